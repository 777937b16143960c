// The AMX build's Q4_0 / Q8_0, Q4_K / Q5_K and F16 kernels (formula in ggml_amx.hpp) with 512-bit code, for
// CPUs with lmtail's AVX-512 tier (every AMX CPU has it). Same bytes as ggml_amx_avx2.cpp, which
// stays the reference and the route on AVX2-only CPUs (LMTAIL_ISA=avx2 selects it here): the
// block integers are exact whatever the grouping, and each (row, t) output takes the same float
// operations in the same order. The activations are quantised by the AVX2 file and passed in.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/ggml/ggml_amx.hpp"
#include "cpu/ggml/k_scales.hpp"
#include "lmtail/blocks/q4_0.h"
#include "lmtail/blocks/q4_k.h"
#include "lmtail/blocks/q5_k.h"
#include "lmtail/blocks/q8_0.h"

namespace lmt::cpu {
namespace {

// Four vectors whose 128-bit lane j holds 4 int32 partials of one row each -> one vector of the
// 16 row sums, lane 4j + m from z[m]'s lane j (unpacks stay within 128-bit lanes).
inline __m512i sum_rows4x4(const __m512i z[4]) {
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
    const __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(u, v), _mm512_unpackhi_epi64(u, v));
}

// 16 weight rows in the 16 lanes (row r0 + L in lane L; a short last group repeats its last row
// and stores only its own outputs). Per block, each row's exact integer dot by vpdpbusd (Q4_0:
// unsigned nibbles x signed x, minus 8 * sum(x); Q8_0: (w ^ 0x80) = w + 128 unsigned x signed x,
// minus 128 * sum(x): exact for every byte, -128 included), the 16 sums gathered by
// sum_rows4x4, then acc[t] = fma((float)S, d_w * d_x, acc[t]) as the AVX2 code.
template <bool kQ4>
void q0_rows16(const MatvecCall &c, const lmt_block_q8_0 *xq, const float *xd, const int32_t *xsum, int64_t r0,
               int64_t r1) {
    const int64_t nb = c.cols / 32;
    constexpr int kBytes = kQ4 ? LMT_Q4_0_BLOCK_BYTES : LMT_Q8_0_BLOCK_BYTES;
    constexpr int32_t kCentre = kQ4 ? 8 : 128;  // the sum(x) correction: 8 or 128 times it
    thread_local std::vector<__m512> acc;
    acc.resize((size_t)c.T);
    const __m512i m4 = _mm512_set1_epi8(0xF), flip = _mm512_set1_epi8((char)0x80);
    for (int64_t r = r0; r < r1; r += 16) {
        const int n = (int)std::min<int64_t>(16, r1 - r);
        const uint8_t *w[16];
        int32_t off[16];
        for (int k = 0; k < 16; ++k) {
            w[k] = c.w + (size_t)(r + std::min(k, n - 1)) * c.row_stride;
            off[k] = (int32_t)(w[k] - w[0]);
        }
        const __m512i voff = _mm512_loadu_si512(off);
        for (int64_t t = 0; t < c.T; ++t) acc[(size_t)t] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const size_t bo = (size_t)b * kBytes;
            // d of the 16 rows: 4 bytes gathered at each block start (d and two code bytes), the low halves kept
            const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(voff, w[0] + bo, 1)));
            __m512i q[8];
            if constexpr (kQ4) {
                // q[m] (lo nibbles) and q[4 + m] (hi) hold rows 4j + m in 128-bit lane j
                for (int m = 0; m < 4; ++m) {
                    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(w[m] + bo + 2)));
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(w[4 + m] + bo + 2)), 1);
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(w[8 + m] + bo + 2)), 2);
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(w[12 + m] + bo + 2)), 3);
                    q[m] = _mm512_and_si512(v, m4);
                    q[4 + m] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                }
            } else {
                // q[2m] holds rows m | 4 + m, q[2m + 1] rows 8 + m | 12 + m (one row per 256-bit half)
                for (int m = 0; m < 4; ++m)
                    for (int h = 0; h < 2; ++h) {
                        const int k0 = 8 * h + m;
                        __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w[k0] + bo + 2)));
                        v = _mm512_inserti64x4(v, _mm256_loadu_si256((const __m256i *)(w[k0 + 4] + bo + 2)), 1);
                        q[2 * m + h] = _mm512_xor_si512(v, flip);
                    }
            }
            for (int64_t t = 0; t < c.T; ++t) {
                const size_t xi = (size_t)(t * nb + b);
                __m512i z[4];
                if constexpr (kQ4) {
                    const __m512i xlo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)xq[xi].qs));
                    const __m512i xhi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xq[xi].qs + 16)));
                    for (int m = 0; m < 4; ++m)
                        z[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q[m], xlo), q[4 + m], xhi);
                } else {
                    const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)xq[xi].qs));
                    for (int m = 0; m < 4; ++m) {
                        const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[2 * m], xv);
                        const __m512i e = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[2 * m + 1], xv);
                        // 128-bit lanes (a0 + a1, a2 + a3, e0 + e1, e2 + e3): rows m, 4 + m, 8 + m, 12 + m
                        z[m] = _mm512_add_epi32(_mm512_shuffle_i32x4(a, e, _MM_SHUFFLE(2, 0, 2, 0)),
                                                _mm512_shuffle_i32x4(a, e, _MM_SHUFFLE(3, 1, 3, 1)));
                    }
                }
                const __m512i s = _mm512_sub_epi32(sum_rows4x4(z), _mm512_set1_epi32(xsum[xi] * kCentre));
                acc[(size_t)t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xd[xi])),
                                                 acc[(size_t)t]);
            }
        }
        for (int64_t t = 0; t < c.T; ++t) {
            alignas(64) float out[16];
            _mm512_store_ps(out, acc[(size_t)t]);
            for (int k = 0; k < n; ++k) c.logits[t * c.rows + r + k] = out[k];
        }
    }
}

