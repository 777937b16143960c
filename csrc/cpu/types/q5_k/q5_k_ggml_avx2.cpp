// Q5_K, precision="ggml": ggml's AVX2 build (paths in cpu/ggml/kquant_ggml.hpp, float order in
// ggml_x86::k45_rows). Chunk c of a block (elements 32c .. 32c + 31) holds the codes
// (qs[32(c/2) + l] >> 4(c%2)) & 15 | ((qh[l] >> c) & 1) << 4, scaled by sc[c]; mins mn[c].
#include "cpu/ggml/kquant_ggml_x86.hpp"
#include "cpu/internal.hpp"
#include "lmtail/blocks/q5_k.h"

namespace lmt::cpu {

void q5_k_ggml_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1) {
    ggml_x86::k45_rows<false>(c, xq, r0, r1, LMT_Q5K_BLOCK_BYTES,
                              [](const uint8_t *p, __m256i q[8], uint8_t sc[8], uint8_t mn[8], float &d, float &dmin) {
                                  const lmt_block_q5_K *b = (const lmt_block_q5_K *)p;
                                  d = f16_to_f32(b->d);
                                  dmin = f16_to_f32(b->dmin);
                                  ggml_x86::kq_scales_mins(b->scales, sc, mn);
                                  const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
                                  const __m256i hb = _mm256_loadu_si256((const __m256i *)b->qh);
                                  for (int g = 0; g < 4; ++g) {
                                      const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * g));
                                      const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * g), one);
                                      const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * g + 1), one);
                                      q[2 * g] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(h0, 4));
                                      q[2 * g + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                                                     _mm256_slli_epi16(h1, 4));
                                  }
                              });
}

}  // namespace lmt::cpu
