// AVX2 + FMA Q5_K matvec: the canonical 16-lane tree (see matvec_q5_k_scalar.cpp) held as two
// 8-lane registers per (row, activation row).
//
// Rows are decoded R at a time (q bytes + per-sub-block d1/m1) into L1/L2-resident scratch and
// then applied to every activation row. Each lane's accumulation is one dependent FMA chain
// (416 FMAs for cols = 6656), so one row alone is latency-bound (4-cycle FMA latency, two
// chains); R rows x TG activation rows give R*TG*2 independent chains. Measured on the 2-vCPU
// EPYC (in-cache, 2048 x 6656, 1 thread): 1 row at a time 2.75 ms; 4 rows 1.x ms (see DESIGN.md).
#include <vector>

#include "cpu/types/q5_k/q5k_x86.hpp"

namespace lmt::cpu {
namespace {

// Both lane halves at once for R rows and one activation row: 2R chains.
template <int R>
static inline void dot_rows_t1(const RowScratch &s, int64_t cols, const float *x, float *out) {
    __m256 acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    const int64_t nsub = cols / 32;
    for (int64_t j = 0; j < nsub; ++j) {
        const float *xj = x + 32 * j;
        const __m256 x0 = _mm256_loadu_ps(xj), x1 = _mm256_loadu_ps(xj + 8);
        const __m256 x2 = _mm256_loadu_ps(xj + 16), x3 = _mm256_loadu_ps(xj + 24);
        for (int r = 0; r < R; ++r) {
            const uint8_t *q = s.q.data() + r * cols + 32 * j;
            const __m256 D = _mm256_broadcast_ss(s.d1.data() + r * nsub + j);
            const __m256 M = _mm256_broadcast_ss(s.m1.data() + r * nsub + j);
            acc0[r] = _mm256_fmadd_ps(_mm256_fmsub_ps(q8_to_ps(q), D, M), x0, acc0[r]);
            acc1[r] = _mm256_fmadd_ps(_mm256_fmsub_ps(q8_to_ps(q + 8), D, M), x1, acc1[r]);
            acc0[r] = _mm256_fmadd_ps(_mm256_fmsub_ps(q8_to_ps(q + 16), D, M), x2, acc0[r]);
            acc1[r] = _mm256_fmadd_ps(_mm256_fmsub_ps(q8_to_ps(q + 24), D, M), x3, acc1[r]);
        }
    }
    for (int r = 0; r < R; ++r) out[r] = hsum16_avx(acc0[r], acc1[r]);
}

// One lane half (0: lanes 0-7, 1: lanes 8-15) for R rows and TG activation rows: R*TG chains.
template <int R, int TG>
static inline void dot_rows_half(const RowScratch &s, int64_t cols, const float *const *x, int half,
                                 __m256 (*acc_out)[8]) {
    __m256 acc[R][TG];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TG; ++t) acc[r][t] = _mm256_setzero_ps();
    const int64_t nsub = cols / 32;
    const int off = 8 * half;
    for (int64_t j = 0; j < nsub; ++j) {
        for (int r = 0; r < R; ++r) {
            const uint8_t *q = s.q.data() + r * cols + 32 * j + off;
            const __m256 D = _mm256_broadcast_ss(s.d1.data() + r * nsub + j);
            const __m256 M = _mm256_broadcast_ss(s.m1.data() + r * nsub + j);
            const __m256 w0 = _mm256_fmsub_ps(q8_to_ps(q), D, M);
            const __m256 w1 = _mm256_fmsub_ps(q8_to_ps(q + 16), D, M);
            const int64_t i = 32 * j + off;
            for (int t = 0; t < TG; ++t) {
                acc[r][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc[r][t]);
                acc[r][t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 16), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TG; ++t) acc_out[r][t] = acc[r][t];
}

template <int R, int TG>
static inline void dot_rows_tg(const RowScratch &s, int64_t cols, const float *const *x, float *out,
                               int64_t out_stride) {
    __m256 lo[R][8], hi[R][8];
    dot_rows_half<R, TG>(s, cols, x, 0, lo);
    dot_rows_half<R, TG>(s, cols, x, 1, hi);
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TG; ++t) out[r + t * out_stride] = hsum16_avx(lo[r][t], hi[r][t]);
}

// Rows per group for a given activation-row count: keep R*TG*lanes-registers within budget.
template <int R>
static void run_group(const MatvecArgs &a, const RowScratch &s, int64_t r) {
    if (a.T == 1) {
        dot_rows_t1<R>(s, a.cols, a.x, a.logits + r);
        return;
    }
    for (int64_t t0 = 0; t0 < a.T; t0 += 8) {
        const float *xs[8];
        const int tg = (int)std::min<int64_t>(8, a.T - t0);
        for (int t = 0; t < tg; ++t) xs[t] = a.x + (t0 + t) * a.cols;
        float *out = a.logits + t0 * a.rows + r;
        // R*TG <= 8 chains per half pass (R = 4 -> TG <= 2, R = 2 -> TG <= 4, R = 1 -> TG <= 8).
        switch (tg) {
            case 1: dot_rows_tg<R, 1>(s, a.cols, xs, out, a.rows); break;
            case 2: dot_rows_tg<R, 2>(s, a.cols, xs, out, a.rows); break;
            case 3: dot_rows_tg<R, 3>(s, a.cols, xs, out, a.rows); break;
            case 4: dot_rows_tg<R, 4>(s, a.cols, xs, out, a.rows); break;
            case 5: dot_rows_tg<R, 5>(s, a.cols, xs, out, a.rows); break;
            case 6: dot_rows_tg<R, 6>(s, a.cols, xs, out, a.rows); break;
            case 7: dot_rows_tg<R, 7>(s, a.cols, xs, out, a.rows); break;
            default: dot_rows_tg<R, 8>(s, a.cols, xs, out, a.rows); break;
        }
    }
}

}  // namespace

void matvec_q5_k_avx2(const MatvecArgs &a, int64_t r0, int64_t r1) {
    // Rows decoded together: enough independent FMA chains to cover the FMA latency.
    const int group = a.T == 1 ? 4 : a.T == 2 ? 4 : a.T <= 4 ? 2 : 1;
    thread_local RowScratch s;
    s.ensure(a.cols * group);
    const int64_t nb = a.cols / LMT_QK_K, nsub = a.cols / 32;
    for (int64_t r = r0; r < r1; r += group) {
        const int R = (int)std::min<int64_t>(group, r1 - r);
        for (int k = 0; k < R; ++k) {
            const uint8_t *row = a.w + (size_t)(r + k) * a.row_stride;
            // Prefetch the row `group` rows ahead (the next group's) while this one is decoded.
            if (r + k + group < r1) {
                const char *ahead = reinterpret_cast<const char *>(row + (size_t)group * a.row_stride);
                const size_t row_bytes = (size_t)nb * LMT_Q5K_BLOCK_BYTES;
                for (size_t off = 0; off < row_bytes; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
            }
            q5k_unpack_row(reinterpret_cast<const lmt_block_q5_K *>(row), nb, s.q.data() + k * a.cols,
                           s.d1.data() + k * nsub, s.m1.data() + k * nsub);
        }
        switch (R) {
            case 4: run_group<4>(a, s, r); break;
            case 3: run_group<3>(a, s, r); break;
            case 2: run_group<2>(a, s, r); break;
            default: run_group<1>(a, s, r); break;
        }
    }
}

// Precision::I16 / I24: matvec_q5_k_int_avx2.cpp (built at -O2, see CMakeLists.txt).

}  // namespace lmt::cpu
