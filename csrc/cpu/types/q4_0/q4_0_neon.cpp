// NEON (AArch64) Q4_0 matvec, both precisions, byte-identical to the scalar references
// (q4_0_kernels.hpp).
// F32: the 16 canonical lanes are four float32x4; one 16-byte load of qs gives weights 0-15
//   (low nibbles) and then 16-31 (high nibbles) for lanes 0-15, so every lane sums in increasing
//   i; w = d * (q - 8) is exact and vfmaq_f32 is the fused fma. T = 1: two rows decoded on the
//   fly (8 FMA chains); T > 1: each row decoded once into f32 scratch and applied to the
//   activation rows two at a time.
// I24: the weight block is unpacked once per row and block and applied to up to 8 activation
//   rows. The a products use (q - 8) << 8 as int16 (|.| <= 2048, so vmull_s16 against |a| <=
//   32767 stays below 2^27) in a's permuted order, where positions (2k, 2k + 1) of the first and
//   third 8-groups are lane k < 4 and of the second and fourth lane 4 + k: vpaddq_s32 of the
//   widened products is then exactly S's A_k grouping. The r products (q - 8) * r fit int16
//   (|.| <= 2040) and pair-add twice into B_k = {4k .. 4k + 3}. Integer sums are exact in any
//   grouping (|S[k]| < 2^28), and the float steps are the reference's.
#include <arm_neon.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/types/q4_0/q4_0_kernels.hpp"

namespace lmt::cpu::q4_0 {
namespace {

constexpr int kQK = LMT_Q4_0_BLOCK_ELEMS;
constexpr size_t kBB = LMT_Q4_0_BLOCK_BYTES;

static inline float block_d(const uint8_t *blk) {
    uint16_t h;
    std::memcpy(&h, blk, 2);
    return f16_to_f32(h);  // the scalar reference's conversion
}

// q - 8 as int8: lo = weights 0-15, hi = weights 16-31.
static inline void nibbles(const uint8_t *blk, int8x16_t &lo, int8x16_t &hi) {
    const uint8x16_t v = vld1q_u8(blk + 2);
    const int8x16_t e = vdupq_n_s8(8);
    lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), e);
    hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), e);
}

// ---- F32 ------------------------------------------------------------------------------------

struct Lanes {
    float32x4_t v[4];
};

static inline Lanes zero_lanes() {
    Lanes a;
    for (auto &v : a.v) v = vdupq_n_f32(0.0f);
    return a;
}

// Canonical tree: b = lanes 0-7 + lanes 8-15; c[l] = b[l] + b[l + 4]; d[l] = c[l] + c[l + 2].
static inline float hsum16_neon(const Lanes &a) {
    const float32x4_t c = vaddq_f32(vaddq_f32(a.v[0], a.v[2]), vaddq_f32(a.v[1], a.v[3]));
    const float d0 = vgetq_lane_f32(c, 0) + vgetq_lane_f32(c, 2), d1 = vgetq_lane_f32(c, 1) + vgetq_lane_f32(c, 3);
    return d0 + d1;
}

// 16 signed weights -> d * q' (exact) as four float32x4.
static inline void w16(int8x16_t q, float d, float32x4_t w[4]) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
    w[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d);
    w[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d);
    w[2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d);
    w[3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d);
}

static inline void fma16(Lanes &acc, const float32x4_t w[4], const float *x) {
    for (int j = 0; j < 4; ++j) acc.v[j] = vfmaq_f32(acc.v[j], w[j], vld1q_f32(x + 4 * j));
}

template <int R>
static inline void rows_t1(const Args &a, int64_t r) {
    const uint8_t *row[R];
    Lanes acc[R];
    for (int k = 0; k < R; ++k) {
        row[k] = a.w + (size_t)(r + k) * a.row_stride;
        acc[k] = zero_lanes();
    }
    const int64_t nb = a.cols / kQK;
    for (int64_t b = 0; b < nb; ++b) {
        const float *xb = a.x + b * kQK;
        for (int k = 0; k < R; ++k) {
            const uint8_t *p = row[k] + (size_t)b * kBB;
            const float d = block_d(p);
            int8x16_t lo, hi;
            nibbles(p, lo, hi);
            float32x4_t w[4];
            w16(lo, d, w);
            fma16(acc[k], w, xb);
            w16(hi, d, w);
            fma16(acc[k], w, xb + 16);
        }
    }
    for (int k = 0; k < R; ++k) a.logits[r + k] = hsum16_neon(acc[k]);
}

template <int TG>
static inline void decoded_row(const Args &a, const float *w, int64_t r, int64_t t0) {
    Lanes acc[TG];
    const float *x[TG];
    for (int t = 0; t < TG; ++t) {
        acc[t] = zero_lanes();
        x[t] = a.x + (t0 + t) * a.cols;
    }
    for (int64_t i = 0; i < a.cols; i += 16) {
        const float32x4_t wv[4] = {vld1q_f32(w + i), vld1q_f32(w + i + 4), vld1q_f32(w + i + 8),
                                   vld1q_f32(w + i + 12)};
        for (int t = 0; t < TG; ++t) fma16(acc[t], wv, x[t] + i);
    }
    for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r] = hsum16_neon(acc[t]);
}

// ---- I24 ------------------------------------------------------------------------------------

struct WBlock {
    int16x8_t s[4];  // (q' << 8) in a's permuted order: weights 0-7, 16-23, 8-15, 24-31
    int16x8_t u[4];  // q' in natural order: weights 0-7, 8-15, 16-23, 24-31
    float d;
};

