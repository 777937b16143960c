// AVX2 + FMA Q4_0 matvec (Precision::F32): the canonical 16-lane tree of q4_0_kernels.hpp held as
// two 8-lane registers per (row, activation row).
//
// T = 1: 4 rows decoded on the fly, 8 independent FMA chains (one row alone is bound by the FMA
// latency). T > 1: 4 rows x 512 columns decoded once into f32 scratch, then applied to every
// activation row (see rows_t), so each decoded weight serves all T rows from L1.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/types/q4_0/q4_0_kernels.hpp"

namespace lmt::cpu::q4_0 {
namespace {

constexpr int kQK = LMT_Q4_0_BLOCK_ELEMS;
constexpr size_t kBB = LMT_Q4_0_BLOCK_BYTES;

static inline __m256 load_d(const uint8_t *blk) {
    uint16_t h;
    std::memcpy(&h, blk, 2);
    // F16C is exact for every half (subnormals included); a NaN comes out quiet, as the scalar
    // path's multiply makes it, so the logits' bits agree.
    return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// The block's 32 weights d * (q - 8) as lanes 0-7, 8-15 (weights 0-15) and 0-7, 8-15 (16-31).
static inline void decode_block(const uint8_t *blk, __m256 w[4]) {
    const __m256 d = load_d(blk);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 2));
    const __m128i m = _mm_set1_epi8(0x0F), e = _mm_set1_epi8(8);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, m), e);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), e);
    w[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d);
    w[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d);
    w[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d);
    w[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d);
}

static inline float hsum16_avx(__m256 lo, __m256 hi) {
    const __m256 b = _mm256_add_ps(lo, hi);
    const __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    const __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_shuffle_ps(d, d, 1)));
}

template <int R>
static void rows_t1(const Args &a, int64_t r) {
    const int64_t nb = a.cols / kQK;
    const uint8_t *row[R];
    __m256 acc0[R], acc1[R];
    for (int k = 0; k < R; ++k) {
        row[k] = a.w + (size_t)(r + k) * a.row_stride;
        acc0[k] = acc1[k] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        const float *xb = a.x + b * kQK;
        const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8);
        const __m256 x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
        for (int k = 0; k < R; ++k) {
            __m256 w[4];
            decode_block(row[k] + (size_t)b * kBB, w);
            acc0[k] = _mm256_fmadd_ps(w[0], x0, acc0[k]);
            acc1[k] = _mm256_fmadd_ps(w[1], x1, acc1[k]);
            acc0[k] = _mm256_fmadd_ps(w[2], x2, acc0[k]);
            acc1[k] = _mm256_fmadd_ps(w[3], x3, acc1[k]);
        }
    }
    for (int k = 0; k < R; ++k) a.logits[r + k] = hsum16_avx(acc0[k], acc1[k]);
}

// T > 1, cache-blocked: RG rows x C columns of weights are decoded into f32 scratch (8 KB) and
// applied to every activation row's C columns (T * 2 KB) while both sit in L1; the per-lane
// accumulators live in memory between column chunks (a store and reload is exact, so each lane's
// FMA chain and order are the canonical ones).
constexpr int kRG = 4;
constexpr int64_t kC = 512;

// Lane half h (0: lanes 0-7, 1: lanes 8-15) of KR decoded rows against TG activation rows over
// the chunk [c0, c0 + cl).
template <int KR, int TG>
static inline void chunk_half(const float *s, const float *const *x, int64_t c0, int64_t cl, int h, float *accm,
                              int64_t T) {
    __m256 acc[KR][TG];
    for (int k = 0; k < KR; ++k)
        for (int t = 0; t < TG; ++t) acc[k][t] = _mm256_loadu_ps(accm + (k * T + t) * 16 + 8 * h);
    for (int64_t i = 8 * h; i < cl; i += kQK) {
        // x held in registers across the KR rows: loads stay below the FMA rate.
        __m256 x0[TG], x1[TG];
        for (int t = 0; t < TG; ++t) {
            x0[t] = _mm256_loadu_ps(x[t] + c0 + i);
            x1[t] = _mm256_loadu_ps(x[t] + c0 + i + 16);
        }
        for (int k = 0; k < KR; ++k) {
            const __m256 w0 = _mm256_loadu_ps(s + k * kC + i), w1 = _mm256_loadu_ps(s + k * kC + i + 16);
            for (int t = 0; t < TG; ++t) {
                acc[k][t] = _mm256_fmadd_ps(w0, x0[t], acc[k][t]);
                acc[k][t] = _mm256_fmadd_ps(w1, x1[t], acc[k][t]);
            }
        }
    }
    for (int k = 0; k < KR; ++k)
        for (int t = 0; t < TG; ++t) _mm256_storeu_ps(accm + (k * T + t) * 16 + 8 * h, acc[k][t]);
}

