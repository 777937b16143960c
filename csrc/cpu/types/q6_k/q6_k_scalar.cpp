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

// Precision::I24 reference (q6k.hpp): written for clarity, not speed.
void matvec_q6_k_i24_scalar(const Q6kI24Args &a, int64_t r0, int64_t r1) {
    const MatvecCall &c = *a.c;
    const int64_t nb = c.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)r * c.row_stride);
        for (int64_t t = 0; t < c.T; ++t) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t b = 0; b < nb; ++b) {
                const lmt_block_q6_K &blk = blocks[b];
                const int64_t tb = t * nb + b;
                const int16_t *xa = a.xa + t * c.cols + b * LMT_QK_K, *xc = a.xc + t * c.cols + b * LMT_QK_K;
                const float d = f16_to_f32(blk.d), e = d * a.dx[tb], ec = d * a.dxc[tb];
                for (int h = 0; h < 2; ++h) {
                    int64_t L[8] = {0, 0, 0, 0, 0, 0, 0, 0}, C[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                    for (int i = 128 * h; i < 128 * h + 128; ++i) {
                        const int64_t w16 = (int64_t)blk.scales[i >> 4] * lmt_q6k_q(blk.ql, blk.qh, i);
                        L[(i & 15) >> 1] += w16 * xa[i];
                        C[(i & 15) >> 1] += w16 * xc[i];
                    }
                    for (int k = 0; k < 8; ++k) {
                        acc[k] = std::fma((float)(int32_t)L[k], e, acc[k]);
                        acc[k] = std::fma((float)(int32_t)C[k], ec, acc[k]);
                    }
                }
            }
            c.logits[t * c.rows + r] = q6k_hsum8(acc);
        }
    }
}

}  // namespace lmt::cpu
