// Scalar reference of the Q5_K matvec. This file DEFINES the canonical expression tree that
// every SIMD path reproduces bit for bit:
//
//   w[i]      = fma(float(q[i]), d1[j], -m1[j])          (j = sub-block of weight i)
//   acc[l]    = fma(w[i], x[i], acc[l])  for i = 16*n + l, in increasing i (16 lanes, l in 0..15)
//   logit     = ((a[0..7] + a[8..15]) folded as 8 -> 4 -> 2 -> 1 lanes)   ("hsum16")
//
// 16 lanes is one AVX-512 register, two AVX2 registers or four NEON registers, so each path
// keeps the same per-lane accumulation order; only which lanes share an instruction differs.
#include "cpu/internal.hpp"

namespace lmt::cpu {

static inline float hsum16(const float a[16]) {
    float b[8], c[4], d[2];
    for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) c[l] = b[l] + b[l + 4];
    for (int l = 0; l < 2; ++l) d[l] = c[l] + c[l + 2];
    return d[0] + d[1];
}

void matvec_q5_k_scalar(const MatvecArgs &a, int64_t r0, int64_t r1) {
    const int64_t nb = a.cols / LMT_QK_K;
    float acc[16];
    float d1[8], m1[8];
    float w[LMT_QK_K];
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q5_K *>(a.w + (size_t)r * a.row_stride);
        for (int64_t t = 0; t < a.T; ++t) {
            const float *x = a.x + t * a.cols;
            for (float &v : acc) v = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                q5k_block_scales(&blocks[b], d1, m1);
                for (int i = 0; i < LMT_QK_K; ++i) {
                    const float q = (float)lmt_q5k_q(blocks[b].qs, blocks[b].qh, i);
                    w[i] = std::fma(q, d1[i >> 5], -m1[i >> 5]);
                }
                const float *xb = x + b * LMT_QK_K;
                for (int i = 0; i < LMT_QK_K; ++i) acc[i & 15] = std::fma(w[i], xb[i], acc[i & 15]);
            }
            a.logits[t * a.rows + r] = hsum16(acc);
        }
    }
}

// ---- Precision::I16 reference: DEFINES the canonical result of the int16-activation path ----
// (the formula and integer bounds are in cpu/internal.hpp). Written for clarity, not speed.
void matvec_q5_k_i16_scalar(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q5_K *>(a.w + (size_t)r * a.row_stride);
        for (int64_t t = 0; t < a.T; ++t) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t b = 0; b < nb; ++b) {
                const lmt_block_q5_K &blk = blocks[b];
                const int16_t *xq = a.xq + t * a.cols + b * LMT_QK_K;
                const float *xs = a.xsum + (t * nb + b) * LMT_Q5K_SUBBLOCKS;
                int64_t L[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // int64 here; the bound keeps it in int32
                int64_t R[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                const uint8_t *xr = a.xr ? a.xr + t * a.cols + b * LMT_QK_K : nullptr;
                for (int i = 0; i < LMT_QK_K; ++i) {
                    const int64_t q = (int64_t)lmt_q5k_q(blk.qs, blk.qh, i);
                    const int64_t sc = (int64_t)lmt_q5k_scale(blk.scales, i >> 5);
                    // I24 centres the weights on 16 (cpu/internal.hpp).
                    L[(i >> 2) & 7] += sc * (xr ? q - 16 : q) * xq[xi16_pos(i)];
                    if (xr) R[(i >> 2) & 7] += sc * (q - 16) * xr[i];
                }
                const float dx = a.dx[t * nb + b];
                const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
                if (xr) {  // I24
                    const float e = d * dx, er = d * a.dxr[t * nb + b];
                    for (int k = 0; k < 8; ++k) {
                        const float sc = (float)lmt_q5k_scale(blk.scales, k), m = (float)lmt_q5k_min(blk.scales, k);
                        const float C = std::fma(d * 16.0f, sc, -(dmin * m));  // 16*d*sc - dmin*m, one rounding
                        acc[k] = std::fma((float)(int32_t)L[k], e, acc[k]);
                        acc[k] = std::fma((float)(int32_t)R[k], er, acc[k]);
                        acc[k] = std::fma(C, xs[k], acc[k]);
                    }
                    continue;
                }
                const float dd = d * dx, dm = dmin * dx;
                for (int k = 0; k < 8; ++k) {
                    const int32_t M = (int32_t)lmt_q5k_min(blk.scales, k) * (int32_t)xs[k];
                    acc[k] = std::fma((float)(int32_t)L[k], dd, acc[k]);
                    acc[k] = std::fma(-(float)M, dm, acc[k]);
                }
            }
            a.logits[t * a.rows + r] = hsum8_canonical(acc);
        }
    }
}

}  // namespace lmt::cpu
