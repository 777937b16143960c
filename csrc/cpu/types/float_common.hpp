// Shared by the float weight types F32, F16 and BF16 (csrc/cpu/types/{f32,f16,bf16}/): ggml's
// conversions for quantize, the exact widening for dequantize, and the scalar reference matvec.
//
// Every stored weight widens to f32 exactly, so there is one precision, F32 (also the default),
// and its canonical expression is Q5_K's F32 tree with w[i] = the widened weight:
//   acc[l] = fma(w[i], x[i], acc[l])   for l = i % 16, i increasing over the whole row
//   logit  = ((acc[0..7] + acc[8..15]) -> 4 -> 2 -> 1)                      ("hsum16")
// cols is any positive integer (block of 1): the SIMD paths run whole 16-weight chunks and
// finish the last cols % 16 weights with the same scalar fmas into the same lanes.
#pragma once

#include <cstring>

#include "cpu/types/types.hpp"
#include "lmtail/blocks/bf16.h"
#include "lmtail/blocks/f16.h"
#include "lmtail/blocks/f32.h"

namespace lmt::cpu {

// ---- The widened weight of each type (exact) ----
struct F32Weights {
    static constexpr int kBytes = 4;
    static float at(const uint8_t *row, int64_t i) {
        float f;
        std::memcpy(&f, row + 4 * i, 4);
        return f;
    }
};
struct F16Weights {
    static constexpr int kBytes = 2;
    static float at(const uint8_t *row, int64_t i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        // ggml's to_float (and vcvtph2ps) returns a signalling NaN half as a quiet NaN.
        if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu)) h |= 0x200u;
        return f16_to_f32(h);
    }
};
struct BF16Weights {
    static constexpr int kBytes = 2;
    static float at(const uint8_t *row, int64_t i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        const uint32_t u = lmt_bf16_to_f32_bits(h);
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};

// ---- ggml's fp32 -> fp16 / bf16 (what ggml_quantize_chunk writes for F16 / BF16) ----
// Round to nearest, ties to even; magnitudes from 65520 (the midpoint above 65504) round to inf;
// a NaN becomes ggml's quiet NaN 0x7E00 with the sign kept (ggml drops the payload).

// ggml_compute_fp32_to_bf16: round to nearest even on the low 16 bits (carries into the exponent,
// so overflow gives inf); a NaN keeps its high bits and gets the quiet bit (0x40) set.
static inline uint16_t f32_to_bf16_ggml(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---- Scalar reference matvec (DEFINES the canonical bytes; see the top of this file) ----
static inline float float_hsum16(const float a[16]) {
    float b[8], c[4], d[2];
    for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) c[l] = b[l] + b[l + 4];
    for (int l = 0; l < 2; ++l) d[l] = c[l] + c[l + 2];
    return d[0] + d[1];
}

// acc[i % 16] += w[i] * x[i] for i in [i0, cols): the scalar tail the SIMD paths share.
template <class W>
static inline void float_dot_tail(const uint8_t *row, const float *x, int64_t i0, int64_t cols, float acc[16]) {
    for (int64_t i = i0; i < cols; ++i) acc[i & 15] = std::fma(W::at(row, i), x[i], acc[i & 15]);
}

template <class W>
static void float_matvec_scalar(const MatvecCall &c, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *row = c.w + (size_t)r * c.row_stride;
        for (int64_t t = 0; t < c.T; ++t) {
            float acc[16] = {0};
            float_dot_tail<W>(row, c.x + t * c.cols, 0, c.cols, acc);
            c.logits[t * c.rows + r] = float_hsum16(acc);
        }
    }
}

using FloatKernel = void (*)(const MatvecCall &, int64_t, int64_t);

// Rows per pool task: a multiple of the AVX2 row groups (4 at T = 1, 3 at T > 1) so no task ends
// in a lone row; 72 rows of 6656 f16 weights = 958 KB, small enough to balance two threads.
constexpr int64_t kFloatRowsPerTask = 72;

