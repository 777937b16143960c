// x86 helpers shared by the AVX2 and AVX-512 matvec translation units. Everything here is
// `static inline` so each TU gets its own copy compiled with its own target flags (no ODR mixing
// of AVX-512 code into the AVX2 path).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {

// Unpack one block's 256 five-bit weights into bytes q[0..255] in weight order.
// Group g (64 weights) takes its 5th bits from qh bit 2g (low nibbles) and 2g+1 (high nibbles).
// Each is moved to bit 4 with one 16-bit shift and masked: a shift of at most 4 cannot carry a
// neighbouring byte's bit into bit 4, so no per-byte compare is needed (9 ops per group, was 11;
// measured 0.62 -> see DESIGN.md). q5k_bit4: group G's 5th bits moved to bit 4 (b_lo for the
// low nibbles, b_hi for the high ones); only bit 4 of each byte is meaningful.
template <int G>
static inline void q5k_bit4(const __m256i qh, __m256i &b_lo, __m256i &b_hi) {
    constexpr int s_lo = 4 - 2 * G, s_hi = 3 - 2 * G;  // left shift if > 0, right if < 0
    if constexpr (s_lo > 0) b_lo = _mm256_slli_epi16(qh, s_lo);
    else if constexpr (s_lo < 0) b_lo = _mm256_srli_epi16(qh, -s_lo);
    else b_lo = qh;
    if constexpr (s_hi > 0) b_hi = _mm256_slli_epi16(qh, s_hi);
    else b_hi = _mm256_srli_epi16(qh, -s_hi);
}

// CENTRED (Precision::I24) yields q - 16 as SIGNED bytes at the same op count: with n = low nibble
// and h = 5th bit, q = n + 16h, so q - 16 = n - 16*(1 - h): subtract the bit4 mask where the 5th
// bit is CLEAR (andnot) instead of or-ing it in where it is set.
template <int G, bool CENTRED = false>
static inline void q5k_split_group(const __m256i ql, const __m256i qh, __m256i &lo, __m256i &hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    __m256i b_lo, b_hi;
    q5k_bit4<G>(qh, b_lo, b_hi);
    const __m256i n_lo = _mm256_and_si256(ql, m4), n_hi = _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
    if constexpr (CENTRED) {
        lo = _mm256_sub_epi8(n_lo, _mm256_andnot_si256(b_lo, bit4));
        hi = _mm256_sub_epi8(n_hi, _mm256_andnot_si256(b_hi, bit4));
    } else {
        lo = _mm256_or_si256(n_lo, _mm256_and_si256(b_lo, bit4));
        hi = _mm256_or_si256(n_hi, _mm256_and_si256(b_hi, bit4));
    }
}

template <int G>
static inline void q5k_unpack_group(const __m256i ql, const __m256i qh, uint8_t *q) {
    __m256i lo, hi;
    q5k_split_group<G>(ql, qh, lo, hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + 64 * G), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + 64 * G + 32), hi);
}

static inline void q5k_unpack_block(const lmt_block_q5_K *b, uint8_t *q) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qh));
    const auto *qs = reinterpret_cast<const __m256i *>(b->qs);
    q5k_unpack_group<0>(_mm256_loadu_si256(qs + 0), qh, q);
    q5k_unpack_group<1>(_mm256_loadu_si256(qs + 1), qh, q);
    q5k_unpack_group<2>(_mm256_loadu_si256(qs + 2), qh, q);
    q5k_unpack_group<3>(_mm256_loadu_si256(qs + 3), qh, q);
}

