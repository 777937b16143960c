// Scalar reference of the Q6_K matvec: DEFINES the canonical result of Precision::F32 (q6k.hpp)
// that every SIMD path reproduces bit for bit.
#include "cpu/types/q6_k/q6k.hpp"

namespace lmt::cpu {

void matvec_q6_k_scalar(const MatvecCall &c, int64_t r0, int64_t r1) {
    const int64_t nb = c.cols / LMT_QK_K;
    float acc[16], D[16], w[LMT_QK_K];
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)r * c.row_stride);
        for (int64_t t = 0; t < c.T; ++t) {
            const float *x = c.x + t * c.cols;
            for (float &v : acc) v = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                q6k_block_scales(&blocks[b], D);
                for (int i = 0; i < LMT_QK_K; ++i)
                    w[i] = D[i >> 4] * (float)lmt_q6k_q(blocks[b].ql, blocks[b].qh, i);
                const float *xb = x + b * LMT_QK_K;
                for (int i = 0; i < LMT_QK_K; ++i) acc[i & 15] = std::fma(w[i], xb[i], acc[i & 15]);
            }
            c.logits[t * c.rows + r] = q6k_hsum16(acc);
        }
    }
}

}  // namespace lmt::cpu
