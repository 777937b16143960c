// 512-bit AVX-512 BW + VNNI integer kernels of the 256-block K precisions: Q5_K I16 / I24 and
// Q4_K I24 (the canonical expressions: cpu/internal.hpp, q4_k_internal.hpp). Included only by
// *_avx512.cpp translation units (static inline, anonymous namespace: no ODR mixing).
//
// Per 64-weight group g of a block the weights are decoded ONCE, in natural order, into one zmm
// of signed bytes C = [sub-block 2g | sub-block 2g+1] (Q5_K: the 5th bit through a byte mask,
// vptestnmb + masked vpsubb of 16; Q4_K: nibble - 8). One vpmaddubsw against the byte pattern
// PE = [(s2g, 0) x16 | (s2g+1, 0) x16] gives the scaled EVEN weights of both sub-blocks as words,
// PO = (0, s) the odd ones; vpdpwssd then multiplies them with the activations and accumulates
// (madd + add in one instruction). The activations must be in the AVX-512 layout
// (k512_activation_layout, cpu/internal.hpp: xq's 32-byte chunks [E2g O2g E2g+1 O2g+1] ->
// [E2g E2g+1 O2g O2g+1], so both operands of each vpdpwssd are one contiguous zmm; and the
// records of a pass's rows block-major, so one pointer with constant offsets serves them: with
// per-row pointers the 16 GPRs spilled at 8 rows per pass). int32 lane m < 8 then holds weights
// 4m, 4m+2 (E) and 4m+1, 4m+3 (O) of sub-block 2g, lane 8 + m the same of sub-block 2g+1: lanes
// m and m + 8 added at the block end are exactly the canonical lane (i >> 2) & 7 == m.
// The I24 residual b (uint8, natural order, 64 bytes = the group) is vpmaddubsw(b, C) (pairs of
// consecutive weights, |.| <= 2 * 255 * 16) then vpdpwssd with PE, whose words are the sub-block
// scales: the same lanes (at TG >= 2: vpdpbusd 4-sums, two groups scaled by one vpdpwssd,
// k512_group_pair). Integer sums are exact (cpu/internal.hpp bounds), so the order is free; the
// f32 combination per block is the AVX2 kernel's expression, lane for lane. Loops: one
// activation row streams weight rows (k512_rows); 2-8 rows take blocks outer over the 64-row
// task so the pass's activations stay in L1 (k512_rows_chunked).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "cpu/internal.hpp"
#include "lmtail/blocks/q4_k.h"

// L / R accumulators per row at TG = 1 (independent chains; 4 / 2 measured no faster).
// I24 at TG >= 2: R by vpdpbusd + word-pair scaling (k512_group_pair); mb harness T = 8 ~4%
// faster, full head T = 8 ratio to ggml 0.75-0.86 vs 0.73-0.89 (noisy).
#ifndef LMT_K512_RPACK
#define LMT_K512_RPACK 1
#endif
#ifndef LMT_K512_NL1
#define LMT_K512_NL1 2
#endif
#ifndef LMT_K512_NR1
#define LMT_K512_NR1 1
#endif
// Software prefetch at one activation row, bytes ahead of the block: into L1 at PF (as
// q5k_x86.hpp) and into L2 at PF2. Full head, T = 1, 2 threads, ratio to ggml per build (noisy
// machine): PF alone 1.04-1.31, + PF2 8192 0.88-1.11, + PF2 16384 0.80-1.08; no prefetch 1.6.
#ifndef LMT_K512_PF2
#define LMT_K512_PF2 8192
#endif
#ifndef LMT_K512_PF
#define LMT_K512_PF 4096
#endif

// The -O2 build of the *_int_* files does not unroll the per-activation-row loops, which would
// leave the accumulators in memory: force it (they are TG <= 8 iterations).
#define LMT_K512_UNROLL _Pragma("GCC unroll 16")

