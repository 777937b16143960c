// Q4_K, precision="ggml": ggml's AVX2 build for a weight in a plain CPU buffer (paths in
// cpu/ggml/kquant_ggml.hpp, float order in ggml_x86::k45_rows). Chunk c of a block holds the
// codes (qs[32(c/2) + l] >> 4(c%2)) & 15, scaled by sc[c]; mins mn[c].
#include "cpu/ggml/kquant_ggml_x86.hpp"
#include "cpu/internal.hpp"
#include "lmtail/blocks/q4_k.h"

namespace lmt::cpu {

void q4_k_ggml_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1) {
    ggml_x86::k45_rows<true>(c, xq, r0, r1, LMT_Q4K_BLOCK_BYTES,
                             [](const uint8_t *p, __m256i q[8], uint8_t sc[8], uint8_t mn[8], float &d, float &dmin) {
                                 const lmt_block_q4_K *b = (const lmt_block_q4_K *)p;
                                 d = f16_to_f32(b->d);
                                 dmin = f16_to_f32(b->dmin);
                                 ggml_x86::kq_scales_mins(b->scales, sc, mn);
                                 const __m256i m4 = _mm256_set1_epi8(0xF);
                                 for (int g = 0; g < 4; ++g) {
                                     const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * g));
                                     q[2 * g] = _mm256_and_si256(v, m4);
                                     q[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                                 }
                             });
}

// ---- CPU_REPACK (q4_K_8x8_q8_K): what llama.cpp runs for a Q4_K weight with rows % 8 == 0 ----
// llama.cpp loads such a weight into the CPU_REPACK buffer on AVX2 (repack.cpp
// ggml_repack_get_optimal_repack_type), and forward_mul_mat then runs, for the activation rows
// t < T4 = (T >= 4 ? T - T % 4 : 0), ggml_gemm_q4_K_8x8_q8_K on rows quantised by
// ggml_quantize_mat_q8_K_4x8 (q8_k.hpp), and for the others ggml_gemv_q4_K_8x8_q8_K on rows
// quantised by quantize_row_q8_K (the tiled matmul never sees repacked weights). The integers of
// both are exact (int16 sums of at most 8 maddubs pairs, |.| <= 30720), so per weight row and
// activation row, with dot[c] the integer dot of chunk c (32 elements) and bs[c] the activation
// sum of chunk c:
//   gemv, per block b:  acc = fma((float)S1_b, d_w * d_x, acc);  accm = fma((float)S2_b, dmin_w * d_x, accm)
//   gemm, per 64-element pair p = 0..3 of block b, the same with S1_p = sc[2p] dot[2p] + sc[2p+1] dot[2p+1],
//                        S2_p = mn[2p] bs[2p] + mn[2p+1] bs[2p+1]
//   logit = acc - accm.
// The column chunks of forward_mul_mat are whole 8-row groups, so no thread count changes a value.
void q4_k_ggml_repack_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1) {
    const int64_t nb = c.cols / 256;
    const int64_t T4 = c.T >= 4 ? c.T - c.T % 4 : 0;
    const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
    uint8_t sc[8], mn[8];
    for (int64_t r = r0; r < r1; ++r) {
        const lmt_block_q4_K *w = (const lmt_block_q4_K *)(c.w + (size_t)r * c.row_stride);
        for (int64_t t = 0; t < c.T; ++t) {
            const GgmlQ8K *y = xq + t * nb;
            const bool gemm = t < T4;
            float acc = 0.0f, accm = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const float dw = f16_to_f32(w[b].d), dminw = f16_to_f32(w[b].dmin);
                ggml_x86::kq_scales_mins(w[b].scales, sc, mn);
                int32_t dot[8], bs[8];
                for (int g = 0; g < 4; ++g) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * g));
                    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    const __m256i ylo = _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * g));
                    const __m256i yhi = _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * g + 32));
                    dot[2 * g] = ggml_x86::hsum_i32_8(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), ones));
                    dot[2 * g + 1] = ggml_x86::hsum_i32_8(_mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), ones));
                }
                for (int k = 0; k < 8; ++k) bs[k] = (int32_t)y[b].bsums[2 * k] + (int32_t)y[b].bsums[2 * k + 1];
                const float e = dw * y[b].d, em = dminw * y[b].d;
                if (gemm) {
                    for (int p = 0; p < 4; ++p) {
                        const int32_t s1 = (int32_t)sc[2 * p] * dot[2 * p] + (int32_t)sc[2 * p + 1] * dot[2 * p + 1];
                        const int32_t s2 = (int32_t)mn[2 * p] * bs[2 * p] + (int32_t)mn[2 * p + 1] * bs[2 * p + 1];
                        acc = std::fma((float)s1, e, acc);
                        accm = std::fma((float)s2, em, accm);
                    }
                } else {
                    int32_t s1 = 0, s2 = 0;
                    for (int k = 0; k < 8; ++k) {
                        s1 += (int32_t)sc[k] * dot[k];
                        s2 += (int32_t)mn[k] * bs[k];
                    }
                    acc = std::fma((float)s1, e, acc);
                    accm = std::fma((float)s2, em, accm);
                }
            }
            c.logits[t * c.rows + r] = acc - accm;
        }
    }
}

}  // namespace lmt::cpu
