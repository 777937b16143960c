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

}  // namespace
}  // namespace lmt::cpu
