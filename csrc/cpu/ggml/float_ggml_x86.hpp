// F32 / F16 / BF16 precision="ggml" (include from the types' *_ggml_avx2.cpp): the bytes of ggml's
// AVX2 (+ FMA + F16C) build. ggml_compute_forward_mul_mat converts x to the vec_dot type first
// (F16: ggml_cpu_fp32_to_fp16, F16C round to nearest even; BF16: ggml_cpu_fp32_to_bf16; F32
// as is), then:
// * llamafile's tinyBLAS<8, __m256> when T >= 2, cols % 8 == 0 and rows % 4 == 0 (matmul()
//   declines k % 8 and m % 4; llamafile_sgemm declines n < 2): per (row, activation)
//     acc[8] = 0; acc = fma(w[i..i+8], x[i..i+8], acc) for i = 0, 8, ...;  logit = hsum8(acc)
//   (on this build the F16 and BF16 weights take it only after x was converted: the first call,
//   with x in f32, declines them);
// * otherwise the type's vec_dot (vec.cpp; sums as the oracle's GCC 12 -O3 compiled them):
//   four 8-lane accumulators over the first np = cols & ~31 weights, acc[(i / 8) % 4] += w * x by
//   FMA, then
//     F32:  s = reduce4_hadd (f32); the cols - np leftovers in order: s = s + round(w * x) for the
//           first 4 * floor((cols - np) / 4), s = fma(w, x, s) for the last (cols - np) % 4
//           (GCC vectorised the leftover loop by 8 and 4 without contraction, left the rest
//           scalar and contracted);
//     F16:  s = (double)reduce4_hadd; s += (double)(w * x) per leftover (products are exact);
//           logit = (float)s;
//     BF16: s = (double)reduce4_bf16; leftovers as F16.
//
// ggml's AVX-512 build (F32, F16; emulated here with AVX2 code, 16 lanes as two halves):
// * tinyBLAS<16, __m512> when T >= 2, cols % 16 == 0 and rows % 4 == 0: 16 FMA lanes stepping
//   16, logit = reduce16 (GCC's _mm512_reduce_add_ps: hi256 + lo256, hi128 + lo128, (s0 + s2,
//   s1 + s3), their sum);
// * otherwise vec_dot with GGML_F32_STEP 64: four 16-lane accumulators over np = cols & ~63,
//   (a0 + a2) + (a1 + a3), reduce16, then the leftovers: F32 in f32, s = s + round(w * x) for
//   the first 8 * floor((cols - np) / 8) and s = fma(w, x, s) for the rest (the oracle's GCC 12
//   vectorised the leftover loop by 16 and 8 without contraction); F16 in double as above.
// F16's AVX-512 build with AVX512_FP16 gives the same bytes (its dot products accumulate in f32).
// BF16's AVX-512 build is the one with AVX512_BF16 (vdpbf16ps; the AVX512F-only variant is not
// verified, so not claimed): lane j of a 16-lane accumulator takes the bf16 pair (2j, 2j + 1) of
// each 32-element step as acc = (acc + w[2j+1] x[2j+1]) + w[2j] x[2j] with the instruction's
// DAZ / FTZ (denormal inputs and results -> signed zero; the products are exact otherwise):
// * tinyBLAS<32, __m512bh> when T >= 2, cols % 32 == 0 and rows % 4 == 0: logit = reduce16;
// * otherwise vec_dot: two such accumulators over 64-element steps, s = 0.0 (double),
//   s += reduce16(c1), s += reduce16(c2), then the leftovers in double as the AVX2 build.
#pragma once

#include <cfloat>

#include "cpu/ggml/q0f_ggml.hpp"
#include "cpu/ggml/q0f_ggml_x86.hpp"

