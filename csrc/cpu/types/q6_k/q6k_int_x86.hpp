// Precision::I24 on the AVX2 and AVX-VNNI tiers (canonical expression in q6k.hpp; only the integer
// grouping is this file's own), included by q6_k_int_avx2.cpp and q6_k_int_avxvnni.cpp: each
// compiles its own copy with its own flags, at -O2 in Release like Q5_K's integer kernels
// (CMakeLists.txt). Built with AVX-VNNI (__AVXVNNI__) the vpmaddwd + vpaddd pairs are vpdpwssd.
//
// Weights: per half block the three 32-byte loads (ql low / high, qh) are taken in 64-bit order
// [0, 2, 1, 3] (vpermq), so a decoded byte vector of q - 32 holds its quarter's weights
// [0-7, 16-23 | 8-15, 24-31]; vpunpck{l,h}bw against zero then gives sub-block j's 16 weights
// and sub-block j + 1's in natural order as words 256 * (q - 32), and vpmulhw by 256 * sc yields
// w16 = sc * (q - 32) exactly (the product is a multiple of 2^16). One vpmaddwd per 16 weights and
// activation piece then puts weights 2k, 2k + 1 in int32 lane k: the canonical lane, so the
// activations keep their natural layout. The scale words come from a per-block table of dwords
// (256 sc, 256 sc), broadcast by plain loads.
//   T = 1: one weight row at a time, prefetching 2 KB ahead.
//   T >= 2: activation rows four at a time; weight rows kGroup at a time, blocks outer, so the four
//   rows' block of activations (4 KB) stays in L1 while kGroup weight rows use it (row-major, each
//   weight row re-read the pass's ~210 KB of activations from L2); the f32 accumulators wait in a
//   small stack array.
// Integer bounds as q6k.hpp: a lane holds at most one half block's 16 products (< 2^31).
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "cpu/internal.hpp"
#include "cpu/types/q6_k/q6k.hpp"
#include "cpu/types/x86_lanes.hpp"

namespace lmt::cpu {
namespace {

constexpr int kPrefetchT1 = 2048;     // T = 1: bytes ahead of the block being decoded
constexpr int kPrefetchGroup = 512;   // T >= 2: per-row bytes ahead in the block-major order

// Dword j' of the table holds sub-block j's (256 sc, 256 sc) with j' = kScPos[j] (the in-lane order
// of vpunpck{l,h}wd).
constexpr int sc_pos(int j) { return (j & 3) | ((j & 4) << 1) | ((j & 8) >> 1); }

static inline void block_sc_table(const lmt_block_q6_K *bk, int32_t *tab) {
    const __m256i w =
        _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(bk->scales))), 8);
    _mm256_store_si256(reinterpret_cast<__m256i *>(tab), _mm256_unpacklo_epi16(w, w));
    _mm256_store_si256(reinterpret_cast<__m256i *>(tab + 8), _mm256_unpackhi_epi16(w, w));
    // Keep the table in memory: GCC would otherwise build each broadcast with two shuffles.
    asm("" : "+m"(*reinterpret_cast<int32_t(*)[16]>(tab)));
}

static inline __m256i sc_vec(const int32_t *tab, int j) {
    return _mm256_set1_epi32(tab[sc_pos(j)]);
}

static inline __m256i ld(const int16_t *p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)); }
static inline __m256i ldq(const uint8_t *p) {
    return _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)), 0xD8);
}

