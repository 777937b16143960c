// precision="ggml" for Q4_K / Q5_K / Q6_K: the driver shared by the three types.
//
// What llama.cpp's CPU backend (ggml-cpu for x86 AVX2 + FMA; its AVX-512 build gives the same
// bytes, cpu/ggml/ggml_isa.hpp) computes for ggml_mul_mat(W, x), W a K-quant in a plain CPU
// buffer, x (T, cols) f32:
//   1. x -> q8_K (q8_k.hpp), row by row.
//   2. T >= 8: the tiled K-quant matmul (ggml-cpu/tiled, AVX2 microtile). Per output (row r, t),
//      over the 256-blocks b in increasing order, with the exact block integers of the type:
//        res = d_w(b) * (float)S1(b)              [HAS_MIN types: res = fma(-dmin_w, (float)S2, res)]
//        acc = fma(res, d_x(t, b), acc)           acc starts at +0
//      No float value depends on the 256 x 256 windows, the narrow-path K extent (every slab is
//      added into the same accumulator in block order), the chunking or the thread count.
//   3. T < 8: the type's vec_dot (arch/x86/quants.c, AVX2 branch) per (row, t): 8 float lanes of
//      fma(d_x * d_w, (float)lane_int, acc) over blocks, then hsum_float_8 (see the type's file).
// Neither path depends on the thread count: every output element is one sequential dot product.
// Q4_K weights with rows % 8 == 0 go through CPU_REPACK in llama.cpp (see q4_k_ggml_avx2.cpp).
#pragma once

#include <string>
#include <vector>

#include "cpu/ggml/ggml_isa.hpp"
#include "cpu/ggml/q8_k.hpp"
#include "cpu/types/types.hpp"

namespace lmt::cpu {

// ggml's tiled matmul takes over from src1 rows >= 8 (tiled.cpp ggml_tiled_min_batch).
constexpr int64_t kGgmlTiledMinBatch = 8;

// Rows [r0, r1) of logits for the activations xq ((T, cols / 256) q8_K blocks).
using GgmlKRowsFn = void (*)(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1);

// The K types list precision "ggml" where its emulation is compiled (x86 builds); elsewhere the
// capability table does not offer it (matvec would raise UnsupportedError).
#if defined(LMTAIL_HAVE_X86)
constexpr uint32_t kGgmlKPrecisionBit = precision_bit(Precision::Ggml);
#else
constexpr uint32_t kGgmlKPrecisionBit = 0;
#endif
constexpr const char *kGgmlKNotReproduced = "ggml's NEON and scalar builds use other dot products";

// Each type's AVX2 rows (csrc/cpu/types/<type>/<type>_ggml_avx2.cpp; x86 builds only).
void q4_k_ggml_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1);
void q5_k_ggml_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1);
void q6_k_ggml_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1);
// Q4_K with rows % 8 == 0: llama.cpp's CPU_REPACK gemv / gemm (q4_k_ggml_avx2.cpp); its
// activation rows t < T - T % 4 (T >= 4) are quantised by ggml_quantize_row_q8_k_4x8.
void q4_k_ggml_repack_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1);

// The emulated ggml build is c.isa, one of kGgmlBuildsInt (matvec checked it against the row):
// ggml's x86 AVX2 and AVX-512 builds, which give the same bytes here (their AVX512-VNNI tiled
// microtile, dot products and repack loops change only exact integer sums), both emulated with
// the AVX2 rows. NEON and scalar builds take other code and are refused.
// repack4x8: the activation rows t < T - T % 4 (T >= 4) are quantised as CPU_REPACK's gemm does.
inline void ggml_kquant_matvec(const MatvecCall &c, const char *type, GgmlKRowsFn avx2_rows, bool repack4x8 = false) {
    ggml_require_build(avx2_rows ? kGgmlBuildsInt : 0u, c.isa, type, kGgmlKNotReproduced);
    struct Scratch {
        std::vector<GgmlQ8K> q;
    };
    thread_local Scratch s;
    const int64_t nb = c.cols / 256;
    if (s.q.size() < (size_t)(c.T * nb)) s.q.resize((size_t)(c.T * nb));
    const int64_t t4 = repack4x8 && c.T >= 4 ? c.T - c.T % 4 : 0;
    for (int64_t t = 0; t < c.T; ++t)
        (t < t4 ? ggml_quantize_row_q8_k_4x8 : ggml_quantize_row_q8_k)(c.x + t * c.cols, s.q.data() + t * nb, c.cols);
    const GgmlQ8K *xq = s.q.data();
    for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) { avx2_rows(c, xq, r0, r1); });
}

}  // namespace lmt::cpu
