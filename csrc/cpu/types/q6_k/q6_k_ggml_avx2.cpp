// Q6_K, precision="ggml": ggml's AVX2 build (see cpu/ggml/kquant_ggml.hpp for the paths).
//
// Block integers (exact): with q[i] in 0..63 the 6-bit codes, sc[j] the int8 scales of the
// 16-element sub-blocks and y the q8_K codes,
//   lane[k] (k = 0..7) = sum over the 8 (32-element chunk, 4-byte group k) cells of
//                        sc[cell's sub-block] * sum q*y  -  32 * (bsums[2k]*sc[2k] + bsums[2k+1]*sc[2k+1])
// exactly ggml_vec_dot_q6_K_q8_K's `sumi - q8sclsub` lanes.
//   vec_dot (T < 8):  acc = fma(d_x * d_w, (float)lane, acc) per lane, block order; hsum_float_8.
//   tiled  (T >= 8):  S1 = sum of the lanes (= sum_i sc * (q - 32) * y, the tiled kernel's
//                     act-biased integer after its correction); res = d_w * (float)S1;
//                     acc = fma(res, d_x, acc).
// (ggml's x86 AVX-512 build gives the same bytes on every path: cpu/ggml/ggml_isa.hpp.)
#include "cpu/ggml/kquant_ggml.hpp"
#include "cpu/ggml/kquant_ggml_x86.hpp"
#include "cpu/types/q6_k/q6k.hpp"

namespace lmt::cpu {

using ggml_x86::q6k_block_lanes;

void q6_k_ggml_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1) {
    const int64_t nb = c.cols / 256;
    const bool tiled = c.T >= kGgmlTiledMinBatch;
    for (int64_t r = r0; r < r1; ++r) {
        const lmt_block_q6_K *w = (const lmt_block_q6_K *)(c.w + (size_t)r * c.row_stride);
        for (int64_t t = 0; t < c.T; ++t) {
            const GgmlQ8K *y = xq + t * nb;
            float out;
            if (tiled) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; ++b) {
                    const float res = ggml_x86::h2f(w[b].d) * (float)ggml_x86::hsum_i32_8(q6k_block_lanes(w + b, y + b));
                    acc = std::fma(res, y[b].d, acc);
                }
                out = acc;
            } else {
                __m256 acc = _mm256_setzero_ps();
                for (int64_t b = 0; b < nb; ++b) {
                    const float d = y[b].d * ggml_x86::h2f(w[b].d);
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q6k_block_lanes(w + b, y + b)), acc);
                }
                out = ggml_x86::hsum_float_8(acc);
            }
            c.logits[t * c.rows + r] = out;
        }
    }
}

}  // namespace lmt::cpu
