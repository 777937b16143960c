// Q4_K / Q5_K weights of 16 rows at one column by dword gathers (the I24 outlier add-back,
// cpu/i24_outliers.hpp). Every gather reads whole dwords inside the block, so no lane reads past
// the weight buffer.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace lmt::cpu {

// Lane r: r * row_stride (row_stride * 15 < 2^31: checked by the caller).
static inline __m512i k_gather_rows(size_t row_stride) {
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32((int)row_stride));
}
// Byte k of the array at p (same offset in every row), zero-extended: the aligned dword around it.
static inline __m512i k_gather_byte(__m512i rows, const uint8_t *p, int k) {
    const __m512i d = _mm512_i32gather_epi32(rows, p + (k & ~3), 1);
    return _mm512_and_si512(_mm512_srli_epi32(d, 8 * (k & 3)), _mm512_set1_epi32(0xFF));
}
// fma(q, d * sc_j, -(dmin * m_j)) of block b (d, dmin, scales at its start) for codes q.
static inline __m512 k_gather_weight(__m512i rows, const uint8_t *b, int j, __m512i q) {
    const __m512i dd = _mm512_i32gather_epi32(rows, b, 1);  // d | dmin << 16
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    const int jj = j & 3;
    const __m512i s0 = _mm512_srli_epi32(_mm512_i32gather_epi32(rows, b + 4, 1), 8 * jj);  // scales[jj]
    const __m512i s1 = _mm512_srli_epi32(_mm512_i32gather_epi32(rows, b + 8, 1), 8 * jj);  // scales[jj + 4]
    const __m512i m63 = _mm512_set1_epi32(63), m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
    __m512i sc, mn;
    if (j < 4) {
        sc = _mm512_and_si512(s0, m63);
        mn = _mm512_and_si512(s1, m63);
    } else {
        const __m512i s2 = _mm512_srli_epi32(_mm512_i32gather_epi32(rows, b + 12, 1), 8 * jj);  // scales[jj + 8]
        sc = _mm512_or_si512(_mm512_and_si512(s2, m15), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, 6), m3), 4));
        mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, 4), m15),
                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, 6), m3), 4));
    }
    const __m512 d1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
    const __m512 m1 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), d1, _mm512_xor_ps(m1, _mm512_set1_ps(-0.0f)));
}
// True when some row's d or dmin is inf / NaN (hardware and software f16 conversions may give
// different NaN payloads: such rows take the scalar path).
static inline bool k_gather_nonfinite_scales(__m512i rows, const uint8_t *b) {
    const __m512i dd = _mm512_i32gather_epi32(rows, b, 1);
    const __m512i e = _mm512_set1_epi32(0x7C00);
    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(dd, e), e) |
           _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_srli_epi32(dd, 16), e), e);
}

}  // namespace lmt::cpu