// Quarter q of half h as bytes q - 32 (order [0-7, 16-23 | 8-15, 24-31]) from the half's three
// permuted loads l0 (ql 0-31), l1 (ql 32-63), qh.
struct HalfLoads {
    __m256i l0, l1, qh;
};
static inline HalfLoads load_half(const lmt_block_q6_K *bk, int h) {
    return {ldq(bk->ql + 64 * h), ldq(bk->ql + 64 * h + 32), ldq(bk->qh + 32 * h)};
}
static inline __m256i decode_quarter(const HalfLoads &x, int q) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    const __m256i l = (q & 1) ? x.l1 : x.l0;
    const __m256i lo = (q & 2) ? _mm256_and_si256(_mm256_srli_epi16(l, 4), m4) : _mm256_and_si256(l, m4);
    __m256i hi;
    switch (q) {
        case 0: hi = _mm256_slli_epi16(x.qh, 4); break;
        case 1: hi = _mm256_slli_epi16(x.qh, 2); break;
        case 2: hi = x.qh; break;
        default: hi = _mm256_srli_epi16(x.qh, 2); break;
    }
    return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_and_si256(hi, m30)), k32);
}

// w16 of sub-blocks j (lo) and j + 1 (hi) from one decoded quarter.
static inline void quarter_w16(__m256i q, const int32_t *tab, int j, __m256i &lo, __m256i &hi) {
    const __m256i z = _mm256_setzero_si256();
    lo = _mm256_mulhi_epi16(_mm256_unpacklo_epi8(z, q), sc_vec(tab, j));
    hi = _mm256_mulhi_epi16(_mm256_unpackhi_epi8(z, q), sc_vec(tab, j + 1));
}

// L plus sub-blocks j, j + 1 (w16 w0, w1) against the 32 activation words at p (L ignored for
// the first quarter of a half). The lanes sum at most 16 products of |w16 * x| <= 4096 * 32767
// each, so every partial sum, in any order, stays below 2^31: the grouping is free.
static inline __m256i quarter_acc(__m256i L, bool first, __m256i w0, __m256i w1, const int16_t *p) {
#if defined(__AVXVNNI__)
    return _mm256_dpwssd_avx_epi32(_mm256_dpwssd_avx_epi32(first ? _mm256_setzero_si256() : L, w0, ld(p)), w1,
                                   ld(p + 16));
#else
    const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(w0, ld(p)), _mm256_madd_epi16(w1, ld(p + 16)));
    return first ? s : _mm256_add_epi32(L, s);
#endif
}

// T = 1 (and the last activation row of an odd T: any T is row-by-row batch invariant).
static void rows_single(const Q6kI24Args &a, int64_t r0, int64_t r1, int64_t t) {
    const MatvecCall &c = *a.c;
    const int64_t nb = c.cols / LMT_QK_K;
    alignas(32) int32_t tab[16];
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)r * c.row_stride);
        __m256 facc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const lmt_block_q6_K *bk = blocks + b;
            prefetch_lines<4>(reinterpret_cast<const char *>(bk) + kPrefetchT1);
            block_sc_table(bk, tab);
            const int64_t tb = t * nb + b;
            const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((int)bk->d)));
            const __m256 e = _mm256_set1_ps(d * a.dx[tb]), ec = _mm256_set1_ps(d * a.dxc[tb]);
            const int16_t *xa = a.xa + t * c.cols + b * LMT_QK_K, *xc = a.xc + t * c.cols + b * LMT_QK_K;
            LMT_UNROLL
            for (int h = 0; h < 2; ++h) {
                const HalfLoads hl = load_half(bk, h);
                __m256i L = _mm256_setzero_si256(), C = _mm256_setzero_si256();
                LMT_UNROLL
                for (int q = 0; q < 4; ++q) {
                    __m256i w0, w1;
                    quarter_w16(decode_quarter(hl, q), tab, 8 * h + 2 * q, w0, w1);
                    const int off = 128 * h + 32 * q;
                    L = quarter_acc(L, q == 0, w0, w1, xa + off);
                    C = quarter_acc(C, q == 0, w0, w1, xc + off);
                    // Pin the running sums (GCC re-associates the half into one tree and spills).
                    asm("" : "+x"(L), "+x"(C));
                }
                facc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(L), e, facc);
                facc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(C), ec, facc);
            }
        }
        c.logits[t * c.rows + r] = hsum8_lanes(facc);
    }
}

