// precision="ggml", K-quants: the x86 float reductions of ggml's AVX2 build (included only from
// *_avx2.cpp files). The integer parts of ggml's kernels are exact, so any grouping of integer
// additions gives ggml's integers; the float parts below follow ggml's operation order exactly.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/ggml/kquant_ggml.hpp"

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

// The Q4_K / Q5_K block integers. sumi: the 8 lanes of ggml's `sumi` (lane k: 4-byte group k
// of every 32-element chunk c, times its scale sc[c]); prod: the 4 lanes of
// madd(mins, hadd(bsums)) (lane m: mn[2m] * (bsums[4m] + bsums[4m+1]) + mn[2m+1] * (bsums[4m+2] + bsums[4m+3])).
// q[c] holds the 32 codes of chunk c (elements 32c .. 32c + 31).
inline void k45_block_ints(const __m256i q[8], const uint8_t sc[8], const uint8_t mn[8], const int8_t *y,
                           const int16_t *bsums, __m256i &sumi, __m128i &prod) {
    __m256i s = _mm256_setzero_si256();
    for (int ch = 0; ch < 8; ++ch) {
        const __m256i yv = _mm256_loadu_si256((const __m256i *)(y + 32 * ch));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_set1_epi16(sc[ch]), _mm256_maddubs_epi16(q[ch], yv)));
    }
    sumi = s;
    const __m128i q8s = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bsums), _mm_loadu_si128((const __m128i *)(bsums + 8)));
    uint64_t m8;
    std::memcpy(&m8, mn, 8);
    prod = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m8)), q8s);
}

// Rows [r0, r1) for Q4_K / Q5_K given the block decoder
//   decode(block, q[8], sc[8], mn[8], d_w, dmin_w).
// vec_dot (T < 8), per block: d = d_x * d_w, dmin = -d_x * dmin_w; acc = fma(d, (float)sumi, acc);
//   Q4_K (MinLanes): acc_m = fma(dmin, (float)prod, acc_m) on 4 lanes, result hsum8(acc) + hsum4(acc_m);
//   Q5_K: summs = fma(dmin, (float)hsum(prod), summs) (GCC contracts `summs += dmin * i`),
//   result hsum8(acc) + summs.
// tiled (T >= 8), per block: res = d_w * (float)S1; res = fma(-dmin_w, (float)S2, res) (the
//   microtile's fnmadd); acc = fma(res, d_x, acc); S1 = sum(sumi), S2 = sum(prod).
template <bool MinLanes, typename Decode>
inline void k45_rows(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1, size_t block_bytes,
                     Decode decode) {
    const int64_t nb = c.cols / 256;
    const bool tiled = c.T >= kGgmlTiledMinBatch;
    __m256i q[8];
    uint8_t sc[8], mn[8];
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *w = c.w + (size_t)r * c.row_stride;
        for (int64_t t = 0; t < c.T; ++t) {
            const GgmlQ8K *y = xq + t * nb;
            __m256 acc = _mm256_setzero_ps();
            __m128 acc_m = _mm_setzero_ps();
            float summs = 0.0f, tacc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                float dw, dminw;
                decode(w + (size_t)b * block_bytes, q, sc, mn, dw, dminw);
                __m256i sumi;
                __m128i prod;
                k45_block_ints(q, sc, mn, y[b].qs, y[b].bsums, sumi, prod);
                if (tiled) {
                    float res = dw * (float)hsum_i32_8(sumi);
                    res = std::fma(-dminw, (float)hsum_i32_4(prod), res);
                    tacc = std::fma(res, y[b].d, tacc);
                } else {
                    const float d = y[b].d * dw, dmin = -y[b].d * dminw;
                    if (MinLanes)
                        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
                    else
                        summs = std::fma(dmin, (float)hsum_i32_4(prod), summs);
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
                }
            }
            float out;
            if (tiled)
                out = tacc;
            else if (MinLanes)
                out = hsum_float_8(acc) + hsum_float_4(acc_m);
            else
                out = hsum_float_8(acc) + summs;
            c.logits[t * c.rows + r] = out;
        }
    }
}

}  // namespace lmt::cpu::ggml_x86
