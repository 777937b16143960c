// Q4_K on the CPU: what the type's translation units share (not installed).
//
// ---- Precision::F32 (q4_k_scalar.cpp is the reference) --------------------------------------
//   w[i]   = fma(float(q[i]), d1[j], -m1[j])     d1[j] = d * sc[j], m1[j] = dmin * m[j] (one
//                                                rounding each, as ggml's dequantiser), j = i / 32
//   acc[l] = fma(w[i], x[i], acc[l])  for lane l = i % 16, in increasing i
//   logit  = hsum16(acc)  ((a[0..7] + a[8..15]) -> 4 -> 2 -> 1)
// i.e. Q5_K's tree with the 4-bit q.
//
// ---- Precision::I24 (the default) -----------------------------------------------------------
// The activations are prepared as Q5_K's I24 (cpu/internal.hpp): per 256-block s = max|x|/32767,
// a = clamp(floor(x/s), +-32767) int16 in the permuted xi16_pos layout, b = residual in [0, 255]
// uint8 in natural order, dx = (float)s, dxr = (float)(s/255), X[k] = the represented x's sum over
// sub-block k rounded once; a non-finite block gets a = b = 0 and dx = dxr = X = NaN, so every
// logit of that activation row is NaN. The weights are CENTRED on 8 (the 4-bit midpoint),
// w = d*sc*(q - 8) + C with C = 8*d*sc - dmin*m, so the integer sums and the f32 roundings act at
// the scale of w itself. For activation row t and super-block b:
//   L[k] = sum_{(i >> 2) & 7 == k} sc[i>>5] * (q[i] - 8) * a[i]    |L| <= 32*8*63*32767 < 2^29
//   R[k] = sum_{(i >> 2) & 7 == k} sc[i>>5] * (q[i] - 8) * b[i]    |R| <= 32*8*63*255  < 2^22
//   C[k] = fma(8*d, sc[k], -(dmin*m[k]))                           one rounding (8*d is exact)
//   acc[k] = fma((float)L[k], d*dx, acc[k]);  acc[k] = fma((float)R[k], d*dxr, acc[k]);
//   acc[k] = fma(C[k], X[b][k], acc[k]);                           in block order b = 0, 1, ...
//   logit = hsum8(acc)   ((a[0..3] + a[4..7]) -> 2 -> 1)
// Lane k of L and R holds exactly 32 products, so every bound holds for any grouping of the
// integer additions and every ISA may build them its own way (the bytes cannot differ). On x86
// the pair sums inside vpmaddubsw are bounded too: sc * |q - 8| <= 63 * 8 (one byte product, the
// other pattern byte is 0) and b * |q - 8| summed over 2 <= 2 * 255 * 8 < 2^15: no saturation.
#pragma once

#include "cpu/internal.hpp"
#include "lmtail/blocks/q4_k.h"

namespace lmt::cpu {

void quantize_q4_k(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads);
void dequantize_q4_k(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads);

// F32 kernels: rows [r0, r1) for all T activation rows (MatvecArgs: cpu/internal.hpp).
void matvec_q4_k_scalar(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q4_k_avx2(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q4_k_avx512(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q4_k_neon(const MatvecArgs &a, int64_t r0, int64_t r1);

// I24 kernels (MatvecI16Args with xr / dxr set: cpu/internal.hpp).
void matvec_q4_k_i24_scalar(const MatvecI16Args &a, int64_t r0, int64_t r1);
void matvec_q4_k_i24_avx2(const MatvecI16Args &a, int64_t r0, int64_t r1);
void matvec_q4_k_i24_avxvnni(const MatvecI16Args &a, int64_t r0, int64_t r1);
void matvec_q4_k_i24_avx512(const MatvecI16Args &a, int64_t r0, int64_t r1);
void matvec_q4_k_i24_neon(const MatvecI16Args &a, int64_t r0, int64_t r1);
void matvec_q4_k_i24_neon_dot(const MatvecI16Args &a, int64_t r0, int64_t r1);  // needs xd
// The I24 outlier add-back's weights of 16 rows (cpu/i24_outliers.hpp: Weights16).
bool q4_k_weights16_avx512(const uint8_t *row0, size_t row_stride, int64_t c, float *w16);

// Per-block constants of the canonical F32 weight (same roundings as ggml's dequantiser).
static inline void q4k_block_scales(const lmt_block_q4_K *b, float d1[8], float m1[8]) {
    const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
    for (int j = 0; j < 8; ++j) {
        d1[j] = d * (float)lmt_q5k_scale(b->scales, j);
        m1[j] = dmin * (float)lmt_q5k_min(b->scales, j);
    }
}

// The 6-bit scales and mins of a block as bytes sc[0..7] | m[0..7] (little-endian u64 each); the
// packing is Q5_K's (q5k_scale_min_bytes), read here from a Q4_K block.
static inline void q4k_scale_min_bytes(const lmt_block_q4_K *b, uint64_t *sc, uint64_t *mm) {
    uint32_t a, bb, c;
    std::memcpy(&a, b->scales + 0, 4);
    std::memcpy(&bb, b->scales + 4, 4);
    std::memcpy(&c, b->scales + 8, 4);
    *sc = (uint64_t)(a & 0x3F3F3F3Fu) | ((uint64_t)((c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u)) << 32);
    *mm = (uint64_t)(bb & 0x3F3F3F3Fu) | ((uint64_t)(((c >> 4) & 0x0F0F0F0Fu) | ((bb >> 2) & 0x30303030u)) << 32);
}

}  // namespace lmt::cpu
