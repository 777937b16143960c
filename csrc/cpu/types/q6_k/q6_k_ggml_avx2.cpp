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
namespace {

inline __m256i q6k_block_lanes(const lmt_block_q6_K *b, const GgmlQ8K *y) {
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)b->scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const __m256i sub = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), sc16), 5);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l2 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(l1, m15), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(l2, m15),
                               _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(12)), 2));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15),
                               _mm256_and_si256(hb, _mm256_set1_epi8(48)));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15),
                               _mm256_srli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8((char)0xC0)), 2));
        for (int k = 0; k < 4; ++k) {
            const int j = 8 * h + 2 * k;  // sub-blocks j (bytes 0..15) and j + 1 (bytes 16..31)
            const __m256i s = _mm256_set_m128i(_mm_set1_epi16(b->scales[j + 1]), _mm_set1_epi16(b->scales[j]));
            const __m256i yv = _mm256_loadu_si256((const __m256i *)(y->qs + 128 * h + 32 * k));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s, _mm256_maddubs_epi16(q[k], yv)));
        }
    }
    return _mm256_sub_epi32(sumi, sub);
}

}  // namespace

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
