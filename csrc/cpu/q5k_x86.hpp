// x86 helpers shared by the AVX2 and AVX-512 matvec translation units. Everything here is
// `static inline` so each TU gets its own copy compiled with its own target flags (no ODR mixing
// of AVX-512 code into the AVX2 path).
#pragma once

#include <immintrin.h>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {

// Unpack one block's 256 five-bit weights into bytes q[0..255] in weight order.
// Group g (64 weights) takes its 5th bits from qh bit 2g (low nibbles) and 2g+1 (high nibbles).
// Each is moved to bit 4 with one 16-bit shift and masked: a shift of at most 4 cannot carry a
// neighbouring byte's bit into bit 4, so no per-byte compare is needed (9 ops per group, was 11;
// measured 0.62 -> see DESIGN.md).
template <int G>
static inline void q5k_unpack_group(const __m256i ql, const __m256i qh, uint8_t *q) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    constexpr int s_lo = 4 - 2 * G, s_hi = 3 - 2 * G;  // left shift if > 0, right if < 0
    __m256i b_lo, b_hi;
    if constexpr (s_lo > 0) b_lo = _mm256_slli_epi16(qh, s_lo);
    else if constexpr (s_lo < 0) b_lo = _mm256_srli_epi16(qh, -s_lo);
    else b_lo = qh;
    if constexpr (s_hi > 0) b_hi = _mm256_slli_epi16(qh, s_hi);
    else b_hi = _mm256_srli_epi16(qh, -s_hi);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(ql, m4), _mm256_and_si256(b_lo, bit4));
    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, 4), m4), _mm256_and_si256(b_hi, bit4));
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

}  // namespace
}  // namespace lmt::cpu
