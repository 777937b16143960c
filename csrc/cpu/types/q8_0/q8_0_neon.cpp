// NEON (AArch64) Q8_0 matvec, byte-identical to the scalar reference (q8_0.hpp): the 16
// canonical lanes are four float32x4 (lanes 0-3, 4-7, 8-11, 12-15); weights 0-15 of a block and
// then weights 16-31 go to lanes 0-15, so every lane sums in increasing i. w = d * q is exact
// and vfmaq_f32 is the fused fma, so only the association order matters, and it is the scalar's.
//   T = 1: two rows decoded straight from the bytes against one x (8 independent FMA chains;
//          one row alone is bound by the FMA latency).
//   T > 1: each row decoded once into f32 scratch (exact) and applied to the activation rows
//          two at a time, so a decoded weight serves every activation row.
#include <arm_neon.h>

#include <vector>

#include "cpu/types/q8_0/q8_0.hpp"

namespace lmt::cpu {
namespace {

constexpr int kQ = LMT_Q8_0_BLOCK_ELEMS;
constexpr int kB = LMT_Q8_0_BLOCK_BYTES;

struct Lanes {
    float32x4_t v[4];
};

static inline Lanes zero_lanes() {
    Lanes a;
    for (auto &v : a.v) v = vdupq_n_f32(0.0f);
    return a;
}

// Canonical tree: b = lanes 0-7 + lanes 8-15; c[l] = b[l] + b[l + 4]; d[l] = c[l] + c[l + 2].
static inline float hsum16(const Lanes &a) {
    const float32x4_t c = vaddq_f32(vaddq_f32(a.v[0], a.v[2]), vaddq_f32(a.v[1], a.v[3]));
    const float d0 = vgetq_lane_f32(c, 0) + vgetq_lane_f32(c, 2), d1 = vgetq_lane_f32(c, 1) + vgetq_lane_f32(c, 3);
    return d0 + d1;
}

// 16 signed bytes -> 16 weights d * q (exact) as four float32x4.
static inline void w16(const int8_t *q, float d, float32x4_t w[4]) {
    const int8x16_t b = vld1q_s8(q);
    const int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_s8(vget_high_s8(b));
    w[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d);
    w[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d);
    w[2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d);
    w[3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d);
}

static inline float block_d(const uint8_t *blk) {
    uint16_t h;
    std::memcpy(&h, blk, 2);
    return f16_to_f32(h);  // the scalar reference's conversion: NaN payloads agree
}

static inline void fma16(Lanes &acc, const float32x4_t w[4], const float *x) {
    for (int j = 0; j < 4; ++j) acc.v[j] = vfmaq_f32(acc.v[j], w[j], vld1q_f32(x + 4 * j));
}

template <int R>
static inline void rows_t1(const MatvecArgs &a, int64_t r) {
    const uint8_t *row[R];
    Lanes acc[R];
    for (int k = 0; k < R; ++k) {
        row[k] = a.w + (size_t)(r + k) * a.row_stride;
        acc[k] = zero_lanes();
    }
    const int64_t nb = a.cols / kQ;
    for (int64_t b = 0; b < nb; ++b) {
        const float *xb = a.x + b * kQ;
        for (int k = 0; k < R; ++k) {
            const uint8_t *p = row[k] + (size_t)b * kB;
            const float d = block_d(p);
            float32x4_t w[4];
            w16(reinterpret_cast<const int8_t *>(p + 2), d, w);
            fma16(acc[k], w, xb);
            w16(reinterpret_cast<const int8_t *>(p + 18), d, w);
            fma16(acc[k], w, xb + 16);
        }
    }
    for (int k = 0; k < R; ++k) a.logits[r + k] = hsum16(acc[k]);
}

// One decoded row (w, cols floats) against TG activation rows starting at t0.
template <int TG>
static inline void decoded_row(const MatvecArgs &a, const float *w, int64_t r, int64_t t0) {
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
    for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r] = hsum16(acc[t]);
}

}  // namespace

void matvec_q8_0_neon(const MatvecArgs &a, int64_t r0, int64_t r1) {
    if (a.T == 1) {
        int64_t r = r0;
        for (; r + 2 <= r1; r += 2) rows_t1<2>(a, r);
        for (; r < r1; ++r) rows_t1<1>(a, r);
        return;
    }
    thread_local std::vector<float> wbuf;
    if ((int64_t)wbuf.size() < a.cols) wbuf.resize((size_t)a.cols);
    const int64_t nb = a.cols / kQ;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *row = a.w + (size_t)r * a.row_stride;
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *p = row + (size_t)b * kB;
            const float d = block_d(p);
            float32x4_t w[8];
            w16(reinterpret_cast<const int8_t *>(p + 2), d, w);
            w16(reinterpret_cast<const int8_t *>(p + 18), d, w + 4);
            for (int j = 0; j < 8; ++j) vst1q_f32(wbuf.data() + b * kQ + 4 * j, w[j]);
        }
        int64_t t = 0;
        for (; t + 2 <= a.T; t += 2) decoded_row<2>(a, wbuf.data(), r, t);
        if (t < a.T) decoded_row<1>(a, wbuf.data(), r, t);
    }
}

}  // namespace lmt::cpu