namespace lmt::cpu::ggml_x86 {

struct F32W {
    static __m256 load8(const uint8_t *row, int64_t i) { return _mm256_loadu_ps((const float *)row + i); }
    static float at(const uint8_t *row, int64_t i) {
        float f;
        std::memcpy(&f, row + 4 * i, 4);
        return f;
    }
    static void prepare(const float *x, float *y, int64_t n) { std::memcpy(y, x, (size_t)n * 4); }
};
struct F16W {
    static __m256 load8(const uint8_t *row, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * i)));
    }
    static float at(const uint8_t *row, int64_t i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        return _cvtsh_ss(h);
    }
    static void prepare(const float *x, float *y, int64_t n) { round_f16(x, y, n); }
};
struct BF16W {
    static __m256 load8(const uint8_t *row, int64_t i) {
        const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    }
    static float at(const uint8_t *row, int64_t i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        const uint32_t u = (uint32_t)h << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    static void prepare(const float *x, float *y, int64_t n) { round_bf16(x, y, n); }
};

enum class VecDot { F32, F16, BF16 };

template <class W, VecDot K>
inline float vec_dot(const uint8_t *row, const float *x, int64_t n) {
    const int64_t np = n & ~(int64_t)31;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < np; i += 32) {
        a0 = _mm256_fmadd_ps(W::load8(row, i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(W::load8(row, i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(W::load8(row, i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(W::load8(row, i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    if constexpr (K == VecDot::F32) {
        float s = reduce4_hadd(a0, a1, a2, a3);
        const int64_t n4 = np + ((n - np) & ~(int64_t)3);
        for (int64_t i = np; i < n4; ++i) s = s + W::at(row, i) * x[i];
        for (int64_t i = n4; i < n; ++i) s = std::fma(W::at(row, i), x[i], s);
        return s;
    } else {
        double s = (double)(K == VecDot::F16 ? reduce4_hadd(a0, a1, a2, a3) : reduce4_bf16(a0, a1, a2, a3));
        for (int64_t i = np; i < n; ++i) s += (double)(W::at(row, i) * x[i]);
        return (float)s;
    }
}

// tinyBLAS's per-element sum for up to 8 activation rows at once (independent chains; each
// weight vector is loaded once for all of them).
template <class W, int N>
inline void sgemm_dot(const uint8_t *row, const float *const *x, int64_t n, float *out) {
    __m256 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 w = W::load8(row, i);
        for (int j = 0; j < N; ++j) acc[j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[j] + i), acc[j]);
    }
    for (int j = 0; j < N; ++j) out[j] = hsum8(acc[j]);
}

// 16 float lanes held as two AVX2 halves (lanes 0-7, 8-15): ggml's AVX-512 build's __m512.
struct V16 {
    __m256 lo, hi;
};
static inline V16 v16_zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline V16 v16_add(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
template <class W>
static inline V16 v16_fma(const uint8_t *row, const float *x, int64_t i, V16 acc) {
    return {_mm256_fmadd_ps(W::load8(row, i), _mm256_loadu_ps(x + i), acc.lo),
            _mm256_fmadd_ps(W::load8(row, i + 8), _mm256_loadu_ps(x + i + 8), acc.hi)};
}
// GCC 12's _mm512_reduce_add_ps, operand order kept (NaN payloads follow the first operand).
static inline float reduce16(V16 v) {
    const __m256 t3 = _mm256_add_ps(v.hi, v.lo);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}

// vec_dot_f32 / vec_dot_f16 of ggml's AVX-512 build (see the header comment).
template <class W, VecDot K>
inline float vec_dot512(const uint8_t *row, const float *x, int64_t n) {
    static_assert(K != VecDot::BF16, "ggml's AVX-512 BF16 build (vdpbf16ps) is not reproduced");
    const int64_t np = n & ~(int64_t)63;
    V16 a0 = v16_zero(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < np; i += 64) {
        a0 = v16_fma<W>(row, x, i, a0);
        a1 = v16_fma<W>(row, x, i + 16, a1);
        a2 = v16_fma<W>(row, x, i + 32, a2);
        a3 = v16_fma<W>(row, x, i + 48, a3);
    }
    const float r = reduce16(v16_add(v16_add(a0, a2), v16_add(a1, a3)));
    if constexpr (K == VecDot::F32) {
        float s = r;
        const int64_t n8 = np + ((n - np) & ~(int64_t)7);
        for (int64_t i = np; i < n8; ++i) s = s + W::at(row, i) * x[i];
        for (int64_t i = n8; i < n; ++i) s = std::fma(W::at(row, i), x[i], s);
        return s;
    } else {
        double s = (double)r;
        for (int64_t i = np; i < n; ++i) s += (double)(W::at(row, i) * x[i]);
        return (float)s;
    }
}

// tinyBLAS<16, __m512>'s per-element sum for up to 8 activation rows.
template <class W, int N>
inline void sgemm_dot512(const uint8_t *row, const float *const *x, int64_t n, float *out) {
    V16 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = v16_zero();
    for (int64_t i = 0; i < n; i += 16) {
        const __m256 wl = W::load8(row, i), wh = W::load8(row, i + 8);
        for (int j = 0; j < N; ++j)
            acc[j] = {_mm256_fmadd_ps(wl, _mm256_loadu_ps(x[j] + i), acc[j].lo),
                      _mm256_fmadd_ps(wh, _mm256_loadu_ps(x[j] + i + 8), acc[j].hi)};
    }
    for (int j = 0; j < N; ++j) out[j] = reduce16(acc[j]);
}

// Z512: ggml's AVX-512 build (16 lanes), else its AVX2 build.
template <class W, VecDot K, bool Z512>
void float_matvec_ggml_build(const MatvecCall &c) {
    std::vector<float> xv((size_t)(c.T * c.cols));
    W::prepare(c.x, xv.data(), c.T * c.cols);
    const bool sgemm = c.T >= 2 && c.cols % (Z512 ? 16 : 8) == 0 && c.rows % 4 == 0;
    for_row_tasks(c.n_threads, c.rows, 32, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const uint8_t *row = c.w + (size_t)r * c.row_stride;
            if (!sgemm) {
                for (int64_t t = 0; t < c.T; ++t) {
                    const float *xt = &xv[(size_t)(t * c.cols)];
                    if constexpr (Z512)
                        c.logits[t * c.rows + r] = vec_dot512<W, K>(row, xt, c.cols);
                    else
                        c.logits[t * c.rows + r] = vec_dot<W, K>(row, xt, c.cols);
                }
                continue;
            }
            for (int64_t t = 0; t < c.T; t += 8) {
                const int n = (int)std::min<int64_t>(8, c.T - t);
                const float *xs[8];
                for (int j = 0; j < 8; ++j) xs[j] = &xv[(size_t)((t + std::min(j, n - 1)) * c.cols)];
                float out[8];
                if constexpr (Z512) {  // 4 activations per pass: 8 + 2 ymm registers, no spills
                    sgemm_dot512<W, 4>(row, xs, c.cols, out);
                    if (n > 4) sgemm_dot512<W, 4>(row, xs + 4, c.cols, out + 4);
                } else if (n <= 4) {
                    sgemm_dot<W, 4>(row, xs, c.cols, out);
                } else {
                    sgemm_dot<W, 8>(row, xs, c.cols, out);
                }
                for (int j = 0; j < n; ++j) c.logits[(t + j) * c.rows + r] = out[j];
            }
        }
    });
}

// ---- BF16, ggml's AVX-512 + AVX512_BF16 build (see the header comment) ----

// vdpbf16ps's denormal rule: a denormal becomes the zero of its sign (NaN and inf kept).
static inline __m256 dp_flush(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 tiny = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), _mm256_set1_ps(FLT_MIN), _CMP_LT_OQ);
    return _mm256_blendv_ps(v, _mm256_and_ps(v, sign), tiny);
}

// 8 lanes of vdpbf16ps: lane j += wo[j] xo[j], then += we[j] xe[j] (the pair's odd element first).
// Exact: every input, product and sum flushed as the instruction does. Fast: no flush, which is
// the same value whenever no input is denormal and every nonzero product is >= 2^-103 (then each
// partial sum is a multiple of 2^-126, so zero or normal, and nothing is ever flushed).
template <bool Exact>
static inline __m256 dp8(__m256 acc, __m256 we, __m256 wo, __m256 xe, __m256 xo) {
    if constexpr (Exact) {
        acc = dp_flush(_mm256_add_ps(acc, dp_flush(_mm256_mul_ps(dp_flush(wo), dp_flush(xo)))));
        return dp_flush(_mm256_add_ps(acc, dp_flush(_mm256_mul_ps(dp_flush(we), dp_flush(xe)))));
    } else {
        return _mm256_add_ps(_mm256_add_ps(acc, _mm256_mul_ps(wo, xo)), _mm256_mul_ps(we, xe));
    }
}

// Activations split once per call: for each 16-element group, its 8 even and 8 odd elements
// (lane j = the pair (2j, 2j + 1)), as floats.
struct Bf16PairActs {
    int64_t stride = 0;  // per activation row: 8 per started 16-element group
    std::vector<float> ev, od;
    uint32_t min_nonzero_bits = 0x7F800000u;  // smallest nonzero |x| (bits), inf if none
};

// The row's logits for every t (vec_dot: two accumulators over 64-element steps and double
// leftovers; sgemm: one accumulator over 32-element steps). Fast returns false, having written
// nothing final, when a weight in (0, tau_bits) (bf16 magnitude bits) makes it inexact.
template <bool Exact>
inline bool bf16_row_512(const MatvecCall &c, const uint8_t *row, const float *xv, const Bf16PairActs &xa,
                         bool sgemm, uint16_t tau_bits, int64_t r) {
    const int64_t n = c.cols;
    const int64_t n64 = sgemm ? n : n & ~(int64_t)63;
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    const __m256i mag = _mm256_set1_epi16(0x7FFF), tau1 = _mm256_set1_epi16((short)(tau_bits - 1));
    __m256i bad = _mm256_setzero_si256();
    for (int64_t t = 0; t < c.T; ++t) {
        const float *xe = &xa.ev[(size_t)(t * xa.stride)], *xo = &xa.od[(size_t)(t * xa.stride)];
        // the 16-element group at i into the 8 lanes acc (one half of a zmm accumulator)
        const auto group = [&](int64_t i, __m256 &acc) {
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(row + 2 * i));
            if (!Exact && t == 0) {  // 0 < |w| <= tau  <=>  |w| - 1 <= tau - 1 (unsigned 16-bit)
                const __m256i m1 = _mm256_sub_epi16(_mm256_and_si256(wv, mag), _mm256_set1_epi16(1));
                bad = _mm256_or_si256(bad, _mm256_cmpeq_epi16(_mm256_min_epu16(m1, tau1), m1));
            }
            const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(wv, 16));
            const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(wv, hi));
            acc = dp8<Exact>(acc, we, wo, _mm256_loadu_ps(xe + i / 2), _mm256_loadu_ps(xo + i / 2));
        };
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        float *out = &c.logits[t * c.rows + r];
        if (sgemm) {  // one zmm accumulator (a0, a1) over 32-element steps
            for (int64_t i = 0; i < n64; i += 32) {
                group(i, a0);
                group(i + 16, a1);
            }
            *out = reduce16({a0, a1});
        } else {  // vec_dot: c1 = (a0, a1), c2 = (a2, a3) over 64-element steps
            for (int64_t i = 0; i < n64; i += 64) {
                group(i, a0);
                group(i + 16, a1);
                group(i + 32, a2);
                group(i + 48, a3);
            }
            double s = 0.0;
            s += (double)reduce16({a0, a1});
            s += (double)reduce16({a2, a3});
            for (int64_t i = n64; i < n; ++i) s += (double)(BF16W::at(row, i) * xv[(size_t)(t * n + i)]);
            *out = (float)s;
        }
        if (!Exact && t == 0 && !_mm256_testz_si256(bad, bad)) return false;
    }
    return true;
}

inline void bf16_matvec_ggml_512(const MatvecCall &c) {
    std::vector<float> xv((size_t)(c.T * c.cols));
    BF16W::prepare(c.x, xv.data(), c.T * c.cols);
    Bf16PairActs xa;
    xa.stride = (c.cols + 15) / 16 * 8;
    xa.ev.assign((size_t)(c.T * xa.stride), 0.0f);
    xa.od.assign((size_t)(c.T * xa.stride), 0.0f);
    bool x_denormal = false;
    for (int64_t t = 0; t < c.T; ++t)
        for (int64_t i = 0; i < c.cols; ++i) {
            const float v = xv[(size_t)(t * c.cols + i)];
            uint32_t u;
            std::memcpy(&u, &v, 4);
            const uint32_t a = u & 0x7FFFFFFFu;
            if (a != 0 && a < xa.min_nonzero_bits) xa.min_nonzero_bits = a;
            x_denormal |= a != 0 && a < 0x00800000u;
            (i % 2 ? xa.od : xa.ev)[(size_t)(t * xa.stride + i / 16 * 8 + (i % 16) / 2)] = v;
        }
    // The fast rows need nonzero |w| >= tau = max(FLT_MIN, 2^-103 / min|x|), tau rounded up to bf16.
    uint16_t tau_bits = 0;  // 0: every row exact
    if (!x_denormal) {
        float xmin;
        std::memcpy(&xmin, &xa.min_nonzero_bits, 4);
        const double tau = std::max((double)FLT_MIN, std::ldexp(1.0, -103) / (double)xmin);
        if (tau < 1e30) {
            const float tf = (float)tau;
            uint32_t u;
            std::memcpy(&u, &tf, 4);
            if ((double)tf < tau) ++u;  // (float) rounded down: the next float up
            tau_bits = (uint16_t)((u + 0xFFFFu) >> 16);
        }
    }
    const bool sgemm = c.T >= 2 && c.cols % 32 == 0 && c.rows % 4 == 0;
    for_row_tasks(c.n_threads, c.rows, 32, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const uint8_t *row = c.w + (size_t)r * c.row_stride;
            if (tau_bits == 0 || !bf16_row_512<false>(c, row, xv.data(), xa, sgemm, tau_bits, r))
                bf16_row_512<true>(c, row, xv.data(), xa, sgemm, tau_bits, r);
        }
    });
}

// c.isa is the emulated ggml build: Avx2 or Avx512 (matvec checked it against the row).
template <class W, VecDot K>
void float_matvec_ggml(const MatvecCall &c) {
    if constexpr (K == VecDot::BF16) {
        if (c.isa == Isa::Avx512) return bf16_matvec_ggml_512(c);
    } else {
        if (c.isa == Isa::Avx512) return float_matvec_ggml_build<W, K, true>(c);
    }
    float_matvec_ggml_build<W, K, false>(c);
}

}  // namespace lmt::cpu::ggml_x86
