// precision="ggml", K-quants: the x86 float reductions of ggml's AVX2 build (included only from
// *_avx2.cpp files). The integer parts of ggml's kernels are exact, so any grouping of integer
// additions gives ggml's integers; the float parts below follow ggml's operation order exactly.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/ggml/k_scales.hpp"
#include "cpu/ggml/kquant_ggml.hpp"
#include "cpu/internal.hpp"
#include "lmtail/blocks/q6_k.h"

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

// The Q4_K / Q5_K block integers (exact), for block bytes p (Q4_K: d, dmin, scales[12], qs[128];
// Q5_K: d, dmin, scales[12], qh[32], qs[128]) and the q8_K block y. Chunk c (elements 32c ..
// 32c + 31) holds the codes (qs[32(c/2) + l] >> 4(c%2)) & 15 (Q5_K: | ((qh[l] >> c) & 1) << 4),
// scaled by sc[c]; mn[c] its min.
//   pair[g] (g = 0..3): 8 lanes of madd(sc[2g], maddubs(chunk 2g)) + madd(sc[2g+1], maddubs(chunk 2g+1));
//   sumi = the sum of the pairs (ggml's `sumi` lanes: lane k is 4-byte group k of every chunk);
//   prod: 4 lanes, lane m = mn[2m] * (bsums[4m] + bsums[4m+1]) + mn[2m+1] * (bsums[4m+2] + bsums[4m+3]).
struct K45Ints {
    __m256i pair[4], sumi;
    __m128i prod;
    float d, dmin;
};

// fp16 -> fp32 by F16C (exact, as ggml's GGML_CPU_FP16_TO_FP32 on this build).
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// One Q4_K / Q5_K block's codes, decoded once for any number of activation rows.
struct K45Codes {
    __m256i lo[4], hi[4];  // chunk 2g / 2g + 1 codes (0..15, Q5_K 0..31), as bytes
    __m256i s0[4], s1[4];  // their 6-bit scales, broadcast as int16
    __m128i mn16;          // the 8 mins as int16
    float d, dmin;
};

template <bool Q5>
inline void k45_decode(const uint8_t *p, K45Codes &k) {
    uint16_t h[2];
    std::memcpy(h, p, 4);
    k.d = h2f(h[0]);
    k.dmin = h2f(h[1]);
    uint32_t u[4];
    k_scales_mins(p + 4, u);
    const __m128i sc16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)u));
    k.mn16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(u + 2)));
    const __m256i sc = _mm256_broadcastsi128_si256(sc16);
    const uint8_t *qs = p + (Q5 ? 48 : 16);
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256i hb = _mm256_setzero_si256();
    if (Q5) hb = _mm256_loadu_si256((const __m256i *)(p + 16));
    const __m256i one = _mm256_set1_epi8(1);
    for (int g = 0; g < 4; ++g) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (Q5) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * g), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * g + 1), one), 4));
        }
        k.lo[g] = lo;
        k.hi[g] = hi;
        // int16 lane k of the 8 scales, broadcast: shuffle bytes (2k, 2k+1) everywhere
        k.s0[g] = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * g))));
        k.s1[g] = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * g + 1))));
    }
}

// The block integers of decoded codes against one q8_K activation block (exact).
template <bool Pairs = true>
inline void k45_dot(const K45Codes &k, const GgmlQ8K &y, K45Ints &o) {
    __m256i sumi = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)(y.qs + 64 * g));
        const __m256i y1 = _mm256_loadu_si256((const __m256i *)(y.qs + 64 * g + 32));
        const __m256i pr = _mm256_add_epi32(_mm256_madd_epi16(k.s0[g], _mm256_maddubs_epi16(k.lo[g], y0)),
                                            _mm256_madd_epi16(k.s1[g], _mm256_maddubs_epi16(k.hi[g], y1)));
        if (Pairs) o.pair[g] = pr;
        sumi = _mm256_add_epi32(sumi, pr);
    }
    o.sumi = sumi;
    const __m128i q8s = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y.bsums), _mm_loadu_si128((const __m128i *)(y.bsums + 8)));
    o.prod = _mm_madd_epi16(k.mn16, q8s);
    o.d = k.d;
    o.dmin = k.dmin;
}

template <bool Q5, bool Pairs = true>
inline void k45_block(const uint8_t *p, const GgmlQ8K &y, K45Ints &o) {
    K45Codes k;
    k45_decode<Q5>(p, k);
    k45_dot<Pairs>(k, y, o);
}