// GCC 12's _mm512_reduce_add_ps (the order reduce16 in float_ggml_x86.hpp restates for halves).
inline float reduce_add16(__m512 v) {
    const __m256 t3 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 1), _mm512_castps512_ps256(v));
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}

// One Q4_K / Q5_K block of a row: d, dmin, the codes in four zmm (sub-blocks (0, 2), (1, 3),
// (4, 6), (5, 7), one per 256-bit half, against x laid out to match: xperm), the 6-bit scales per
// lane (sc[i] matches q[i]) and the 8 mins.
template <bool kQ5>
inline void k45_block(const uint8_t *p, __m512i m4, __m512i one, const __m512i (&sel)[4], float &d, float &dmin,
                      __m512i (&q)[4], __m512i (&sc)[4], __m256i &mins) {
    uint16_t h[2];
    std::memcpy(h, p, 4);
    d = _cvtsh_ss(h[0]);
    dmin = _cvtsh_ss(h[1]);
    uint32_t u[4];
    ggml_x86::k_scales_mins(p + 4, u);
    const __m512i scm = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)u));
    mins = _mm512_extracti32x8_epi32(scm, 1);
    const uint8_t *qs = p + (kQ5 ? 48 : 16);
    for (int k = 0; k < 2; ++k) {  // (lo, hi) nibbles of qs[0..63], then of qs[64..127]
        const __m512i v = _mm512_loadu_si512(qs + 64 * k);
        q[2 * k] = _mm512_and_si512(v, m4);
        q[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    if constexpr (kQ5) {
        // the fifth bit of sub-block j is bit j of qh[l]: halves of q[i] are sub-blocks
        // (2i', 2i' + 2) with their bits selected by per-half shift counts
        const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 16)));
        const int first[4] = {0, 1, 4, 5};
        for (int i = 0; i < 4; ++i) {
            const __m512i cnt = _mm512_inserti64x4(_mm512_set1_epi16((short)first[i]),
                                                   _mm256_set1_epi16((short)(first[i] + 2)), 1);
            q[i] = _mm512_or_si512(q[i], _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, cnt), one), 4));
        }
    }
    for (int i = 0; i < 4; ++i) sc[i] = _mm512_permutexvar_epi32(sel[i], scm);
}