// d1[j] = d * sc[j], m1[j] = dmin * m[j] for the 8 sub-blocks (same roundings as the scalar path).
static inline void q5k_block_scales_x86(const lmt_block_q5_K *b, float *d1, float *m1) {
    uint32_t a, bb, c;
    std::memcpy(&a, b->scales + 0, 4);
    std::memcpy(&bb, b->scales + 4, 4);
    std::memcpy(&c, b->scales + 8, 4);
    // Bytes 0-3 hold sc[0..3] | hi bits of sc[4..7]; 4-7 m[0..3] | hi bits of m[4..7];
    // 8-11 the low nibbles of sc[4..7] (low) and m[4..7] (high).
    const uint64_t sc = (uint64_t)(a & 0x3F3F3F3Fu) |
                        ((uint64_t)((c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u)) << 32);
    const uint64_t mm = (uint64_t)(bb & 0x3F3F3F3Fu) |
                        ((uint64_t)(((c >> 4) & 0x0F0F0F0Fu) | ((bb >> 2) & 0x30303030u)) << 32);
    // F16C conversion is exact, like f16_to_f32, and avoids its branches (measured: the scalar
    // conversion made the row decode cost more than the dot product).
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)b->d | ((uint32_t)b->dmin << 16))));
    const __m256 d = _mm256_broadcastss_ps(dd);
    const __m256 dm = _mm256_broadcastss_ps(_mm_movehdup_ps(dd));
    const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
    const __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mm)));
    _mm256_storeu_ps(d1, _mm256_mul_ps(d, scf));
    _mm256_storeu_ps(m1, _mm256_mul_ps(dm, mf));
}

// Decode a whole row: q bytes (cols), d1/m1 per 32-weight sub-block (cols/32 each).
static inline void q5k_unpack_row(const lmt_block_q5_K *blocks, int64_t nb, uint8_t *q, float *d1, float *m1) {
    for (int64_t b = 0; b < nb; ++b) {
        q5k_unpack_block(&blocks[b], q + b * LMT_QK_K);
        q5k_block_scales_x86(&blocks[b], d1 + b * 8, m1 + b * 8);
    }
}

// 8 bytes -> 8 floats (exact)
static inline __m256 q8_to_ps(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))));
}

// Canonical horizontal sum of 16 lanes held as (lanes 0-7, lanes 8-15).
static inline float hsum16_avx(__m256 lo, __m256 hi) {
    const __m256 b = _mm256_add_ps(lo, hi);                                            // 8
    const __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));  // 4
    const __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));                              // 2
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps(d, d, 1)));
}

// Per-thread scratch for one decoded row.
struct RowScratch {
    std::vector<uint8_t> q;
    std::vector<float> d1, m1;
    void ensure(int64_t cols) {
        if ((int64_t)q.size() < cols) {
            q.resize((size_t)cols);
            d1.resize((size_t)cols / 32);
            m1.resize((size_t)cols / 32);
        }
    }
};

// Software prefetch distance in bytes ahead of the block being decoded (0: none). Full head,
// T = 1, pair ratio vs ggml under load: none 0.94-1.09, 1 KB 0.89-0.97, 2 KB 0.79-0.87,
// 4 KB 0.72-0.87, 8 KB 0.90-0.92. Past the end of the weights it is a harmless hint.
#ifndef LMT_I16_PF
#define LMT_I16_PF 4096
#endif
// ---- Precision::I16 / I24 (the AVX2 TU; the AVX-512 tier has its own: k_avx512.hpp) ------
// One super-block (256 weights) of one weight row against TG activation rows:
//   unpack q to bytes (ggml's layout: group g = 32 bytes of qs; low nibbles are weights
//   64g + l, high nibbles 64g + 32 + l, 5th bit from qh), then ONE vpmaddubsw per 16 weights both
//   widens q to int16 and multiplies by the 6-bit scale: against the byte pattern (sc, 0, sc, 0..)
//   word w is q[2w] * sc, against (0, sc, 0, sc..) it is q[2w + 1] * sc (<= 31 * 63, exact), so
//   the even and odd weights land in separate vectors, matched by the permuted x (xi16_pos).
//   vpmaddwd with x then gives int32 lane k = weights 4k..4k+3 of each 32-weight half: exactly
//   the canonical L[k] partition (i >> 2) & 7. Per 64 weights: 9 unpack ops, 4 maddubs, and per
//   activation row 4 madd + 4 add (ggml's q8_K kernel: about 21 in all).

