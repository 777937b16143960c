// precision="ggml" for ggml's AMX build (Isa::Amx, cpu/ggml/ggml_isa.hpp): the bytes of the
// AMX extra buffer's mul_mat (ggml-cpu/amx/mmq.cpp), which llama.cpp uses for the weights that
// buffer supports when its CPU backend is a native build on an AMX-INT8 CPU.
//
// What it computes, per weight row r, activation row t (x quantised as the type's vec_dot type:
// quantize_row_q8_0 for Q4_0 / Q8_0, quantize_row_q8_K_ref for the K types), over the blocks b
// in increasing order, starting from acc = +0:
//   acc = fma((float)S1_b, d_w(b) * d_x(t, b), acc)
//   Q4_K / Q5_K only:  acc = fma(-(float)S2_b, dmin_w(b) * d_x(t, b), acc)
// S1_b is the block's exact integer dot (K types: sum over sub-blocks of scale * dot, Q6_K with
// its codes - 32), S2_b = sum_j min_j * (bsums[2j] + bsums[2j + 1]). Both its kernels give these
// bytes: the VNNI gemv at T = 1 (fnmadd is fma of the negated product) and the AMX tile gemm at
// T > 1 (integer tiles, then the same per-block float update), so unlike the AVX-512 build this
// build is batch invariant. No value depends on the thread count (one accumulator per output).
// F16 weights (cols % 16 == 0) go to the buffer too, to an AVX-512 kernel on f32 x (ggml_amx_avx2.cpp).
#pragma once

#include <cstdint>

#include "cpu/types/types.hpp"
#include "lmtail/blocks/q8_0.h"

namespace lmt::cpu {

// True where llama.cpp puts this weight in the AMX buffer (its supports_op: a type with AMX
// kernels or F16, rows % 32 == 0, cols a multiple of the type's block; F16: of 16).
bool ggml_amx_takes(WeightType type, int64_t rows, int64_t cols);

// The AMX build's logits for a weight ggml_amx_takes (x86 builds: AVX2 + F16C code; Q4_0, Q8_0,
// Q4_K, Q5_K and F16 run the 512-bit rows below where lmtail's ISA resolves to avx512).
void ggml_amx_matvec(WeightType type, const MatvecCall &c);

// ggml_amx_avx512.cpp: rows [r0, r1) of Q4_0 (q4) / Q8_0 from the activations the AVX2 file
// quantised (xq, xd: block i of all T rows; xsum: each block's sum of codes), and of F16.
void ggml_amx_q0_rows_avx512(bool q4, const MatvecCall &c, const lmt_block_q8_0 *xq, const float *xd,
                             const int32_t *xsum, int64_t r0, int64_t r1);
void ggml_amx_f16_rows_avx512(const MatvecCall &c, int64_t r0, int64_t r1);
// Q4_K (q5 false) / Q5_K rows: xd the q8_K activations' scales (block i of all T rows), xperm their codes
// as the 512-bit rows read them (256 bytes per block: sub-blocks 0, 2, 1, 3, 4, 6, 5, 7), bs8
// each block's 8 sub-block sums (bsums[2j] + bsums[2j + 1]).
void ggml_amx_k45_rows_avx512(bool q5, const MatvecCall &c, const float *xd, const uint8_t *xperm,
                              const int32_t *bs8, int64_t r0, int64_t r1);

}  // namespace lmt::cpu
