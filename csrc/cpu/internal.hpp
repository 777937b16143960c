// Internals shared by the CPU kernel translation units (not installed).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/thread_pool.hpp"
#include "lmtail/cpu.hpp"

namespace lmt::cpu {

Isa resolve_isa(Isa isa);

// IEEE half -> float, exact (subnormals, inf, NaN). Portable: no F16C needed.
static inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);
    } else if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
        }
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}
// Non-finite test on the exponent bits: immune to -ffast-math style assumptions.
static inline bool is_nonfinite(float x) { return (f32_bits(x) & 0x7F800000u) == 0x7F800000u; }

// Per-block constants of the canonical Q5_K weight: w = fma(q, d1[j], -m1[j]) for sub-block j,
// d1[j] = d * sc[j], m1[j] = dmin * m[j] (one rounding each, as ggml's dequantiser).
static inline void q5k_block_scales(const lmt_block_q5_K *b, float d1[8], float m1[8]) {
    const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
    for (int j = 0; j < 8; ++j) {
        d1[j] = d * (float)lmt_q5k_scale(b->scales, j);
        m1[j] = dmin * (float)lmt_q5k_min(b->scales, j);
    }
}

// Matvec kernels per ISA: rows [r0, r1) of W for all T activation rows.
// logits is (T, rows) with row stride `rows`.
struct MatvecArgs {
    const uint8_t *w;
    int64_t rows, cols;
    size_t row_stride;
    const float *x;  // (T, cols)
    int64_t T;
    float *logits;   // (T, rows)
};
void matvec_q5_k_scalar(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q5_k_avx2(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q5_k_avx512(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q5_k_neon(const MatvecArgs &a, int64_t r0, int64_t r1);

[[noreturn]] inline void fail_arg(const std::string &msg) { throw ArgumentError(msg); }

}  // namespace lmt::cpu
