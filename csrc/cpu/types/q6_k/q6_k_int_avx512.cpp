// Precision::I24 on AVX-512 (F/BW/VL/DQ + VNNI): 512-bit integer kernel. Canonical expression in
// q6k.hpp; only the integer grouping differs from the AVX2 kernel (exact), the f32 lanes and
// operations are the same.
//
// Weights: per 32-weight quarter (sub-blocks j, j + 1) one zmm of 32 int16 w16 = sc * (q - 32):
// the 6-bit codes are built as bytes, one quarter per ymm (shifts put each qh bit pair at bits 4-5,
// vpternlogd merges them under the low nibble), sign-extended to words and multiplied by the
// per-sub-block scales (vpermw spreads sc[j] / sc[j + 1] over the two halves).
// vpdpwssd lane m then holds weights 2m, 2m + 1: canonical lane k = m % 8 of sub-block j + m / 8.
//   T = 1: one zmm accumulator per half for L (and C); lanes 0-7 + lanes 8-15 at the half's end;
//   blocks outer over 16 weight rows (rows_single).
//   T >= 2: activation rows in pairs (q6k.hpp xap layout): the first zmm of a chunk holds row 2p's
//   sub-block j and row 2p + 1's sub-block j + 1, the second the other two, against the weights
//   [j | j + 1] and [j + 1 | j]; so lanes 0-7 are row 2p's canonical L and lanes 8-15 row 2p + 1's,
//   with no reduction, and one 16-lane fma serves both rows.
// Integer bounds as q6k.hpp: a lane holds at most one half block's 16 products (< 2^31).
#include <immintrin.h>

#include <algorithm>

#include "cpu/types/q6_k/q6k.hpp"
#include "cpu/types/x86_lanes.hpp"

namespace lmt::cpu {
namespace {

// One activation row (T odd): weight rows taken kSingleGroup at a time block-major, each row's
// block prefetched kSingleAhead bytes (two blocks) ahead, kSingleGroup blocks of work before use.
constexpr int64_t kSingleGroup = 16;
constexpr int kSingleAhead = 2 * (int)sizeof(lmt_block_q6_K);

struct ScIdx {
    alignas(64) int16_t v[8][32];
};
constexpr ScIdx make_sc_idx() {
    ScIdx s{};
    for (int p = 0; p < 8; ++p)
        for (int m = 0; m < 32; ++m) s.v[p][m] = (int16_t)(2 * p + (m >= 16));
    return s;
}
// vpermw indices: quarter p of a block takes scale words 2p (lanes 0-15) and 2p + 1 (16-31).
alignas(64) constexpr ScIdx kScIdx = make_sc_idx();

// The 4 lines (256 bytes >= one 210-byte block) `ahead` bytes past bk into L1.
template <int ahead>
static inline void prefetch_block(const lmt_block_q6_K *bk) {
    prefetch_lines<4>(reinterpret_cast<const char *>(bk) + ahead);
}

// The block's 16 scales as words (lanes 0-15 of the zmm; vpermw reads no others).
static inline __m512i block_scales(const lmt_block_q6_K *bk) {
    return _mm512_castsi256_si512(
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(bk->scales))));
}

// w16 of half h: W[q] = weights 128h + 32q .. + 31 (blocks/q6_k.h: quarter q takes the low (q < 2)
// or high nibble of ql[64h + 32 (q & 1) + l] and qh bits 2q, 2q + 1). The bytes are built one
// quarter per ymm, so the widening takes each straight from its register (64 at a time in a zmm
// needed an extract for every other quarter: ~10% more cycles per block) and the shifts are
// immediates.
static inline void decode_half(const lmt_block_q6_K *bk, int h, __m512i s16, __m512i W[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->ql + 64 * h));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->qh + 32 * h));
    // 0xE4: m4 ? nibble : high bits; the 16-bit shifts' carries across bytes land under the mask
    // or in bits 6-7, which the 0x30 mask cleared.
    const __m256i z[4] = {
        _mm256_ternarylogic_epi32(l0, _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30), m4, 0xE4),
        _mm256_ternarylogic_epi32(l1, _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30), m4, 0xE4),
        _mm256_ternarylogic_epi32(_mm256_srli_epi16(l0, 4), _mm256_and_si256(qh, m30), m4, 0xE4),
        _mm256_ternarylogic_epi32(_mm256_srli_epi16(l1, 4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30), m4,
                                  0xE4)};
    const __m512i *idx = reinterpret_cast<const __m512i *>(kScIdx.v[4 * h]);
    LMT_UNROLL
    for (int q = 0; q < 4; ++q)
        W[q] = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm256_sub_epi8(z[q], k32)),
                                  _mm512_permutexvar_epi16(_mm512_load_si512(idx + q), s16));
}

