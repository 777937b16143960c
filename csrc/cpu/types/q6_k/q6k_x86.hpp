// x86 helpers shared by the Q6_K AVX2 and AVX-512 translation units; `static inline` so each TU
// gets its own copy compiled with its own target flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "cpu/types/q6_k/q6k.hpp"

namespace lmt::cpu {
namespace {

// One block's 256 weights as signed bytes q - 32 in weight order. Per half h (128 weights): the
// four 32-weight quarters take ql[0..31] / ql[32..63] low then high nibbles and qh bit pairs
// 0-1, 2-3, 4-5, 6-7 (blocks/q6_k.h). The pair is moved to bits 4-5 with a 16-bit shift; the
// 0x30 mask drops what the shift carried from the neighbouring byte.
static inline void q6k_unpack_block(const lmt_block_q6_K *b, int8_t *q) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; ++h) {
        const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qh + 32 * h));
        const __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
        const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        __m256i *o = reinterpret_cast<__m256i *>(q + 128 * h);
        _mm256_storeu_si256(o + 0, _mm256_sub_epi8(q0, k32));
        _mm256_storeu_si256(o + 1, _mm256_sub_epi8(q1, k32));
        _mm256_storeu_si256(o + 2, _mm256_sub_epi8(q2, k32));
        _mm256_storeu_si256(o + 3, _mm256_sub_epi8(q3, k32));
    }
}

// D[j] = d * sc[j] for the 16 sub-blocks (F16C's conversion is exact like f16_to_f32).
static inline void q6k_block_scales_x86(const lmt_block_q6_K *b, float *D) {
    const __m256 d = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)b->d)));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b->scales));
    _mm256_storeu_ps(D, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(D + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
}

static inline void q6k_unpack_row(const lmt_block_q6_K *blocks, int64_t nb, int8_t *q, float *D) {
    for (int64_t b = 0; b < nb; ++b) {
        q6k_unpack_block(&blocks[b], q + b * LMT_QK_K);
        q6k_block_scales_x86(&blocks[b], D + b * 16);
    }
}

// 8 signed bytes -> 8 floats (exact).
static inline __m256 q6k_s8_to_ps(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))));
}

// Canonical horizontal sum of 16 lanes held as (lanes 0-7, lanes 8-15).
static inline float q6k_hsum16_avx(__m256 lo, __m256 hi) {
    const __m256 b = _mm256_add_ps(lo, hi);
    const __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    const __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps(d, d, 1)));
}

// Per-thread scratch for decoded rows: q - 32 bytes and D per 16 weights.
struct Q6kScratch {
    std::vector<int8_t> q;
    std::vector<float> D;
    void ensure(int64_t n) {
        if ((int64_t)q.size() < n) {
            q.resize((size_t)n);
            D.resize((size_t)n / 16);
        }
    }
};

// ---- Precision::I24 (q6k.hpp), shared verbatim by the AVX2 and AVX-512 translation units ------
// Per 32 weights (one unpacked byte vector = sub-blocks j, j + 1): sign-extend each 16-byte half
// to words and multiply by the sub-block's scale (vpmullw: w16 = sc * (q - 32), exact), then per
// activation row one vpmaddwd against a and one against c: int32 lane k of sub-block j holds
// weights 16j + 2k, 16j + 2k + 1, exactly the canonical lane (i % 16) / 2.
#ifndef LMT_Q6K_PF
#define LMT_Q6K_PF 2048  // prefetch distance in bytes ahead of the block being decoded
#endif

static inline float q6k_hsum8_avx(__m256 a) {
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

template <int TG>
static inline void q6k_i24_quarter(__m256i q, const int16_t *scw, int j, const int16_t *const *xa,
                                   const int16_t *const *xc, int off, __m256i *L, __m256i *C) {
    const __m256i w0 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)), _mm256_set1_epi16(scw[j]));
    const __m256i w1 =
        _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)), _mm256_set1_epi16(scw[j + 1]));
    for (int t = 0; t < TG; ++t) {
        const __m256i *pa = reinterpret_cast<const __m256i *>(xa[t] + off);
        const __m256i *pc = reinterpret_cast<const __m256i *>(xc[t] + off);
        L[t] = _mm256_add_epi32(L[t], _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(pa)),
                                                       _mm256_madd_epi16(w1, _mm256_loadu_si256(pa + 1))));
        C[t] = _mm256_add_epi32(C[t], _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(pc)),
                                                       _mm256_madd_epi16(w1, _mm256_loadu_si256(pc + 1))));
        // As in Q5_K: at TG = 1 pin the running sums so GCC does not re-associate the half block
        // into one add tree after all products (spills); exact integers, so the bytes are equal.
        if constexpr (TG == 1) asm("" : "+x"(L[t]), "+x"(C[t]));
    }
}