template <int KR, int TG>
static inline void chunk_rows(const float *s, const Args &a, int64_t t0, int64_t c0, int64_t cl, float *accm) {
    const float *x[TG];
    for (int t = 0; t < TG; ++t) x[t] = a.x + (t0 + t) * a.cols;
    chunk_half<KR, TG>(s, x, c0, cl, 0, accm + t0 * 16, a.T);
    chunk_half<KR, TG>(s, x, c0, cl, 1, accm + t0 * 16, a.T);
}

// KR * TG accumulators + 2 * TG x registers + 2 weights fit the 16 ymm registers.
template <int KR, int TG>
static void chunk_all_t(const float *s, const Args &a, int64_t c0, int64_t cl, float *accm) {
    int64_t t = 0;
    for (; t + TG <= a.T; t += TG) chunk_rows<KR, TG>(s, a, t, c0, cl, accm);
    if constexpr (TG > 1) {
        for (; t < a.T; ++t) chunk_rows<KR, 1>(s, a, t, c0, cl, accm);
    }
}

struct Scratch {
    std::vector<float> w, acc;
};

static void rows_t(const Args &a, Scratch &sc, int64_t r, int nr) {
    if (sc.w.size() < (size_t)(kRG * kC)) sc.w.resize((size_t)(kRG * kC));
    if (sc.acc.size() < (size_t)(kRG * a.T * 16)) sc.acc.resize((size_t)(kRG * a.T * 16));
    std::fill(sc.acc.begin(), sc.acc.begin() + kRG * a.T * 16, 0.0f);
    for (int64_t c0 = 0; c0 < a.cols; c0 += kC) {
        const int64_t cl = std::min<int64_t>(kC, a.cols - c0);
        for (int k = 0; k < nr; ++k) {
            const uint8_t *row = a.w + (size_t)(r + k) * a.row_stride + (size_t)(c0 / kQK) * kBB;
            float *sk = sc.w.data() + k * kC;
            for (int64_t b = 0; b < cl / kQK; ++b) {
                __m256 w[4];
                decode_block(row + (size_t)b * kBB, w);
                _mm256_storeu_ps(sk + b * kQK, w[0]);
                _mm256_storeu_ps(sk + b * kQK + 8, w[1]);
                _mm256_storeu_ps(sk + b * kQK + 16, w[2]);
                _mm256_storeu_ps(sk + b * kQK + 24, w[3]);
            }
        }
        if (nr == kRG) {
            chunk_all_t<kRG, 2>(sc.w.data(), a, c0, cl, sc.acc.data());
        } else {
            for (int k = 0; k < nr; ++k)
                chunk_all_t<1, 4>(sc.w.data() + k * kC, a, c0, cl, sc.acc.data() + k * a.T * 16);
        }
    }
    for (int k = 0; k < nr; ++k)
        for (int64_t t = 0; t < a.T; ++t)
            a.logits[t * a.rows + r + k] = hsum16(sc.acc.data() + (k * a.T + t) * 16);
}

}  // namespace

void matvec_avx2(const Args &a, int64_t r0, int64_t r1) {
    if (a.T == 1) {
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) rows_t1<4>(a, r);
        for (; r < r1; ++r) rows_t1<1>(a, r);
        return;
    }
    thread_local Scratch sc;
    for (int64_t r = r0; r < r1; r += kRG) rows_t(a, sc, r, (int)std::min<int64_t>(kRG, r1 - r));
}

}  // namespace lmt::cpu::q4_0
