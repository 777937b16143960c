// AVX2 + FMA Q5_K matvec: the canonical 16-lane tree (see matvec_q5_k_scalar.cpp) held as two
// 8-lane registers. A row is decoded once (q bytes + per-sub-block d1/m1) into L1-resident
// scratch, then applied to every activation row: T = 1 in one pass with both lane halves;
// T >= 2 one lane half at a time so up to 8 activation rows' accumulators fit the 16 ymm
// registers (the weight decode is shared by all of them).
#include <vector>

#include "cpu/q5k_x86.hpp"

namespace lmt::cpu {
namespace {

static inline void dot_t1(const uint8_t *q, const float *d1, const float *m1, const float *x, int64_t cols,
                          float *out) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t j = 0; j < cols / 32; ++j) {
        const __m256 D = _mm256_broadcast_ss(d1 + j), M = _mm256_broadcast_ss(m1 + j);
        const uint8_t *qj = q + 32 * j;
        const float *xj = x + 32 * j;
        for (int h = 0; h < 2; ++h) {
            const __m256 w0 = _mm256_fmsub_ps(q8_to_ps(qj + 16 * h), D, M);
            const __m256 w1 = _mm256_fmsub_ps(q8_to_ps(qj + 16 * h + 8), D, M);
            acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xj + 16 * h), acc0);
            acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xj + 16 * h + 8), acc1);
        }
    }
    *out = hsum16_avx(acc0, acc1);
}

// One lane half (half = 0: lanes 0-7, 1: lanes 8-15) for TG activation rows.
template <int TG>
static inline void dot_half(const uint8_t *q, const float *d1, const float *m1, const float *const *x,
                            int64_t cols, int half, __m256 *acc_out) {
    __m256 acc[TG];
    for (int t = 0; t < TG; ++t) acc[t] = _mm256_setzero_ps();
    const int off = 8 * half;
    for (int64_t j = 0; j < cols / 32; ++j) {
        const __m256 D = _mm256_broadcast_ss(d1 + j), M = _mm256_broadcast_ss(m1 + j);
        for (int h = 0; h < 2; ++h) {
            const int64_t i = 32 * j + 16 * h + off;
            const __m256 w = _mm256_fmsub_ps(q8_to_ps(q + i), D, M);
            for (int t = 0; t < TG; ++t) acc[t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[t] + i), acc[t]);
        }
    }
    for (int t = 0; t < TG; ++t) acc_out[t] = acc[t];
}

template <int TG>
static inline void dot_group(const uint8_t *q, const float *d1, const float *m1, const float *const *x,
                             int64_t cols, float *out, int64_t out_stride) {
    __m256 lo[TG], hi[TG];
    dot_half<TG>(q, d1, m1, x, cols, 0, lo);
    dot_half<TG>(q, d1, m1, x, cols, 1, hi);
    for (int t = 0; t < TG; ++t) out[t * out_stride] = hsum16_avx(lo[t], hi[t]);
}

}  // namespace

void matvec_q5_k_avx2(const MatvecArgs &a, int64_t r0, int64_t r1) {
    thread_local RowScratch s;
    s.ensure(a.cols);
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q5_K *>(a.w + (size_t)r * a.row_stride);
        q5k_unpack_row(blocks, nb, s.q.data(), s.d1.data(), s.m1.data());
        if (a.T == 1) {
            dot_t1(s.q.data(), s.d1.data(), s.m1.data(), a.x, a.cols, a.logits + r);
            continue;
        }
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

}  // namespace lmt::cpu
