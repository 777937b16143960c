// AVX2 pieces of ggml's x86 arithmetic for Q8_0 / Q4_0 / F16 / BF16 / F32 (include only from
// *_avx2.cpp files). Each mirrors the instruction sequence ggml's AVX2 build executes, so the
// values (and NaN propagation, as far as the instruction operands go) are ggml's.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/types/types.hpp"
#include "lmtail/blocks/q8_0.h"

namespace lmt::cpu::ggml_x86 {

// The horizontal sum of llamafile's hsum(__m256) and of quants.c's hsum_float_8:
// (hi + lo) -> s[0..3]; (s0 + s2, s1 + s3); then their sum.
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// GGML_F32x8_REDUCE (vec_dot_f32 / vec_dot_f16 on AVX): (a0 + a2) + (a1 + a3), then lo + hi and
// two hadds: (s0 + s1) + (s2 + s3).
static inline float reduce4_hadd(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// vec_dot_bf16's AVX2 reduction: (c1 + c3) + (c2 + c4), then hsum8's order.
static inline float reduce4_bf16(__m256 c1, __m256 c2, __m256 c3, __m256 c4) {
    return hsum8(_mm256_add_ps(_mm256_add_ps(c1, c3), _mm256_add_ps(c2, c4)));
}

// quants.c's mul_sum_i8_pairs_float on AVX2 without VNNI: |x| * (y signed by x), byte pairs to
// int16 (maddubs), pairs to int32 (madd with ones): lane j = the sum over bytes 4j..4j+3. `x` is
// the sign source (the weight in vec_dot and tinyBLAS_Q0_AVX): an activation byte of -128 against
// a negative weight wraps to -128 there, exactly as ggml's bytes do.
static inline __m256i dot4_i32(__m256i x, __m256i y) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(_mm256_set1_epi16(1), p16);
}

// The 8 int32 lanes of each of v[0..7] summed: lane k of the result = sum of v[k] (exact).
static inline __m256i sum8x8(const __m256i v[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    // a = [v0 v1 v2 v3 | v0 v1 v2 v3] partial halves; add the 128-bit halves across a and b.
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// Q4_0 nibbles as ggml unpacks them (bytes_from_nibbles_32 / denibble): element i < 16 is the low
// nibble of qs[i], element 16 + i the high one, minus 8.
static inline __m256i q4_0_bytes(const uint8_t *qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

// ggml's x86 from_float for Q8_0 (quantize_row_q8_0 under __AVX2__; the repack's
// ggml_quantize_mat_q8_0_4x8 computes the same values per row, interleaved):
//   amax by max_ps over |v0..v3|, then 128-bit and scalar max steps (max_ps returns its second
//   operand when either is NaN, so a NaN can be dropped or kept by position);
//   d = amax / 127 stored as F16C fp16 (round to nearest even); id = amax != 0 ? 127 / amax : 0;
//   q = cvtps_epi32(round_ps(v * id, nearest even)), packed with signed saturation (a NaN or an
//   out-of-range value becomes INT_MIN -> -128).
static inline void quantize_q8_0_block(const float *x, lmt_block_q8_0 *y) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
           v3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_andnot_ps(sign, v0);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v1));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v2));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.f;
    y->d = _cvtss_sh(d, 0);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    const int r = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), r));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), r));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), r));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), r));
    // packs work per 128-bit half; the permute restores element order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    _mm256_storeu_si256((__m256i *)y->qs, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// T activation rows as ggml's q8_0 blocks, plus each block's d widened to f32 (exact).
struct Q8_0Acts {
    std::vector<lmt_block_q8_0> q;
    std::vector<float> d;
    Q8_0Acts(const float *x, int64_t T, int64_t cols) : q((size_t)(T * (cols / 32))), d(q.size()) {
        for (size_t i = 0; i < q.size(); ++i) {
            quantize_q8_0_block(x + 32 * (int64_t)i, &q[i]);  // rows are contiguous: block i of all T
            d[i] = _cvtsh_ss(q[i].d);
        }
    }
};

// The row loop of the Q8_0 / Q4_0 dot-product routes: rows in tasks of 64, four weight rows a
// call of dot4(rows[4], x blocks, x scales, nb, out[4]) per activation row (a short last group
// repeats its last row; only its own outputs are stored).
template <typename MatvecCallT, typename Dot4>
inline void for_rows_by_4(const MatvecCallT &c, const Q8_0Acts &xa, int64_t nb, Dot4 &&dot4) {
    for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r += 4) {
            const int n = (int)std::min<int64_t>(4, r1 - r);
            const uint8_t *wr[4];
            for (int k = 0; k < 4; ++k) wr[k] = c.w + (size_t)(r + std::min(k, n - 1)) * c.row_stride;
            for (int64_t t = 0; t < c.T; ++t) {
                float out[4];
                dot4(wr, &xa.q[(size_t)(t * nb)], &xa.d[(size_t)(t * nb)], nb, out);
                for (int k = 0; k < n; ++k) c.logits[t * c.rows + r + k] = out[k];
            }
        }
    });
}

// ggml_cpu_fp32_to_fp16 with F16C (cvtps_ph, round to nearest even, 8 / 4 / 1 at a time: the
// same instruction semantics), returned widened back to f32 (exact): the values vec_dot_f16 and
// tinyBLAS read.
static inline void round_f16(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), 0)));
    for (; i < n; ++i) y[i] = _cvtsh_ss(_cvtss_sh(x[i], 0));
}

// ggml_compute_fp32_to_bf16 (round to nearest even; a NaN keeps its top bits, quiet bit forced),
// widened back to f32.
static inline void round_bf16(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, x + i, 4);
        const uint32_t h = (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u >> 16) | 64u) : ((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
        const uint32_t f = h << 16;
        std::memcpy(y + i, &f, 4);
    }
}

}  // namespace lmt::cpu::ggml_x86
