// Q4_0 kernels shared by the type's translation units (not installed).
//
// Precision::F32 canonical expression (q4_0_scalar in q4_0.cpp is the reference): per weight
//   w[i]   = d * (q[i] - 8)          exact in f32 (a 4-bit integer times an f16 value)
//   acc[l] = fma(w[i], x[i], acc[l])  l = i % 16, over the whole row in increasing i
//   logit  = ((acc[0..7] + acc[8..15]) -> 4 -> 2 -> 1)
// In a 32-weight block, lane l takes the low nibble of qs[l] (weight l) and then its high nibble
// (weight 16 + l), so one 16-byte load feeds the 16 lanes twice with no shuffle across bytes.
#pragma once

#include <cstdint>

#include "cpu/types/types.hpp"
#include "lmtail/blocks/q4_0.h"

namespace lmt::cpu::q4_0 {

struct Args {
    const uint8_t *w;
    int64_t rows, cols;
    size_t row_stride;
    const float *x;  // (T, cols)
    int64_t T;
    float *logits;   // (T, rows)
};

void matvec_scalar(const Args &a, int64_t r0, int64_t r1);
void matvec_avx2(const Args &a, int64_t r0, int64_t r1);

static inline float hsum16(const float a[16]) {
    float b[8], c[4], d[2];
    for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) c[l] = b[l] + b[l + 4];
    for (int l = 0; l < 2; ++l) d[l] = c[l] + c[l + 2];
    return d[0] + d[1];
}

}  // namespace lmt::cpu::q4_0
