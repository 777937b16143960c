// Scalar reference of the Q8_0 matvec: DEFINES the canonical expression (q8_0.hpp) that every
// SIMD path reproduces bit for bit.
#include "cpu/types/q8_0/q8_0.hpp"

namespace lmt::cpu {

void matvec_q8_0_scalar(const MatvecArgs &a, int64_t r0, int64_t r1) {
    const int64_t nb = a.cols / LMT_Q8_0_BLOCK_ELEMS;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *row = a.w + (size_t)r * a.row_stride;
        for (int64_t t = 0; t < a.T; ++t) {
            const float *x = a.x + t * a.cols;
            float acc[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t b = 0; b < nb; ++b) {
                lmt_block_q8_0 blk;  // copy: the row carries no alignment guarantee
                std::memcpy(&blk, row + (size_t)b * LMT_Q8_0_BLOCK_BYTES, sizeof blk);
                const float d = f16_to_f32(blk.d);
                const float *xb = x + b * LMT_Q8_0_BLOCK_ELEMS;
                // 32 = 2 * 16: weight i of the block sits in lane i % 16 of the row.
                for (int i = 0; i < LMT_Q8_0_BLOCK_ELEMS; ++i)
                    acc[i & 15] = std::fma(d * (float)blk.qs[i], xb[i], acc[i & 15]);
            }
            a.logits[t * a.rows + r] = q8_0_hsum16(acc);
        }
    }
}

}  // namespace lmt::cpu
