// AVX-512 kernels of the float weight types (included by f32/f16/bf16 *_avx512.cpp, each compiled
// with the AVX-512 flags; everything is static so no AVX-512 code leaks into other TUs).
// The canonical 16 lanes are exactly one zmm (lane l = weight i % 16); the tail (cols % 16) and
// the final tree run the scalar reference's code on the spilled lanes, so the bytes match it.
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "cpu/types/float_common.hpp"
#include "cpu/types/x86_lanes.hpp"

namespace lmt::cpu {
namespace {

// 16 consecutive weights from element i of a row, widened to f32 (exact).
struct F32Load16 {
    using W = F32Weights;
    static __m512 load16(const uint8_t *row, int64_t i) { return _mm512_loadu_ps(reinterpret_cast<const float *>(row) + i); }
};
struct F16Load16 {
    using W = F16Weights;
    // vcvtph2ps quiets a signalling NaN half, as F16Weights::at does.
    static __m512 load16(const uint8_t *row, int64_t i) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + 2 * i)));
    }
};
struct BF16Load16 {
    using W = BF16Weights;
    static __m512 load16(const uint8_t *row, int64_t i) {
        const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + 2 * i)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    }
};

template <class L>
static inline float finish_row16(__m512 a, const uint8_t *row, const float *x, int64_t n16, int64_t cols) {
    alignas(64) float acc[16];
    _mm512_store_ps(acc, a);
    float_dot_tail<typename L::W>(row, x, n16, cols, acc);
    return float_hsum16(acc);
}

// Prefetch, both kernels: while a group of R rows is computed, the next group's rows are
// fetched into L2 at the same column (a whole group ahead, so DRAM latency is covered at any
// speed); at T > 1 the current rows are also fetched into L1 kPfBytes ahead. Without it the
// hardware prefetcher left both kernels waiting on DRAM (measured: ~0.6-0.8x the time with it).
constexpr int64_t kPfBytes = 1024;

template <int R>
static inline void next_rows(const MatvecCall &c, int64_t r, const uint8_t *(&nxt)[R]) {
    for (int k = 0; k < R; ++k) nxt[k] = c.w + (size_t)std::min<int64_t>(r + R + k, c.rows - 1) * c.row_stride;
}

// T = 1 (DRAM-bound): R rows share each x load; R independent FMA chains, each row streamed once.
template <class L, int R>
static inline void rows_t1_512(const MatvecCall &c, int64_t r) {
    const uint8_t *row[R], *nxt[R];
    __m512 a[R];
    for (int k = 0; k < R; ++k) {
        row[k] = c.w + (size_t)(r + k) * c.row_stride;
        a[k] = _mm512_setzero_ps();
    }
    next_rows<R>(c, r, nxt);
    const int64_t n16 = c.cols & ~(int64_t)15;
    for (int64_t i = 0; i < n16; i += 16) {
        const __m512 xv = _mm512_loadu_ps(c.x + i);
        if (((i * L::W::kBytes) & 63) == 0)  // one prefetch per 64-byte line
            for (int k = 0; k < R; ++k)
                _mm_prefetch(reinterpret_cast<const char *>(nxt[k]) + i * L::W::kBytes, _MM_HINT_T1);
        for (int k = 0; k < R; ++k) a[k] = _mm512_fmadd_ps(L::load16(row[k], i), xv, a[k]);
    }
    for (int k = 0; k < R; ++k) c.logits[r + k] = finish_row16<L>(a[k], row[k], c.x, n16, c.cols);
}

// T > 1: R weight rows x TG activation rows of accumulators stay in registers over the whole row
// (R * TG + R + 1 <= 32 zmm); each widened weight vector feeds TG FMAs, each x vector R FMAs.
// x (TG rows) streams from L2 once per R rows.
template <class L, int R, int TG>
static inline void rows_tg_512(const MatvecCall &c, int64_t r, int64_t t0) {
    const uint8_t *row[R], *nxt[R];
    const float *x[TG];
    for (int k = 0; k < R; ++k) row[k] = c.w + (size_t)(r + k) * c.row_stride;
    next_rows<R>(c, r, nxt);
    for (int t = 0; t < TG; ++t) x[t] = c.x + (t0 + t) * c.cols;
    __m512 a[R][TG];
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) a[k][t] = _mm512_setzero_ps();
    const int64_t n16 = c.cols & ~(int64_t)15;
    for (int64_t i = 0; i < n16; i += 16) {
        __m512 w[R];
        for (int k = 0; k < R; ++k) w[k] = L::load16(row[k], i);
        if (((i * L::W::kBytes) & 63) == 0) {  // one prefetch per 64-byte line
            for (int k = 0; k < R; ++k) {
                _mm_prefetch(reinterpret_cast<const char *>(row[k]) + i * L::W::kBytes + kPfBytes, _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char *>(nxt[k]) + i * L::W::kBytes, _MM_HINT_T1);
            }
        }
        for (int t = 0; t < TG; ++t) {
            __m512 xv = _mm512_loadu_ps(x[t] + i);
            // Keep x in a register (GCC would otherwise fold the load into each of the R FMAs).
            __asm__("" : "+v"(xv));
            for (int k = 0; k < R; ++k) a[k][t] = _mm512_fmadd_ps(w[k], xv, a[k][t]);
        }
    }
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t)
            c.logits[(t0 + t) * c.rows + r + k] = finish_row16<L>(a[k][t], row[k], x[t], n16, c.cols);
}

