// The NEON dotprod (Isa::NeonDot) I24 kernel of the 256-block K types whose canonical lanes are
// k = (i >> 2) & 7 (cpu/internal.hpp: Q5_K centred on 16, Q4_K on 8): included by
// q5_k_neon_dot.cpp and q4_k/q4_k_neon_dot.cpp, which are built with -march=armv8.2-a+dotprod.
//
// An sdot lane sums 4 consecutive byte products, which is exactly a canonical lane's share of a
// 16-weight vector (weights 32j + 16v + 4l .. + 3 -> lane 4v + l). Per vector and activation row,
// from the k_dot_layout record (ah, al - 128, b - 128; natural order) and the centred codes w:
//   h = sdot(w, ah) << 8;  h = sdot(h, w, al - 128)      = sum w * (a - 128)  per lane, exact
//   L += sc[j] * h;  R += sc[j] * sdot(w, b - 128)        (mla by the sub-block scale)
// and once per weight row and block, shared by the activation rows, the offsets' term
//   CW = 128 * sum_j sc[j] * sdot(w_j, 1)                 added to L and R at the block's end,
// so L and R are the reference's exact integers, then the reference's f32 epilogue.
// Bounds (|w| <= 16, sc <= 63): |h| <= 4 * 16 * (256 * 128 + 128) < 2^21 + 2^13, every partial
// sum of sc * h over a block's 8 sub-blocks <= 504 * (2^21 + 2^13) < 2^30, |CW| <= 128 * 8 * 63 *
// 64 < 2^23: below 2^31 throughout, so this regrouping of the exact integers cannot overflow.
// (Tried: the scale split into the weight bytes, sc = 8 * sh + sl, W = sh * w and sl * w, 6 sdot
// per vector with no mla or zeroing: fewer instructions per extra activation row, but at T = 1 the
// per-row planes cost more than they save (GCC 12: 70 against 52 instructions per 32 weights).)
#pragma once

#include <arm_neon.h>

#include <algorithm>

#include "cpu/internal.hpp"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "k_neon_dot.hpp needs -march=armv8.2-a+dotprod (CMakeLists.txt LMTAIL_NEON_DOT_FLAGS)"
#endif

