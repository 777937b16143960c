// 512-bit Precision::F32 kernels of Q4_K and Q5_K (the canonical tree of q5_k_scalar.cpp /
// q4_k_internal.hpp: w = fma(q, d1[j], -m1[j]), acc[i % 16] = fma(w, x, acc) in increasing i,
// hsum16). Included only by the types' *_avx512.cpp translation units (static inline, anonymous
// namespace).
//
// A weight depends only on its code q and its sub-block's (d1, m1), so each sub-block's weights
// come from a table: T_j[q] = fma(q, d1[j], -m1[j]) for every code (16 for Q4_K, 32 for Q5_K),
// built with one (two) vfmsubps, and 16 weights are one vpermps (vpermt2ps) indexed by their codes,
// the same f32 values as the reference's per-weight fma. The codes need no masking: vpermps reads
// bits 0-3 of each dword index and vpermt2ps bits 0-4, so a zero-extended qs byte is already the
// low nibble's index, a 4-bit shift the high nibble's, and Q5_K's 5th bit is merged into bit 4 by
// one vpternlogd. R weight rows share each activation load, TG activation rows each decoded
// weight; the rows of a block are decoded once per pass of TG activation rows.
//
// Why: these kernels serve every activation row the I24 outlier rule sends to F32 (any 256-block
// whose median |x| is below max/8: rows with outlier channels, the usual case for a real model's
// hidden states). The AVX2-derived kernel they replace ran one weight row at a time at T = 1
// (one FMA chain, latency-bound) and decoded through byte scratch; on a Xeon with AMX, full
// 202048 x 6656 head, 2 threads: Q4_K 142 ms at T = 1 and 657 ms at T = 8, Q5_K 124 / 337 ms,
// against 46 / 166 and 51 / 156 ms on I24 (bench/RESULTS.md has the figures after).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cpu/internal.hpp"
#include "cpu/types/q5_k/q5k_x86.hpp"  // hsum16_avx: the canonical 16-lane tree
#include "lmtail/blocks/q4_k.h"
#include "lmtail/blocks/q5_k.h"

namespace lmt::cpu {
namespace {

// The block layouts the kernel reads: d, dmin, scales[12] at byte 0 in both; Q5_K's qh[32] at 16.
template <bool Q5>
struct KF32Layout {
    static constexpr size_t kBytes = Q5 ? LMT_Q5K_BLOCK_BYTES : LMT_Q4K_BLOCK_BYTES;
    static constexpr size_t kQs = Q5 ? 48 : 16;
};
static_assert(offsetof(lmt_block_q4_K, qs) == 16 && offsetof(lmt_block_q5_K, qs) == 48 &&
                  offsetof(lmt_block_q5_K, qh) == 16,
              "K-quant layouts as read below");

// Row K of kf32_scales: its 16 bytes sc[0..7], m[0..7] (lane K of B) times [d x 8 | dmin x 8].
template <int K>
static inline void kf32_scales_row(__m512i B, __m512 ddz, float (*d1)[8], float (*m1)[8]) {
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(B, K)));
    const __m512i sel = _mm512_setr_epi32(2 * K, 2 * K, 2 * K, 2 * K, 2 * K, 2 * K, 2 * K, 2 * K, 2 * K + 1, 2 * K + 1,
                                          2 * K + 1, 2 * K + 1, 2 * K + 1, 2 * K + 1, 2 * K + 1, 2 * K + 1);
    const __m512 p = _mm512_mul_ps(_mm512_permutexvar_ps(sel, ddz), f);
    _mm256_store_ps(d1[K], _mm512_castps512_ps256(p));
    _mm256_store_ps(m1[K], _mm512_extractf32x8_ps(p, 1));
}