static inline __m256i fold16(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

static inline __m512i ld(const int16_t *p) { return _mm512_loadu_si512(p); }

// One activation row t in the natural layout, for weight rows [r0, r1) taken kSingleGroup at a time
// block-major: block b's activations (a and c, 1 KB) stay in L1 for the group's rows. Row after
// row, every row re-read all its activations (26 KB at 6656 columns) while the weight stream went
// through the same 32 KB L1: one thread on DRAM-sized weights ran 5-25% slower that way; with
// L2-resident weights block-major is ~4% slower, and the 2-thread full head is the same either way.
// Per row the f32 accumulation order is unchanged (blocks and halves in order); the accumulators
// wait in a small stack array.
static void rows_single(const Q6kI24Args &a, int64_t r0, int64_t r1, int64_t t) {
    const MatvecCall &c = *a.c;
    const int64_t nb = c.cols / LMT_QK_K;
    alignas(32) float acc[kSingleGroup][8];
    for (int64_t g0 = r0; g0 < r1; g0 += kSingleGroup) {
        const int64_t n = std::min(kSingleGroup, r1 - g0);
        for (int64_t i = 0; i < n; ++i) _mm256_store_ps(acc[i], _mm256_setzero_ps());
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t tb = t * nb + b;
            const float dx = a.dx[tb], dxc = a.dxc[tb];
            const int16_t *xa = a.xa + t * c.cols + b * LMT_QK_K, *xc = a.xc + t * c.cols + b * LMT_QK_K;
            for (int64_t i = 0; i < n; ++i) {
                const lmt_block_q6_K *bk =
                    reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)(g0 + i) * c.row_stride) + b;
                prefetch_block<kSingleAhead>(bk);
                const __m512i s16 = block_scales(bk);
                const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((int)bk->d)));
                const __m256 e = _mm256_set1_ps(d * dx), ec = _mm256_set1_ps(d * dxc);
                __m256 facc = _mm256_load_ps(acc[i]);
                LMT_UNROLL
                for (int h = 0; h < 2; ++h) {
                    __m512i W[4];
                    decode_half(bk, h, s16, W);
                    const int16_t *pa = xa + 128 * h, *pc = xc + 128 * h;
                    __m512i L = _mm512_madd_epi16(W[0], ld(pa));
                    __m512i C = _mm512_madd_epi16(W[0], ld(pc));
                    LMT_UNROLL
                    for (int q = 1; q < 4; ++q) {
                        L = _mm512_dpwssd_epi32(L, W[q], ld(pa + 32 * q));
                        C = _mm512_dpwssd_epi32(C, W[q], ld(pc + 32 * q));
                    }
                    facc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold16(L)), e, facc);
                    facc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold16(C)), ec, facc);
                }
                _mm256_store_ps(acc[i], facc);
            }
        }
        for (int64_t i = 0; i < n; ++i) c.logits[t * c.rows + g0 + i] = hsum8_lanes(_mm256_load_ps(acc[i]));
    }
}

// P row pairs p0 .. p0 + P - 1 (activation rows 2 p0 .. 2 (p0 + P) - 1) in the pair layout, for
// weight rows [r0, r1) taken kGroup at a time block-major: the 8 activation rows' block (8 KB)
// then stays in L1 for kGroup weight rows (row-major, every weight block re-read all of it from
// L2, which bound the kernel), and the f32 accumulators wait in a small stack array.
constexpr int64_t kGroup = 16;
constexpr int kGroupPrefetchAhead = 512;  // per row in the block-major order (bytes)