// One activation row's share of a 64-weight group (Q5_K and Q4_K): iacc += the vpmaddwd of the
// scaled words A..D with the row's 64 permuted x words; RES: racc += the residual bytes r against
// the centred codes (vpmaddubsw, |pair| <= 2 * 255 * 16) times the words (sc, sc ..) of PE0 / PE1.
// Over a block |L| < 2^30 and |R| < 2^23 bound every partial sum (cpu/internal.hpp), so any
// grouping is exact: built with AVX-VNNI each vpmaddwd + vpaddd is one vpdpwssd (8 ops, was 14).
template <bool RES>
static inline void k_group_row(__m256i A, __m256i B, __m256i C, __m256i D, __m256i lo, __m256i hi, __m256i PE0,
                               __m256i PE1, const int16_t *xq, const uint8_t *xr, __m256i &iacc, __m256i &racc) {
    const __m256i *x = reinterpret_cast<const __m256i *>(xq);
    const __m256i *r = reinterpret_cast<const __m256i *>(xr);
#if defined(__AVXVNNI__)
    iacc = _mm256_dpwssd_avx_epi32(iacc, A, _mm256_loadu_si256(x + 0));
    iacc = _mm256_dpwssd_avx_epi32(iacc, B, _mm256_loadu_si256(x + 1));
    iacc = _mm256_dpwssd_avx_epi32(iacc, C, _mm256_loadu_si256(x + 2));
    iacc = _mm256_dpwssd_avx_epi32(iacc, D, _mm256_loadu_si256(x + 3));
    if constexpr (RES) {
        racc = _mm256_dpwssd_avx_epi32(racc, _mm256_maddubs_epi16(_mm256_loadu_si256(r), lo), PE0);
        racc = _mm256_dpwssd_avx_epi32(racc, _mm256_maddubs_epi16(_mm256_loadu_si256(r + 1), hi), PE1);
    }
#else
    const __m256i ab = _mm256_add_epi32(_mm256_madd_epi16(A, _mm256_loadu_si256(x + 0)),
                                        _mm256_madd_epi16(B, _mm256_loadu_si256(x + 1)));
    const __m256i cd = _mm256_add_epi32(_mm256_madd_epi16(C, _mm256_loadu_si256(x + 2)),
                                        _mm256_madd_epi16(D, _mm256_loadu_si256(x + 3)));
    iacc = _mm256_add_epi32(iacc, _mm256_add_epi32(ab, cd));
    if constexpr (RES) {
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_loadu_si256(r), lo), PE0);
        const __m256i q = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_loadu_si256(r + 1), hi), PE1);
        racc = _mm256_add_epi32(racc, _mm256_add_epi32(p, q));
    }
#endif
}