namespace lmt::cpu {
namespace {

enum class K512 { Q5_I16, Q5_I24, Q4_I24 };

template <K512 K>
struct K512Block {
    using type = lmt_block_q5_K;
};
template <>
struct K512Block<K512::Q4_I24> {
    using type = lmt_block_q4_K;
};

// 8 bytes, each `v`, as one qword.
constexpr long long k512_rep8(unsigned v) { return (long long)(0x0101010101010101ull * (v & 0xFFu)); }
constexpr long long k512_rep4w(unsigned w) { return (long long)(0x0001000100010001ull * (w & 0xFFFFu)); }

// Group G as signed bytes [sub-block 2G | 2G+1] in natural order: q (I16), q - 16 (Q5 I24),
// q - 8 (Q4 I24).
template <K512 K, int G>
static inline __m512i k512_decode(const uint8_t *qs, __m512i QH) {
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs + 32 * G));
    const __m512i n = _mm512_and_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(ql), _mm256_srli_epi16(ql, 4), 1), _mm512_set1_epi8(0x0F));
    if constexpr (K == K512::Q4_I24) {
        (void)QH;
        return _mm512_sub_epi8(n, _mm512_set1_epi8(8));
    } else {
        // Low nibbles take qh bit 2G, high nibbles bit 2G + 1 (lmt_q5k_q).
        const long long lo = k512_rep8(1u << (2 * G)), hi = k512_rep8(1u << (2 * G + 1));
        const __m512i bits = _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo);
        if constexpr (K == K512::Q5_I24) {  // q - 16 = n - 16 where the 5th bit is clear
            return _mm512_mask_sub_epi8(n, _mm512_testn_epi8_mask(QH, bits), n, _mm512_set1_epi8(16));
        } else {
            return _mm512_mask_add_epi8(n, _mm512_test_epi8_mask(QH, bits), n, _mm512_set1_epi8(16));
        }
    }
}

// vpshufb controls picking scale byte 2G (low half) / 2G + 1 (high half) of the broadcast
// scales into the even (E) or odd (O) byte of each word; 0x80 gives 0.
template <int G>
static inline __m512i k512_ctrl_e() {
    const long long lo = k512_rep4w(0x8000u | (2u * G)), hi = k512_rep4w(0x8000u | (2u * G + 1));
    return _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo);
}
template <int G>
static inline __m512i k512_ctrl_o() {
    const long long lo = k512_rep4w(((2u * G) << 8) | 0x80u), hi = k512_rep4w(((2u * G + 1) << 8) | 0x80u);
    return _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo);
}

// NL int32 accumulators for L and NR for R per activation row (more at small TG: independent
// dependency chains; they are summed exactly at the block end).
template <K512 K, int G, int TG, int NL, int NR>
static inline void k512_group(const uint8_t *qs, __m512i QH, __m512i SCB, const int16_t *xb, const uint8_t *rb,
                              __m512i (*aL)[NL], __m512i (*aR)[NR]) {
    constexpr int sE = NL == 4 ? 2 * (G & 1) : 0, sO = NL == 4 ? 2 * (G & 1) + 1 : NL - 1;
    constexpr int sR = NR == 2 ? (G & 1) : 0;
    constexpr bool RES = K != K512::Q5_I16;
    const __m512i C = k512_decode<K, G>(qs, QH);
    const __m512i PE = _mm512_shuffle_epi8(SCB, k512_ctrl_e<G>());
    const __m512i PO = _mm512_shuffle_epi8(SCB, k512_ctrl_o<G>());
    // Pattern unsigned (<= 63), weights signed: |s * c| <= 63 * 31, one nonzero byte product.
    const __m512i E = _mm512_maddubs_epi16(PE, C), O = _mm512_maddubs_epi16(PO, C);
    LMT_K512_UNROLL
    for (int t = 0; t < TG; ++t) {
        const __m512i *x = reinterpret_cast<const __m512i *>(xb + LMT_QK_K * t + 64 * G);
        aL[t][sE] = _mm512_dpwssd_epi32(aL[t][sE], E, _mm512_loadu_si512(x));
        aL[t][sO] = _mm512_dpwssd_epi32(aL[t][sO], O, _mm512_loadu_si512(x + 1));
        if constexpr (RES) {
            const __m512i bc = _mm512_maddubs_epi16(_mm512_loadu_si512(rb + LMT_QK_K * t + 64 * G), C);
            aR[t][sR] = _mm512_dpwssd_epi32(aR[t][sR], bc, PE);
        }
    }
}