namespace lmt::cpu::kdot {

// K: the block type's policy:
//   using Block;  static constexpr float kCentre;  scale_min(bk, &sc, &m) (q5k_scale_min_bytes);
//   struct Half { Half(bk, h); void pair(g, lo, hi) }: centred codes of weights 64g + 16h + l
//   (sub-block 2g, vector h) and 64g + 32 + 16h + l (sub-block 2g + 1, vector h), l = 0..15.
template <class K, int TG>
static void rows(const MatvecI16Args &a, int64_t r0, int64_t r1, int64_t t0) {
    const int64_t nb = a.cols / LMT_QK_K;
    const int8x16_t ones = vdupq_n_s8(1);
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const typename K::Block *>(a.w + (size_t)r * a.row_stride);
        float32x4_t f0[TG], f1[TG];
        for (int t = 0; t < TG; ++t) f0[t] = f1[t] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; ++b) {
            const typename K::Block *bk = blocks + b;
            uint64_t scb, mmb;
            K::scale_min(bk, &scb, &mmb);
            int32_t sc[8];
            float mv[8], scf[8];
            for (int j = 0; j < 8; ++j) {
                sc[j] = (int32_t)((scb >> (8 * j)) & 0xFF);
                mv[j] = (float)((mmb >> (8 * j)) & 0xFF);
                scf[j] = (float)sc[j];
            }
            const int8_t *rec[TG];
            for (int t = 0; t < TG; ++t) rec[t] = a.xd + ((t0 + t) * nb + b) * kKDotRecord;
            int32x4_t L[TG][2], R[TG][2];
            for (int t = 0; t < TG; ++t) L[t][0] = L[t][1] = R[t][0] = R[t][1] = vdupq_n_s32(0);
            int32x4_t cw[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
            LMT_UNROLL
            for (int h = 0; h < 2; ++h) {
                const typename K::Half half(bk, h);
                for (int g = 0; g < 4; ++g) {
                    int8x16_t w[2];
                    half.pair(g, w[0], w[1]);
                    LMT_UNROLL
                    for (int s = 0; s < 2; ++s) {  // sub-block j = 2g + s, vector h: lanes 4h .. 4h + 3
                        const int j = 2 * g + s, o = 32 * j + 16 * h;
                        cw[h] = vmlaq_n_s32(cw[h], vdotq_s32(vdupq_n_s32(0), w[s], ones), sc[j]);
                        LMT_UNROLL
                        for (int t = 0; t < TG; ++t) {
                            int32x4_t x = vdotq_s32(vdupq_n_s32(0), w[s], vld1q_s8(rec[t] + o));
                            x = vdotq_s32(vshlq_n_s32(x, 8), w[s], vld1q_s8(rec[t] + 256 + o));
                            L[t][h] = vmlaq_n_s32(L[t][h], x, sc[j]);
                            R[t][h] = vmlaq_n_s32(R[t][h], vdotq_s32(vdupq_n_s32(0), w[s], vld1q_s8(rec[t] + 512 + o)),
                                                  sc[j]);
                        }
                    }
                }
            }
            cw[0] = vshlq_n_s32(cw[0], 7);
            cw[1] = vshlq_n_s32(cw[1], 7);
            // The reference's epilogue (cpu/internal.hpp, I24): fma(L, d*dx), fma(R, d*dxr),
            // fma(C, X) with C = fma(centre*d, sc, -(dmin*m)).
            const float d = f16_to_f32(bk->d), dmin = f16_to_f32(bk->dmin);
            const float32x4_t dc = vdupq_n_f32(d * K::kCentre);
            const float32x4_t C_lo = vfmaq_f32(vnegq_f32(vmulq_n_f32(vld1q_f32(mv), dmin)), dc, vld1q_f32(scf));
            const float32x4_t C_hi = vfmaq_f32(vnegq_f32(vmulq_n_f32(vld1q_f32(mv + 4), dmin)), dc, vld1q_f32(scf + 4));
            for (int t = 0; t < TG; ++t) {
                const int64_t tb = (t0 + t) * nb + b;
                const float32x4_t e = vdupq_n_f32(d * a.dx[tb]), er = vdupq_n_f32(d * a.dxr[tb]);
                const float *xs = a.xsum + tb * 8;
                f0[t] = vfmaq_f32(f0[t], vcvtq_f32_s32(vaddq_s32(L[t][0], cw[0])), e);
                f1[t] = vfmaq_f32(f1[t], vcvtq_f32_s32(vaddq_s32(L[t][1], cw[1])), e);
                f0[t] = vfmaq_f32(f0[t], vcvtq_f32_s32(vaddq_s32(R[t][0], cw[0])), er);
                f1[t] = vfmaq_f32(f1[t], vcvtq_f32_s32(vaddq_s32(R[t][1], cw[1])), er);
                f0[t] = vfmaq_f32(f0[t], C_lo, vld1q_f32(xs));
                f1[t] = vfmaq_f32(f1[t], C_hi, vld1q_f32(xs + 4));
            }
        }
        for (int t = 0; t < TG; ++t) {  // hsum8: (a[l] + a[l+4]) -> (b[l] + b[l+2]) -> c[0] + c[1]
            const float32x4_t bsum = vaddq_f32(f0[t], f1[t]);
            const float32x2_t c = vadd_f32(vget_low_f32(bsum), vget_high_f32(bsum));
            a.logits[(t0 + t) * a.rows + r] = vget_lane_f32(c, 0) + vget_lane_f32(c, 1);
        }
    }
}

// All activation rows in groups of up to 3 (4 int32 + 2 f32 accumulators each: 3 groups and the
// codes / activation temporaries fit the 32 vector registers).
template <class K>
static void matvec(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < a.T; t0 += 3) {
        switch ((int)std::min<int64_t>(3, a.T - t0)) {
            case 1: rows<K, 1>(a, r0, r1, t0); break;
            case 2: rows<K, 2>(a, r0, r1, t0); break;
            default: rows<K, 3>(a, r0, r1, t0); break;
        }
    }
}

}  // namespace lmt::cpu::kdot
