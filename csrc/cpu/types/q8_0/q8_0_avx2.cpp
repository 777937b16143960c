// AVX2 + FMA + F16C Q8_0 matvec: the canonical 16-lane tree (q8_0.hpp) held as two 8-lane
// registers per (weight row, activation row). Weight i of a 32-block goes to register
// (i >> 3) & 1, so each lane accumulates its weights in increasing i, as the scalar reference.
//
// Every lane's sum is one dependent FMA chain, so a single (row, activation) pair is
// latency-bound; the kernels keep about 8 independent chains in flight:
//   T = 1: 4 weight rows decoded straight from the bytes against one x (8 chains);
//   T > 1: column chunks outer; per chunk, R rows decoded into f32 scratch (w = d*q, exact),
//          then each half of the lanes against up to 8 activation rows (R * TG <= 8 chains),
//          so each decoded weight is shared by every activation row of the group.
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

// Columns per chunk at T > 1: TG activation rows' chunk of x (8 * 512 * 4 = 16 KB) stays in L1
// while every weight row of the task passes over it. Streaming the whole x per weight row
// instead (213 KB at T = 8, cols = 6656) made the kernel L2-bandwidth-bound: 2.9x ggml's time.
constexpr int64_t kChunk = 512;

static inline void decode_blocks(const uint8_t *row, int64_t b0, int64_t b1, float *w) {
    for (int64_t b = b0; b < b1; ++b) {
        const uint8_t *p = row + (size_t)b * kB;
        const __m256 D = block_d(p);
        for (int j = 0; j < 4; ++j) _mm256_storeu_ps(w + (b - b0) * kQ + 8 * j, w8(p + 2 + 8 * j, D));
    }
}

// Columns [c0, c1) of R decoded rows (w: R x kChunk) against TG activation rows; acc holds each
// (row, activation) pair's 16 lanes between chunks, so every lane still sums in increasing i.
template <int R, int TG>
static inline void chunk_pass(const float *w, const float *const *x, int64_t c0, int64_t c1, float *acc) {
    for (int h = 0; h < 2; ++h) {
        __m256 v[R][TG];
        for (int k = 0; k < R; ++k)
            for (int t = 0; t < TG; ++t) v[k][t] = _mm256_loadu_ps(acc + (k * TG + t) * 16 + 8 * h);
        for (int64_t i = c0 + 8 * h; i < c1; i += 16) {
            for (int k = 0; k < R; ++k) {
                const __m256 wv = _mm256_loadu_ps(w + k * kChunk + (i - c0));
                for (int t = 0; t < TG; ++t) v[k][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[t] + i), v[k][t]);
            }
        }
        for (int k = 0; k < R; ++k)
            for (int t = 0; t < TG; ++t) _mm256_storeu_ps(acc + (k * TG + t) * 16 + 8 * h, v[k][t]);
    }
}

// Rows [r0, r1) against activation rows [t0, t0 + TG): chunk-outer, rows R at a time (R * TG <= 8
// independent chains per pass; a tail of fewer than R rows goes one row at a time).
template <int R, int TG>
static void rows_chunked(const MatvecArgs &a, int64_t r0, int64_t r1, int64_t t0, float *accs, float *wbuf) {
    const float *x[TG];
    for (int t = 0; t < TG; ++t) x[t] = a.x + (t0 + t) * a.cols;
    const int64_t n = r1 - r0, nfull = n / R * R;
    std::fill(accs, accs + n * TG * 16, 0.0f);
    for (int64_t c0 = 0; c0 < a.cols; c0 += kChunk) {
        const int64_t c1 = std::min(a.cols, c0 + kChunk);
        for (int64_t k = 0; k < n;) {
            const int rr = k < nfull ? R : 1;
            for (int j = 0; j < rr; ++j)
                decode_blocks(a.w + (size_t)(r0 + k + j) * a.row_stride, c0 / kQ, c1 / kQ, wbuf + j * kChunk);
            if (rr == R) chunk_pass<R, TG>(wbuf, x, c0, c1, accs + k * TG * 16);
            else chunk_pass<1, TG>(wbuf, x, c0, c1, accs + k * TG * 16);
            k += rr;
        }
    }
    for (int64_t k = 0; k < n; ++k)
        for (int t = 0; t < TG; ++t) {
            const float *p = accs + (k * TG + t) * 16;
            a.logits[(t0 + t) * a.rows + r0 + k] = hsum16_avx(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8));
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
    thread_local std::vector<float> accs, wbuf;
    if ((int64_t)accs.size() < (r1 - r0) * 8 * 16) accs.resize((size_t)((r1 - r0) * 8 * 16));
    if ((int64_t)wbuf.size() < 4 * kChunk) wbuf.resize((size_t)(4 * kChunk));
    // Activation rows in groups of near-equal size <= 8 (T = 9: 5 + 4, not 8 + 1).
    const int64_t groups = (a.T + 7) / 8, per = (a.T + groups - 1) / groups;
    for (int64_t t0 = 0; t0 < a.T; t0 += per) {
        float *ac = accs.data(), *wb = wbuf.data();
        switch ((int)std::min<int64_t>(per, a.T - t0)) {
            case 1: rows_chunked<4, 1>(a, r0, r1, t0, ac, wb); break;
            case 2: rows_chunked<4, 2>(a, r0, r1, t0, ac, wb); break;
            case 3: rows_chunked<2, 3>(a, r0, r1, t0, ac, wb); break;
            case 4: rows_chunked<2, 4>(a, r0, r1, t0, ac, wb); break;
            case 5: rows_chunked<1, 5>(a, r0, r1, t0, ac, wb); break;
            case 6: rows_chunked<1, 6>(a, r0, r1, t0, ac, wb); break;
            case 7: rows_chunked<1, 7>(a, r0, r1, t0, ac, wb); break;
            default: rows_chunked<1, 8>(a, r0, r1, t0, ac, wb); break;
        }
    }
}

}  // namespace lmt::cpu
