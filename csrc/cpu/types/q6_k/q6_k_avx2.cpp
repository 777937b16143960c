// AVX2 + FMA Q6_K matvec (Precision::F32): the canonical 16-lane tree (q6k.hpp) as two 8-lane
// registers per (row, activation row). As in Q5_K, R rows are decoded at a time (q - 32 bytes
// and D per sub-block) into L1-resident scratch and then applied to every activation row, so
// R x TG x 2 independent FMA chains cover the FMA latency.
#include "cpu/types/q6_k/q6k_x86.hpp"

namespace lmt::cpu {
namespace {

// Both lane halves for R rows and one activation row: 2R chains.
template <int R>
static inline void dot_t1(const Q6kScratch &s, int64_t cols, const float *x, float *out) {
    __m256 acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    const int64_t nsub = cols / 16;
    for (int64_t j = 0; j < nsub; ++j) {
        const __m256 x0 = _mm256_loadu_ps(x + 16 * j), x1 = _mm256_loadu_ps(x + 16 * j + 8);
        for (int r = 0; r < R; ++r) {
            const int8_t *q = s.q.data() + r * cols + 16 * j;
            const __m256 D = _mm256_broadcast_ss(s.D.data() + r * nsub + j);
            acc0[r] = _mm256_fmadd_ps(_mm256_mul_ps(q6k_s8_to_ps(q), D), x0, acc0[r]);
            acc1[r] = _mm256_fmadd_ps(_mm256_mul_ps(q6k_s8_to_ps(q + 8), D), x1, acc1[r]);
        }
    }
    for (int r = 0; r < R; ++r) out[r] = q6k_hsum16_avx(acc0[r], acc1[r]);
}

// One lane half (0: lanes 0-7, 1: lanes 8-15) for R rows and TG activation rows: R*TG chains.
template <int R, int TG>
static inline void dot_half(const Q6kScratch &s, int64_t cols, const float *const *x, int half, __m256 (*out)[8]) {
    __m256 acc[R][TG];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TG; ++t) acc[r][t] = _mm256_setzero_ps();
    const int64_t nsub = cols / 16;
    const int off = 8 * half;
    for (int64_t j = 0; j < nsub; ++j) {
        const int64_t i = 16 * j + off;
        for (int r = 0; r < R; ++r) {
            const __m256 D = _mm256_broadcast_ss(s.D.data() + r * nsub + j);
            const __m256 w = _mm256_mul_ps(q6k_s8_to_ps(s.q.data() + r * cols + i), D);
            for (int t = 0; t < TG; ++t) acc[r][t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[t] + i), acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TG; ++t) out[r][t] = acc[r][t];
}

template <int R, int TG>
static inline void dot_tg(const Q6kScratch &s, int64_t cols, const float *const *x, float *out, int64_t stride) {
    __m256 lo[R][8], hi[R][8];
    dot_half<R, TG>(s, cols, x, 0, lo);
    dot_half<R, TG>(s, cols, x, 1, hi);
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TG; ++t) out[r + t * stride] = q6k_hsum16_avx(lo[r][t], hi[r][t]);
}

template <int R>
static void run_group(const MatvecCall &c, const Q6kScratch &s, int64_t r) {
    if (c.T == 1) {
        dot_t1<R>(s, c.cols, c.x, c.logits + r);
        return;
    }
    for (int64_t t0 = 0; t0 < c.T; t0 += 8) {
        const float *xs[8];
        const int tg = (int)std::min<int64_t>(8, c.T - t0);
        for (int t = 0; t < tg; ++t) xs[t] = c.x + (t0 + t) * c.cols;
        float *out = c.logits + t0 * c.rows + r;
        switch (tg) {
            case 1: dot_tg<R, 1>(s, c.cols, xs, out, c.rows); break;
            case 2: dot_tg<R, 2>(s, c.cols, xs, out, c.rows); break;
            case 3: dot_tg<R, 3>(s, c.cols, xs, out, c.rows); break;
            case 4: dot_tg<R, 4>(s, c.cols, xs, out, c.rows); break;
            case 5: dot_tg<R, 5>(s, c.cols, xs, out, c.rows); break;
            case 6: dot_tg<R, 6>(s, c.cols, xs, out, c.rows); break;
            case 7: dot_tg<R, 7>(s, c.cols, xs, out, c.rows); break;
            default: dot_tg<R, 8>(s, c.cols, xs, out, c.rows); break;
        }
    }
}

}  // namespace

void matvec_q6_k_avx2(const MatvecCall &c, int64_t r0, int64_t r1) {
    // R*TG <= 8 chains per half pass (T = 2: 4 rows; T <= 4: 2 rows; else 1 row).
    const int group = c.T <= 2 ? 4 : c.T <= 4 ? 2 : 1;
    thread_local Q6kScratch s;
    s.ensure(c.cols * group);
    const int64_t nb = c.cols / LMT_QK_K;
    const size_t rb = (size_t)nb * LMT_Q6K_BLOCK_BYTES;
    for (int64_t r = r0; r < r1; r += group) {
        const int R = (int)std::min<int64_t>(group, r1 - r);
        for (int k = 0; k < R; ++k) {
            const uint8_t *row = c.w + (size_t)(r + k) * c.row_stride;
            if (r + k + group < r1) {  // the next group's row, while this one is decoded
                const char *ahead = reinterpret_cast<const char *>(row + (size_t)group * c.row_stride);
                for (size_t off = 0; off < rb; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
            }
            q6k_unpack_row(reinterpret_cast<const lmt_block_q6_K *>(row), nb, s.q.data() + k * c.cols,
                           s.D.data() + k * (c.cols / 16));
        }
        switch (R) {
            case 4: run_group<4>(c, s, r); break;
            case 3: run_group<3>(c, s, r); break;
            case 2: run_group<2>(c, s, r); break;
            default: run_group<1>(c, s, r); break;
        }
    }
}

}  // namespace lmt::cpu