// The row split shared by the three types: scalar or the ISA's kernel (simd: AVX2 or NEON;
// simd512: the AVX-512 one, x86 only).
static inline void float_matvec_run(const MatvecCall &c, FloatKernel scalar, FloatKernel simd,
                                    FloatKernel simd512 = nullptr) {
    FloatKernel k = scalar;
    if ((c.isa == Isa::Avx2 || c.isa == Isa::Avx512 || c.isa == Isa::Neon) && simd) k = simd;
    if (c.isa == Isa::Avx512 && simd512) k = simd512;
    for_row_tasks(c.n_threads, c.rows, kFloatRowsPerTask, [&](int64_t r0, int64_t r1) {
        k(c, r0, r1);
        // NaN payloads are not part of the canonical expression: where two NaNs meet (two NaN
        // weights, a NaN weight and a NaN x), which payload survives depends on the operand order
        // the compiler picked for a commutative multiply or add, in the scalar reference as in the
        // SIMD kernels. Every NaN logit is written as the default quiet NaN, so the bytes agree on
        // every ISA and compiler; non-finite stays non-finite.
        const uint32_t qnan = 0x7FC00000u;
        for (int64_t t = 0; t < c.T; ++t)
            for (int64_t r = r0; r < r1; ++r) {
                float *p = c.logits + t * c.rows + r;
                if ((f32_bits(*p) & 0x7FFFFFFFu) > 0x7F800000u) std::memcpy(p, &qnan, 4);
            }
    });
}

// BF16 at T > 1 on AVX-512 (float_avx512.hpp rows_bf16_512) reads x in this "half-step" layout,
// which lets a 64-byte load of 32 weights widen with a shift and a mask (no shuffle): step h of
// the row (h = -1 .. H - 1, H = cols / 16) pairs lanes j = 0..7 with weight 16h + 2j (canonical
// lane 2j) and lanes 8 + j with weight 16(h + 1) + 2j + 1 (canonical lane 2j + 1). Per activation
// row (stride bf16_x_stride): 16 floats per step, x[16h + 2j] then x[16h + 17 + 2j] (0 outside
// the row), then x[16H .. cols) as they are. The values are x's: only their order changes.
static inline int64_t bf16_x_stride(int64_t cols) { return 16 * (cols / 16 + 1) + cols % 16; }
static inline void bf16_x_layout(const float *x, int64_t T, int64_t cols, float *xp) {
    const int64_t H = cols / 16, st = bf16_x_stride(cols);
    for (int64_t t = 0; t < T; ++t) {
        const float *xr = x + t * cols;
        float *o = xp + t * st;
        for (int64_t h = -1; h < H; ++h, o += 16)
            for (int j = 0; j < 8; ++j) {
                o[j] = h >= 0 ? xr[16 * h + 2 * j] : 0.0f;
                o[8 + j] = h + 1 < H ? xr[16 * h + 17 + 2 * j] : 0.0f;
            }
        for (int64_t i = 16 * H; i < cols; ++i) *o++ = xr[i];
    }
}

template <uint16_t (*Conv)(float)>
static void float_quantize_16(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads) {
    for_row_tasks(n_threads, rows, 256, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * cols; i < r1 * cols; ++i) {
            const uint16_t h = Conv(src[i]);
            std::memcpy(dst + 2 * i, &h, 2);
        }
    });
}

template <class W>
static void float_dequantize(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads) {
    for_row_tasks(n_threads, rows, 256, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t i = 0; i < cols; ++i) dst[r * cols + i] = W::at(src + (size_t)r * cols * W::kBytes, i);
    });
}

#if defined(LMTAIL_HAVE_X86)
void matvec_f32_avx2(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_f16_avx2(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_bf16_avx2(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_f32_avx512(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_f16_avx512(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_bf16_avx512(const MatvecCall &c, int64_t r0, int64_t r1);
#endif
#if defined(LMTAIL_HAVE_NEON)
void matvec_f32_neon(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_f16_neon(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_bf16_neon(const MatvecCall &c, int64_t r0, int64_t r1);
#endif

}  // namespace lmt::cpu
