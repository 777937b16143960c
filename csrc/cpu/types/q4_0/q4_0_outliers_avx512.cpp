// The canonical F32 weight d * (q - 8) of 16 consecutive rows at one column (the I24 outlier
// add-back, cpu/i24_outliers.hpp), by dword gathers: the same value as weight_at in q4_0.cpp,
// lane by lane; false (nothing written) when a row's d is not finite.
#include <immintrin.h>

#include "cpu/internal.hpp"
#include "cpu/types/q5_k/k_gather_avx512.hpp"
#include "cpu/types/q4_0/q4_0_kernels.hpp"

namespace lmt::cpu::q4_0 {

bool weights16_avx512(const uint8_t *row0, size_t row_stride, int64_t c, float *w16) {
    const int k = (int)(c % LMT_Q4_0_BLOCK_ELEMS);
    const uint8_t *b = row0 + (size_t)(c / LMT_Q4_0_BLOCK_ELEMS) * LMT_Q4_0_BLOCK_BYTES;
    const __m512i rows = k_gather_rows(row_stride);
    const __m512i dd = _mm512_i32gather_epi32(rows, b, 1);  // d | qs[0..1] << 16
    const __m512i e = _mm512_set1_epi32(0x7C00);
    if (_mm512_cmpeq_epi32_mask(_mm512_and_si512(dd, e), e)) return false;
    // qs[k % 16]: low nibble for k < 16, high for k >= 16 (a dword inside qs).
    const __m512i q = _mm512_and_si512(_mm512_srli_epi32(k_gather_byte(rows, b + 2, k & 15), 4 * (k >> 4)),
                                       _mm512_set1_epi32(15));
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    _mm512_storeu_ps(w16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(8))), d));
    return true;
}

}  // namespace lmt::cpu::q4_0
