// Q4_0 matvec, Precision::I24, on the AVX2 and AVX-VNNI tiers (canonical expression in
// q4_0_kernels.hpp), included by q4_0_int_avx2.cpp and q4_0_int_avxvnni.cpp (each its own copy
// with its own flags). A weight block is unpacked once (signed nibbles for vpmaddubsw against r,
// the same bytes << 8 as int16 for vpmaddwd against a); S = madd(a0, w0) + madd(a1, w1) +
// madd(maddubs(r, q8), 1), exact; with AVX-VNNI one vpdpbusd and two vpdpwssd (3 ops, was 6).
//   T = 1: R weight rows per step share the block's activation loads (R independent FMA chains).
//   T >= 2: register tile of 1 weight row x up to 8 activation rows (each unpacked block feeds
//          every activation row), activations in the pass layout (I24Args::xp: one pointer,
//          constant offsets). Weight rows kGroup at a time, kChunk blocks at a time (block-major),
//          so the pass's activation chunk stays in L1 across the group.
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "cpu/internal.hpp"
#include "cpu/types/q4_0/q4_0_kernels.hpp"
#include "cpu/types/x86_lanes.hpp"

namespace lmt::cpu::q4_0 {
namespace {

constexpr int kQK = LMT_Q4_0_BLOCK_ELEMS;
constexpr size_t kBB = LMT_Q4_0_BLOCK_BYTES;

struct Consts {
    __m256i cnt, m4, k8, ones;
    Consts()
        : cnt(_mm256_set_epi64x(4, 4, 0, 0)), m4(_mm256_set1_epi8(0x0F)), k8(_mm256_set1_epi8(8)),
          ones(_mm256_set1_epi16(1)) {}
};

// q - 8 as int8: bytes 0-15 weights 0-15 (low nibbles), bytes 16-31 weights 16-31 (the upper
// 128-bit lane's qwords shifted right by 4; the mask drops what crosses a byte).
static inline __m256i unpack_q8(const uint8_t *blk, const Consts &c) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 2)));
    return _mm256_sub_epi8(_mm256_and_si256(_mm256_srlv_epi64(v, c.cnt), c.m4), c.k8);
}

// The block's d in lane 0 (vcvtph2ps of the first 4 halves: d and 3 halves of qs, ignored).
static inline __m128 block_d(const uint8_t *blk) {
    return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(blk)));
}

// S of one block and activation row (a0, a1: xa's two 16-word halves, r: 32 bytes).
static inline __m256i block_sum(__m256i q8, __m256i w0, __m256i w1, const int16_t *xa, const uint8_t *xr,
                                const Consts &c) {
    const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xa));
    const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xa + 16));
    const __m256i r = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xr));
#if defined(__AVXVNNI__)
    // vpdpbusd's lane k is r[4k..4k+3] . q8[4k..4k+3], the lane B_k of maddubs + madd(1); the
    // partial sums are bounded by |S| < 2^28 (q4_0_kernels.hpp), so the regrouping is exact.
    (void)c;
    const __m256i R = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), r, q8);
    return _mm256_dpwssd_avx_epi32(_mm256_dpwssd_avx_epi32(R, a0, w0), a1, w1);
#else
    const __m256i L = _mm256_add_epi32(_mm256_madd_epi16(a0, w0), _mm256_madd_epi16(a1, w1));
    return _mm256_add_epi32(L, _mm256_madd_epi16(_mm256_maddubs_epi16(r, q8), c.ones));
#endif
}

template <int R>
static void rows_t1(const I24Args &a, int64_t r) {
    const Consts c;
    const int64_t nb = a.cols / kQK;
    const uint8_t *row[R];
    __m256 acc[R];
    LMT_UNROLL
    for (int k = 0; k < R; ++k) {
        row[k] = a.w + (size_t)(r + k) * a.row_stride;
        acc[k] = _mm256_setzero_ps();
    }
    const __m256i z = _mm256_setzero_si256();
    for (int64_t b = 0; b < nb; ++b) {
        const int16_t *xa = a.a + b * kQK;
        const uint8_t *xr = a.r + b * kQK;
        const __m128 s = _mm_load_ss(a.sr + b);
        LMT_UNROLL
        for (int k = 0; k < R; ++k) {
            const uint8_t *blk = row[k] + (size_t)b * kBB;
            const __m256i q8 = unpack_q8(blk, c);
            const __m256i S = block_sum(q8, _mm256_unpacklo_epi8(z, q8), _mm256_unpackhi_epi8(z, q8), xa, xr, c);
            // e = d * sr: the scalar reference's one f32 product
            const __m256 e = _mm256_broadcastss_ps(_mm_mul_ss(block_d(blk), s));
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), e, acc[k]);
        }
    }
    LMT_UNROLL
    for (int k = 0; k < R; ++k) a.logits[r + k] = hsum8_lanes(acc[k]);
}

