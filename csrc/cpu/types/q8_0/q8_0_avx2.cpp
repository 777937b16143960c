// AVX2 + FMA + F16C Q8_0 matvec: the canonical 16-lane tree (q8_0.hpp) held as two 8-lane
// registers per (weight row, activation row). Weight i of a 32-block goes to register
// (i >> 3) & 1, so each lane accumulates its weights in increasing i, as the scalar reference.
//
// Every lane's sum is one dependent FMA chain, so a single (row, activation) pair is
// latency-bound; the kernels keep about 8 independent chains in flight:
//   T = 1: 4 weight rows decoded straight from the bytes against one x (8 chains);
//   T > 1: R rows decoded once into f32 scratch (w = d*q, exact), then each half of the lanes
//          against up to 8 activation rows (R * TG <= 8 chains per pass), so each decoded
//          weight is shared by every activation row of the group.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "cpu/types/q8_0/q8_0.hpp"

namespace lmt::cpu {
namespace {

constexpr int kQ = LMT_Q8_0_BLOCK_ELEMS;
constexpr int kB = LMT_Q8_0_BLOCK_BYTES;

// The block's d, converted exactly (F16C), broadcast.
static inline __m256 block_d(const uint8_t *blk) {
    uint16_t h;
    std::memcpy(&h, blk, 2);
    return _mm256_set1_ps(_cvtsh_ss(h));
}

// 8 signed bytes -> 8 weights d * q (exact).
static inline __m256 w8(const uint8_t *q, __m256 D) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(q));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), D);
}

// Canonical horizontal sum of 16 lanes held as (lanes 0-7, lanes 8-15).
static inline float hsum16_avx(__m256 lo, __m256 hi) {
    const __m256 b = _mm256_add_ps(lo, hi);
    const __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    const __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps(d, d, 1)));
}

template <int R>
static inline void rows_t1(const MatvecArgs &a, int64_t r, float *out) {
    const uint8_t *row[R];
    __m256 acc0[R], acc1[R];
    for (int k = 0; k < R; ++k) {
        row[k] = a.w + (size_t)(r + k) * a.row_stride;
        acc0[k] = acc1[k] = _mm256_setzero_ps();
    }
    const int64_t nb = a.cols / kQ;
    for (int64_t b = 0; b < nb; ++b) {
        const float *xb = a.x + b * kQ;
        const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8);
        const __m256 x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
        for (int k = 0; k < R; ++k) {
            const uint8_t *p = row[k] + (size_t)b * kB;
            const __m256 D = block_d(p);
            acc0[k] = _mm256_fmadd_ps(w8(p + 2, D), x0, acc0[k]);
            acc1[k] = _mm256_fmadd_ps(w8(p + 10, D), x1, acc1[k]);
            acc0[k] = _mm256_fmadd_ps(w8(p + 18, D), x2, acc0[k]);
            acc1[k] = _mm256_fmadd_ps(w8(p + 26, D), x3, acc1[k]);
        }
    }
    for (int k = 0; k < R; ++k) out[k] = hsum16_avx(acc0[k], acc1[k]);
}

// One lane half (0: lanes 0-7, 1: lanes 8-15) of R decoded rows against TG activation rows.
template <int R, int TG>
static inline void half_pass(const float *s, int64_t cols, const float *const *x, int half, __m256 (*res)[8]) {
    __m256 acc[R][TG];
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) acc[k][t] = _mm256_setzero_ps();
    for (int64_t i = 8 * half; i < cols; i += 16) {
        for (int k = 0; k < R; ++k) {
            const __m256 w = _mm256_loadu_ps(s + k * cols + i);
            for (int t = 0; t < TG; ++t) acc[k][t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[t] + i), acc[k][t]);
        }
    }
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) res[k][t] = acc[k][t];
}

template <int R, int TG>
static inline void rows_tg(const float *s, int64_t cols, const float *const *x, float *out, int64_t out_stride) {
    __m256 lo[R][8], hi[R][8];
    half_pass<R, TG>(s, cols, x, 0, lo);
    half_pass<R, TG>(s, cols, x, 1, hi);
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) out[k + t * out_stride] = hsum16_avx(lo[k][t], hi[k][t]);
}

// R decoded rows (scratch s) against every activation row, in groups of near-equal size <= 8.
template <int R>
static void rows_all_t(const MatvecArgs &a, const float *s, int64_t r) {
    const int64_t groups = (a.T + 7) / 8, per = (a.T + groups - 1) / groups;
    for (int64_t t0 = 0; t0 < a.T; t0 += per) {
        const int tg = (int)std::min<int64_t>(per, a.T - t0);
        const float *xs[8];
        for (int t = 0; t < tg; ++t) xs[t] = a.x + (t0 + t) * a.cols;
        float *out = a.logits + t0 * a.rows + r;
        // R * TG <= 8 accumulators per pass (the callers pick R from T).
        switch (tg) {
            case 1: rows_tg<R, 1>(s, a.cols, xs, out, a.rows); break;
            case 2: rows_tg<R, std::min(2, 8 / R)>(s, a.cols, xs, out, a.rows); break;
            case 3: rows_tg<R, std::min(3, 8 / R)>(s, a.cols, xs, out, a.rows); break;
            case 4: rows_tg<R, std::min(4, 8 / R)>(s, a.cols, xs, out, a.rows); break;
            case 5: rows_tg<R, std::min(5, 8 / R)>(s, a.cols, xs, out, a.rows); break;
            case 6: rows_tg<R, std::min(6, 8 / R)>(s, a.cols, xs, out, a.rows); break;
            case 7: rows_tg<R, std::min(7, 8 / R)>(s, a.cols, xs, out, a.rows); break;
            default: rows_tg<R, std::min(8, 8 / R)>(s, a.cols, xs, out, a.rows); break;
        }
    }
}

static inline void decode_row(const uint8_t *row, int64_t cols, float *w) {
    for (int64_t b = 0; b < cols / kQ; ++b) {
        const uint8_t *p = row + (size_t)b * kB;
        const __m256 D = block_d(p);
        for (int j = 0; j < 4; ++j) _mm256_storeu_ps(w + b * kQ + 8 * j, w8(p + 2 + 8 * j, D));
    }
}

}  // namespace

void matvec_q8_0_avx2(const MatvecArgs &a, int64_t r0, int64_t r1) {
    if (a.T == 1) {
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) rows_t1<4>(a, r, a.logits + r);
        for (; r < r1; ++r) rows_t1<1>(a, r, a.logits + r);
        return;
    }
    // The groups' largest size decides R: R * size <= 8.
    const int64_t groups = (a.T + 7) / 8, per = (a.T + groups - 1) / groups;
    const int group = per <= 2 ? 4 : per <= 4 ? 2 : 1;
    thread_local std::vector<float> s;
    if ((int64_t)s.size() < group * a.cols) s.resize((size_t)(group * a.cols));
    for (int64_t r = r0; r < r1; r += group) {
        const int R = (int)std::min<int64_t>(group, r1 - r);
        for (int k = 0; k < R; ++k) decode_row(a.w + (size_t)(r + k) * a.row_stride, a.cols, s.data() + k * a.cols);
        switch (R) {
            case 4: rows_all_t<4>(a, s.data(), r); break;
            case 3: rows_all_t<2>(a, s.data(), r), rows_all_t<1>(a, s.data() + 2 * a.cols, r + 2); break;
            case 2: rows_all_t<2>(a, s.data(), r); break;
            default: rows_all_t<1>(a, s.data(), r); break;
        }
    }
}

}  // namespace lmt::cpu