// sum_j sc_j * dot_j of one block against one activation row's permuted codes, in 16 lanes. A
// lane's dot (4 codes <= 31 times int8) fits int16 and its scale's high half is zero, so vpdpwssd
// adds exactly dot * sc (one instruction for vpmulld + vpaddd).
inline __m512i k45_dot(const __m512i (&q)[4], const __m512i (&sc)[4], const uint8_t *xp) {
    __m512i s = _mm512_setzero_si512();
    for (int i = 0; i < 4; ++i) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[i], _mm512_loadu_si512(xp + 64 * i));
        s = _mm512_dpwssd_epi32(s, dot, sc[i]);
    }
    return s;
}

// Q4_K / Q5_K, four weight rows at a time (a short last group repeats its last row and stores only
// its own outputs), each block decoded once for all T. Per (row, t) S1 = sum_j sc_j * dot_j is
// folded to 8 lanes and S2 = sum_j m_j * (bsums[2j] + bsums[2j + 1]) (bs8) left as 8 products;
// three hadds per quantity then put the four rows' sums in one xmm: exact, so the same integers as
// the AVX2 rows, and the same two fmas per block, lane by lane.
template <bool kQ5>
void k45_rows(const MatvecCall &c, const float *xd, const uint8_t *xperm, const int32_t *bs8, int64_t r0,
              int64_t r1) {
    const int64_t nb = c.cols / 256;
    constexpr int kBytes = kQ5 ? LMT_Q5K_BLOCK_BYTES : LMT_Q4K_BLOCK_BYTES;
    const __m512i m4 = _mm512_set1_epi8(0xF), one = _mm512_set1_epi8(1);
    const __m512i sel[4] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                            _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3),
                            _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6),
                            _mm512_setr_epi32(5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7)};
    // vectors of __m512 only: no std::vector<float> code compiled with AVX-512 flags, which the
    // linker could hand to AVX2 callers of the same template
    thread_local std::vector<__m512> park_store, acc4_store;
    park_store.resize((size_t)c.T * 4);
    acc4_store.resize((size_t)(c.T + 3) / 4);
    __m256i *park = reinterpret_cast<__m256i *>(park_store.data());  // [t][S1 rows 0..3, S2 rows 0..3]
    __m128 *acc4 = reinterpret_cast<__m128 *>(acc4_store.data());
    for (int64_t r = r0; r < r1; r += 4) {
        const int n = r1 - r < 4 ? (int)(r1 - r) : 4;
        for (int64_t t = 0; t < c.T; ++t) acc4[t] = _mm_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            alignas(16) float dv[4], dmv[4];
            for (int k = 0; k < 4; ++k) {
                const uint8_t *p = c.w + (size_t)(r + (k < n ? k : n - 1)) * c.row_stride + b * kBytes;
                __m512i q[4], sc[4];
                __m256i mins;
                k45_block<kQ5>(p, m4, one, sel, dv[k], dmv[k], q, sc, mins);
                for (int64_t t = 0; t < c.T; ++t) {
                    const size_t xi = (size_t)(t * nb + b);
                    const __m512i s = k45_dot(q, sc, xperm + 256 * xi);
                    park[8 * t + k] = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti32x8_epi32(s, 1));
                    park[8 * t + 4 + k] = _mm256_mullo_epi32(mins, _mm256_loadu_si256((const __m256i *)(bs8 + 8 * xi)));
                }
            }
            const __m128 d4 = _mm_load_ps(dv), dm4 = _mm_load_ps(dmv);
            for (int64_t t = 0; t < c.T; ++t) {
                const __m256i *pk = park + 8 * t;
                const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(pk[0], pk[1]), _mm256_hadd_epi32(pk[2], pk[3]));
                const __m256i h2 = _mm256_hadd_epi32(_mm256_hadd_epi32(pk[4], pk[5]), _mm256_hadd_epi32(pk[6], pk[7]));
                const __m128i S1 = _mm_add_epi32(_mm256_castsi256_si128(h1), _mm256_extracti128_si256(h1, 1));
                const __m128i S2 = _mm_add_epi32(_mm256_castsi256_si128(h2), _mm256_extracti128_si256(h2, 1));
                const __m128 xdv = _mm_set1_ps(xd[(size_t)(t * nb + b)]);
                const __m128 s1 = _mm_fmadd_ps(_mm_cvtepi32_ps(S1), _mm_mul_ps(d4, xdv), acc4[t]);
                acc4[t] = _mm_fnmadd_ps(_mm_cvtepi32_ps(S2), _mm_mul_ps(dm4, xdv), s1);
            }
        }
        for (int64_t t = 0; t < c.T; ++t) {
            alignas(16) float out[4];
            _mm_store_ps(out, acc4[t]);
            for (int k = 0; k < n; ++k) c.logits[t * c.rows + r + k] = out[k];
        }
    }
}

}  // namespace