template <class L, int R>
static inline void rows_tn_512(const MatvecCall &c, int64_t r, int64_t t0, int nt) {
    switch (nt) {
        case 1: return rows_tg_512<L, R, 1>(c, r, t0);
        case 2: return rows_tg_512<L, R, 2>(c, r, t0);
        case 3: return rows_tg_512<L, R, 3>(c, r, t0);
        case 4: return rows_tg_512<L, R, 4>(c, r, t0);
        case 5: return rows_tg_512<L, R, 5>(c, r, t0);
        case 6: return rows_tg_512<L, R, 6>(c, r, t0);
        case 7: if constexpr (R <= 3) return rows_tg_512<L, R, 7>(c, r, t0); break;
        default: if constexpr (R <= 3) return rows_tg_512<L, R, 8>(c, r, t0); break;
    }
}

template <class L, int R>
static inline void rows_all_512(const MatvecCall &c, int64_t r0, int64_t r1, int64_t per) {
    for_row_groups<R>(r0, r1, c.T, per,
                      [&](auto g, int64_t r, int64_t t0, int nt) { rows_tn_512<L, decltype(g)::value>(c, r, t0, nt); });
}

template <class L>
static void float_matvec_avx512(const MatvecCall &c, int64_t r0, int64_t r1) {
    if (c.T == 1) {
        int64_t r = r0;
        for (; r + 8 <= r1; r += 8) rows_t1_512<L, 8>(c, r);  // 8 rows measured ahead of 4 (12, 16: no clear gain)
        for (; r + 4 <= r1; r += 4) rows_t1_512<L, 4>(c, r);
        for (; r < r1; ++r) rows_t1_512<L, 1>(c, r);
        return;
    }
    // Activation rows in blocks of near-equal size <= 8 (T = 9: 5 + 4); R so that R * TG >= 8
    // chains cover the FMA latency and R * TG + R + 1 <= 32 registers.
    const int64_t groups = (c.T + 7) / 8, per = (c.T + groups - 1) / groups;
    if (per <= 6) rows_all_512<L, 4>(c, r0, r1, per);
    else rows_all_512<L, 3>(c, r0, r1, per);
}