// The 4 pair sums (exact): lane p = sum of pair[p]'s 8 lanes.
inline __m128i k45_pair_sums(const __m256i pair[4]) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(pair[0], pair[1]), _mm256_hadd_epi32(pair[2], pair[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// 4 vectors of 8 int32 -> their 4 lane sums (exact, any grouping).
inline __m128i hsum4x8_i32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
inline __m128i hsum4x4_i32(__m128i a, __m128i b, __m128i c, __m128i d) {
    return _mm_hadd_epi32(_mm_hadd_epi32(a, b), _mm_hadd_epi32(c, d));
}

// Rows [r0, r1) for Q4_K (MinLanes) / Q5_K, plain CPU buffer.
// vec_dot (T < 8), per block: d = d_x * d_w, dmin = -d_x * dmin_w; acc = fma(d, (float)sumi, acc);
//   Q4_K: acc_m = fma(dmin, (float)prod, acc_m) on 4 lanes, result hsum8(acc) + hsum4(acc_m);
//   Q5_K: summs = fma(dmin, (float)hsum(prod), summs) (GCC contracts `summs += dmin * i`),
//   result hsum8(acc) + summs.
// tiled (T >= 8), per block: res = d_w * (float)S1; res = fma(-dmin_w, (float)S2, res) (the
//   microtile's fnmadd); acc = fma(res, d_x, acc); S1 = sum(sumi), S2 = sum(prod).
template <bool Q5>
inline void k45_rows(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1) {
    constexpr bool MinLanes = !Q5;
    constexpr size_t block_bytes = Q5 ? 176 : 144;
    const int64_t nb = c.cols / 256;
    const bool tiled = c.T >= kGgmlTiledMinBatch;
    K45Ints k;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *w = c.w + (size_t)r * c.row_stride;
        for (int64_t t = 0; t < c.T; ++t) {
            const GgmlQ8K *y = xq + t * nb;
            float out;
            if (tiled) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; ++b) {
                    k45_block<Q5>(w + (size_t)b * block_bytes, y[b], k);
                    float res = k.d * (float)hsum_i32_8(k.sumi);
                    res = std::fma(-k.dmin, (float)hsum_i32_4(k.prod), res);
                    acc = std::fma(res, y[b].d, acc);
                }
                out = acc;
            } else {
                __m256 acc = _mm256_setzero_ps();
                __m128 acc_m = _mm_setzero_ps();
                float summs = 0.0f;
                for (int64_t b = 0; b < nb; ++b) {
                    k45_block<Q5>(w + (size_t)b * block_bytes, y[b], k);
                    const float d = y[b].d * k.d, dmin = -y[b].d * k.dmin;
                    if (MinLanes)
                        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k.prod), acc_m);
                    else
                        summs = std::fma(dmin, (float)hsum_i32_4(k.prod), summs);
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(k.sumi), acc);
                }
                out = MinLanes ? hsum_float_8(acc) + hsum_float_4(acc_m) : hsum_float_8(acc) + summs;
            }
            c.logits[t * c.rows + r] = out;
        }
    }
}

// Q6_K's block integers as ggml_vec_dot_q6_K_q8_K's `sumi - q8sclsub` lanes (exact): lane k
// (k = 0..7) = sum over the 8 (32-element chunk, 4-byte group k) cells of sc[cell's sub-block] *
// sum q*y - 32 * (bsums[2k]*sc[2k] + bsums[2k+1]*sc[2k+1]), q the 6-bit codes 0..63.
struct Q6Codes {
    __m256i q[2][4];  // the 6-bit codes 0..63 of each 128-element half, four 32-byte chunks
    __m256i s[2][4];  // scales of sub-blocks (8h + 2k, 8h + 2k + 1), broadcast as int16 halves
    __m256i sc16;     // the 16 scales as int16
};

inline void q6k_decode(const lmt_block_q6_K *b, Q6Codes &c) {
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    c.sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    for (int h = 0; h < 2; ++h) {
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l2 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        __m256i *q = c.q[h];
        q[0] = _mm256_or_si256(_mm256_and_si256(l1, m15), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(l2, m15),
                               _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(12)), 2));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15),
                               _mm256_and_si256(hb, _mm256_set1_epi8(48)));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15),
                               _mm256_srli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8((char)0xC0)), 2));
        for (int k = 0; k < 4; ++k) {
            const int j = 8 * h + 2 * k;  // sub-blocks j (bytes 0..15) and j + 1 (bytes 16..31)
            c.s[h][k] = _mm256_set_m128i(_mm_set1_epi16(b->scales[j + 1]), _mm_set1_epi16(b->scales[j]));
        }
    }
}

inline __m256i q6k_dot_lanes(const Q6Codes &c, const GgmlQ8K *y) {
    const __m256i sub = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), c.sc16), 5);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 4; ++k) {
            const __m256i yv = _mm256_loadu_si256((const __m256i *)(y->qs + 128 * h + 32 * k));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(c.s[h][k], _mm256_maddubs_epi16(c.q[h][k], yv)));
        }
    return _mm256_sub_epi32(sumi, sub);
}

inline __m256i q6k_block_lanes(const lmt_block_q6_K *b, const GgmlQ8K *y) {
    Q6Codes c;
    q6k_decode(b, c);
    return q6k_dot_lanes(c, y);
}

}  // namespace lmt::cpu::ggml_x86
