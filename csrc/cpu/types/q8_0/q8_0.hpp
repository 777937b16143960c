// Q8_0 internals shared by the type's translation units (not installed).
//
// Precision::F32 (the only precision; it is the default): the weight is exact in f32,
//   w[i]   = (float)d * (float)q[i]        (11-bit d significand x 8-bit q: no rounding)
//   acc[l] = fma(w[i], x[i], acc[l])       l = i % 16, over the whole row in increasing i
//   logit  = hsum16(acc)                   ((acc[0..7] + acc[8..15]) -> 4 -> 2 -> 1)
// so the only roundings are the f32 accumulation's (measured normwise error in the report /
// tests/test_type_q8_0.py). q may be -128 (other quantizers write it); nothing here narrows q.
#pragma once

#include <cmath>

#include "cpu/internal.hpp"
#include "lmtail/blocks/q8_0.h"

namespace lmt::cpu {

static inline float q8_0_hsum16(const float a[16]) {
    float b[8], c[4], d[2];
    for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) c[l] = b[l] + b[l + 4];
    for (int l = 0; l < 2; ++l) d[l] = c[l] + c[l + 2];
    return d[0] + d[1];
}

// Rows [r0, r1) of W against all T activation rows (MatvecArgs: cpu/internal.hpp).
void matvec_q8_0_scalar(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q8_0_avx2(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q8_0_avx512(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q8_0_neon(const MatvecArgs &a, int64_t r0, int64_t r1);

void quantize_q8_0(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads);
void dequantize_q8_0(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads);

}  // namespace lmt::cpu
