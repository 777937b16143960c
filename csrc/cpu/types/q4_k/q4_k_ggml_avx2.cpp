// Q4_K, precision="ggml": ggml's AVX2 build for a weight in a plain CPU buffer (paths in
// cpu/ggml/kquant_ggml.hpp, float order in ggml_x86::k45_rows). Chunk c of a block holds the
// codes (qs[32(c/2) + l] >> 4(c%2)) & 15, scaled by sc[c]; mins mn[c].
// (ggml's x86 AVX-512 build gives the same bytes on every path: cpu/ggml/ggml_isa.hpp.)
#include "cpu/ggml/kquant_ggml_x86.hpp"
#include "cpu/internal.hpp"
#include "lmtail/blocks/q4_k.h"

namespace lmt::cpu {

void q4_k_ggml_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1) {
    ggml_x86::k45_rows<false>(c, xq, r0, r1);
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
    ggml_x86::K45Ints k;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *w = c.w + (size_t)r * c.row_stride;
        for (int64_t t = 0; t < c.T; ++t) {
            const GgmlQ8K *y = xq + t * nb;
            float acc = 0.0f, accm = 0.0f;
            if (t < T4) {  // gemm: per 64-element pair
                for (int64_t b = 0; b < nb; ++b) {
                    ggml_x86::k45_block<false>(w + (size_t)b * LMT_Q4K_BLOCK_BYTES, y[b], k);
                    alignas(16) int32_t s1[4], s2[4];
                    _mm_store_si128((__m128i *)s1, ggml_x86::k45_pair_sums(k.pair));
                    _mm_store_si128((__m128i *)s2, k.prod);
                    const float e = k.d * y[b].d, em = k.dmin * y[b].d;
                    for (int p = 0; p < 4; ++p) {
                        acc = std::fma((float)s1[p], e, acc);
                        accm = std::fma((float)s2[p], em, accm);
                    }
                }
            } else {  // gemv: per block; the integer sums of 4 blocks are reduced together
                int64_t b = 0;
                for (; b + 4 <= nb; b += 4) {
                    ggml_x86::K45Ints k4[4];
                    for (int j = 0; j < 4; ++j)
                        ggml_x86::k45_block<false, false>(w + (size_t)(b + j) * LMT_Q4K_BLOCK_BYTES, y[b + j], k4[j]);
                    alignas(16) int32_t s1[4], s2[4];
                    _mm_store_si128((__m128i *)s1, ggml_x86::hsum4x8_i32(k4[0].sumi, k4[1].sumi, k4[2].sumi, k4[3].sumi));
                    _mm_store_si128((__m128i *)s2, ggml_x86::hsum4x4_i32(k4[0].prod, k4[1].prod, k4[2].prod, k4[3].prod));
                    for (int j = 0; j < 4; ++j) {
                        acc = std::fma((float)s1[j], k4[j].d * y[b + j].d, acc);
                        accm = std::fma((float)s2[j], k4[j].dmin * y[b + j].d, accm);
                    }
                }
                for (; b < nb; ++b) {
                    ggml_x86::k45_block<false, false>(w + (size_t)b * LMT_Q4K_BLOCK_BYTES, y[b], k);
                    acc = std::fma((float)ggml_x86::hsum_i32_8(k.sumi), k.d * y[b].d, acc);
                    accm = std::fma((float)ggml_x86::hsum_i32_4(k.prod), k.dmin * y[b].d, accm);
                }
            }
            c.logits[t * c.rows + r] = acc - accm;
        }
    }
}

}  // namespace lmt::cpu