// d1[k][j] = d * sc[j], m1[k][j] = dmin * m[j] (one rounding each, as the reference) for the
// blocks of R <= 4 weight rows at once: the 16-byte headers in the 128-bit lanes (unused lanes
// repeat row 0), the 6-bit fields by byte shuffles and masks, one conversion per row. A scalar
// unpack per row was ~40% of the Q4_K kernel's time at T = 1 (L3-resident, 1 thread).
template <int R>
static inline void kf32_scales(const uint8_t *const *blk, float (*d1)[8], float (*m1)[8]) {
    static_assert(R >= 1 && R <= 4, "four 128-bit lanes");
    __m512i H = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk[0])));
    if constexpr (R > 1) H = _mm512_inserti32x4(H, _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk[1])), 1);
    if constexpr (R > 2) H = _mm512_inserti32x4(H, _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk[2])), 2);
    if constexpr (R > 3) H = _mm512_inserti32x4(H, _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk[3])), 3);
    // header byte 4 + i = scales[i]. Output bytes per lane: sc[0..7], m[0..7] with
    //   sc[j] = s[j] & 63,  sc[4+j] = (s[8+j] & 15) | (s[j] >> 6) << 4,
    //   m[j] = s[4+j] & 63, m[4+j] = (s[8+j] >> 4) | (s[4+j] >> 6) << 4       (j < 4)
    const __m512i i1 = _mm512_broadcast_i32x4(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m512i i2 = _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
    const __m512i X1 = _mm512_shuffle_epi8(H, i1), X2 = _mm512_shuffle_epi8(H, i2);
    const __m512i mlow = _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    const __m512i mnib = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
    const __m512i mhi = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48));
    const __m512i B = _mm512_or_si512(
        _mm512_or_si512(_mm512_and_si512(X1, mlow), _mm512_and_si512(_mm512_srli_epi16(X1, 4), mnib)),
        _mm512_and_si512(_mm512_srli_epi16(X2, 2), mhi));
    // [d, dmin] of each row as floats: lane r's dword 0
    const __m256 dd = _mm256_cvtph_ps(_mm512_castsi512_si128(
        _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), H)));
    const __m512 ddz = _mm512_castps256_ps512(dd);
    kf32_scales_row<0>(B, ddz, d1, m1);
    if constexpr (R > 1) kf32_scales_row<1>(B, ddz, d1, m1);
    if constexpr (R > 2) kf32_scales_row<2>(B, ddz, d1, m1);
    if constexpr (R > 3) kf32_scales_row<3>(B, ddz, d1, m1);
}

// Bit `bit` of each dword of q moved to bit 4 (other bits: don't care; vpternlogd keeps bit 4).
template <int bit>
static inline __m512i kf32_bit4(__m512i q) {
    if constexpr (bit < 4) return _mm512_slli_epi32(q, 4 - bit);
    else if constexpr (bit > 4) return _mm512_srli_epi32(q, bit - 4);
    else return q;
}

// Rows row[0..R) of one block for activation rows x[0..TG) at element offset i0; acc[k][t] holds
// (row k, activation row t)'s 16 lanes.
template <bool Q5, int R, int TG, int G>
static inline void kf32_group(const uint8_t *const *blk, const float (*d1)[8], const float (*m1)[8],
                              const float *const *x, int64_t i0, __m512 (&acc)[R][TG]) {
    using L = KF32Layout<Q5>;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i low4 = _mm512_set1_epi32(0x0F);
    // sub-block 2G (low nibbles: quarters 0, 1), then 2G + 1 (high nibbles: quarters 2, 3)
    LMT_UNROLL
    for (int s = 0; s < 2; ++s) {
        const int j = 2 * G + s;
        __m512 w[2][R];
        LMT_UNROLL
        for (int k = 0; k < R; ++k) {
            const uint8_t *qs = blk[k] + L::kQs + 32 * G;
            __m512i i0v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(qs)));
            __m512i i1v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(qs + 16)));
            if (s == 1) {
                i0v = _mm512_srli_epi32(i0v, 4);
                i1v = _mm512_srli_epi32(i1v, 4);
            }
            const __m512 D = _mm512_set1_ps(d1[k][j]), M = _mm512_set1_ps(m1[k][j]);
            const __m512 t0 = _mm512_fmsub_ps(iota, D, M);  // codes 0..15
            if constexpr (Q5) {
                const __m512 t1 = _mm512_fmsub_ps(_mm512_add_ps(iota, _mm512_set1_ps(16.0f)), D, M);  // 16..31
                const uint8_t *qh = blk[k] + 16;
                const __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(qh)));
                const __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(qh + 16)));
                // index = nibble (bits 0-3) | the 5th bit (bit j of qh, moved to bit 4): c ? a : b
                const __m512i b0 = s == 0 ? kf32_bit4<2 * G>(q0) : kf32_bit4<2 * G + 1>(q0);
                const __m512i b1 = s == 0 ? kf32_bit4<2 * G>(q1) : kf32_bit4<2 * G + 1>(q1);
                i0v = _mm512_ternarylogic_epi32(i0v, b0, low4, 0xE4);
                i1v = _mm512_ternarylogic_epi32(i1v, b1, low4, 0xE4);
                w[0][k] = _mm512_permutex2var_ps(t0, i0v, t1);
                w[1][k] = _mm512_permutex2var_ps(t0, i1v, t1);
            } else {
                w[0][k] = _mm512_permutexvar_ps(i0v, t0);
                w[1][k] = _mm512_permutexvar_ps(i1v, t0);
            }
        }
        LMT_UNROLL
        for (int h = 0; h < 2; ++h) {
            LMT_UNROLL
            for (int t = 0; t < TG; ++t) {
                __m512 xv = _mm512_loadu_ps(x[t] + i0 + 64 * G + 32 * s + 16 * h);
                __asm__("" : "+v"(xv));  // one load shared by the R rows
                LMT_UNROLL
                for (int k = 0; k < R; ++k) acc[k][t] = _mm512_fmadd_ps(w[h][k], xv, acc[k][t]);
            }
        }
    }
    (void)low4;
}

