// Scalar references of the Q4_K matvec: they DEFINE the canonical results (q4_k_internal.hpp)
// that every SIMD path reproduces bit for bit. Written for clarity, not speed.
#include "cpu/types/q4_k/q4_k_internal.hpp"

namespace lmt::cpu {

static inline float hsum16(const float a[16]) {
    float b[8], c[4], d[2];
    for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) c[l] = b[l] + b[l + 4];
    for (int l = 0; l < 2; ++l) d[l] = c[l] + c[l + 2];
    return d[0] + d[1];
}

void matvec_q4_k_scalar(const MatvecArgs &a, int64_t r0, int64_t r1) {
    const int64_t nb = a.cols / LMT_QK_K;
    float acc[16], d1[8], m1[8], w[LMT_QK_K];
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q4_K *>(a.w + (size_t)r * a.row_stride);
        for (int64_t t = 0; t < a.T; ++t) {
            const float *x = a.x + t * a.cols;
            for (float &v : acc) v = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                q4k_block_scales(&blocks[b], d1, m1);
                for (int i = 0; i < LMT_QK_K; ++i)
                    w[i] = std::fma((float)lmt_q4k_q(blocks[b].qs, i), d1[i >> 5], -m1[i >> 5]);
                const float *xb = x + b * LMT_QK_K;
                for (int i = 0; i < LMT_QK_K; ++i) acc[i & 15] = std::fma(w[i], xb[i], acc[i & 15]);
            }
            a.logits[t * a.rows + r] = hsum16(acc);
        }
    }
}

void matvec_q4_k_i24_scalar(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q4_K *>(a.w + (size_t)r * a.row_stride);
        for (int64_t t = 0; t < a.T; ++t) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t b = 0; b < nb; ++b) {
                const lmt_block_q4_K &blk = blocks[b];
                const int16_t *xq = a.xq + t * a.cols + b * LMT_QK_K;
                const uint8_t *xr = a.xr + t * a.cols + b * LMT_QK_K;
                const float *X = a.xsum + (t * nb + b) * 8;
                int64_t L[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // int64 here; the bounds keep them in int32
                int64_t R[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (int i = 0; i < LMT_QK_K; ++i) {
                    const int64_t w = (int64_t)lmt_q5k_scale(blk.scales, i >> 5) * ((int64_t)lmt_q4k_q(blk.qs, i) - 8);
                    L[(i >> 2) & 7] += w * xq[xi16_pos(i)];
                    R[(i >> 2) & 7] += w * xr[i];
                }
                const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
                const float e = d * a.dx[t * nb + b], er = d * a.dxr[t * nb + b];
                for (int k = 0; k < 8; ++k) {
                    const float sc = (float)lmt_q5k_scale(blk.scales, k), m = (float)lmt_q5k_min(blk.scales, k);
                    const float C = std::fma(d * 8.0f, sc, -(dmin * m));
                    acc[k] = std::fma((float)(int32_t)L[k], e, acc[k]);
                    acc[k] = std::fma((float)(int32_t)R[k], er, acc[k]);
                    acc[k] = std::fma(C, X[k], acc[k]);
                }
            }
            a.logits[t * a.rows + r] = hsum8_canonical(acc);
        }
    }
}

}  // namespace lmt::cpu
