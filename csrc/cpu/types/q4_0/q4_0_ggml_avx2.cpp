// Q4_0 precision="ggml": the bytes of ggml's AVX2 build, on the path llama.cpp takes.
// * rows % 8 != 0 (a plain CPU buffer): ggml_vec_dot_q4_0_q8_0 at T = 1 and tinyBLAS_Q0_AVX at
//   T >= 2, the same arithmetic as Q8_0's (q8_0_ggml_avx2.cpp) with the nibbles - 8 as weights.
// * rows % 8 == 0: llama.cpp loads the weight into CPU_REPACK (q4_0_8x8_q8_0, its default
//   use_extra_bufts), whose forward_mul_mat runs ggml_gemm_q4_0_8x8_q8_0 on the activation rows
//   [0, T - T % 4) and ggml_gemv_q4_0_8x8_q8_0 on the rest. Both keep ONE f32 accumulator per
//   output, fed once per block:
//     acc = fma((float)isum_b, fp32(d_w) * fp32(d_x), acc)     isum_b = the block's exact dot
//   The two differ only in the sign trick of their byte products: the gemm takes |x| * (w signed
//   by x), the gemv |w| * (x signed by w), so an activation byte of -128 (ggml's q8_0 of a NaN)
//   against a negative weight wraps in the gemv only. No repacked copy is needed for the values:
//   the interleaving only reorders loads, so these kernels read the plain Q4_0 rows.
// (ggml's x86 AVX-512 build gives the same bytes on every path: cpu/ggml/ggml_isa.hpp.)
#include "cpu/ggml/q0f_ggml.hpp"
#include "cpu/ggml/q0f_ggml_x86.hpp"
#include "lmtail/blocks/q4_0.h"

namespace lmt::cpu {
namespace {

using namespace ggml_x86;
constexpr int kB = LMT_Q4_0_BLOCK_BYTES;

inline float block_d(const uint8_t *blk) {
    uint16_t h;
    std::memcpy(&h, blk, 2);
    return _cvtsh_ss(h);
}

// Plain path: R rows against one activation row, 8-lane accumulators, hsum8.
template <int R>
inline void plain_dot(const uint8_t *const *wr, const lmt_block_q8_0 *xq, const float *xd, int64_t nb, float *out) {
    __m256 acc[R];
    for (int k = 0; k < R; ++k) acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)xq[b].qs);
        for (int k = 0; k < R; ++k) {
            const uint8_t *blk = wr[k] + b * kB;
            const __m256 d = _mm256_set1_ps(block_d(blk) * xd[b]);
            const __m256 q = _mm256_cvtepi32_ps(dot4_i32(q4_0_bytes(blk + 2), qx));
            acc[k] = _mm256_fmadd_ps(d, q, acc[k]);
        }
    }
    for (int k = 0; k < R; ++k) out[k] = hsum8(acc[k]);
}

// sum8x8 for int16 byte-pair sums m[k] (maddubs of nibbles 0..15 by bytes: |lane| <= 3840): two
// hadd_epi16 levels stay below 2^15 (8 products <= 15360), then one widening madd.
inline __m256i sum8x8_i16(const __m256i m[8]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i a = _mm256_madd_epi16(
        _mm256_hadd_epi16(_mm256_hadd_epi16(m[0], m[1]), _mm256_hadd_epi16(m[2], m[3])), ones);
    const __m256i b = _mm256_madd_epi16(
        _mm256_hadd_epi16(_mm256_hadd_epi16(m[4], m[5]), _mm256_hadd_epi16(m[6], m[7])), ones);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// Repack path: 8 rows (lanes) against one activation row. The exact block sum is computed as
// sum((w + 8) * x) - 8 * sum(x) (unsigned nibbles straight into maddubs: no sign ops), which is
// what both ggml kernels compute except where the gemv's sign trick wraps: a -128 activation
// byte against a negative weight. Blocks holding a -128 byte (xneg) therefore take the gemv's
// own sign trick when kGemm is false.
template <bool kGemm>
inline __m256 repack_dot8(const uint8_t *w0, size_t stride, const lmt_block_q8_0 *xq, const float *xd,
                          const int32_t *xsum, const uint8_t *xneg, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)xq[b].qs);
        __m256i v[8];
        alignas(16) uint16_t dh[8];
        const bool trick = !kGemm && xneg[b];
        for (int k = 0; k < 8; ++k) {
            const uint8_t *blk = w0 + k * stride + b * kB;
            std::memcpy(&dh[k], blk, 2);
            const __m128i t = _mm_loadu_si128((const __m128i *)(blk + 2));
            const __m256i u = _mm256_and_si256(_mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1), m4);
            v[k] = trick ? dot4_i32(_mm256_sub_epi8(u, _mm256_set1_epi8(8)), qx) : _mm256_maddubs_epi16(u, qx);
        }
        const __m256i isum = trick ? sum8x8(v) : _mm256_sub_epi32(sum8x8_i16(v), _mm256_set1_epi32(8 * xsum[b]));
        const __m256 dd = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128((const __m128i *)dh)), _mm256_set1_ps(xd[b]));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, acc);
    }
    return acc;
}

}  // namespace

void q4_0_matvec_ggml_avx2(const MatvecCall &c) {
    const int64_t nb = c.cols / 32;
    const Q8_0Acts xa(c.x, c.T, c.cols);
    if (c.rows % 8 == 0) {
        const int64_t t_gemm = c.T - c.T % 4;
        std::vector<int32_t> xsum(xa.q.size());
        std::vector<uint8_t> xneg(xa.q.size());
        for (size_t i = 0; i < xa.q.size(); ++i) {
            int32_t s = 0;
            bool neg = false;
            for (int j = 0; j < 32; ++j) {
                s += xa.q[i].qs[j];
                neg |= xa.q[i].qs[j] == -128;
            }
            xsum[i] = s;
            xneg[i] = neg;
        }
        for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; r += 8) {
                const uint8_t *w0 = c.w + (size_t)r * c.row_stride;
                for (int64_t t = 0; t < c.T; ++t) {
                    const lmt_block_q8_0 *xq = &xa.q[(size_t)(t * nb)];
                    const float *xd = &xa.d[(size_t)(t * nb)];
                    const int32_t *xs = &xsum[(size_t)(t * nb)];
                    const uint8_t *xn = &xneg[(size_t)(t * nb)];
                    const __m256 acc = t < t_gemm ? repack_dot8<true>(w0, c.row_stride, xq, xd, xs, xn, nb)
                                                  : repack_dot8<false>(w0, c.row_stride, xq, xd, xs, xn, nb);
                    _mm256_storeu_ps(c.logits + t * c.rows + r, acc);
                }
            }
        });
        return;
    }
    for_rows_by_4(c, xa, nb, [](const uint8_t *const *wr, const lmt_block_q8_0 *q, const float *d, int64_t n, float *out) {
        plain_dot<4>(wr, q, d, n, out);
    });
}

}  // namespace lmt::cpu
