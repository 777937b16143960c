// Q4_K quantisation and dequantisation on the host: ggml's quantize_row_q4_K_ref bytes and
// dequantize_row_q4_K values, through the K-quant (scale, min) quantiser shared with Q5_K
// (csrc/cpu/types/qkx_quantize.hpp). Q4_K's part: 4-bit codes, the search over 21 grids of
// (15 - 1 + 0.1 s) steps, the codes as nibbles of qs (no qh).
#include "cpu/types/qkx_quantize.hpp"
#include "cpu/types/q4_k/q4_k_internal.hpp"
#include "lmtail/blocks/q4_k.h"

namespace lmt {
namespace cpu {
namespace {

struct Q4K {
    using Block = lmt_block_q4_K;
    static constexpr int kQMax = 15;
    static constexpr int kSteps = 20;
    static constexpr float kStretch0 = -1.0f;
    static constexpr const char *kName = "Q4_K";
    static constexpr const char *kLower = "q4_k";
    static constexpr const char *kRange = "6.19e7";

    // For group g (64 weights), weight 64g+l goes to the low nibble of qs[32g+l] and weight
    // 64g+32+l to the high nibble.
    static void pack(const uint8_t *codes, Block *out) {
        for (int g = 0; g < LMT_QK_K / 64; ++g) {
            const uint8_t *lo_half = codes + 64 * g;
            for (int l = 0; l < 32; ++l)
                out->qs[32 * g + l] = static_cast<uint8_t>(lo_half[l] | (lo_half[l + 32] << 4));
        }
    }

    static uint32_t code(const Block *blk, int j, int l) {
        return (uint32_t)(blk->qs[32 * (j >> 1) + l] >> (4 * (j & 1))) & 0x0Fu;
    }
};

}  // namespace

void quantize_q4_k(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads) {
    qkx::quantize_rows<Q4K>(src, dst, rows, cols, n_threads);
}

void dequantize_q4_k(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads) {
    qkx::dequantize_rows<Q4K>(src, dst, rows, cols, n_threads);
}

}  // namespace cpu
}  // namespace lmt