// BF16, T > 1, x in the half-step layout (float_common.hpp): step h loads the 64 bytes of
// weights 16h .. 16h + 31; lanes 0-7 take the low half of dwords 0-7 (weights 16h + 2j: a shift
// by 16) and lanes 8-15 the high half of dwords 8-15 (weights 16h + 17 + 2j: a mask), so each
// lane's chain still meets its canonical weights in increasing order. Step -1 (lanes 8-15 only)
// and step H - 1 (lanes 0-7 only) load 32 bytes and leave the other lanes' accumulators alone.
// The shift and the mask run beside the FMAs; vpmovzxwd's shuffle took FMA issue slots.
template <int R, int TG>
static inline void rows_bf16_512(const MatvecCall &c, int64_t r, int64_t t0) {
    const int64_t H = c.cols / 16, xs = bf16_x_stride(c.cols);
    const uint8_t *row[R], *nxt[R];
    const float *x[TG];
    for (int k = 0; k < R; ++k) row[k] = c.w + (size_t)(r + k) * c.row_stride;
    next_rows<R>(c, r, nxt);
    for (int t = 0; t < TG; ++t) x[t] = c.x + (t0 + t) * xs + 16;  // step 0
    const __m512i cnt = _mm512_setr_epi32(16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i hi16 = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 a[R][TG];
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) a[k][t] = _mm512_setzero_ps();
    auto widen = [&](__m512i v) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_sllv_epi32(v, cnt), hi16)); };
    if (H > 0) {  // step -1: lanes 8-15 take weights 1, 3, .., 15
        for (int k = 0; k < R; ++k) {
            const __m256i h0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row[k]));
            const __m512 w = widen(_mm512_inserti64x4(_mm512_setzero_si512(), h0, 1));
            for (int t = 0; t < TG; ++t) a[k][t] = _mm512_mask3_fmadd_ps(w, _mm512_loadu_ps(x[t] - 16), a[k][t], 0xFF00);
        }
    }
    for (int64_t h = 0; h + 1 < H; ++h) {
        const int64_t i = 16 * h;
        __m512 w[R];
        for (int k = 0; k < R; ++k)
            w[k] = widen(_mm512_loadu_si512(reinterpret_cast<const void *>(row[k] + 2 * i)));
        if ((h & 1) == 0) {  // one prefetch per 64-byte line
            for (int k = 0; k < R; ++k) {
                _mm_prefetch(reinterpret_cast<const char *>(row[k]) + 2 * i + kPfBytes, _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char *>(nxt[k]) + 2 * i, _MM_HINT_T1);
            }
        }
        for (int t = 0; t < TG; ++t) {
            __m512 xv = _mm512_loadu_ps(x[t] + i);
            // Keep x in a register (GCC would otherwise fold the load into each of the R FMAs).
            __asm__("" : "+v"(xv));
            for (int k = 0; k < R; ++k) a[k][t] = _mm512_fmadd_ps(w[k], xv, a[k][t]);
        }
    }
    if (H > 0) {  // step H - 1: lanes 0-7 take weights 16(H - 1) + 0, 2, .., 14
        const int64_t i = 16 * (H - 1);
        for (int k = 0; k < R; ++k) {
            const __m256i hl = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row[k] + 2 * i));
            const __m512 w = widen(_mm512_zextsi256_si512(hl));
            for (int t = 0; t < TG; ++t) a[k][t] = _mm512_mask3_fmadd_ps(w, _mm512_loadu_ps(x[t] + i), a[k][t], 0x00FF);
        }
    }
    const int64_t n16 = 16 * H;
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) {
            alignas(64) float l[16], acc[16];
            _mm512_store_ps(l, a[k][t]);
            for (int j = 0; j < 8; ++j) {
                acc[2 * j] = l[j];
                acc[2 * j + 1] = l[8 + j];
            }
            // x's last cols % 16 elements follow the steps, in order
            float_dot_tail<BF16Weights>(row[k], x[t] + 16 * H - n16, n16, c.cols, acc);
            c.logits[(t0 + t) * c.rows + r + k] = float_hsum16(acc);
        }
}

template <int R>
static inline void rows_bf16_tn_512(const MatvecCall &c, int64_t r, int64_t t0, int nt) {
    switch (nt) {
        case 1: return rows_bf16_512<R, 1>(c, r, t0);
        case 2: return rows_bf16_512<R, 2>(c, r, t0);
        case 3: return rows_bf16_512<R, 3>(c, r, t0);
        case 4: return rows_bf16_512<R, 4>(c, r, t0);
        case 5: return rows_bf16_512<R, 5>(c, r, t0);
        case 6: return rows_bf16_512<R, 6>(c, r, t0);
        case 7: if constexpr (R <= 3) return rows_bf16_512<R, 7>(c, r, t0); break;
        default: if constexpr (R <= 3) return rows_bf16_512<R, 8>(c, r, t0); break;
    }
}

template <int R>
static inline void rows_bf16_all_512(const MatvecCall &c, int64_t r0, int64_t r1, int64_t per) {
    int64_t r = r0;
    for (; r + R <= r1; r += R)
        for (int64_t t0 = 0; t0 < c.T; t0 += per) rows_bf16_tn_512<R>(c, r, t0, (int)std::min<int64_t>(per, c.T - t0));
    for (; r < r1; ++r)
        for (int64_t t0 = 0; t0 < c.T; t0 += per) rows_bf16_tn_512<1>(c, r, t0, (int)std::min<int64_t>(per, c.T - t0));
}

// T > 1 (the row split and register budget of float_matvec_avx512).
static void bf16_matvec_halfstep_512(const MatvecCall &c, int64_t r0, int64_t r1) {
    const int64_t groups = (c.T + 7) / 8, per = (c.T + groups - 1) / groups;
    if (per <= 6) rows_bf16_all_512<4>(c, r0, r1, per);
    else rows_bf16_all_512<3>(c, r0, r1, per);
}

}  // namespace
}  // namespace lmt::cpu