template <int TG>
static inline void q6k_i24_rows(const Q6kI24Args &a, int64_t r0, int64_t r1, int64_t t0) {
    const MatvecCall &c = *a.c;
    const int64_t nb = c.cols / LMT_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)r * c.row_stride);
        __m256 facc[TG];
        for (int t = 0; t < TG; ++t) facc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const lmt_block_q6_K *bk = blocks + b;
#if LMT_Q6K_PF > 0
            {
                const char *ahead = reinterpret_cast<const char *>(bk) + LMT_Q6K_PF;
                _mm_prefetch(ahead, _MM_HINT_T0);
                _mm_prefetch(ahead + 64, _MM_HINT_T0);
                _mm_prefetch(ahead + 128, _MM_HINT_T0);
                _mm_prefetch(ahead + 192, _MM_HINT_T0);
            }
#endif
            alignas(32) int16_t scw[16];
            _mm256_store_si256(reinterpret_cast<__m256i *>(scw),
                               _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(bk->scales))));
            // Broadcast each scale from memory (vpbroadcastw m16, a load) rather than by shuffles.
            asm("" : "+m"(scw));
            const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((int)bk->d)));
            const int16_t *xa[TG], *xc[TG];
            __m256 e[TG], ec[TG];
            for (int t = 0; t < TG; ++t) {
                const int64_t tb = (t0 + t) * nb + b;
                xa[t] = a.xa + (t0 + t) * c.cols + b * LMT_QK_K;
                xc[t] = a.xc + (t0 + t) * c.cols + b * LMT_QK_K;
                e[t] = _mm256_set1_ps(d * a.dx[tb]);
                ec[t] = _mm256_set1_ps(d * a.dxc[tb]);
            }
            for (int h = 0; h < 2; ++h) {
                const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->ql + 64 * h));
                const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->ql + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->qh + 32 * h));
                __m256i L[TG], C[TG];
                for (int t = 0; t < TG; ++t) L[t] = C[t] = _mm256_setzero_si256();
                const __m256i q0 = _mm256_sub_epi8(
                    _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)), k32);
                q6k_i24_quarter<TG>(q0, scw, 8 * h + 0, xa, xc, 128 * h + 0, L, C);
                const __m256i q1 = _mm256_sub_epi8(
                    _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)), k32);
                q6k_i24_quarter<TG>(q1, scw, 8 * h + 2, xa, xc, 128 * h + 32, L, C);
                const __m256i q2 = _mm256_sub_epi8(
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30)), k32);
                q6k_i24_quarter<TG>(q2, scw, 8 * h + 4, xa, xc, 128 * h + 64, L, C);
                const __m256i q3 = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
                                                   k32);
                q6k_i24_quarter<TG>(q3, scw, 8 * h + 6, xa, xc, 128 * h + 96, L, C);
                for (int t = 0; t < TG; ++t) {
                    facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(L[t]), e[t], facc[t]);
                    facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(C[t]), ec[t], facc[t]);
                }
            }
        }
        for (int t = 0; t < TG; ++t) c.logits[(t0 + t) * c.rows + r] = q6k_hsum8_avx(facc[t]);
    }
}

// Activation rows per pass: three accumulators each, so 4 rows fit the 16 ymm registers.
static inline void q6k_i24_x86(const Q6kI24Args &a, int64_t r0, int64_t r1) {
    const int64_t T = a.c->T;
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
        switch ((int)std::min<int64_t>(4, T - t0)) {
            case 1: q6k_i24_rows<1>(a, r0, r1, t0); break;
            case 2: q6k_i24_rows<2>(a, r0, r1, t0); break;
            case 3: q6k_i24_rows<3>(a, r0, r1, t0); break;
            default: q6k_i24_rows<4>(a, r0, r1, t0); break;
        }
    }
}

}  // namespace
}  // namespace lmt::cpu