template <int P>
static void rows_pairs(const Q6kI24Args &a, int64_t r0, int64_t r1, int64_t p0) {
    const MatvecCall &c = *a.c;
    const int64_t nb = c.cols / LMT_QK_K;
    alignas(64) float acc[kGroup][P][16];
    for (int64_t g0 = r0; g0 < r1; g0 += kGroup) {
        const int64_t G = std::min(kGroup, r1 - g0);
        for (int64_t i = 0; i < G; ++i)
            LMT_UNROLL
            for (int p = 0; p < P; ++p) _mm512_store_ps(acc[i][p], _mm512_setzero_ps());
        for (int64_t b = 0; b < nb; ++b) {
            const int16_t *xa[P], *xc[P];
            __m512 dx[P], dxc[P];
            LMT_UNROLL
            for (int p = 0; p < P; ++p) {
                const int64_t pb = ((p0 + p) * nb + b) * 16;
                dx[p] = _mm512_loadu_ps(a.dxp + pb);
                dxc[p] = _mm512_loadu_ps(a.dxcp + pb);
                xa[p] = a.xap + (p0 + p) * 2 * c.cols + b * 2 * LMT_QK_K;
                xc[p] = a.xcp + (p0 + p) * 2 * c.cols + b * 2 * LMT_QK_K;
            }
            for (int64_t i = 0; i < G; ++i) {
                const lmt_block_q6_K *bk =
                    reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)(g0 + i) * c.row_stride) + b;
                prefetch_block<kGroupPrefetchAhead>(bk);
                const __m512i s16 = block_scales(bk);
                const __m512 d = _mm512_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((int)bk->d))));
                __m512 facc[P];
                LMT_UNROLL
                for (int p = 0; p < P; ++p) facc[p] = _mm512_load_ps(acc[i][p]);
                LMT_UNROLL
                for (int h = 0; h < 2; ++h) {
                    __m512i W[4];
                    decode_half(bk, h, s16, W);
                    __m512i L[P], C[P];
                    LMT_UNROLL
                    for (int q = 0; q < 4; ++q) {
                        const __m512i Ws = _mm512_shuffle_i64x2(W[q], W[q], 0x4E);  // [j + 1 | j]
                        const int off = 2 * (128 * h + 32 * q);
                        LMT_UNROLL
                        for (int p = 0; p < P; ++p) {
                            if (q == 0) {
                                L[p] = _mm512_madd_epi16(W[q], ld(xa[p] + off));
                                C[p] = _mm512_madd_epi16(W[q], ld(xc[p] + off));
                            } else {
                                L[p] = _mm512_dpwssd_epi32(L[p], W[q], ld(xa[p] + off));
                                C[p] = _mm512_dpwssd_epi32(C[p], W[q], ld(xc[p] + off));
                            }
                            L[p] = _mm512_dpwssd_epi32(L[p], Ws, ld(xa[p] + off + 32));
                            C[p] = _mm512_dpwssd_epi32(C[p], Ws, ld(xc[p] + off + 32));
                        }
                    }
                    LMT_UNROLL
                    for (int p = 0; p < P; ++p) {
                        // e = d * dx per lane (one f32 product, as the scalar reference's d * dx[tb])
                        facc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(L[p]), _mm512_mul_ps(d, dx[p]), facc[p]);
                        facc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(C[p]), _mm512_mul_ps(d, dxc[p]), facc[p]);
                    }
                }
                LMT_UNROLL
                for (int p = 0; p < P; ++p) _mm512_store_ps(acc[i][p], facc[p]);
            }
        }
        for (int64_t i = 0; i < G; ++i)
            LMT_UNROLL
            for (int p = 0; p < P; ++p) store_row_pair(c.logits, c.rows, 2 * (p0 + p), g0 + i, _mm512_load_ps(acc[i][p]));
    }
}

}  // namespace

void matvec_q6_k_i24_avx512(const Q6kI24Args &a, int64_t r0, int64_t r1) {
    const int64_t T = a.c->T, pairs = T / 2;
    // Up to 4 pairs (8 activation rows) per pass: 8 integer and 4 f32 accumulators plus the
    // weights and scales fit the 32 zmm registers.
    for (int64_t p0 = 0; p0 < pairs; p0 += 4) {
        switch ((int)std::min<int64_t>(4, pairs - p0)) {
            case 1: rows_pairs<1>(a, r0, r1, p0); break;
            case 2: rows_pairs<2>(a, r0, r1, p0); break;
            case 3: rows_pairs<3>(a, r0, r1, p0); break;
            default: rows_pairs<4>(a, r0, r1, p0); break;
        }
    }
    if (T % 2) rows_single(a, r0, r1, T - 1);
}

}  // namespace lmt::cpu
