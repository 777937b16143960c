// NEON Q5_K matvec (arm64): the canonical 16-lane tree (matvec_q5_k_scalar.cpp) held as four
// 4-lane registers per activation row; activation rows processed in groups of 4 so 16
// accumulators + the weight vectors fit the 32 NEON registers.
#include <arm_neon.h>

#include <algorithm>
#include <vector>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {

struct RowScratchNeon {
    std::vector<uint8_t> q;
    std::vector<float> d1, m1;
    void ensure(int64_t cols) {
        if ((int64_t)q.size() < cols) {
            q.resize((size_t)cols);
            d1.resize((size_t)cols / 32);
            m1.resize((size_t)cols / 32);
        }
    }
};

static inline void unpack_block(const lmt_block_q5_K *b, uint8_t *q) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), bit4 = vdupq_n_u8(0x10);
    for (int half = 0; half < 2; ++half) {
        const uint8x16_t qh = vld1q_u8(b->qh + 16 * half);
        for (int g = 0; g < 4; ++g) {
            const uint8x16_t ql = vld1q_u8(b->qs + 32 * g + 16 * half);
            const uint8x16_t sel_lo = vdupq_n_u8((uint8_t)(1 << (2 * g)));
            const uint8x16_t sel_hi = vdupq_n_u8((uint8_t)(2 << (2 * g)));
            const uint8x16_t lo = vorrq_u8(vandq_u8(ql, m4), vandq_u8(vtstq_u8(qh, sel_lo), bit4));
            const uint8x16_t hi = vorrq_u8(vshrq_n_u8(ql, 4), vandq_u8(vtstq_u8(qh, sel_hi), bit4));
            vst1q_u8(q + 64 * g + 16 * half, lo);
            vst1q_u8(q + 64 * g + 32 + 16 * half, hi);
        }
    }
}

static inline float32x4_t q4_to_f32(uint8x16_t v, int part) {
    const uint16x8_t h = part < 2 ? vmovl_u8(vget_low_u8(v)) : vmovl_u8(vget_high_u8(v));
    const uint32x4_t w = (part & 1) ? vmovl_u16(vget_high_u16(h)) : vmovl_u16(vget_low_u16(h));
    return vcvtq_f32_u32(w);
}

static inline float hsum16_neon(const float32x4_t a[4]) {
    // b[l] = a[l] + a[l+8] (l in 0..7) -> registers (a0+a2, a1+a3); c[l] = b[l] + b[l+4]
    const float32x4_t c = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));
    const float32x2_t d = vadd_f32(vget_low_f32(c), vget_high_f32(c));
    return vget_lane_f32(d, 0) + vget_lane_f32(d, 1);
}

template <int TG>
static inline void dot_group(const uint8_t *q, const float *d1, const float *m1, const float *const *x,
                             int64_t cols, float *out, int64_t out_stride) {
    float32x4_t acc[TG][4];
    for (int t = 0; t < TG; ++t)
        for (int p = 0; p < 4; ++p) acc[t][p] = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j < cols / 32; ++j) {
        const float32x4_t D = vdupq_n_f32(d1[j]);
        const float32x4_t negM = vdupq_n_f32(-m1[j]);
        for (int h = 0; h < 2; ++h) {
            const int64_t i = 32 * j + 16 * h;
            const uint8x16_t qv = vld1q_u8(q + i);
            for (int p = 0; p < 4; ++p) {
                const float32x4_t w = vfmaq_f32(negM, q4_to_f32(qv, p), D);  // fma(q, d1, -m1)
                for (int t = 0; t < TG; ++t) acc[t][p] = vfmaq_f32(acc[t][p], w, vld1q_f32(x[t] + i + 4 * p));
            }
        }
    }
    for (int t = 0; t < TG; ++t) out[t * out_stride] = hsum16_neon(acc[t]);
}

}  // namespace

