// x86 Q4_K kernels shared by the AVX2 and AVX-512 translation units: everything is `static
// inline` in an anonymous namespace, so each TU compiles its own copy with its own target flags.
// The same source under both flag sets gives the same instructions' results: the canonical
// expressions (q4_k_internal.hpp) are written out intrinsic by intrinsic, never left to the
// compiler to contract or reassociate in floating point.
#pragma once

#include <immintrin.h>

#include <algorithm>

#include "cpu/types/q4_k/q4_k_internal.hpp"
#include "cpu/types/q5_k/q5k_x86.hpp"  // RowScratch, q8_to_ps, hsum16_avx, hsum8_avx, LMT_I16_PF

namespace lmt::cpu {
namespace {

// ---- Precision::F32 --------------------------------------------------------------------------
// Rows are decoded R at a time (q bytes + per-sub-block d1/m1) into L1-resident scratch and then
// applied to every activation row, as Q5_K's AVX2 kernel: R rows x TG activation rows give
// enough independent FMA chains to cover the FMA latency.

static inline void q4k_scales_x86(const lmt_block_q4_K *b, float *d1, float *m1) {
    uint64_t sc, mm;
    q4k_scale_min_bytes(b, &sc, &mm);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)b->d | ((uint32_t)b->dmin << 16))));
    const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
    const __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mm)));
    _mm256_storeu_ps(d1, _mm256_mul_ps(_mm256_broadcastss_ps(dd), scf));
    _mm256_storeu_ps(m1, _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)), mf));
}

static inline void q4k_unpack_row(const lmt_block_q4_K *blocks, int64_t nb, uint8_t *q, float *d1, float *m1) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
        const auto *qs = reinterpret_cast<const __m256i *>(blocks[b].qs);
        uint8_t *qb = q + b * LMT_QK_K;
        for (int g = 0; g < 4; ++g) {
            const __m256i v = _mm256_loadu_si256(qs + g);
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(qb + 64 * g), _mm256_and_si256(v, m4));
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(qb + 64 * g + 32),
                                _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        }
        q4k_scales_x86(&blocks[b], d1 + 8 * b, m1 + 8 * b);
    }
}