constexpr int64_t kGroup = 16;  // weight rows per block-major group
constexpr int64_t kChunk = 8;   // blocks per step (8 activation rows: 8 KB)

// Weight row `row` over blocks [b0, b1) against the TG activation rows of the pass at xp;
// acc holds the TG rows' 8 lanes between chunks (each lane still sums blocks in increasing order).
template <int TG>
static inline void tile_step(const uint8_t *row, const uint8_t *xp, int64_t b0, int64_t b1, float *acc) {
    const Consts c;
    const __m256i z = _mm256_setzero_si256();
    prefetch_lines<3>(row + (size_t)b1 * kBB);  // this row's next chunk (144 bytes), after the group's other rows
    __m256 v[TG];
    LMT_UNROLL
    for (int t = 0; t < TG; ++t) v[t] = _mm256_load_ps(acc + 8 * t);
    for (int64_t b = b0; b < b1; ++b) {
        const uint8_t *blk = row + (size_t)b * kBB;
        const __m256i q8 = unpack_q8(blk, c);
        const __m256i w0 = _mm256_unpacklo_epi8(z, q8), w1 = _mm256_unpackhi_epi8(z, q8);
        const __m256 d = _mm256_broadcastss_ps(block_d(blk));
        const uint8_t *x = xp + b * TG * kI24PassRecord;
        LMT_UNROLL
        for (int t = 0; t < TG; ++t) {
            const uint8_t *p = x + t * kI24PassRecord;
            const __m256i S = block_sum(q8, w0, w1, reinterpret_cast<const int16_t *>(p), p + 64, c);
            // e = d * sr (sr broadcast in the record): the scalar reference's one f32 product
            const __m256 e = _mm256_mul_ps(d, _mm256_load_ps(reinterpret_cast<const float *>(p + 96)));
            v[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), e, v[t]);
        }
    }
    LMT_UNROLL
    for (int t = 0; t < TG; ++t) _mm256_store_ps(acc + 8 * t, v[t]);
}

template <int TG>
static void rows_pass(const I24Args &a, int64_t r0, int64_t r1, int64_t t0) {
    const int64_t nb = a.cols / kQK;
    const uint8_t *xp = a.xp + t0 * nb * kI24PassRecord;
    alignas(32) float acc[kGroup][TG][8];
    for (int64_t g0 = r0; g0 < r1; g0 += kGroup) {
        const int64_t G = std::min(kGroup, r1 - g0);
        for (int64_t i = 0; i < G; ++i)
            for (int t = 0; t < TG; ++t) _mm256_store_ps(acc[i][t], _mm256_setzero_ps());
        for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
            const int64_t b1 = std::min(nb, b0 + kChunk);
            for (int64_t i = 0; i < G; ++i)
                tile_step<TG>(a.w + (size_t)(g0 + i) * a.row_stride, xp, b0, b1, &acc[i][0][0]);
        }
        for (int64_t i = 0; i < G; ++i)
            for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + g0 + i] = hsum8_lanes(_mm256_load_ps(acc[i][t]));
    }
}

static inline void matvec_i24_x86(const I24Args &a, int64_t r0, int64_t r1) {
    if (a.T == 1) {
        constexpr int R = 4;  // weight rows sharing each block's activation loads (2 measured the same)
        int64_t r = r0;
        for (; r + R <= r1; r += R) rows_t1<R>(a, r);
        for (; r < r1; ++r) rows_t1<1>(a, r);
        return;
    }
    for (int64_t t0 = 0; t0 < a.T; t0 += a.pass_rows) {
        switch ((int)std::min<int64_t>(a.pass_rows, a.T - t0)) {
            case 1: rows_pass<1>(a, r0, r1, t0); break;
            case 2: rows_pass<2>(a, r0, r1, t0); break;
            case 3: rows_pass<3>(a, r0, r1, t0); break;
            case 4: rows_pass<4>(a, r0, r1, t0); break;
            case 5: rows_pass<5>(a, r0, r1, t0); break;
            case 6: rows_pass<6>(a, r0, r1, t0); break;
            case 7: rows_pass<7>(a, r0, r1, t0); break;
            default: rows_pass<8>(a, r0, r1, t0); break;
        }
    }
}

}  // namespace
}  // namespace lmt::cpu::q4_0
