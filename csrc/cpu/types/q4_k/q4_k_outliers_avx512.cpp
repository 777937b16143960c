// The canonical F32 weight of 16 consecutive rows at one column (the I24 outlier add-back,
// cpu/i24_outliers.hpp), by dword gathers: the same value as q4_k_weight_at, lane by lane;
// false (nothing written) when a row's scales are not finite.
#include <immintrin.h>

#include "cpu/types/q4_k/q4_k_internal.hpp"
#include "cpu/types/q5_k/k_gather_avx512.hpp"

namespace lmt::cpu {

bool q4_k_weights16_avx512(const uint8_t *row0, size_t row_stride, int64_t c, float *w16) {
    const int i = (int)(c % LMT_QK_K), group = i >> 6, l = i & 31, upper = (i >> 5) & 1;
    const uint8_t *b = row0 + (size_t)(c / LMT_QK_K) * LMT_Q4K_BLOCK_BYTES;
    const __m512i rows = k_gather_rows(row_stride);
    if (k_gather_nonfinite_scales(rows, b)) return false;
    const __m512i q = _mm512_and_si512(
        _mm512_srli_epi32(k_gather_byte(rows, b + 16 + 32 * group, l), 4 * upper), _mm512_set1_epi32(15));
    _mm512_storeu_ps(w16, k_gather_weight(rows, b, i / 32, q));
    return true;
}

}  // namespace lmt::cpu