// Both lane halves for R rows and one activation row: 2R chains.
template <int R>
static inline void q4k_dot_t1(const RowScratch &s, int64_t cols, const float *x, float *out) {
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

// One lane half (0: lanes 0-7, 1: lanes 8-15) for R rows and TG activation rows.
template <int R, int TG>
static inline void q4k_dot_half(const RowScratch &s, int64_t cols, const float *const *x, int half,
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
static inline void q4k_dot_tg(const RowScratch &s, int64_t cols, const float *const *x, float *out, int64_t stride) {
    __m256 lo[R][8], hi[R][8];
    q4k_dot_half<R, TG>(s, cols, x, 0, lo);
    q4k_dot_half<R, TG>(s, cols, x, 1, hi);
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < TG; ++t) out[r + t * stride] = hsum16_avx(lo[r][t], hi[r][t]);
}

template <int R>
static void q4k_run_group(const MatvecArgs &a, const RowScratch &s, int64_t r) {
    if (a.T == 1) {
        q4k_dot_t1<R>(s, a.cols, a.x, a.logits + r);
        return;
    }
    for (int64_t t0 = 0; t0 < a.T; t0 += 8) {
        const float *xs[8];
        const int tg = (int)std::min<int64_t>(8, a.T - t0);
        for (int t = 0; t < tg; ++t) xs[t] = a.x + (t0 + t) * a.cols;
        float *out = a.logits + t0 * a.rows + r;
        switch (tg) {
            case 1: q4k_dot_tg<R, 1>(s, a.cols, xs, out, a.rows); break;
            case 2: q4k_dot_tg<R, 2>(s, a.cols, xs, out, a.rows); break;
            case 3: q4k_dot_tg<R, 3>(s, a.cols, xs, out, a.rows); break;
            case 4: q4k_dot_tg<R, 4>(s, a.cols, xs, out, a.rows); break;
            case 5: q4k_dot_tg<R, 5>(s, a.cols, xs, out, a.rows); break;
            case 6: q4k_dot_tg<R, 6>(s, a.cols, xs, out, a.rows); break;
            case 7: q4k_dot_tg<R, 7>(s, a.cols, xs, out, a.rows); break;
            default: q4k_dot_tg<R, 8>(s, a.cols, xs, out, a.rows); break;
        }
    }
}

static inline void matvec_q4_k_f32_x86(const MatvecArgs &a, int64_t r0, int64_t r1) {
    const int group = a.T <= 2 ? 4 : a.T <= 4 ? 2 : 1;
    thread_local RowScratch s;
    s.ensure(a.cols * group);
    const int64_t nb = a.cols / LMT_QK_K, nsub = a.cols / 32;
    for (int64_t r = r0; r < r1; r += group) {
        const int R = (int)std::min<int64_t>(group, r1 - r);
        for (int k = 0; k < R; ++k) {
            const uint8_t *row = a.w + (size_t)(r + k) * a.row_stride;
            if (r + k + group < r1) {  // prefetch the next group's row while this one is decoded
                const char *ahead = reinterpret_cast<const char *>(row + (size_t)group * a.row_stride);
                for (size_t off = 0; off < (size_t)nb * LMT_Q4K_BLOCK_BYTES; off += 64)
                    _mm_prefetch(ahead + off, _MM_HINT_T0);
            }
            q4k_unpack_row(reinterpret_cast<const lmt_block_q4_K *>(row), nb, s.q.data() + k * a.cols,
                           s.d1.data() + k * nsub, s.m1.data() + k * nsub);
        }
        switch (R) {
            case 4: q4k_run_group<4>(a, s, r); break;
            case 3: q4k_run_group<3>(a, s, r); break;
            case 2: q4k_run_group<2>(a, s, r); break;
            default: q4k_run_group<1>(a, s, r); break;
        }
    }
}

// ---- Precision::I24 --------------------------------------------------------------------------
// Q5_K's integer kernel with the 4-bit unpack: group G (64 weights) is 32 bytes of qs; the
// centred codes q - 8 are (nibble - 8) as signed bytes (2 ops per 32 weights). One vpmaddubsw
// per 16 weights against the byte pattern (sc, 0, sc, 0 ..) (even weights) or (0, sc, ..) (odd)
// widens and scales them; vpmaddwd with the permuted a gives int32 lane k = weights 4k..4k+3
// of each 32-weight half, the canonical partition (i >> 2) & 7. The residual b (natural order)
// is vpmaddubsw(b, q - 8) then vpmaddwd with the words (sc, sc ..): the same partition.
template <int G, int TG>
static inline void q4k_i24_group(const lmt_block_q4_K *bk, const int32_t *pat, const int16_t *const *xb,
                                 const uint8_t *const *rb, __m256i *iacc, __m256i *racc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), c8 = _mm256_set1_epi8(8);
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(bk->qs + 32 * G));
    const __m256i lo = _mm256_sub_epi8(_mm256_and_si256(ql, m4), c8);
    const __m256i hi = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(ql, 4), m4), c8);
    const __m256i PE0 = _mm256_set1_epi32(pat[2 * G]), PE1 = _mm256_set1_epi32(pat[2 * G + 1]);
    const __m256i PO0 = _mm256_slli_epi16(PE0, 8), PO1 = _mm256_slli_epi16(PE1, 8);
    const __m256i A = _mm256_maddubs_epi16(PE0, lo), B = _mm256_maddubs_epi16(PO0, lo);
    const __m256i C = _mm256_maddubs_epi16(PE1, hi), D = _mm256_maddubs_epi16(PO1, hi);
    for (int t = 0; t < TG; ++t) {
        k_group_row<true>(A, B, C, D, lo, hi, PE0, PE1, xb[t] + 64 * G, rb[t] + 64 * G, iacc[t], racc[t]);
        // As Q5_K: at TG = 1 keep the sums running instead of one spilled add tree per block.
        if constexpr (TG == 1) {
            asm("" : "+x"(iacc[t]));
            asm("" : "+x"(racc[t]));
        }
    }
}