void ggml_amx_k45_rows_avx512(bool q5, const MatvecCall &c, const float *xd, const uint8_t *xperm,
                              const int32_t *bs8, int64_t r0, int64_t r1) {
    if (q5)
        k45_rows<true>(c, xd, xperm, bs8, r0, r1);
    else
        k45_rows<false>(c, xd, xperm, bs8, r0, r1);
}

void ggml_amx_q0_rows_avx512(bool q4, const MatvecCall &c, const lmt_block_q8_0 *xq, const float *xd,
                             const int32_t *xsum, int64_t r0, int64_t r1) {
    if (q4)
        q0_rows16<true>(c, xq, xd, xsum, r0, r1);
    else
        q0_rows16<false>(c, xq, xd, xsum, r0, r1);
}

// F16: the buffer's tinygemm, as f16_matvec in the AVX2 file: per (row, t) one 16-lane
// accumulator over cols in steps of 16, acc = fma(x, w, acc), then reduce_add16. Here 4 weight
// rows x up to 2 activation rows per pass.
void ggml_amx_f16_rows_avx512(const MatvecCall &c, int64_t r0, int64_t r1) {
    constexpr int kR = 4;
    for (int64_t r = r0; r < r1; r += kR) {
        const int nr = (int)std::min<int64_t>(kR, r1 - r);
        const uint8_t *w[kR];
        for (int i = 0; i < kR; ++i) w[i] = c.w + (size_t)(r + std::min(i, nr - 1)) * c.row_stride;
        for (int64_t t = 0; t < c.T; t += 2) {
            const int nt = t + 1 < c.T ? 2 : 1;
            const float *x0 = c.x + t * c.cols, *x1 = c.x + (t + nt - 1) * c.cols;
            __m512 a[kR][2];
            for (int i = 0; i < kR; ++i) a[i][0] = a[i][1] = _mm512_setzero_ps();
            for (int64_t k = 0; k < c.cols; k += 16) {
                const __m512 xa = _mm512_loadu_ps(x0 + k), xb = _mm512_loadu_ps(x1 + k);
                for (int i = 0; i < kR; ++i) {
                    const __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w[i] + 2 * k)));
                    a[i][0] = _mm512_fmadd_ps(xa, wv, a[i][0]);
                    a[i][1] = _mm512_fmadd_ps(xb, wv, a[i][1]);
                }
            }
            for (int i = 0; i < nr; ++i)
                for (int j = 0; j < nt; ++j) c.logits[(t + j) * c.rows + r + i] = reduce_add16(a[i][j]);
        }
    }
}

}  // namespace lmt::cpu
