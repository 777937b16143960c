// Q5_K quantisation and dequantisation on the host: ggml's quantize_row_q5_K_ref bytes and
// dequantize_row_q5_K values, through the K-quant (scale, min) quantiser shared with Q4_K
// (csrc/cpu/types/qkx_quantize.hpp explains why it is "literal"). Q5_K's part: 5-bit codes, the
// search over 16 grids of (31 - 0.5 + 0.1 s) steps, the low nibbles in qs and the 5th bits in qh.
#include "cpu/types/qkx_quantize.hpp"

namespace lmt {
namespace cpu {
namespace {

struct Q5K {
    using Block = lmt_block_q5_K;
    static constexpr int kQMax = 31;
    static constexpr int kSteps = 15;
    static constexpr float kStretch0 = -0.5f;
    static constexpr const char *kName = "Q5_K";
    static constexpr const char *kLower = "q5_k";
    static constexpr const char *kRange = "1.28e8";

    static void pack(const uint8_t *codes, Block *out) {
        // Pack: for group g (64 weights), weight 64g+l goes to the low nibble of qs[32g+l] and weight
        // 64g+32+l to the high nibble; their 5th bits go to bits 2g and 2g+1 of qh[l].
        std::memset(out->qh, 0, sizeof out->qh);
        for (int g = 0; g < LMT_QK_K / 64; ++g) {
            const uint8_t *lo_half = codes + 64 * g;
            const uint8_t *hi_half = lo_half + 32;
            for (int l = 0; l < 32; ++l) {
                const uint8_t a = lo_half[l];
                const uint8_t b = hi_half[l];
                out->qs[32 * g + l] = static_cast<uint8_t>((a & 0x0F) | ((b & 0x0F) << 4));
                out->qh[l] |= static_cast<uint8_t>(((a >> 4) << (2 * g)) | ((b >> 4) << (2 * g + 1)));
            }
        }
    }

    // Sub-block j's code l: the low nibble (j even) or high nibble (j odd) of its group's qs
    // byte, with the 5th bit from qh.
    static uint32_t code(const Block *blk, int j, int l) {
        const int g = j >> 1, upper = j & 1;
        const uint8_t qs = blk->qs[32 * g + l];
        const uint32_t low = upper ? (uint32_t)(qs >> 4) : (uint32_t)(qs & 0x0Fu);
        return low | (((uint32_t)(blk->qh[l] >> (2 * g + upper)) & 1u) << 4);
    }
};

}  // namespace

void quantize_q5_k(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads) {
    qkx::quantize_rows<Q5K>(src, dst, rows, cols, n_threads);
}

void dequantize_q5_k(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads) {
    qkx::dequantize_rows<Q5K>(src, dst, rows, cols, n_threads);
}

}  // namespace cpu
}  // namespace lmt
