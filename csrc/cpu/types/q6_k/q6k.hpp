// Q6_K internals shared by this type's translation units (not installed).
//
// Canonical weight of Precision::F32 (matvec_q6_k_scalar is the reference):
//   D[j] = d * (float)sc[j]                j = i / 16, d the f16 super-block scale (exact: an
//                                          11-bit by 8-bit product, never rounded)
//   w[i] = D[j] * (float)(q[i] - 32)       one rounding: the correctly rounded d*sc*(q-32),
// which is ggml's dequantize_row_q6_K (`d * sc[is] * q1`, evaluated left to right) bit for bit.
// Then the canonical 16-lane tree of every type (docs/DESIGN.md "Canonical order"):
//   acc[i % 16] = fma(w[i], x[i], acc[i % 16]) in increasing i; logit = hsum16(acc).
// A Q6_K sub-block is exactly 16 weights, so lane l of block b's sub-block j is weight 16j + l
// and one 16-lane vector shares one D[j].
#pragma once

#include <cstdint>

#include "cpu/types/types.hpp"
#include "lmtail/blocks/q6_k.h"

namespace lmt::cpu {

void matvec_q6_k_scalar(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_q6_k_avx2(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_q6_k_avx512(const MatvecCall &c, int64_t r0, int64_t r1);


void quantize_q6_k(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads);
void dequantize_q6_k(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads);

// The 16 sub-block factors D[j] = d * sc[j] of a block (exact products).
static inline void q6k_block_scales(const lmt_block_q6_K *b, float D[16]) {
    const float d = f16_to_f32(b->d);
    for (int j = 0; j < 16; ++j) D[j] = d * (float)b->scales[j];
}

// Canonical 16-lane horizontal sum: (a[l] + a[l+8]) -> 4 -> 2 -> 1.
static inline float q6k_hsum16(const float a[16]) {
    float b[8], c[4], d[2];
    for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) c[l] = b[l] + b[l + 4];
    for (int l = 0; l < 2; ++l) d[l] = c[l] + c[l + 2];
    return d[0] + d[1];
}

}  // namespace lmt::cpu
