// NEON Q4_K matvec (arm64), following Q5_K's NEON kernels with the 4-bit unpack.
// F32: the canonical 16-lane tree held as four 4-lane registers per activation row, activation
// rows in groups of 4. I24: the canonical lanes of q4_k_internal.hpp built with vmlal_s16 (every
// partial sum is a subset of one lane's 32 products, so the int32 bounds hold throughout).
#include <arm_neon.h>

#include <algorithm>
#include <vector>

#include "cpu/types/q4_k/q4_k_internal.hpp"

namespace lmt::cpu {
namespace {

struct Q4kRowScratchNeon {
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

static inline void q4k_unpack_block_neon(const lmt_block_q4_K *b, uint8_t *q) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int g = 0; g < 4; ++g)
        for (int half = 0; half < 2; ++half) {
            const uint8x16_t ql = vld1q_u8(b->qs + 32 * g + 16 * half);
            vst1q_u8(q + 64 * g + 16 * half, vandq_u8(ql, m4));
            vst1q_u8(q + 64 * g + 32 + 16 * half, vshrq_n_u8(ql, 4));
        }
}

static inline float32x4_t q4k_u8_to_f32(uint8x16_t v, int part) {
    const uint16x8_t h = part < 2 ? vmovl_u8(vget_low_u8(v)) : vmovl_u8(vget_high_u8(v));
    const uint32x4_t w = (part & 1) ? vmovl_u16(vget_high_u16(h)) : vmovl_u16(vget_low_u16(h));
    return vcvtq_f32_u32(w);
}

static inline float q4k_hsum16_neon(const float32x4_t a[4]) {
    // b[l] = a[l] + a[l+8] -> registers (a0+a2, a1+a3); c[l] = b[l] + b[l+4]; then 4 -> 2 -> 1
    const float32x4_t c = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));
    const float32x2_t d = vadd_f32(vget_low_f32(c), vget_high_f32(c));
    return vget_lane_f32(d, 0) + vget_lane_f32(d, 1);
}

template <int TG>
static inline void q4k_dot_group_neon(const uint8_t *q, const float *d1, const float *m1, const float *const *x,
                                      int64_t cols, float *out, int64_t out_stride) {
    float32x4_t acc[TG][4];
    for (int t = 0; t < TG; ++t)
        for (int p = 0; p < 4; ++p) acc[t][p] = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j < cols / 32; ++j) {
        const float32x4_t D = vdupq_n_f32(d1[j]), negM = vdupq_n_f32(-m1[j]);
        for (int h = 0; h < 2; ++h) {
            const int64_t i = 32 * j + 16 * h;
            const uint8x16_t qv = vld1q_u8(q + i);
            for (int p = 0; p < 4; ++p) {
                const float32x4_t w = vfmaq_f32(negM, q4k_u8_to_f32(qv, p), D);  // fma(q, d1, -m1)
                for (int t = 0; t < TG; ++t) acc[t][p] = vfmaq_f32(acc[t][p], w, vld1q_f32(x[t] + i + 4 * p));
            }
        }
    }
    for (int t = 0; t < TG; ++t) out[t * out_stride] = q4k_hsum16_neon(acc[t]);
}

