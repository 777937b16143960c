// AVX-512 Q4_0 matvec, Precision::F32 (canonical tree in q4_0_kernels.hpp), every T. The 16
// canonical lanes are one zmm: a block's low nibbles are its first FMA of each lane, its high
// nibbles the second. A block decodes to two f32 vectors (q - 8) * d with one vpermps each (the
// 16-entry table of (q - 8) * d, indexed by the low 4 bits of each dword), shared by the TG
// activation rows; R weight rows share each x load. The scales of 8 blocks are converted at once
// (scales8_f16), so a block's table is one multiply by a broadcast scale.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/types/q4_0/q4_0_avx512.hpp"
#include "cpu/types/q4_0/q4_0_kernels.hpp"
#include "cpu/types/x86_lanes.hpp"

namespace lmt::cpu::q4_0 {
namespace {

constexpr int kQK = LMT_Q4_0_BLOCK_ELEMS;
constexpr size_t kBB = LMT_Q4_0_BLOCK_BYTES;

template <int R, int TG>
static void rows_tg(const Args &a, int64_t r, int64_t t0) {
    const int64_t nb = a.cols / kQK;
    const __m512 table = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const uint8_t *row[R], *nxt[R];
    const float *x[TG];
    for (int k = 0; k < R; ++k) {
        row[k] = a.w + (size_t)(r + k) * a.row_stride;
        nxt[k] = a.w + (size_t)std::min<int64_t>(r + R + k, a.rows - 1) * a.row_stride;
    }
    for (int t = 0; t < TG; ++t) x[t] = a.x + (t0 + t) * a.cols;
    __m512 acc[R][TG];
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) acc[k][t] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        const int n = (int)std::min<int64_t>(8, nb - b0);
        alignas(32) float dv[R][8];  // F16C is exact for every half; a NaN comes out quiet, as the scalar multiply makes it
        for (int k = 0; k < R; ++k) _mm256_store_ps(dv[k], _mm256_cvtph_ps(scales8_f16(row[k] + (size_t)b0 * kBB, n)));
        for (int j = 0; j < n; ++j) {
        const int64_t b = b0 + j;
        __m512 lo[R], hi[R];
        for (int k = 0; k < R; ++k) {
            const uint8_t *blk = row[k] + (size_t)b * kBB;
            // the next row group's bytes (one line per 64 bytes suffices; per block is simpler)
            _mm_prefetch(reinterpret_cast<const char *>(nxt[k] + (size_t)b * kBB), _MM_HINT_T0);
            const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 2)));
            // The table times d holds (float)(q - 8) * d, the scalar reference's one product per
            // weight, for each of the 16 codes: one multiply per block instead of two.
            const __m512 td = _mm512_mul_ps(table, _mm512_set1_ps(dv[k][j]));
            lo[k] = _mm512_permutexvar_ps(v, td);
            hi[k] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), td);
        }
        for (int t = 0; t < TG; ++t) {
            __m512 x0 = _mm512_loadu_ps(x[t] + b * kQK);
            __asm__("" : "+v"(x0));  // one load shared by the R rows (not folded into each FMA)
            for (int k = 0; k < R; ++k) acc[k][t] = _mm512_fmadd_ps(lo[k], x0, acc[k][t]);
        }
        for (int t = 0; t < TG; ++t) {
            __m512 x1 = _mm512_loadu_ps(x[t] + b * kQK + 16);
            __asm__("" : "+v"(x1));
            for (int k = 0; k < R; ++k) acc[k][t] = _mm512_fmadd_ps(hi[k], x1, acc[k][t]);
        }
        }
    }
    for (int k = 0; k < R; ++k)
        for (int t = 0; t < TG; ++t) {
            alignas(64) float l[16];
            _mm512_store_ps(l, acc[k][t]);
            a.logits[(t0 + t) * a.rows + r + k] = hsum16(l);
        }
}

template <int R>
static void rows_tn(const Args &a, int64_t r, int64_t t0, int nt) {
    switch (nt) {
        case 1: return rows_tg<R, 1>(a, r, t0);
        case 2: return rows_tg<R, 2>(a, r, t0);
        case 3: return rows_tg<R, 3>(a, r, t0);
        case 4: return rows_tg<R, 4>(a, r, t0);
        case 5: if constexpr (R <= 2) return rows_tg<R, 5>(a, r, t0); break;
        case 6: if constexpr (R <= 2) return rows_tg<R, 6>(a, r, t0); break;
        case 7: if constexpr (R <= 2) return rows_tg<R, 7>(a, r, t0); break;
        default: if constexpr (R <= 2) return rows_tg<R, 8>(a, r, t0); break;
    }
}

template <int R>
static void rows_all(const Args &a, int64_t r0, int64_t r1, int64_t per) {
    for_row_groups<R>(r0, r1, a.T, per,
                      [&](auto g, int64_t r, int64_t t0, int nt) { rows_tn<decltype(g)::value>(a, r, t0, nt); });
}

}  // namespace

void matvec_avx512(const Args &a, int64_t r0, int64_t r1) {
    // Activation rows in blocks of near-equal size <= 8; R * TG accumulators + 2R decoded
    // weights + x + the table fit the 32 zmm.
    const int64_t groups = (a.T + 3) / 4, per = (a.T + groups - 1) / groups;
    if (per <= 4) rows_all<4>(a, r0, r1, per);
    else rows_all<2>(a, r0, r1, per);
}

}  // namespace lmt::cpu::q4_0
