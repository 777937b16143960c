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
void matvec_q6_k_neon(const MatvecCall &c, int64_t r0, int64_t r1);


// ---- Precision::I24: two-piece 16-bit block fixed point, integer sums -----------------------
// Activations prepared once per call (prepare_x_q6k, q6_k.cpp), in double, scalar, so every ISA
// and thread count sees the same integers. Per activation row t and 256-block b, with
// s = max|x| / 32767 (double) and s2 = s / 65534:
//   a[i] = clamp(round_even(x[i] / s), -32767, 32767)               int16 (xa, natural order)
//   c[i] = clamp(round_even((x[i] - a[i]*s) / s2), -32767, 32767)   int16 (xc): |x - a*s| <= s/2
//   dx = (float)s, dxc = (float)s2; a non-finite block: a = c = 0, dx = dxc = NaN (so every logit
//   of that row is NaN); an all-zero block: zeros.
// x ~= s*a + s2*c to max|x| * 2^-31 (31 bits against the block maximum: the name's 24 bits are
// a lower bound; the f32 scales add 2^-24 relative, as f32 storage of x itself would).
// Canonical result (matvec_q6_k_i24_scalar is the reference). With w16[i] = sc[i/16] * (q[i] - 32)
// (exact int16, |w16| <= 128 * 32 = 4096), for half h of block b (weights 128h .. 128h + 127):
//   L[k] = sum_{i in half h, (i % 16) / 2 == k} w16[i] * a[i]     k in 0..7, exact int32
//   C[k] = the same with c[i]
//   e = d * dx, ec = d * dxc                                       (f32 products, d the f16 scale)
//   acc[k] = fma((float)L[k], e, acc[k]);  acc[k] = fma((float)C[k], ec, acc[k])   (h = 0, 1, in
//   block order), logit = hsum8(acc) = ((acc[0..3] + acc[4..7]) -> 2 -> 1).
// Integer bounds: a lane of a half holds 16 products, |L|, |C| <= 16 * 4096 * 32767 =
// 2,147,418,112 < 2^31 - 1 (a whole block, 32 products, could overflow: hence per half). The
// pairwise vpmaddwd sum never saturates (|a|, |c| <= 32767, never -32768). Any grouping of the
// integer additions is exact, so every ISA may build L and C its own way.
struct Q6kI24Args {
    const MatvecCall *c;
    const int16_t *xa, *xc;  // (T, cols)
    const float *dx, *dxc;   // (T, cols / 256)
    // Isa::Avx512 with T >= 2 only (q6_k.cpp q6k_pair_layout fills them): activation rows 2p, 2p+1
    // (u = 2p + 1) interleaved so one zmm of 32 words feeds both rows. Per pair 2 * cols words; per
    // 32-weight chunk g (sub-blocks 2g, 2g + 1) 64 words:
    //   xa[2p][32g + 0..15], xa[u][32g + 16..31], xa[2p][32g + 16..31], xa[u][32g + 0..15]
    // (xcp likewise) and per pair and block 16 floats dx[2p][b] x 8, dx[u][b] x 8 (dxcp likewise).
    const int16_t *xap = nullptr, *xcp = nullptr;  // (T / 2, 2 * cols)
    const float *dxp = nullptr, *dxcp = nullptr;   // (T / 2, cols / 256, 16)
    // Isa::Avx2 / AvxVnni with T >= 2 only (q6_k.cpp q6k_pass_layout): activation rows in passes of
    // n = min(4, T - 4p) rows starting at row 4p, block-major, so a pass's block is one 2n * 256
    // word run at constant offsets: pass p at 8p * cols words; block b at 2n * 256 * b within it,
    // then xa of rows 4p .. 4p + n - 1 (256 words each), then xc of the same rows.
    const int16_t *xg = nullptr;  // (T * 2 * cols)
};
void matvec_q6_k_i24_scalar(const Q6kI24Args &a, int64_t r0, int64_t r1);
void matvec_q6_k_i24_avx2(const Q6kI24Args &a, int64_t r0, int64_t r1);
void matvec_q6_k_i24_avxvnni(const Q6kI24Args &a, int64_t r0, int64_t r1);
void matvec_q6_k_i24_avx512(const Q6kI24Args &a, int64_t r0, int64_t r1);
void matvec_q6_k_i24_neon(const Q6kI24Args &a, int64_t r0, int64_t r1);

static inline float q6k_hsum8(const float a[8]) {
    float b[4], c[2];
    for (int l = 0; l < 4; ++l) b[l] = a[l] + a[l + 4];
    for (int l = 0; l < 2; ++l) c[l] = b[l] + b[l + 2];
    return c[0] + c[1];
}

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
