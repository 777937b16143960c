// precision="ggml", K-quants: the x86 float reductions of ggml's AVX2 build (included only from
// *_avx2.cpp files). The integer parts of ggml's kernels are exact, so any grouping of integer
// additions gives ggml's integers; the float parts below follow ggml's operation order exactly.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace lmt::cpu::ggml_x86 {

// hsum_float_8 (arch/x86/quants.c): (x[k] + x[k+4]) -> ((s0 + s2) + (s1 + s3)).
inline float hsum_float_8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// 4 float lanes -> (a0 + a2) + (a1 + a3) (the acc_m reduction of ggml_vec_dot_q4_K_q8_K).
inline float hsum_float_4(__m128 a) {
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

inline int32_t hsum_i32_8(__m256i v) {  // exact (wrapping) integer sum of 8 lanes
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

inline int32_t hsum_i32_4(__m128i s) {
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

// Q4_K / Q5_K 12-byte scale/min packing -> 8 scales (sc) and 8 mins (mn), as uint8.
inline void kq_scales_mins(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0xF) | ((q[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

}  // namespace lmt::cpu::ggml_x86