template <int G, int TG, bool RES>
static inline void i16_group(const lmt_block_q5_K *bk, __m256i qh, const int32_t *pat, const int16_t *const *xb,
                             const uint8_t *const *rb, __m256i *iacc, __m256i *racc) {
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->qs + 32 * G));
    const __m256i PE0 = _mm256_set1_epi32(pat[2 * G]), PE1 = _mm256_set1_epi32(pat[2 * G + 1]);
    // (0, sc, 0, sc ..) is (sc, 0, sc, 0 ..) shifted up a byte: one shift instead of a second
    // broadcast load. Full head, T = 1, one thread, pairs against the two-load version in one
    // process: i24 0.969, i16 0.951 (median ratios); T = 4 and 8 unchanged (0.99-1.00).
    const __m256i PO0 = _mm256_slli_epi16(PE0, 8), PO1 = _mm256_slli_epi16(PE1, 8);
    __m256i lo, hi, A, B, C, D;
    if constexpr (RES) {
        // I24: signed bytes q - 16 (|.| <= 16); the pattern is the unsigned vpmaddubsw operand.
        q5k_split_group<G, true>(ql, qh, lo, hi);
        A = _mm256_maddubs_epi16(PE0, lo);
        B = _mm256_maddubs_epi16(PO0, lo);
        C = _mm256_maddubs_epi16(PE1, hi);
        D = _mm256_maddubs_epi16(PO1, hi);
    } else {
        q5k_split_group<G>(ql, qh, lo, hi);
        A = _mm256_maddubs_epi16(lo, PE0);
        B = _mm256_maddubs_epi16(lo, PO0);
        C = _mm256_maddubs_epi16(hi, PE1);
        D = _mm256_maddubs_epi16(hi, PO1);
    }
    for (int t = 0; t < TG; ++t) {
        // I24 residual (k_group_row): vpmaddubsw(b, q - 16) = b[2w](q[2w]-16) + b[2w+1](q[2w+1]-16),
        // b the unsigned operand, then the words (sc, sc, ..): int32 lane k = sc * (weights
        // 4k..4k+3 of the sub-block), the same canonical partition as L.
        k_group_row<RES>(A, B, C, D, lo, hi, PE0, PE1, xb[t] + 64 * G, RES ? rb[t] + 64 * G : nullptr, iacc[t],
                         racc[t]);
        if constexpr (RES && TG == 1) asm("" : "+x"(racc[t]));
        // At TG = 1 GCC's reassociation turns the block's whole accumulation into one balanced add
        // tree after all 24 products, which spills them (59 stack references per block at
        // T = 1, I24). An empty asm pinning the accumulator to a register after every group keeps
        // the sum running: 50 -> 18 stack references; 2048 x 6656, one thread, min of 40, same
        // process: i24 20.4-23.0 -> 17.9-18.9 ns per block, i16 17.2-19.4 -> 15.9-18.1. At TG >= 3
        // the tree is what the scheduler needs (T = 4 measured 2-5% slower with the pin), so
        // it is applied to TG = 1 only. Integer sums: the bytes do not depend on the order.
        if constexpr (TG == 1) asm("" : "+x"(iacc[t]));
    }
}

// Canonical hsum8 (cpu/internal.hpp): (a[l] + a[l+4]) -> (b[0]+b[2], b[1]+b[3]) -> c0 + c1.
static inline float hsum8_avx(__m256 a) {
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// Rows [r0, r1) against activation rows [t0, t0 + TG). RES: Precision::I24 (the int8 residual
// piece and the exact-sum min term, cpu/internal.hpp); otherwise Precision::I16.
template <int TG, bool RES>
static inline void i16_rows(const MatvecI16Args &a, int64_t r0, int64_t r1, int64_t t0) {
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q5_K *>(a.w + (size_t)r * a.row_stride);
        __m256 facc[TG];
        for (int t = 0; t < TG; ++t) facc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const lmt_block_q5_K *bk = blocks + b;
#if LMT_I16_PF > 0
            {
                const char *ahead = reinterpret_cast<const char *>(bk) + LMT_I16_PF;
                _mm_prefetch(ahead, _MM_HINT_T0);
                _mm_prefetch(ahead + 64, _MM_HINT_T0);
                _mm_prefetch(ahead + 128, _MM_HINT_T0);
            }
#endif
            uint64_t sc, mm;
            q5k_scale_min_bytes(bk, &sc, &mm);
            // maddubs pattern per sub-block j: pat[j] = bytes (sc, 0, sc, 0).
            alignas(32) int32_t pat[8];
            const __m256i scw = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc));
            const __m256i pe = _mm256_or_si256(scw, _mm256_slli_epi32(scw, 16));
            _mm256_store_si256(reinterpret_cast<__m256i *>(pat), pe);
            // Compiler barrier: broadcast each pattern from memory (a pure load, vpbroadcastd m32)
            // instead of letting the compiler rebuild them with shuffles (port 5 / FP1-2 bound).
            asm("" : "+m"(pat));
            const int16_t *xb[TG];
            const uint8_t *rb[TG];
            for (int t = 0; t < TG; ++t) {
                xb[t] = a.xq + (t0 + t) * a.cols + b * LMT_QK_K;
                rb[t] = RES ? a.xr + (t0 + t) * a.cols + b * LMT_QK_K : nullptr;
            }
            __m256i iacc[TG], racc[TG];
            for (int t = 0; t < TG; ++t) iacc[t] = racc[t] = _mm256_setzero_si256();
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->qh));
            i16_group<0, TG, RES>(bk, qh, pat, xb, rb, iacc, racc);
            i16_group<1, TG, RES>(bk, qh, pat, xb, rb, iacc, racc);
            i16_group<2, TG, RES>(bk, qh, pat, xb, rb, iacc, racc);
            i16_group<3, TG, RES>(bk, qh, pat, xb, rb, iacc, racc);
            const __m128 ddm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)bk->d | ((uint32_t)bk->dmin << 16))));
            const __m256 mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mm)));
            if constexpr (RES) {
                // I24 (cpu/internal.hpp): acc = fma(L, d*dx, acc); acc = fma(R, d*dxr, acc);
                // acc = fma(C, X, acc), C = 16*d*sc - dmin*m (shared by the activation rows).
                const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
                const __m256 d16 = _mm256_broadcastss_ps(_mm_mul_ss(ddm, _mm_set_ss(16.0f)));
                const __m256 Cc = _mm256_fmsub_ps(d16, scf, _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(ddm)), mv));
                const float d = _mm_cvtss_f32(ddm);
                for (int t = 0; t < TG; ++t) {
                    const int64_t tb = (t0 + t) * nb + b;
                    facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[t]), _mm256_set1_ps(d * a.dx[tb]), facc[t]);
                    facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(racc[t]), _mm256_set1_ps(d * a.dxr[tb]), facc[t]);
                    facc[t] = _mm256_fmadd_ps(Cc, _mm256_loadu_ps(a.xsum + tb * 8), facc[t]);
                }
            } else {
                // f32 combination, the canonical expression: acc = fma(L, d*dx, acc); acc = fma(-M, dmin*dx, acc).
                // (d, dmin) * dx in one multiply; m * xsum in f32 is the correctly rounded integer product.
                for (int t = 0; t < TG; ++t) {
                    const int64_t tb = (t0 + t) * nb + b;
                    const __m128 s = _mm_mul_ps(ddm, _mm_set1_ps(a.dx[tb]));
                    const __m256 M = _mm256_mul_ps(mv, _mm256_loadu_ps(a.xsum + tb * 8));
                    facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[t]), _mm256_broadcastss_ps(s), facc[t]);
                    facc[t] = _mm256_fnmadd_ps(M, _mm256_broadcastss_ps(_mm_movehdup_ps(s)), facc[t]);
                }
            }
        }
        for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r] = hsum8_avx(facc[t]);
    }
}