#if LMT_K512_RPACK
// Groups G and G + 1 together, TG >= 2 (NL = NR = 1). L as k512_group. R with fewer multiplies:
// vpdpbusd(b, C) gives the UNSCALED 4-sums U (|U| <= 4 * 255 * 16 < 2^15, lanes as L's) of each
// group; the two groups' U are interleaved as the low / high words of each dword (exact: they
// fit int16) and one vpdpwssd with the dword scale pairs (s of G's sub-block, s of G + 1's)
// scales and adds both: 3 multiplies per 128 weights instead of 4.
template <K512 K, int G, int TG>
static inline void k512_group_pair(const uint8_t *qs, __m512i QH, __m512i SCB, const int16_t *xb, const uint8_t *rb,
                                   __m512i (*aL)[1], __m512i (*aR)[1]) {
    const __m512i C0 = k512_decode<K, G>(qs, QH), C1 = k512_decode<K, G + 1>(qs, QH);
    const __m512i E0 = _mm512_maddubs_epi16(_mm512_shuffle_epi8(SCB, k512_ctrl_e<G>()), C0);
    const __m512i O0 = _mm512_maddubs_epi16(_mm512_shuffle_epi8(SCB, k512_ctrl_o<G>()), C0);
    const __m512i E1 = _mm512_maddubs_epi16(_mm512_shuffle_epi8(SCB, k512_ctrl_e<G + 1>()), C1);
    const __m512i O1 = _mm512_maddubs_epi16(_mm512_shuffle_epi8(SCB, k512_ctrl_o<G + 1>()), C1);
    // dword bytes (s[2G], 0, s[2G+2], 0) low half, (s[2G+1], 0, s[2G+3], 0) high half.
    constexpr unsigned a0 = 2 * G, b0 = 2 * G + 2, a1 = 2 * G + 1, b1 = 2 * G + 3;
    const long long lo = (long long)(0x0000000100000001ull * (0x80008000u | (b0 << 16) | a0));
    const long long hi = (long long)(0x0000000100000001ull * (0x80008000u | (b1 << 16) | a1));
    const __m512i SC2 = _mm512_shuffle_epi8(SCB, _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo));
    LMT_K512_UNROLL
    for (int t = 0; t < TG; ++t) {
        const __m512i *x = reinterpret_cast<const __m512i *>(xb + LMT_QK_K * t + 64 * G);
        aL[t][0] = _mm512_dpwssd_epi32(aL[t][0], E0, _mm512_loadu_si512(x));
        aL[t][0] = _mm512_dpwssd_epi32(aL[t][0], O0, _mm512_loadu_si512(x + 1));
        aL[t][0] = _mm512_dpwssd_epi32(aL[t][0], E1, _mm512_loadu_si512(x + 2));
        aL[t][0] = _mm512_dpwssd_epi32(aL[t][0], O1, _mm512_loadu_si512(x + 3));
        const uint8_t *r = rb + LMT_QK_K * t + 64 * G;
        const __m512i U0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(r), C0);
        const __m512i U1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(r + 64), C1);
        const __m512i W = _mm512_mask_blend_epi16(0xAAAAAAAAu, U0, _mm512_slli_epi32(U1, 16));
        aR[t][0] = _mm512_dpwssd_epi32(aR[t][0], W, SC2);
    }
}
#endif