void matvec_q5_k_neon(const MatvecArgs &a, int64_t r0, int64_t r1) {
    thread_local RowScratchNeon s;
    s.ensure(a.cols);
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q5_K *>(a.w + (size_t)r * a.row_stride);
        for (int64_t b = 0; b < nb; ++b) {
            unpack_block(&blocks[b], s.q.data() + b * LMT_QK_K);
            q5k_block_scales(&blocks[b], s.d1.data() + b * 8, s.m1.data() + b * 8);
        }
        for (int64_t t0 = 0; t0 < a.T; t0 += 4) {
            const float *xs[4];
            const int tg = (int)std::min<int64_t>(4, a.T - t0);
            for (int t = 0; t < tg; ++t) xs[t] = a.x + (t0 + t) * a.cols;
            float *out = a.logits + t0 * a.rows + r;
            switch (tg) {
                case 1: dot_group<1>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 2: dot_group<2>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 3: dot_group<3>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                default: dot_group<4>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
            }
        }
    }
}

// ---- Precision::I16 ------------------------------------------------------------------------
// Same canonical lanes as the scalar reference (cpu/internal.hpp). Per 16 q bytes (weights
// 64g + 16h + l), the even and odd bytes are split into int16 words (and / shift), scaled by sc
// (vmulq: <= 31 * 63, exact) and multiplied with the permuted x by vmlal_s16. Word w of half h
// belongs to canonical lane 4h + (w >> 1), so accumulator P[2h] collects lanes (4h, 4h, 4h+1,
// 4h+1) and P[2h+1] (4h+2, 4h+2, 4h+3, 4h+3); a pairwise add gives L[0..3] and L[4..7]. Every
// partial sum is a subset of one lane's 32 products, so the int32 bound holds throughout.
namespace {

// RES (Precision::I24): the weight words are centred (sc * (q - 16)); the unsigned residual bytes
// (natural order) are split into even / odd int16 words exactly as q is split into A / B, so they
// multiply the same words and land in the same canonical lanes (accumulators Q, reduced like P).
// Accumulate the four weight-word vectors against four activation-word vectors into the two
// lane accumulators of one half (p0: words 0-3, p1: words 4-7 of each vector).
static inline void mlal4(int32x4_t &p0, int32x4_t &p1, int16x8_t A, int16x8_t B, int16x8_t C, int16x8_t D,
                         int16x8_t xA, int16x8_t xB, int16x8_t xC, int16x8_t xD) {
    p0 = vmlal_s16(p0, vget_low_s16(A), vget_low_s16(xA));
    p1 = vmlal_high_s16(p1, A, xA);
    p0 = vmlal_s16(p0, vget_low_s16(B), vget_low_s16(xB));
    p1 = vmlal_high_s16(p1, B, xB);
    p0 = vmlal_s16(p0, vget_low_s16(C), vget_low_s16(xC));
    p1 = vmlal_high_s16(p1, C, xC);
    p0 = vmlal_s16(p0, vget_low_s16(D), vget_low_s16(xD));
    p1 = vmlal_high_s16(p1, D, xD);
}

template <int TG, bool RES>
static inline void i16_rows_neon(const MatvecI16Args &a, int64_t r0, int64_t r1, int64_t t0) {
    const int64_t nb = a.cols / LMT_QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), bit4 = vdupq_n_u8(0x10);
    const uint16x8_t lowbyte = vdupq_n_u16(0x00FF);
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q5_K *>(a.w + (size_t)r * a.row_stride);
        float32x4_t f0[TG], f1[TG];
        for (int t = 0; t < TG; ++t) f0[t] = f1[t] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; ++b) {
            const lmt_block_q5_K *bk = blocks + b;
            uint64_t scb, mmb;
            q5k_scale_min_bytes(bk, &scb, &mmb);
            int16_t sc[8];
            float mv[8];
            for (int j = 0; j < 8; ++j) {
                sc[j] = (int16_t)((scb >> (8 * j)) & 0xFF);
                mv[j] = (float)((mmb >> (8 * j)) & 0xFF);
            }
            int32x4_t P[TG][4], Q[TG][4];
            for (int t = 0; t < TG; ++t)
                for (int p = 0; p < 4; ++p) P[t][p] = Q[t][p] = vdupq_n_s32(0);
            for (int h = 0; h < 2; ++h) {
                const uint8x16_t qh = vld1q_u8(bk->qh + 16 * h);
                for (int g = 0; g < 4; ++g) {
                    const uint8x16_t ql = vld1q_u8(bk->qs + 32 * g + 16 * h);
                    const uint8x16_t lo = vorrq_u8(vandq_u8(ql, m4), vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(1 << (2 * g)))), bit4));
                    const uint8x16_t hi = vorrq_u8(vshrq_n_u8(ql, 4), vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(2 << (2 * g)))), bit4));
                    const uint16x8_t lo16 = vreinterpretq_u16_u8(lo), hi16 = vreinterpretq_u16_u8(hi);
                    const int16x8_t A = vmulq_n_s16(vreinterpretq_s16_u16(vandq_u16(lo16, lowbyte)), sc[2 * g]);
                    const int16x8_t B = vmulq_n_s16(vreinterpretq_s16_u16(vshrq_n_u16(lo16, 8)), sc[2 * g]);
                    const int16x8_t C = vmulq_n_s16(vreinterpretq_s16_u16(vandq_u16(hi16, lowbyte)), sc[2 * g + 1]);
                    const int16x8_t D = vmulq_n_s16(vreinterpretq_s16_u16(vshrq_n_u16(hi16, 8)), sc[2 * g + 1]);
                    // I24 centres the weights: sc * (q - 16) (cpu/internal.hpp).
                    const int16x8_t Ac = RES ? vsubq_s16(A, vdupq_n_s16((int16_t)(16 * sc[2 * g]))) : A;
                    const int16x8_t Bc = RES ? vsubq_s16(B, vdupq_n_s16((int16_t)(16 * sc[2 * g]))) : B;
                    const int16x8_t Cc = RES ? vsubq_s16(C, vdupq_n_s16((int16_t)(16 * sc[2 * g + 1]))) : C;
                    const int16x8_t Dc = RES ? vsubq_s16(D, vdupq_n_s16((int16_t)(16 * sc[2 * g + 1]))) : D;
                    for (int t = 0; t < TG; ++t) {
                        const int16_t *xg = a.xq + (t0 + t) * a.cols + b * LMT_QK_K + 64 * g + 8 * h;
                        const int16x8_t xA = vld1q_s16(xg), xB = vld1q_s16(xg + 16);
                        const int16x8_t xC = vld1q_s16(xg + 32), xD = vld1q_s16(xg + 48);
                        mlal4(P[t][2 * h], P[t][2 * h + 1], Ac, Bc, Cc, Dc, xA, xB, xC, xD);
                        if constexpr (RES) {
                            // Residual bytes (unsigned, natural order) of weights 64g + 16h + l (lo)
                            // and 64g + 32 + 16h + l (hi): even bytes pair with Ac / Cc's words,
                            // odd ones with Bc / Dc's.
                            const uint8_t *rg = a.xr + (t0 + t) * a.cols + b * LMT_QK_K + 64 * g + 16 * h;
                            const uint16x8_t rl = vreinterpretq_u16_u8(vld1q_u8(rg));
                            const uint16x8_t rh = vreinterpretq_u16_u8(vld1q_u8(rg + 32));
                            const int16x8_t rA = vreinterpretq_s16_u16(vandq_u16(rl, lowbyte));
                            const int16x8_t rB = vreinterpretq_s16_u16(vshrq_n_u16(rl, 8));
                            const int16x8_t rC = vreinterpretq_s16_u16(vandq_u16(rh, lowbyte));
                            const int16x8_t rD = vreinterpretq_s16_u16(vshrq_n_u16(rh, 8));
                            mlal4(Q[t][2 * h], Q[t][2 * h + 1], Ac, Bc, Cc, Dc, rA, rB, rC, rD);
                        }
                    }
                }
            }
            const float d = f16_to_f32(bk->d), dmin = f16_to_f32(bk->dmin);
            const float32x4_t m_lo = vld1q_f32(mv), m_hi = vld1q_f32(mv + 4);
            if constexpr (RES) {
                // I24 (cpu/internal.hpp): acc = fma(L, d*dx, acc); acc = fma(R, d*dxr, acc);
                // acc = fma(C, X, acc), C = 16*d*sc - dmin*m.
                float scf[8];
                for (int j = 0; j < 8; ++j) scf[j] = (float)sc[j];
                const float32x4_t d16 = vdupq_n_f32(d * 16.0f);
                const float32x4_t C_lo = vfmaq_f32(vnegq_f32(vmulq_n_f32(m_lo, dmin)), d16, vld1q_f32(scf));
                const float32x4_t C_hi = vfmaq_f32(vnegq_f32(vmulq_n_f32(m_hi, dmin)), d16, vld1q_f32(scf + 4));
                for (int t = 0; t < TG; ++t) {
                    const int64_t tb = (t0 + t) * nb + b;
                    const float32x4_t e = vdupq_n_f32(d * a.dx[tb]), er = vdupq_n_f32(d * a.dxr[tb]);
                    const int32x4_t L_lo = vpaddq_s32(P[t][0], P[t][1]), L_hi = vpaddq_s32(P[t][2], P[t][3]);
                    const int32x4_t R_lo = vpaddq_s32(Q[t][0], Q[t][1]), R_hi = vpaddq_s32(Q[t][2], Q[t][3]);
                    const float *xs = a.xsum + tb * 8;
                    f0[t] = vfmaq_f32(f0[t], vcvtq_f32_s32(L_lo), e);
                    f1[t] = vfmaq_f32(f1[t], vcvtq_f32_s32(L_hi), e);
                    f0[t] = vfmaq_f32(f0[t], vcvtq_f32_s32(R_lo), er);
                    f1[t] = vfmaq_f32(f1[t], vcvtq_f32_s32(R_hi), er);
                    f0[t] = vfmaq_f32(f0[t], C_lo, vld1q_f32(xs));
                    f1[t] = vfmaq_f32(f1[t], C_hi, vld1q_f32(xs + 4));
                }
                continue;
            }
            for (int t = 0; t < TG; ++t) {
                const int64_t tb = (t0 + t) * nb + b;
                const float dx = a.dx[tb];
                const float32x4_t dd = vdupq_n_f32(d * dx), dm = vdupq_n_f32(dmin * dx);
                const int32x4_t L_lo = vpaddq_s32(P[t][0], P[t][1]), L_hi = vpaddq_s32(P[t][2], P[t][3]);
                const float *xs = a.xsum + tb * 8;
                f0[t] = vfmaq_f32(f0[t], vcvtq_f32_s32(L_lo), dd);  // fma(L, d*dx, acc)
                f1[t] = vfmaq_f32(f1[t], vcvtq_f32_s32(L_hi), dd);
                f0[t] = vfmsq_f32(f0[t], vmulq_f32(m_lo, vld1q_f32(xs)), dm);  // fma(-M, dmin*dx, acc)
                f1[t] = vfmsq_f32(f1[t], vmulq_f32(m_hi, vld1q_f32(xs + 4)), dm);
            }
        }
        for (int t = 0; t < TG; ++t) {
            const float32x4_t bsum = vaddq_f32(f0[t], f1[t]);                        // a[l] + a[l+4]
            const float32x2_t c = vadd_f32(vget_low_f32(bsum), vget_high_f32(bsum));  // b[l] + b[l+2]
            a.logits[(t0 + t) * a.rows + r] = vget_lane_f32(c, 0) + vget_lane_f32(c, 1);
        }
    }
}

}  // namespace

template <bool RES>
static void i16_neon_all(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < a.T; t0 += 4) {
        switch ((int)std::min<int64_t>(4, a.T - t0)) {
            case 1: i16_rows_neon<1, RES>(a, r0, r1, t0); break;
            case 2: i16_rows_neon<2, RES>(a, r0, r1, t0); break;
            case 3: i16_rows_neon<3, RES>(a, r0, r1, t0); break;
            default: i16_rows_neon<4, RES>(a, r0, r1, t0); break;
        }
    }
}

void matvec_q5_k_i16_neon(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    if (a.xr) i16_neon_all<true>(a, r0, r1);
    else i16_neon_all<false>(a, r0, r1);
}

}  // namespace lmt::cpu
