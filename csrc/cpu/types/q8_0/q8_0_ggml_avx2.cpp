// Q8_0 precision="ggml": the bytes of ggml's AVX2 build. Every T takes the same arithmetic:
// T = 1 runs ggml_vec_dot_q8_0_q8_0 (arch/x86/quants.c), T >= 2 llamafile's tinyBLAS_Q0_AVX
// (sgemm.cpp; it never declines Q8_0 x Q8_0 for n >= 2), and both compute, per (row, activation):
//   x -> q8_0 blocks by quantize_row_q8_0's x86 code (ggml_x86::quantize_q8_0_block);
//   acc[8] = 0; per block b: acc = fma(fp32(d_w) * fp32(d_x), dot4_i32(q_w, q_x), acc)
//   logit = hsum8(acc)
// (tinyBLAS's gemm4xN/gemmMx4 tiles form the same d product, da * db, in a vector multiply).
// Each logit is one dot product, so the thread count cannot change it (ggml's neither).
// (ggml's x86 AVX-512 build gives the same bytes on every path: cpu/ggml/ggml_isa.hpp.)
#include "cpu/ggml/q0f_ggml.hpp"
#include "cpu/ggml/q0f_ggml_x86.hpp"

namespace lmt::cpu {
namespace {

using namespace ggml_x86;

// R weight rows against one activation row: R independent FMA chains (ggml runs one row at a
// time; interleaving rows changes no value, only the latency bound).
template <int R>
inline void rows_dot(const uint8_t *const *wr, const lmt_block_q8_0 *xq, const float *xd, int64_t nb, float *out) {
    __m256 acc[R];
    for (int k = 0; k < R; ++k) acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)xq[b].qs);
        for (int k = 0; k < R; ++k) {
            const uint8_t *blk = wr[k] + b * LMT_Q8_0_BLOCK_BYTES;
            uint16_t h;
            std::memcpy(&h, blk, 2);
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(h) * xd[b]);
            const __m256 q = _mm256_cvtepi32_ps(dot4_i32(_mm256_loadu_si256((const __m256i *)(blk + 2)), qx));
            acc[k] = _mm256_fmadd_ps(d, q, acc[k]);
        }
    }
    for (int k = 0; k < R; ++k) out[k] = hsum8(acc[k]);
}

}  // namespace

void q8_0_matvec_ggml_avx2(const MatvecCall &c) {
    const int64_t nb = c.cols / 32;
    const Q8_0Acts xa(c.x, c.T, c.cols);
    for_rows_by_4(c, xa, nb, [](const uint8_t *const *wr, const lmt_block_q8_0 *q, const float *d, int64_t n, float *out) {
        rows_dot<4>(wr, q, d, n, out);
    });
}

}  // namespace lmt::cpu
