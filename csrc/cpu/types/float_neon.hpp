// NEON (AArch64) matvec of the float weight types, byte-identical to float_matvec_scalar
// (float_common.hpp): the 16 canonical lanes are four float32x4, weight i goes to lane i % 16 in
// increasing i, each widened exactly (F16: fcvtl, which quiets a signalling NaN as F16Weights
// does; BF16: the bits shifted up; F32: loaded), vfmaq_f32 is the fused fma; the last cols % 16
// weights and the final sum are the scalar reference's own float_dot_tail and float_hsum16.
//   T = 1: two rows against one x (8 independent FMA chains).
//   T > 1: each row widened once into f32 scratch and applied to the activation rows two at a
//          time, so a weight is read from memory once per call.
// Included only by the <type>_neon.cpp files (built on arm64 only).
#pragma once

#include <arm_neon.h>

#include <type_traits>
#include <vector>

#include "cpu/types/float_common.hpp"

namespace lmt::cpu::float_neon {

// 16 weights from i (a whole chunk) widened to four float32x4.
template <class W>
static inline void load16(const uint8_t *row, int64_t i, float32x4_t w[4]) {
    if constexpr (W::kBytes == 4) {
        const float *p = reinterpret_cast<const float *>(row) + i;  // unaligned loads are fine on AArch64
        for (int j = 0; j < 4; ++j) w[j] = vld1q_f32(p + 4 * j);
    } else {
        const uint16x8_t h0 = vld1q_u16(reinterpret_cast<const uint16_t *>(row) + i);
        const uint16x8_t h1 = vld1q_u16(reinterpret_cast<const uint16_t *>(row) + i + 8);
        if constexpr (std::is_same_v<W, F16Weights>) {
            w[0] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h0)));
            w[1] = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h0)));
            w[2] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h1)));
            w[3] = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h1)));
        } else {
            w[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
            w[1] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(h0), 16));
            w[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
            w[3] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(h1), 16));
        }
    }
}

struct Lanes {
    float32x4_t v[4];
};

static inline Lanes zero_lanes() {
    Lanes a;
    for (auto &v : a.v) v = vdupq_n_f32(0.0f);
    return a;
}

static inline void fma16(Lanes &acc, const float32x4_t w[4], const float *x) {
    for (int j = 0; j < 4; ++j) acc.v[j] = vfmaq_f32(acc.v[j], w[j], vld1q_f32(x + 4 * j));
}

// The lanes out to memory, the scalar tail from i0, the canonical sum.
template <class W>
static inline float finish(const Lanes &acc, const uint8_t *row, const float *x, int64_t i0, int64_t cols) {
    float a[16];
    for (int j = 0; j < 4; ++j) vst1q_f32(a + 4 * j, acc.v[j]);
    float_dot_tail<W>(row, x, i0, cols, a);
    return float_hsum16(a);
}

template <class W, int R>
static inline void rows_t1(const MatvecCall &c, int64_t r) {
    const uint8_t *row[R];
    Lanes acc[R];
    for (int k = 0; k < R; ++k) {
        row[k] = c.w + (size_t)(r + k) * c.row_stride;
        acc[k] = zero_lanes();
    }
    const int64_t n16 = c.cols / 16 * 16;
    for (int64_t i = 0; i < n16; i += 16)
        for (int k = 0; k < R; ++k) {
            float32x4_t w[4];
            load16<W>(row[k], i, w);
            fma16(acc[k], w, c.x + i);
        }
    for (int k = 0; k < R; ++k) c.logits[r + k] = finish<W>(acc[k], row[k], c.x, n16, c.cols);
}

// One widened row (w: n16 floats) against TG activation rows from t0; the tail from the bytes.
template <class W, int TG>
static inline void widened_row(const MatvecCall &c, const float *w, const uint8_t *row, int64_t r, int64_t t0) {
    const int64_t n16 = c.cols / 16 * 16;
    Lanes acc[TG];
    const float *x[TG];
    for (int t = 0; t < TG; ++t) {
        acc[t] = zero_lanes();
        x[t] = c.x + (t0 + t) * c.cols;
    }
    for (int64_t i = 0; i < n16; i += 16) {
        const float32x4_t wv[4] = {vld1q_f32(w + i), vld1q_f32(w + i + 4), vld1q_f32(w + i + 8),
                                   vld1q_f32(w + i + 12)};
        for (int t = 0; t < TG; ++t) fma16(acc[t], wv, x[t] + i);
    }
    for (int t = 0; t < TG; ++t) c.logits[(t0 + t) * c.rows + r] = finish<W>(acc[t], row, x[t], n16, c.cols);
}

template <class W>
static void matvec(const MatvecCall &c, int64_t r0, int64_t r1) {
    if (c.T == 1) {
        int64_t r = r0;
        for (; r + 2 <= r1; r += 2) rows_t1<W, 2>(c, r);
        for (; r < r1; ++r) rows_t1<W, 1>(c, r);
        return;
    }
    const int64_t n16 = c.cols / 16 * 16;
    thread_local std::vector<float> wbuf;
    if ((int64_t)wbuf.size() < n16 + 16) wbuf.resize((size_t)(n16 + 16));
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *row = c.w + (size_t)r * c.row_stride;
        for (int64_t i = 0; i < n16; i += 16) {
            float32x4_t w[4];
            load16<W>(row, i, w);
            for (int j = 0; j < 4; ++j) vst1q_f32(wbuf.data() + i + 4 * j, w[j]);
        }
        int64_t t = 0;
        for (; t + 2 <= c.T; t += 2) widened_row<W, 2>(c, wbuf.data(), row, r, t);
        if (t < c.T) widened_row<W, 1>(c, wbuf.data(), row, r, t);
    }
}

}  // namespace lmt::cpu::float_neon