// Weight rows r .. r + R, activation rows t0 .. t0 + TG.
template <bool Q5, int R, int TG>
static void kf32_tile(const MatvecArgs &a, int64_t r, int64_t t0) {
    using L = KF32Layout<Q5>;
    const int64_t nb = a.cols / LMT_QK_K;
    const uint8_t *row[R];
    const float *x[TG];
    LMT_UNROLL
    for (int k = 0; k < R; ++k) row[k] = a.w + (size_t)(r + k) * a.row_stride;
    for (int t = 0; t < TG; ++t) x[t] = a.x + (t0 + t) * a.cols;
    __m512 acc[R][TG];
    LMT_UNROLL
    for (int k = 0; k < R; ++k)
        LMT_UNROLL
        for (int t = 0; t < TG; ++t) acc[k][t] = _mm512_setzero_ps();
    alignas(32) float d1[R][8], m1[R][8];
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *blk[R];
        LMT_UNROLL
        for (int k = 0; k < R; ++k) {
            blk[k] = row[k] + (size_t)b * L::kBytes;
            // this row's next blocks, 1 KB ahead (DRAM latency over R streams)
            const char *ahead = reinterpret_cast<const char *>(blk[k]) + 1024;
            for (size_t l = 0; l < L::kBytes; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
        }
        kf32_scales<R>(blk, d1, m1);
        const int64_t i0 = b * LMT_QK_K;
        kf32_group<Q5, R, TG, 0>(blk, d1, m1, x, i0, acc);
        kf32_group<Q5, R, TG, 1>(blk, d1, m1, x, i0, acc);
        kf32_group<Q5, R, TG, 2>(blk, d1, m1, x, i0, acc);
        kf32_group<Q5, R, TG, 3>(blk, d1, m1, x, i0, acc);
    }
    LMT_UNROLL
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r + k] =
                hsum16_avx(_mm512_castps512_ps256(acc[k][t]), _mm512_extractf32x8_ps(acc[k][t], 1));
}

template <bool Q5, int R>
static void kf32_tn(const MatvecArgs &a, int64_t r, int64_t t0, int nt) {
    switch (nt) {
        case 1: return kf32_tile<Q5, R, 1>(a, r, t0);
        case 2: return kf32_tile<Q5, R, 2>(a, r, t0);
        case 3: return kf32_tile<Q5, R, 3>(a, r, t0);
        default: return kf32_tile<Q5, R, 4>(a, r, t0);
    }
}

// Rows [r0, r1) of every activation row: 4 weight rows x up to 4 activation rows per tile (16
// accumulators), the tile's weight rows re-read from L1 for each further pass of activation rows.
// Measured (Xeon with AMX, L3-resident 8192 x 6656, 1 thread, medians of noisy runs): 8 rows at
// T = 1 and 2 x 8 tiles at T = 8 were no faster.
template <bool Q5>
static void kf32_matvec(const MatvecArgs &a, int64_t r0, int64_t r1) {
    const int64_t passes = (a.T + 3) / 4, per = (a.T + passes - 1) / passes;
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4)
        for (int64_t t0 = 0; t0 < a.T; t0 += per) kf32_tn<Q5, 4>(a, r, t0, (int)std::min<int64_t>(per, a.T - t0));
    for (; r < r1; ++r)
        for (int64_t t0 = 0; t0 < a.T; t0 += per) kf32_tn<Q5, 1>(a, r, t0, (int)std::min<int64_t>(per, a.T - t0));
}

}  // namespace
}  // namespace lmt::cpu