// Lanes m and m + 8 -> the 8 canonical int32 lanes, as f32 (exact sum, one rounding).
static inline __m256 k512_fold_ps(__m512i v) {
    return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

template <int N>
static inline __m512i k512_sum(const __m512i *v) {  // exact int32 sum of N accumulators
    if constexpr (N == 1) return v[0];
    else if constexpr (N == 2) return _mm512_add_epi32(v[0], v[1]);
    else return _mm512_add_epi32(_mm512_add_epi32(v[0], v[1]), _mm512_add_epi32(v[2], v[3]));
}

static inline float k512_hsum8(__m256 a) {  // canonical hsum8 (cpu/internal.hpp)
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

template <K512 K>
static inline void k512_scale_min_bytes(const typename K512Block<K>::type *bk, uint64_t *sc, uint64_t *mm) {
    // Q5_K and Q4_K pack the 6-bit scales / mins identically.
    q5k_scale_min_bytes(reinterpret_cast<const lmt_block_q5_K *>(bk), sc, mm);
}

// The block's f32 terms from its int32 accumulators (the canonical expression).
template <K512 K, int TG, int NL, int NR>
__attribute__((always_inline)) static inline void k512_finish(const MatvecI16Args &a,
                                                              const typename K512Block<K>::type *bk, uint64_t sc,
                                                              uint64_t mm, __m512i (*aL)[NL], __m512i (*aR)[NR],
                                                              int64_t tb0, __m256 *facc) {
    constexpr bool RES = K != K512::Q5_I16;
    const __m128 ddm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)bk->d | ((uint32_t)bk->dmin << 16))));
    const __m256 mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mm)));
    if constexpr (RES) {
        // acc = fma(L, d*dx, acc); acc = fma(R, d*dxr, acc); acc = fma(C, X, acc) with
        // C = c*d*sc - dmin*m (c = 16 for Q5_K, 8 for Q4_K; c*d exact).
        const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
        const float cen = K == K512::Q4_I24 ? 8.0f : 16.0f;
        const __m256 dc = _mm256_broadcastss_ps(_mm_mul_ss(ddm, _mm_set_ss(cen)));
        const __m256 Cc =
            _mm256_fmsub_ps(dc, scf, _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(ddm)), mv));
        // d * dx and d * dxr for the pass's rows at once (their records are contiguous,
        // pass-major), then broadcast from memory per row: per-row scalar multiplies
        // and register broadcasts were ~1/4 of the f32 part's instructions.
        alignas(32) float e[8], er[8];
        if constexpr (TG == 1) {
            e[0] = _mm_cvtss_f32(ddm) * a.dx[tb0];
            er[0] = _mm_cvtss_f32(ddm) * a.dxr[tb0];
        } else {
            const __mmask8 km = (__mmask8)((1u << TG) - 1u);
            const __m256 dv = _mm256_broadcastss_ps(ddm);
            _mm256_store_ps(e, _mm256_mul_ps(dv, _mm256_maskz_loadu_ps(km, a.dx + tb0)));
            _mm256_store_ps(er, _mm256_mul_ps(dv, _mm256_maskz_loadu_ps(km, a.dxr + tb0)));
        }
        LMT_K512_UNROLL
        for (int t = 0; t < TG; ++t) {
            const int64_t tb = tb0 + t;
            const __m512i l = k512_sum<NL>(aL[t]);
            facc[t] = _mm256_fmadd_ps(k512_fold_ps(l), _mm256_broadcast_ss(e + t), facc[t]);
            facc[t] = _mm256_fmadd_ps(k512_fold_ps(k512_sum<NR>(aR[t])), _mm256_broadcast_ss(er + t), facc[t]);
            facc[t] = _mm256_fmadd_ps(Cc, _mm256_loadu_ps(a.xsum + tb * 8), facc[t]);
        }
    } else {
        // acc = fma(L, d*dx, acc); acc = fma(-M, dmin*dx, acc), M = m * xsum (exact in f32).
        const __mmask8 km = (__mmask8)((1u << TG) - 1u);
        const __m256 dxv = _mm256_maskz_loadu_ps(km, a.dx + tb0);
        alignas(32) float e[8], em[8];
        _mm256_store_ps(e, _mm256_mul_ps(_mm256_broadcastss_ps(ddm), dxv));
        _mm256_store_ps(em, _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(ddm)), dxv));
        LMT_K512_UNROLL
        for (int t = 0; t < TG; ++t) {
            const int64_t tb = tb0 + t;
            const __m256 M = _mm256_mul_ps(mv, _mm256_loadu_ps(a.xsum + tb * 8));
            const __m512i l = k512_sum<NL>(aL[t]);
            facc[t] = _mm256_fmadd_ps(k512_fold_ps(l), _mm256_broadcast_ss(e + t), facc[t]);
            facc[t] = _mm256_fnmadd_ps(M, _mm256_broadcast_ss(em + t), facc[t]);
        }
    }
}

