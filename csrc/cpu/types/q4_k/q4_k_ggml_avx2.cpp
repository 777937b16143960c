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

}  // namespace lmt::cpu