// Activation rows per pass over a task's weight rows (4 and 8 measured equal within noise).
// With T > 8 the second pass re-reads the task's 64 rows (~290 KB) from L2, not from DRAM.
#ifndef LMT_I16_TG
#define LMT_I16_TG 8
#endif
template <int TGMAX, bool RES>
static inline void i16_rows_all(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < a.T; t0 += TGMAX) {
        switch ((int)std::min<int64_t>(TGMAX, a.T - t0)) {
            case 1: i16_rows<1, RES>(a, r0, r1, t0); break;
            case 2: i16_rows<std::min(2, TGMAX), RES>(a, r0, r1, t0); break;
            case 3: i16_rows<std::min(3, TGMAX), RES>(a, r0, r1, t0); break;
            case 4: i16_rows<std::min(4, TGMAX), RES>(a, r0, r1, t0); break;
            case 5: i16_rows<std::min(5, TGMAX), RES>(a, r0, r1, t0); break;
            case 6: i16_rows<std::min(6, TGMAX), RES>(a, r0, r1, t0); break;
            case 7: i16_rows<std::min(7, TGMAX), RES>(a, r0, r1, t0); break;
            default: i16_rows<TGMAX, RES>(a, r0, r1, t0); break;
        }
    }
}

// I24 keeps two int32 accumulators per activation row: 4 rows per pass fit the 16 ymm registers
// (8 rows spilled: 1.45x the I16 time at T = 8, 4 rows 1.09x; 2048 x 6656, one thread).
static inline void matvec_q5_k_i16_x86(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    if (a.xr) i16_rows_all<4, true>(a, r0, r1);
    else i16_rows_all<LMT_I16_TG, false>(a, r0, r1);
}

}  // namespace
}  // namespace lmt::cpu