// One block (bk) of one weight row against the TG activation rows of a pass: facc[t] += the
// block's canonical f32 terms. xb / rb / tb0: the pass's records of block b (pass-major).
template <K512 K, int TG>
__attribute__((always_inline)) static inline void k512_block(const MatvecI16Args &a, const typename K512Block<K>::type *bk, const int16_t *xb,
                              const uint8_t *rb, int64_t tb0, __m256 *facc) {
    static_assert(offsetof(lmt_block_q5_K, scales) == offsetof(lmt_block_q4_K, scales), "shared scale packing");
    constexpr bool RES = K != K512::Q5_I16;
    constexpr int NL = TG == 1 ? LMT_K512_NL1 : TG <= 2 ? 2 : 1;
    constexpr int NR = TG == 1 ? LMT_K512_NR1 : 1;
    if constexpr (!RES) (void)rb;
    uint64_t sc, mm;
    k512_scale_min_bytes<K>(bk, &sc, &mm);
    const __m512i SCB = _mm512_set1_epi64((long long)sc);
    __m512i QH = _mm512_setzero_si512();
    if constexpr (K != K512::Q4_I24)
        QH = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->qh)));
    __m512i aL[TG][NL], aR[TG][NR];
    LMT_K512_UNROLL
    for (int t = 0; t < TG; ++t) {
        for (int l = 0; l < NL; ++l) aL[t][l] = _mm512_setzero_si512();
        for (int l = 0; l < NR; ++l) aR[t][l] = _mm512_setzero_si512();
    }
#if LMT_K512_RPACK
    if constexpr (RES && TG >= 2 && NL == 1 && NR == 1) {
        k512_group_pair<K, 0, TG>(bk->qs, QH, SCB, xb, rb, aL, aR);
        k512_group_pair<K, 2, TG>(bk->qs, QH, SCB, xb, rb, aL, aR);
    } else
#endif
    {
        k512_group<K, 0, TG, NL, NR>(bk->qs, QH, SCB, xb, rb, aL, aR);
        k512_group<K, 1, TG, NL, NR>(bk->qs, QH, SCB, xb, rb, aL, aR);
        k512_group<K, 2, TG, NL, NR>(bk->qs, QH, SCB, xb, rb, aL, aR);
        k512_group<K, 3, TG, NL, NR>(bk->qs, QH, SCB, xb, rb, aL, aR);
    }
    k512_finish<K, TG, NL, NR>(a, bk, sc, mm, aL, aR, tb0, facc);
}

// (Two weight rows per step, groups interleaved, measured 5% faster with L2-resident weights
// but slower on the full head: not kept.)
// Rows [r0, r1) against activation rows [t0, t0 + TG), one weight row at a time (TG = 1: one
// activation row's xq + xr is 3 bytes per column, 20 KB at 6656 columns, and stays in L1).
template <K512 K, int TG>
static inline void k512_rows(const MatvecI16Args &a, int64_t r0, int64_t r1, int64_t t0) {
    using Block = typename K512Block<K>::type;
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const Block *>(a.w + (size_t)r * a.row_stride);
        __m256 facc[TG];
        LMT_K512_UNROLL
        for (int t = 0; t < TG; ++t) facc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const Block *bk = blocks + b;
#if LMT_K512_PF > 0
            {
                const char *ahead = reinterpret_cast<const char *>(bk) + LMT_K512_PF;
                _mm_prefetch(ahead, _MM_HINT_T0);
                _mm_prefetch(ahead + 64, _MM_HINT_T0);
                _mm_prefetch(ahead + 128, _MM_HINT_T0);
            }
#endif
#if LMT_K512_PF2 > 0
            {
                const char *far = reinterpret_cast<const char *>(bk) + LMT_K512_PF2;
                _mm_prefetch(far, _MM_HINT_T1);
                _mm_prefetch(far + 64, _MM_HINT_T1);
                _mm_prefetch(far + 128, _MM_HINT_T1);
            }
#endif
            // Pass-major records (cpu/internal.hpp): row t of block b at b * TG + t.
            k512_block<K, TG>(a, bk, a.xq + t0 * a.cols + b * TG * LMT_QK_K,
                              a.xr ? a.xr + t0 * a.cols + b * TG * LMT_QK_K : nullptr, t0 * nb + b * TG, facc);
        }
        LMT_K512_UNROLL
        for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r] = k512_hsum8(facc[t]);
    }
}