constexpr int64_t kGroup = 16;

// TG activation rows t0 .. t0 + TG - 1, weight rows [r0, r1) kGroup at a time, blocks outer.
template <int TG>
static void rows_group(const Q6kI24Args &a, int64_t r0, int64_t r1, int64_t t0) {
    const MatvecCall &c = *a.c;
    const int64_t nb = c.cols / LMT_QK_K;
    alignas(32) float acc[kGroup][TG][8];
    alignas(32) int32_t tab[16];
    for (int64_t g0 = r0; g0 < r1; g0 += kGroup) {
        const int64_t G = std::min(kGroup, r1 - g0);
        for (int64_t i = 0; i < G; ++i)
            for (int t = 0; t < TG; ++t) _mm256_store_ps(acc[i][t], _mm256_setzero_ps());
        for (int64_t b = 0; b < nb; ++b) {
            const int16_t *xg = a.xg + 2 * t0 * c.cols + 2 * TG * LMT_QK_K * b;
            float dx[TG], dxc[TG];
            for (int t = 0; t < TG; ++t) {
                dx[t] = a.dx[(t0 + t) * nb + b];
                dxc[t] = a.dxc[(t0 + t) * nb + b];
            }
            for (int64_t i = 0; i < G; ++i) {
                const lmt_block_q6_K *bk =
                    reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)(g0 + i) * c.row_stride) + b;
                prefetch_lines<4>(reinterpret_cast<const char *>(bk) + kPrefetchGroup);
                block_sc_table(bk, tab);
                const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((int)bk->d)));
                LMT_UNROLL
                for (int h = 0; h < 2; ++h) {
                    const HalfLoads hl = load_half(bk, h);
                    __m256i L[TG], C[TG];
                    LMT_UNROLL
                    for (int t = 0; t < TG; ++t) L[t] = C[t] = _mm256_setzero_si256();
                    LMT_UNROLL
                    for (int q = 0; q < 4; ++q) {
                        __m256i w0, w1;
                        quarter_w16(decode_quarter(hl, q), tab, 8 * h + 2 * q, w0, w1);
                        const int off = 128 * h + 32 * q;
                        LMT_UNROLL
                        for (int t = 0; t < TG; ++t) {
                            L[t] = quarter_acc(L[t], q == 0, w0, w1, xg + t * LMT_QK_K + off);
                            C[t] = quarter_acc(C[t], q == 0, w0, w1, xg + (TG + t) * LMT_QK_K + off);
                            asm("" : "+x"(L[t]), "+x"(C[t]));
                        }
                    }
                    LMT_UNROLL
                    for (int t = 0; t < TG; ++t) {
                        __m256 f = _mm256_load_ps(acc[i][t]);
                        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(L[t]), _mm256_set1_ps(d * dx[t]), f);
                        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(C[t]), _mm256_set1_ps(d * dxc[t]), f);
                        _mm256_store_ps(acc[i][t], f);
                    }
                }
            }
        }
        for (int64_t i = 0; i < G; ++i)
            for (int t = 0; t < TG; ++t) c.logits[(t0 + t) * c.rows + g0 + i] = hsum8_lanes(_mm256_load_ps(acc[i][t]));
    }
}

static inline void matvec_q6_k_i24_x86(const Q6kI24Args &a, int64_t r0, int64_t r1) {
    const int64_t T = a.c->T;
    if (T == 1) {
        rows_single(a, r0, r1, 0);
        return;
    }
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
        switch ((int)std::min<int64_t>(4, T - t0)) {
            case 1: rows_single(a, r0, r1, t0); break;
            case 2: rows_group<2>(a, r0, r1, t0); break;
            case 3: rows_group<3>(a, r0, r1, t0); break;
            default: rows_group<4>(a, r0, r1, t0); break;
        }
    }
}

}  // namespace
}  // namespace lmt::cpu
