// The canonical F32 weight of 16 consecutive rows at one column (the I24 outlier add-back,
// cpu/i24_outliers.hpp), by dword gathers: the same value as q5_k_weight_at, lane by lane;
// false (nothing written) when a row's scales are not finite.
#include <immintrin.h>

#include "cpu/internal.hpp"
#include "cpu/types/q5_k/k_gather_avx512.hpp"

namespace lmt::cpu {

bool q5_k_weights16_avx512(const uint8_t *row0, size_t row_stride, int64_t c, float *w16) {
    const int i = (int)(c % LMT_QK_K), group = i >> 6, l = i & 31, upper = (i >> 5) & 1;
    const uint8_t *b = row0 + (size_t)(c / LMT_QK_K) * LMT_Q5K_BLOCK_BYTES;
    const __m512i rows = k_gather_rows(row_stride);
    if (k_gather_nonfinite_scales(rows, b)) return false;
    const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(k_gather_byte(rows, b + 48 + 32 * group, l), 4 * upper),
                                        _mm512_set1_epi32(15));
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(k_gather_byte(rows, b + 16, l), 2 * group + upper),
                                        _mm512_set1_epi32(1));
    _mm512_storeu_ps(w16, k_gather_weight(rows, b, i / 32, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4))));
    return true;
}

}  // namespace lmt::cpu