// TG >= 2: the pass's activations (TG * 768 bytes per block) exceed L1 over a row, and sweeping
// them from L2 once per weight row bounded the kernel (the same ~10 ns per block and row as the
// AVX2 kernel at T = 8, well above its multiply count). So blocks are the outer loop over a chunk
// of KC weight rows: block b's activations stay in L1 while the chunk's rows use them; the f32
// accumulators live in a small L1 array between blocks (their order per lane is unchanged).
// KC = 64 (a whole dispatch task): full head, T = 8, 2 threads, ratio to ggml, 3-5 runs each:
// KC 16 0.81-0.91, 32 0.73-0.88, 64 0.75-0.79.
#ifndef LMT_K512_KC
#define LMT_K512_KC 64
#endif
template <K512 K, int TG>
static inline void k512_rows_chunked(const MatvecI16Args &a, int64_t r0, int64_t r1, int64_t t0) {
    using Block = typename K512Block<K>::type;
    constexpr int KC = LMT_K512_KC;
    const int64_t nb = a.cols / LMT_QK_K;
    alignas(32) float accm[KC][TG][8];
    for (int64_t c0 = r0; c0 < r1; c0 += KC) {
        const int n = (int)std::min<int64_t>(KC, r1 - c0);
        std::memset(accm, 0, sizeof(accm));
        for (int64_t b = 0; b < nb; ++b) {
            const int16_t *xb = a.xq + t0 * a.cols + b * TG * LMT_QK_K;
            const uint8_t *rb = a.xr ? a.xr + t0 * a.cols + b * TG * LMT_QK_K : nullptr;
            for (int k = 0; k < n; ++k) {
                const Block *bk = reinterpret_cast<const Block *>(a.w + (size_t)(c0 + k) * a.row_stride) + b;
                {  // the same row's next-but-one block: n block-rows of work away
                    const char *ahead = reinterpret_cast<const char *>(bk + 2);
                    _mm_prefetch(ahead, _MM_HINT_T0);
                    _mm_prefetch(ahead + 64, _MM_HINT_T0);
                    _mm_prefetch(ahead + 128, _MM_HINT_T0);
                    _mm_prefetch(ahead + sizeof(Block) - 1, _MM_HINT_T0);
                }
                __m256 facc[TG];
                LMT_K512_UNROLL
                for (int t = 0; t < TG; ++t) facc[t] = _mm256_load_ps(accm[k][t]);
                k512_block<K, TG>(a, bk, xb, rb, t0 * nb + b * TG, facc);
                LMT_K512_UNROLL
                for (int t = 0; t < TG; ++t) _mm256_store_ps(accm[k][t], facc[t]);
            }
        }
        for (int k = 0; k < n; ++k)
            for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + c0 + k] = k512_hsum8(_mm256_load_ps(accm[k][t]));
    }
}

// Passes of kK512Pass activation rows, as k512_activation_layout stored them.
template <K512 K>
static inline void k512_rows_all(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    constexpr int TGMAX = kK512Pass;
    for (int64_t t0 = 0; t0 < a.T; t0 += TGMAX) {
        switch ((int)std::min<int64_t>(TGMAX, a.T - t0)) {
            case 1: k512_rows<K, 1>(a, r0, r1, t0); break;
            case 2: k512_rows_chunked<K, std::min(2, TGMAX)>(a, r0, r1, t0); break;
            case 3: k512_rows_chunked<K, std::min(3, TGMAX)>(a, r0, r1, t0); break;
            case 4: k512_rows_chunked<K, std::min(4, TGMAX)>(a, r0, r1, t0); break;
            case 5: k512_rows_chunked<K, std::min(5, TGMAX)>(a, r0, r1, t0); break;
            case 6: k512_rows_chunked<K, std::min(6, TGMAX)>(a, r0, r1, t0); break;
            case 7: k512_rows_chunked<K, std::min(7, TGMAX)>(a, r0, r1, t0); break;
            default: k512_rows_chunked<K, TGMAX>(a, r0, r1, t0); break;
        }
    }
}

}  // namespace
}  // namespace lmt::cpu