static inline WBlock unpack(const uint8_t *blk) {
    WBlock o;
    int8x16_t lo, hi;
    nibbles(blk, lo, hi);
    o.u[0] = vmovl_s8(vget_low_s8(lo));
    o.u[1] = vmovl_s8(vget_high_s8(lo));
    o.u[2] = vmovl_s8(vget_low_s8(hi));
    o.u[3] = vmovl_s8(vget_high_s8(hi));
    o.s[0] = vshlq_n_s16(o.u[0], 8);
    o.s[1] = vshlq_n_s16(o.u[2], 8);
    o.s[2] = vshlq_n_s16(o.u[1], 8);
    o.s[3] = vshlq_n_s16(o.u[3], 8);
    o.d = block_d(blk);
    return o;
}

// Pair sums of the 8 int32 products of two int16x8: positions (0,1) (2,3) (4,5) (6,7).
static inline int32x4_t pair_products(int16x8_t w, int16x8_t x) {
    return vpaddq_s32(vmull_s16(vget_low_s16(w), vget_low_s16(x)), vmull_s16(vget_high_s16(w), vget_high_s16(x)));
}

// Sums of 4 consecutive int16 products of (w0 * x0, w1 * x1) (16 weights): k = 0..3.
static inline int32x4_t quad_products(int16x8_t w0, int16x8_t x0, int16x8_t w1, int16x8_t x1) {
    return vpaddq_s32(vpaddlq_s16(vmulq_s16(w0, x0)), vpaddlq_s16(vmulq_s16(w1, x1)));
}

// One block's term for one activation row: lanes 0-3 (lo) and 4-7 (hi) of acc.
static inline void block_term(const WBlock &w, const int16_t *xa, const uint8_t *xr, float sr, float32x4_t &lo,
                              float32x4_t &hi) {
    const int16x8_t a0 = vld1q_s16(xa), a1 = vld1q_s16(xa + 8), a2 = vld1q_s16(xa + 16), a3 = vld1q_s16(xa + 24);
    const uint8x16_t r0 = vld1q_u8(xr), r1 = vld1q_u8(xr + 16);
    const int16x8_t x0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(r0)));
    const int16x8_t x1 = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(r0)));
    const int16x8_t x2 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(r1)));
    const int16x8_t x3 = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(r1)));
    // Positions 0-7 and 16-23 of a: lanes 0-3; positions 8-15 and 24-31: lanes 4-7.
    const int32x4_t Llo = vaddq_s32(pair_products(w.s[0], a0), pair_products(w.s[2], a2));
    const int32x4_t Lhi = vaddq_s32(pair_products(w.s[1], a1), pair_products(w.s[3], a3));
    const int32x4_t Rlo = quad_products(w.u[0], x0, w.u[1], x1);
    const int32x4_t Rhi = quad_products(w.u[2], x2, w.u[3], x3);
    const float e = w.d * sr;
    lo = vfmaq_n_f32(lo, vcvtq_f32_s32(vaddq_s32(Llo, Rlo)), e);
    hi = vfmaq_n_f32(hi, vcvtq_f32_s32(vaddq_s32(Lhi, Rhi)), e);
}

// Canonical 8-lane tree: b = lanes 0-3 + lanes 4-7; c[l] = b[l] + b[l + 2]; c[0] + c[1].
static inline float hsum8_neon(float32x4_t lo, float32x4_t hi) {
    const float32x4_t b = vaddq_f32(lo, hi);
    const float c0 = vgetq_lane_f32(b, 0) + vgetq_lane_f32(b, 2), c1 = vgetq_lane_f32(b, 1) + vgetq_lane_f32(b, 3);
    return c0 + c1;
}

template <int TG>
static void row_tg(const I24Args &a, int64_t r, int64_t t0) {
    const int64_t nb = a.cols / kQK;
    const uint8_t *row = a.w + (size_t)r * a.row_stride;
    float32x4_t lo[TG], hi[TG];
    for (int t = 0; t < TG; ++t) lo[t] = hi[t] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
        const WBlock w = unpack(row + (size_t)b * kBB);
        for (int t = 0; t < TG; ++t) {
            const int64_t o = (t0 + t) * a.cols + b * kQK;
            block_term(w, a.a + o, a.r + o, a.sr[(t0 + t) * nb + b], lo[t], hi[t]);
        }
    }
    for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r] = hsum8_neon(lo[t], hi[t]);
}

}  // namespace

void matvec_neon(const Args &a, int64_t r0, int64_t r1) {
    if (a.T == 1) {
        int64_t r = r0;
        for (; r + 2 <= r1; r += 2) rows_t1<2>(a, r);
        for (; r < r1; ++r) rows_t1<1>(a, r);
        return;
    }
    thread_local std::vector<float> wbuf;
    if ((int64_t)wbuf.size() < a.cols) wbuf.resize((size_t)a.cols);
    const int64_t nb = a.cols / kQK;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *row = a.w + (size_t)r * a.row_stride;
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *p = row + (size_t)b * kBB;
            const float d = block_d(p);
            int8x16_t lo, hi;
            nibbles(p, lo, hi);
            float32x4_t w[8];
            w16(lo, d, w);
            w16(hi, d, w + 4);
            for (int j = 0; j < 8; ++j) vst1q_f32(wbuf.data() + b * kQK + 4 * j, w[j]);
        }
        int64_t t = 0;
        for (; t + 2 <= a.T; t += 2) decoded_row<2>(a, wbuf.data(), r, t);
        if (t < a.T) decoded_row<1>(a, wbuf.data(), r, t);
    }
}

void matvec_i24_neon(const I24Args &a, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        for_token_groups8(a.T, [&](auto n, int64_t t) { row_tg<decltype(n)::value>(a, r, t); });
    }
}

}  // namespace lmt::cpu::q4_0
