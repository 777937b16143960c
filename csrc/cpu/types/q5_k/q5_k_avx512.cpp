// AVX-512 Q5_K matvec: the canonical 16-lane tree (matvec_q5_k_scalar.cpp) in one zmm register
// per activation row; up to 8 activation rows share each decoded weight vector in one pass.
// The block decode is the AVX2 one (q5k_x86.hpp), compiled here with AVX-512 enabled.
#include <vector>

#include "cpu/types/q5_k/q5k_x86.hpp"

namespace lmt::cpu {
namespace {

static inline __m512 q16_to_ps(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))));
}

static inline float hsum16_zmm(__m512 v) {
    return hsum16_avx(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}

template <int TG>
static inline void dot_group(const uint8_t *q, const float *d1, const float *m1, const float *const *x,
                             int64_t cols, float *out, int64_t out_stride) {
    __m512 acc[TG];
    for (int t = 0; t < TG; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols / 32; ++j) {
        const __m512 D = _mm512_set1_ps(d1[j]), M = _mm512_set1_ps(m1[j]);
        for (int h = 0; h < 2; ++h) {
            const int64_t i = 32 * j + 16 * h;
            const __m512 w = _mm512_fmsub_ps(q16_to_ps(q + i), D, M);
            for (int t = 0; t < TG; ++t) acc[t] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x[t] + i), acc[t]);
        }
    }
    for (int t = 0; t < TG; ++t) out[t * out_stride] = hsum16_zmm(acc[t]);
}

}  // namespace

void matvec_q5_k_avx512(const MatvecArgs &a, int64_t r0, int64_t r1) {
    thread_local RowScratch s;
    s.ensure(a.cols);
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q5_K *>(a.w + (size_t)r * a.row_stride);
        q5k_unpack_row(blocks, nb, s.q.data(), s.d1.data(), s.m1.data());
        for (int64_t t0 = 0; t0 < a.T; t0 += 8) {
            const float *xs[8];
            const int tg = (int)std::min<int64_t>(8, a.T - t0);
            for (int t = 0; t < tg; ++t) xs[t] = a.x + (t0 + t) * a.cols;
            float *out = a.logits + t0 * a.rows + r;
            switch (tg) {
                case 1: dot_group<1>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 2: dot_group<2>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 3: dot_group<3>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 4: dot_group<4>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 5: dot_group<5>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 6: dot_group<6>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 7: dot_group<7>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                default: dot_group<8>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
            }
        }
    }
}

// Precision::I16 / I24: matvec_q5_k_int_avx512.cpp (built at -O2, see CMakeLists.txt).

}  // namespace lmt::cpu