template <int TG>
static inline void q4k_i24_rows(const MatvecI16Args &a, int64_t r0, int64_t r1, int64_t t0) {
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q4_K *>(a.w + (size_t)r * a.row_stride);
        __m256 facc[TG];
        for (int t = 0; t < TG; ++t) facc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const lmt_block_q4_K *bk = blocks + b;
#if LMT_I16_PF > 0
            {
                const char *ahead = reinterpret_cast<const char *>(bk) + LMT_I16_PF;
                _mm_prefetch(ahead, _MM_HINT_T0);
                _mm_prefetch(ahead + 64, _MM_HINT_T0);
                _mm_prefetch(ahead + 128, _MM_HINT_T0);
            }
#endif
            uint64_t sc, mm;
            q4k_scale_min_bytes(bk, &sc, &mm);
            alignas(32) int32_t pat[8];  // bytes (sc[j], 0, sc[j], 0)
            const __m256i scw = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc));
            _mm256_store_si256(reinterpret_cast<__m256i *>(pat), _mm256_or_si256(scw, _mm256_slli_epi32(scw, 16)));
            asm("" : "+m"(pat));  // broadcast each pattern from memory (as Q5_K)
            const int16_t *xb[TG];
            const uint8_t *rb[TG];
            for (int t = 0; t < TG; ++t) {
                xb[t] = a.xq + (t0 + t) * a.cols + b * LMT_QK_K;
                rb[t] = a.xr + (t0 + t) * a.cols + b * LMT_QK_K;
            }
            __m256i iacc[TG], racc[TG];
            for (int t = 0; t < TG; ++t) iacc[t] = racc[t] = _mm256_setzero_si256();
            q4k_i24_group<0, TG>(bk, pat, xb, rb, iacc, racc);
            q4k_i24_group<1, TG>(bk, pat, xb, rb, iacc, racc);
            q4k_i24_group<2, TG>(bk, pat, xb, rb, iacc, racc);
            q4k_i24_group<3, TG>(bk, pat, xb, rb, iacc, racc);
            const __m128 ddm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)bk->d | ((uint32_t)bk->dmin << 16))));
            const __m256 mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mm)));
            const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
            const __m256 d8 = _mm256_broadcastss_ps(_mm_mul_ss(ddm, _mm_set_ss(8.0f)));
            const __m256 Cc = _mm256_fmsub_ps(d8, scf, _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(ddm)), mv));
            const float d = _mm_cvtss_f32(ddm);
            for (int t = 0; t < TG; ++t) {
                const int64_t tb = (t0 + t) * nb + b;
                facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[t]), _mm256_set1_ps(d * a.dx[tb]), facc[t]);
                facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(racc[t]), _mm256_set1_ps(d * a.dxr[tb]), facc[t]);
                facc[t] = _mm256_fmadd_ps(Cc, _mm256_loadu_ps(a.xsum + tb * 8), facc[t]);
            }
        }
        for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r] = hsum8_avx(facc[t]);
    }
}

// Two int32 accumulators per activation row: 4 rows per pass fit the 16 ymm registers (Q5_K's
// measurement; the same register budget here).
static inline void matvec_q4_k_i24_x86(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < a.T; t0 += 4) {
        switch ((int)std::min<int64_t>(4, a.T - t0)) {
            case 1: q4k_i24_rows<1>(a, r0, r1, t0); break;
            case 2: q4k_i24_rows<2>(a, r0, r1, t0); break;
            case 3: q4k_i24_rows<3>(a, r0, r1, t0); break;
            default: q4k_i24_rows<4>(a, r0, r1, t0); break;
        }
    }
}

}  // namespace
}  // namespace lmt::cpu