static inline void q4k_mlal4(int32x4_t &p0, int32x4_t &p1, int16x8_t A, int16x8_t B, int16x8_t C, int16x8_t D,
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

// Per 16 qs bytes of group g, half h (weights 64g + 16h + l low nibbles, 64g + 32 + 16h + l high):
// even and odd bytes split into int16 words, centred and scaled, sc * (q - 8) (<= 63 * 8, exact).
// Word w of half h belongs to canonical lane 4h + (w >> 1): accumulator P[2h] collects lanes
// (4h, 4h, 4h+1, 4h+1), P[2h+1] (4h+2, 4h+2, 4h+3, 4h+3); a pairwise add gives L[0..3], L[4..7].
template <int TG>
static inline void q4k_i24_rows_neon(const MatvecI16Args &a, int64_t r0, int64_t r1, int64_t t0) {
    const int64_t nb = a.cols / LMT_QK_K;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const uint16x8_t lowbyte = vdupq_n_u16(0x00FF);
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q4_K *>(a.w + (size_t)r * a.row_stride);
        float32x4_t f0[TG], f1[TG];
        for (int t = 0; t < TG; ++t) f0[t] = f1[t] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; ++b) {
            const lmt_block_q4_K *bk = blocks + b;
            uint64_t scb, mmb;
            q4k_scale_min_bytes(bk, &scb, &mmb);
            int16_t sc[8];
            float mv[8], scf[8];
            for (int j = 0; j < 8; ++j) {
                sc[j] = (int16_t)((scb >> (8 * j)) & 0xFF);
                mv[j] = (float)((mmb >> (8 * j)) & 0xFF);
                scf[j] = (float)sc[j];
            }
            int32x4_t P[TG][4], Q[TG][4];
            for (int t = 0; t < TG; ++t)
                for (int p = 0; p < 4; ++p) P[t][p] = Q[t][p] = vdupq_n_s32(0);
            for (int h = 0; h < 2; ++h) {
                for (int g = 0; g < 4; ++g) {
                    const uint8x16_t ql = vld1q_u8(bk->qs + 32 * g + 16 * h);
                    const uint16x8_t lo16 = vreinterpretq_u16_u8(vandq_u8(ql, m4));
                    const uint16x8_t hi16 = vreinterpretq_u16_u8(vshrq_n_u8(ql, 4));
                    const int16_t s0 = sc[2 * g], s1 = sc[2 * g + 1];
                    const int16x8_t c0 = vdupq_n_s16((int16_t)(8 * s0)), c1 = vdupq_n_s16((int16_t)(8 * s1));
                    const int16x8_t A = vsubq_s16(vmulq_n_s16(vreinterpretq_s16_u16(vandq_u16(lo16, lowbyte)), s0), c0);
                    const int16x8_t B = vsubq_s16(vmulq_n_s16(vreinterpretq_s16_u16(vshrq_n_u16(lo16, 8)), s0), c0);
                    const int16x8_t C = vsubq_s16(vmulq_n_s16(vreinterpretq_s16_u16(vandq_u16(hi16, lowbyte)), s1), c1);
                    const int16x8_t D = vsubq_s16(vmulq_n_s16(vreinterpretq_s16_u16(vshrq_n_u16(hi16, 8)), s1), c1);
                    for (int t = 0; t < TG; ++t) {
                        const int16_t *xg = a.xq + (t0 + t) * a.cols + b * LMT_QK_K + 64 * g + 8 * h;
                        q4k_mlal4(P[t][2 * h], P[t][2 * h + 1], A, B, C, D, vld1q_s16(xg), vld1q_s16(xg + 16),
                                  vld1q_s16(xg + 32), vld1q_s16(xg + 48));
                        // Residual bytes (natural order): even bytes pair with A / C, odd with B / D.
                        const uint8_t *rg = a.xr + (t0 + t) * a.cols + b * LMT_QK_K + 64 * g + 16 * h;
                        const uint16x8_t rl = vreinterpretq_u16_u8(vld1q_u8(rg));
                        const uint16x8_t rh = vreinterpretq_u16_u8(vld1q_u8(rg + 32));
                        q4k_mlal4(Q[t][2 * h], Q[t][2 * h + 1], A, B, C, D,
                                  vreinterpretq_s16_u16(vandq_u16(rl, lowbyte)), vreinterpretq_s16_u16(vshrq_n_u16(rl, 8)),
                                  vreinterpretq_s16_u16(vandq_u16(rh, lowbyte)), vreinterpretq_s16_u16(vshrq_n_u16(rh, 8)));
                    }
                }
            }
            const float d = f16_to_f32(bk->d), dmin = f16_to_f32(bk->dmin);
            const float32x4_t d8 = vdupq_n_f32(d * 8.0f);
            // C = fma(8*d, sc, -(dmin*m)), one rounding after the exact products' negation.
            const float32x4_t C_lo = vfmaq_f32(vnegq_f32(vmulq_n_f32(vld1q_f32(mv), dmin)), d8, vld1q_f32(scf));
            const float32x4_t C_hi = vfmaq_f32(vnegq_f32(vmulq_n_f32(vld1q_f32(mv + 4), dmin)), d8, vld1q_f32(scf + 4));
            for (int t = 0; t < TG; ++t) {
                const int64_t tb = (t0 + t) * nb + b;
                const float32x4_t e = vdupq_n_f32(d * a.dx[tb]), er = vdupq_n_f32(d * a.dxr[tb]);
                const float *xs = a.xsum + tb * 8;
                f0[t] = vfmaq_f32(f0[t], vcvtq_f32_s32(vpaddq_s32(P[t][0], P[t][1])), e);
                f1[t] = vfmaq_f32(f1[t], vcvtq_f32_s32(vpaddq_s32(P[t][2], P[t][3])), e);
                f0[t] = vfmaq_f32(f0[t], vcvtq_f32_s32(vpaddq_s32(Q[t][0], Q[t][1])), er);
                f1[t] = vfmaq_f32(f1[t], vcvtq_f32_s32(vpaddq_s32(Q[t][2], Q[t][3])), er);
                f0[t] = vfmaq_f32(f0[t], C_lo, vld1q_f32(xs));
                f1[t] = vfmaq_f32(f1[t], C_hi, vld1q_f32(xs + 4));
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

void matvec_q4_k_neon(const MatvecArgs &a, int64_t r0, int64_t r1) {
    thread_local Q4kRowScratchNeon s;
    s.ensure(a.cols);
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q4_K *>(a.w + (size_t)r * a.row_stride);
        for (int64_t b = 0; b < nb; ++b) {
            q4k_unpack_block_neon(&blocks[b], s.q.data() + b * LMT_QK_K);
            q4k_block_scales(&blocks[b], s.d1.data() + b * 8, s.m1.data() + b * 8);
        }
        for (int64_t t0 = 0; t0 < a.T; t0 += 4) {
            const float *xs[4];
            const int tg = (int)std::min<int64_t>(4, a.T - t0);
            for (int t = 0; t < tg; ++t) xs[t] = a.x + (t0 + t) * a.cols;
            float *out = a.logits + t0 * a.rows + r;
            switch (tg) {
                case 1: q4k_dot_group_neon<1>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 2: q4k_dot_group_neon<2>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 3: q4k_dot_group_neon<3>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                default: q4k_dot_group_neon<4>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
            }
        }
    }
}

void matvec_q4_k_i24_neon(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < a.T; t0 += 4) {
        switch ((int)std::min<int64_t>(4, a.T - t0)) {
            case 1: q4k_i24_rows_neon<1>(a, r0, r1, t0); break;
            case 2: q4k_i24_rows_neon<2>(a, r0, r1, t0); break;
            case 3: q4k_i24_rows_neon<3>(a, r0, r1, t0); break;
            default: q4k_i24_rows_neon<4>(a, r0, r1, t0); break;
        }
    }
}

}  // namespace lmt::cpu
