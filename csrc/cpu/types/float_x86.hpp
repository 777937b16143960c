// AVX2 + FMA kernels of the float weight types (included by f32/f16/bf16 *_avx2.cpp, each
// compiled with the AVX2 flags; everything is static so no AVX2 code leaks into other TUs).
// The canonical 16 lanes are two 8-lane registers (lanes 0-7, 8-15); the tail (cols % 16) and the
// final tree run the scalar reference's code on the spilled lanes, so the bytes match it.
#pragma once

#include <immintrin.h>

#include <algorithm>

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

// T > 1. FMA-bound (each weight feeds T FMAs), so everything the inner loop reads must come from
// L1: columns are cut into chunks of kColChunk (x: 8 rows x 1 KB, weights: R x 0.5-1 KB), and per
// chunk, lane half (0: lanes 0-7, 1: lanes 8-15) and group of TG activation rows, R*TG register
// accumulators run over the chunk; between chunks they rest in `acc` (L1). Each widened weight
// vector feeds TG FMAs, each x load R FMAs.
constexpr int64_t kColChunk = 256;  // 128-1024 measured: 256 was among the best, with the prefetch
constexpr int kTBlock = 8;

template <class L, int R, int TG, bool PF = false>
static inline void chunk_tg(const uint8_t *const *row, const float *const *x, int64_t i0, int64_t i1,
                            __m256 (*acc)[kTBlock], int t0) {
    __m256 a[R][TG];
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) a[k][t] = acc[k][t0 + t];
    for (int64_t i = i0; i < i1; i += 16) {
        __m256 w[R];
        for (int k = 0; k < R; ++k) w[k] = L::load8(row[k], i);
        if constexpr (PF)  // the first pass over a chunk fetches the next one (the loop is FMA-bound: the
                           // hardware prefetcher alone leaves it waiting on DRAM)
            for (int k = 0; k < R; ++k)
                _mm_prefetch(reinterpret_cast<const char *>(row[k]) + (i + kColChunk) * L::W::kBytes, _MM_HINT_T0);
        for (int t = 0; t < TG; ++t) {
            __m256 xv = _mm256_loadu_ps(x[t0 + t] + i);
            // Keep x in a register: GCC otherwise folds the load into each of the R FMAs, and
            // R*TG + R loads per R*TG FMAs make the loop load-bound.
            __asm__("" : "+x"(xv));
            for (int k = 0; k < R; ++k) a[k][t] = _mm256_fmadd_ps(w[k], xv, a[k][t]);
        }
    }
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) acc[k][t0 + t] = a[k][t];
}

// Activation rows [t0, t0 + n) of the block (n < TG): one chunk_tg with TG = n.
template <class L, int R, int TG, bool PF = false>
static inline void chunk_rest(const uint8_t *const *row, const float *const *x, int64_t i0, int64_t i1,
                              __m256 (*acc)[kTBlock], int t0, int n) {
    if constexpr (TG >= 1) {
        if (n == TG) return chunk_tg<L, R, TG, PF>(row, x, i0, i1, acc, t0);
        chunk_rest<L, R, TG - 1, PF>(row, x, i0, i1, acc, t0, n);
    }
}

template <class L, int R>
static inline void rows_t(const MatvecCall &c, int64_t r) {
    constexpr int TG = 4;  // R = 3: 12 accumulators (Zen 2 needs 10 chains: 2 pipes x 5-cycle FMA) + 3 w + x
    const uint8_t *row[R];
    for (int k = 0; k < R; ++k) row[k] = c.w + (size_t)(r + k) * c.row_stride;
    const int64_t n16 = c.cols & ~(int64_t)15;
    for (int64_t t0 = 0; t0 < c.T; t0 += kTBlock) {
        const int nt = (int)std::min<int64_t>(kTBlock, c.T - t0);
        const float *x[kTBlock];
        for (int t = 0; t < nt; ++t) x[t] = c.x + (t0 + t) * c.cols;
        __m256 acc[2][R][kTBlock];
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < R; ++k)
                for (int t = 0; t < kTBlock; ++t) acc[h][k][t] = _mm256_setzero_ps();
        for (int64_t i0 = 0; i0 < n16; i0 += kColChunk) {
            const int64_t i1 = std::min(n16, i0 + kColChunk);
            for (int h = 0; h < 2; ++h) {
                int t = 0;
                if (h == 0) {  // the prefetching pass
                    t = std::min(nt, TG);
                    if (t == TG) chunk_tg<L, R, TG, true>(row, x, i0, i1, acc[h], 0);
                    else chunk_rest<L, R, TG - 1, true>(row, x, i0, i1, acc[h], 0, t);
                }
                for (; t + TG <= nt; t += TG)
                    chunk_tg<L, R, TG>(row, x, i0 + 8 * h, i1, acc[h], t);
                if (t < nt) chunk_rest<L, R, TG - 1>(row, x, i0 + 8 * h, i1, acc[h], t, nt - t);
            }
        }
        for (int k = 0; k < R; ++k)
            for (int t = 0; t < nt; ++t)
                c.logits[(t0 + t) * c.rows + r + k] = finish_row<L>(acc[0][k][t], acc[1][k][t], row[k], x[t], n16, c.cols);
    }
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
    constexpr int R = 3;
    int64_t r = r0;
    for (; r + R <= r1; r += R) rows_t<L, R>(c, r);
    if (r1 - r == 2) rows_t<L, 2>(c, r);
    else if (r1 - r == 1) rows_t<L, 1>(c, r);
}

}  // namespace
}  // namespace lmt::cpu
