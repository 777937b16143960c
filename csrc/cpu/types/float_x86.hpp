// AVX2 + FMA kernels of the float weight types (included by f32/f16/bf16 *_avx2.cpp, each
// compiled with the AVX2 flags; everything is static so no AVX2 code leaks into other TUs).
// The canonical 16 lanes are two 8-lane registers (lanes 0-7, 8-15); the tail (cols % 16) and the
// final tree run the scalar reference's code on the spilled lanes, so the bytes match it.
#pragma once

#include <immintrin.h>

#include "cpu/types/float_common.hpp"

namespace lmt::cpu {
namespace {

// 8 consecutive weights from element i of a row, widened to f32 (exact).
struct F32Load {
    using W = F32Weights;
    static __m256 load8(const uint8_t *row, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float *>(row) + i); }
};
struct F16Load {
    using W = F16Weights;
    static __m256 load8(const uint8_t *row, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 2 * i)));
    }
};
struct BF16Load {
    using W = BF16Weights;
    static __m256 load8(const uint8_t *row, int64_t i) {
        const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 2 * i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    }
};

template <class L>
static inline float finish_row(__m256 lo, __m256 hi, const uint8_t *row, const float *x, int64_t n16, int64_t cols) {
    alignas(32) float acc[16];
    _mm256_store_ps(acc, lo);
    _mm256_store_ps(acc + 8, hi);
    float_dot_tail<typename L::W>(row, x, n16, cols, acc);
    return float_hsum16(acc);
}

// T = 1: R rows share each x load; 2R independent FMA chains cover the FMA latency, and the row
// bytes are streamed once.
template <class L, int R>
static inline void rows_t1(const MatvecCall &c, int64_t r) {
    const uint8_t *row[R];
    __m256 lo[R], hi[R];
    for (int k = 0; k < R; ++k) {
        row[k] = c.w + (size_t)(r + k) * c.row_stride;
        lo[k] = hi[k] = _mm256_setzero_ps();
    }
    const int64_t n16 = c.cols & ~(int64_t)15;
    for (int64_t i = 0; i < n16; i += 16) {
        const __m256 x0 = _mm256_loadu_ps(c.x + i), x1 = _mm256_loadu_ps(c.x + i + 8);
        for (int k = 0; k < R; ++k) {
            lo[k] = _mm256_fmadd_ps(L::load8(row[k], i), x0, lo[k]);
            hi[k] = _mm256_fmadd_ps(L::load8(row[k], i + 8), x1, hi[k]);
        }
    }
    for (int k = 0; k < R; ++k) c.logits[r + k] = finish_row<L>(lo[k], hi[k], row[k], c.x, n16, c.cols);
}

// T > 1: one lane half (0: lanes 0-7, 1: lanes 8-15) at a time for R rows x TG activation rows,
// R*TG accumulators; each widened weight vector feeds TG FMAs, each x load R FMAs.
template <class L, int R, int TG>
static inline void rows_tg(const MatvecCall &c, int64_t r, int64_t t0) {
    const uint8_t *row[R];
    const float *x[TG];
    for (int k = 0; k < R; ++k) row[k] = c.w + (size_t)(r + k) * c.row_stride;
    for (int t = 0; t < TG; ++t) x[t] = c.x + (t0 + t) * c.cols;
    const int64_t n16 = c.cols & ~(int64_t)15;
    __m256 part[2][R][TG];
    for (int half = 0; half < 2; ++half) {
        __m256 acc[R][TG];
        for (int k = 0; k < R; ++k)
            for (int t = 0; t < TG; ++t) acc[k][t] = _mm256_setzero_ps();
        for (int64_t i = 8 * half; i < n16; i += 16) {
            __m256 w[R];
            for (int k = 0; k < R; ++k) w[k] = L::load8(row[k], i);
            for (int t = 0; t < TG; ++t) {
                const __m256 xv = _mm256_loadu_ps(x[t] + i);
                for (int k = 0; k < R; ++k) acc[k][t] = _mm256_fmadd_ps(w[k], xv, acc[k][t]);
            }
        }
        for (int k = 0; k < R; ++k)
            for (int t = 0; t < TG; ++t) part[half][k][t] = acc[k][t];
    }
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t)
            c.logits[(t0 + t) * c.rows + r + k] = finish_row<L>(part[0][k][t], part[1][k][t], row[k], x[t], n16, c.cols);
}

// The last T % TGMAX activation rows: one rows_tg with TG = n (n < TGMAX).
template <class L, int R, int TG>
static inline void rows_tg_rest(const MatvecCall &c, int64_t r, int64_t t0, int64_t n) {
    if constexpr (TG >= 1) {
        if (n == TG) return rows_tg<L, R, TG>(c, r, t0);
        rows_tg_rest<L, R, TG - 1>(c, r, t0, n);
    }
}

template <class L, int R>
static inline void rows_t(const MatvecCall &c, int64_t r) {
    constexpr int TGMAX = 8 / R;  // R * TG <= 8 accumulators
    int64_t t0 = 0;
    for (; t0 + TGMAX <= c.T; t0 += TGMAX) rows_tg<L, R, TGMAX>(c, r, t0);
    if (t0 < c.T) rows_tg_rest<L, R, TGMAX - 1>(c, r, t0, c.T - t0);
}

template <class L>
static void float_matvec_avx2(const MatvecCall &c, int64_t r0, int64_t r1) {
    if (c.T == 1) {
        constexpr int R = 4;
        int64_t r = r0;
        for (; r + R <= r1; r += R) rows_t1<L, R>(c, r);
        for (; r < r1; ++r) rows_t1<L, 1>(c, r);
        return;
    }
    constexpr int R = 2;
    int64_t r = r0;
    for (; r + R <= r1; r += R) rows_t<L, R>(c, r);
    for (; r < r1; ++r) rows_t<L, 1>(c, r);
}

}  // namespace
}  // namespace lmt::cpu
