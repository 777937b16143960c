// AVX-512 Q8_0 matvec: the canonical 16-lane tree (q8_0.hpp) in one zmm per (weight row,
// activation row). Weights 0-15 and then 16-31 of a 32-block go into the same 16 lanes, so each
// lane accumulates its weights in increasing i, as the scalar reference.
//
//   T = 1: R weight rows decoded straight from the bytes against one x (R FMA chains);
//   T > 1: R rows x TG activation rows of accumulators held in registers over the whole row:
//          each decoded weight vector (w = d*q, exact) feeds TG FMAs, each x vector R FMAs.
//          At T = 8 this is FMA-pipe-bound: per 16 weights of a row, 8 FMAs + the decode's mul
//          (in L2: ~3.0 zmm FMAs/ns per core on Zen 4, against ~3.2 for BF16, which has no mul).
#include <immintrin.h>

#include <algorithm>

#include "cpu/types/q8_0/q8_0.hpp"
#include "cpu/types/x86_lanes.hpp"

namespace lmt::cpu {
namespace {

constexpr int kQ = LMT_Q8_0_BLOCK_ELEMS;
constexpr int kB = LMT_Q8_0_BLOCK_BYTES;
// Prefetch (as the float kernels, float_avx512.hpp): the next group of R rows into L2 at the
// same block while this group is computed, and at T > 1 the current rows into L1 kPfBytes ahead.
constexpr int64_t kPfBytes = 1024;

template <int R>
static inline void next_rows(const MatvecArgs &a, int64_t r, const uint8_t *(&nxt)[R]) {
    for (int k = 0; k < R; ++k) nxt[k] = a.w + (size_t)std::min<int64_t>(r + R + k, a.rows - 1) * a.row_stride;
}

// The block's d, converted exactly, broadcast.
static inline __m512 block_d(const uint8_t *blk) {
    uint16_t h;
    std::memcpy(&h, blk, 2);
    return _mm512_set1_ps(_cvtsh_ss(h));
}

// 16 signed bytes -> 16 weights d * q (exact).
static inline __m512 w16(const uint8_t *q, __m512 D) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(q));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), D);
}

static inline float hsum16_zmm(__m512 v) {
    alignas(64) float a[16];
    _mm512_store_ps(a, v);
    return q8_0_hsum16(a);
}

template <int R>
static inline void rows_t1(const MatvecArgs &a, int64_t r) {
    const uint8_t *row[R], *nxt[R];
    __m512 acc[R];
    for (int k = 0; k < R; ++k) {
        row[k] = a.w + (size_t)(r + k) * a.row_stride;
        acc[k] = _mm512_setzero_ps();
    }
    next_rows<R>(a, r, nxt);
    const int64_t nb = a.cols / kQ;
    for (int64_t b = 0; b < nb; ++b) {
        const float *xb = a.x + b * kQ;
        const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
        // One prefetch per block: a 34-byte block touches at most 2 lines, so every line is covered.
        for (int k = 0; k < R; ++k) _mm_prefetch(reinterpret_cast<const char *>(nxt[k]) + (size_t)b * kB, _MM_HINT_T1);
        for (int k = 0; k < R; ++k) {
            const uint8_t *p = row[k] + (size_t)b * kB;
            const __m512 D = block_d(p);
            acc[k] = _mm512_fmadd_ps(w16(p + 2, D), x0, acc[k]);
            acc[k] = _mm512_fmadd_ps(w16(p + 18, D), x1, acc[k]);
        }
    }
    for (int k = 0; k < R; ++k) a.logits[r + k] = hsum16_zmm(acc[k]);
}

// R weight rows against activation rows [t0, t0 + TG); R * TG + 2R + 1 <= 32 zmm.
template <int R, int TG>
static inline void rows_tg(const MatvecArgs &a, int64_t r, int64_t t0) {
    const uint8_t *row[R], *nxt[R];
    const float *x[TG];
    for (int k = 0; k < R; ++k) row[k] = a.w + (size_t)(r + k) * a.row_stride;
    next_rows<R>(a, r, nxt);
    for (int t = 0; t < TG; ++t) x[t] = a.x + (t0 + t) * a.cols;
    __m512 acc[R][TG];
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) acc[k][t] = _mm512_setzero_ps();
    const int64_t nb = a.cols / kQ;
    for (int64_t b = 0; b < nb; ++b) {
        __m512 D[R];
        for (int k = 0; k < R; ++k) D[k] = block_d(row[k] + (size_t)b * kB);
        for (int k = 0; k < R; ++k) {
            _mm_prefetch(reinterpret_cast<const char *>(row[k]) + (size_t)b * kB + kPfBytes, _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char *>(nxt[k]) + (size_t)b * kB, _MM_HINT_T1);
        }
        for (int h = 0; h < 2; ++h) {
            __m512 w[R];
            for (int k = 0; k < R; ++k) w[k] = w16(row[k] + (size_t)b * kB + 2 + 16 * h, D[k]);
            for (int t = 0; t < TG; ++t) {
                __m512 xv = _mm512_loadu_ps(x[t] + b * kQ + 16 * h);
                // Keep x in a register (GCC would otherwise fold the load into each of the R FMAs).
                __asm__("" : "+v"(xv));
                for (int k = 0; k < R; ++k) acc[k][t] = _mm512_fmadd_ps(w[k], xv, acc[k][t]);
            }
        }
    }
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r + k] = hsum16_zmm(acc[k][t]);
}

template <int R>
static inline void rows_tn(const MatvecArgs &a, int64_t r, int64_t t0, int nt) {
    switch (nt) {
        case 1: return rows_tg<R, 1>(a, r, t0);
        case 2: return rows_tg<R, 2>(a, r, t0);
        case 3: return rows_tg<R, 3>(a, r, t0);
        case 4: return rows_tg<R, 4>(a, r, t0);
        case 5: return rows_tg<R, 5>(a, r, t0);
        case 6: return rows_tg<R, 6>(a, r, t0);
        case 7: if constexpr (R <= 3) return rows_tg<R, 7>(a, r, t0); break;
        default: if constexpr (R <= 3) return rows_tg<R, 8>(a, r, t0); break;
    }
}

template <int R>
static inline void rows_all(const MatvecArgs &a, int64_t r0, int64_t r1, int64_t per) {
    for_row_groups<R>(r0, r1, a.T, per,
                      [&](auto g, int64_t r, int64_t t0, int nt) { rows_tn<decltype(g)::value>(a, r, t0, nt); });
}

}  // namespace

void matvec_q8_0_avx512(const MatvecArgs &a, int64_t r0, int64_t r1) {
    if (a.T == 1) {
        constexpr int R = 8;
        int64_t r = r0;
        for (; r + R <= r1; r += R) rows_t1<R>(a, r);
        for (; r < r1; ++r) rows_t1<1>(a, r);
        return;
    }
    // Activation rows in blocks of near-equal size <= 8 (T = 9: 5 + 4).
    const int64_t groups = (a.T + 7) / 8, per = (a.T + groups - 1) / groups;
    if (per <= 5) rows_all<4>(a, r0, r1, per);
    else rows_all<3>(a, r0, r1, per);
}

}  // namespace lmt::cpu
