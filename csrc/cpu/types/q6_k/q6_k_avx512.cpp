// AVX-512 Q6_K matvec (Precision::F32): the canonical 16-lane tree (q6k.hpp) in one zmm per
// activation row; a 16-lane vector is exactly one sub-block, so it shares one D. Up to 8
// activation rows share each decoded weight vector. The decode is q6k_x86.hpp's.
#include "cpu/types/q6_k/q6k_x86.hpp"

namespace lmt::cpu {
namespace {

static inline float hsum16_zmm(__m512 v) {
    return q6k_hsum16_avx(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}

template <int TG>
static inline void dot_group(const int8_t *q, const float *D, const float *const *x, int64_t cols, float *out,
                             int64_t stride) {
    __m512 acc[TG];
    for (int t = 0; t < TG; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols / 16; ++j) {
        const __m512 w = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(q + 16 * j)))),
            _mm512_set1_ps(D[j]));
        for (int t = 0; t < TG; ++t) acc[t] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x[t] + 16 * j), acc[t]);
    }
    for (int t = 0; t < TG; ++t) out[t * stride] = hsum16_zmm(acc[t]);
}

}  // namespace

void matvec_q6_k_avx512(const MatvecCall &c, int64_t r0, int64_t r1) {
    thread_local Q6kScratch s;
    s.ensure(c.cols);
    const int64_t nb = c.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        q6k_unpack_row(reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)r * c.row_stride), nb, s.q.data(),
                       s.D.data());
        for (int64_t t0 = 0; t0 < c.T; t0 += 8) {
            const float *xs[8];
            const int tg = (int)std::min<int64_t>(8, c.T - t0);
            for (int t = 0; t < tg; ++t) xs[t] = c.x + (t0 + t) * c.cols;
            float *out = c.logits + t0 * c.rows + r;
            switch (tg) {
                case 1: dot_group<1>(s.q.data(), s.D.data(), xs, c.cols, out, c.rows); break;
                case 2: dot_group<2>(s.q.data(), s.D.data(), xs, c.cols, out, c.rows); break;
                case 3: dot_group<3>(s.q.data(), s.D.data(), xs, c.cols, out, c.rows); break;
                case 4: dot_group<4>(s.q.data(), s.D.data(), xs, c.cols, out, c.rows); break;
                case 5: dot_group<5>(s.q.data(), s.D.data(), xs, c.cols, out, c.rows); break;
                case 6: dot_group<6>(s.q.data(), s.D.data(), xs, c.cols, out, c.rows); break;
                case 7: dot_group<7>(s.q.data(), s.D.data(), xs, c.cols, out, c.rows); break;
                default: dot_group<8>(s.q.data(), s.D.data(), xs, c.cols, out, c.rows); break;
            }
        }
    }
}

}  // namespace lmt::cpu
