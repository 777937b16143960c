// AVX-512 (F/BW/VL/DQ + VNNI) Q4_0 matvec, Precision::I24 (canonical expression in
// q4_0_kernels.hpp). The weight unpack is AVX2's; the integer sum S of a block and activation row
// is three VNNI instructions: vpdpbusd (r u8 x (q - 8) s8, 4 consecutive bytes per int32 lane:
// exactly B_k) and two vpdpwssd (a x (q - 8) << 8 over A_k), exact like AVX2's
// vpmaddubsw / vpmaddwd / vpaddd chain. The f32 part is the same per lane.
//   T = 1 (and the odd last row): 512-bit over weight row pairs (pairs_t1), 4 pairs at a time; a
//   last lone row runs the 256-bit kernel (rows_single). L3-resident head, 1 thread, Xeon with
//   AMX: 6.2 -> 3.9-4.3 cycles per row and block against 4 rows of the 256-bit kernel.
//   T >= 2: 512-bit over activation row pairs (ap / rp / srp layout): lanes 0-7 are row 2p's S,
//   lanes 8-15 row 2p + 1's, against the block's weights in both halves. Weight rows are taken
//   kGroup at a time, kChunk blocks at a time (block-major), so the 8 activation rows' chunk stays in
//   L1 across the group (a row-major pass re-reads all of them from L2 for every weight row).
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

static inline float f16_scale(const uint8_t *blk) {
    uint16_t h;
    std::memcpy(&h, blk, 2);
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// ---- 256-bit: one activation row ----------------------------------------------------------------
struct WB {
    __m256i q8;      // q - 8 as int8: bytes 0-15 weights 0-15, bytes 16-31 weights 16-31
    __m256i w0, w1;  // (q - 8) << 8 as int16: [w0..7 | w16..23], [w8..15 | w24..31]
    __m256 d;
};

static inline WB unpack256(const uint8_t *blk) {
    WB o;
    o.d = _mm256_set1_ps(f16_scale(blk));
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 2));
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    o.q8 = _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
    const __m256i z = _mm256_setzero_si256();
    o.w0 = _mm256_unpacklo_epi8(z, o.q8);
    o.w1 = _mm256_unpackhi_epi8(z, o.q8);
    return o;
}

template <int R>
static void rows_single(const I24Args &a, int64_t r, int64_t t) {
    const int64_t nb = a.cols / kQK;
    const uint8_t *row[R];
    __m256 acc[R];
    LMT_UNROLL
    for (int k = 0; k < R; ++k) {
        row[k] = a.w + (size_t)(r + k) * a.row_stride;
        acc[k] = _mm256_setzero_ps();
    }
    const int16_t *xa = a.a + t * a.cols;
    const uint8_t *xr = a.r + t * a.cols;
    const float *sr = a.sr + t * nb;
    for (int64_t b = 0; b < nb; ++b) {
        const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xa + b * kQK));
        const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xa + b * kQK + 16));
        const __m256i rr = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xr + b * kQK));
        const __m256 s = _mm256_broadcast_ss(sr + b);
        LMT_UNROLL
        for (int k = 0; k < R; ++k) {
            const WB w = unpack256(row[k] + (size_t)b * kBB);
            __m256i S = _mm256_dpbusd_epi32(_mm256_setzero_si256(), rr, w.q8);
            S = _mm256_dpwssd_epi32(S, a0, w.w0);
            S = _mm256_dpwssd_epi32(S, a1, w.w1);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(w.d, s), acc[k]);
        }
    }
    LMT_UNROLL
    for (int k = 0; k < R; ++k) a.logits[t * a.rows + r + k] = hsum8_lanes(acc[k]);
}

// ---- 512-bit, one activation row: weight row pairs ----------------------------------------------
// Rows 2p and 2p + 1 fill a zmm's halves (lanes 0-7, 8-15), each half the 256-bit kernel's lanes.
// Per block and pair: one blend of the two rows' broadcast codes, the nibble split, the raw codes
// q (not q - 8: S starts from c1, which holds the -8 terms), three VNNI, one vpermps of e. e = d * sr
// for 8 blocks of both rows is one multiply: the 8 f16 scales of each row gathered by vpermt2w from
// 128 bytes (block j's d is word 9j) and converted in one vcvtph2ps.
constexpr int kEBlocks = 8;
#ifndef LMT_Q4_0_PF
#define LMT_Q4_0_PF 512
#endif
constexpr int kPfT1 = LMT_Q4_0_PF;

template <int P>
static void pairs_t1(const I24Args &a, int64_t r, int64_t t) {
    const int64_t nb = a.cols / kQK;
    const uint8_t *row[2 * P];
    LMT_UNROLL
    for (int k = 0; k < 2 * P; ++k) row[k] = a.w + (size_t)(r + k) * a.row_stride;
    const int16_t *xa = a.a + t * a.cols;
    const uint8_t *xr = a.r + t * a.cols;
    const float *sr = a.sr + t * nb;
    const __m512i cnt = nibble_shifts();
    const __m512i m4 = _mm512_set1_epi8(0x0F), z = _mm512_setzero_si512();
    const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8);
    __m512 acc[P];
    LMT_UNROLL
    for (int p = 0; p < P; ++p) acc[p] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += kEBlocks) {
        const int n = (int)std::min<int64_t>(kEBlocks, nb - b0);
        LMT_UNROLL
        for (int k = 0; k < 2 * P; ++k) {  // the chunk's 144 bytes kPfT1 ahead (DRAM latency, 8 streams)
            const char *ahead = reinterpret_cast<const char *>(row[k] + (size_t)b0 * kBB) + kPfT1;
            _mm_prefetch(ahead, _MM_HINT_T0);
            _mm_prefetch(ahead + 64, _MM_HINT_T0);
            _mm_prefetch(ahead + 128, _MM_HINT_T0);
        }
        // sr of the n blocks in both halves (0 past them: those lanes are never read)
        const __mmask8 ms = (__mmask8)((1u << n) - 1);
        const __m256 s8 = _mm256_maskz_loadu_ps(ms, sr + b0);
        const __m512 s16 = _mm512_insertf32x8(_mm512_castps256_ps512(s8), s8, 1);
        __m512 e[P];
        LMT_UNROLL
        for (int p = 0; p < P; ++p) {
            const __m256i d16 = _mm256_set_m128i(scales8_f16(row[2 * p + 1] + (size_t)b0 * kBB, n),
                                                 scales8_f16(row[2 * p] + (size_t)b0 * kBB, n));
            e[p] = _mm512_mul_ps(_mm512_cvtph_ps(d16), s16);
        }
        __m512i idx = half;
        for (int j = 0; j < n; ++j, idx = _mm512_add_epi32(idx, _mm512_set1_epi32(1))) {
            const int64_t b = b0 + j;
            const __m512i R8 = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(xr + b * kQK)));
            const __m512i A0 = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(xa + b * kQK)));
            const __m512i A1 =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(xa + b * kQK + 16)));
            const __m512i C = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i *>(a.c1 + b * 8)));
            LMT_UNROLL
            for (int p = 0; p < P; ++p) {
                const __m512i v0 = _mm512_broadcast_i32x4(
                    _mm_loadu_si128(reinterpret_cast<const __m128i *>(row[2 * p] + (size_t)b * kBB + 2)));
                const __m512i v1 = _mm512_broadcast_i32x4(
                    _mm_loadu_si128(reinterpret_cast<const __m128i *>(row[2 * p + 1] + (size_t)b * kBB + 2)));
                // [row 2p: lo nibbles | hi nibbles | row 2p + 1: lo | hi], the codes 0..15
                const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_mask_blend_epi64(0xF0, v0, v1), cnt), m4);
                __m512i S = _mm512_dpbusd_epi32(C, R8, q);
                S = _mm512_dpwssd_epi32(S, A0, _mm512_unpacklo_epi8(z, q));
                S = _mm512_dpwssd_epi32(S, A1, _mm512_unpackhi_epi8(z, q));
                acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_permutexvar_ps(idx, e[p]), acc[p]);
            }
        }
    }
    LMT_UNROLL
    for (int p = 0; p < P; ++p) {
        a.logits[t * a.rows + r + 2 * p] = hsum8_lanes(_mm512_castps512_ps256(acc[p]));
        a.logits[t * a.rows + r + 2 * p + 1] = hsum8_lanes(_mm512_extractf32x8_ps(acc[p], 1));
    }
}

// ---- 512-bit: activation row pairs --------------------------------------------------------------
#ifndef LMT_Q4_0_G
#define LMT_Q4_0_G 16
#endif
#ifndef LMT_Q4_0_C
#define LMT_Q4_0_C 8
#endif
constexpr int64_t kGroup = LMT_Q4_0_G;  // weight rows per block-major group
constexpr int64_t kChunk = LMT_Q4_0_C;   // blocks per step (8 rows' activations: 8 KB)
static_assert(kChunk <= 8, "scales8_f16 converts at most 8 scales");

#ifndef LMT_Q4_0_R
#define LMT_Q4_0_R 2  // weight rows per step sharing each activation load (half the loads; 1 measured the same)
#endif

// Weight rows row[0..R) over blocks [b0, b1) for P row pairs; acc[k] holds row k's accumulators.
template <int P, int R>
static inline void pairs_step(const I24Args &a, const uint8_t *const *row, int64_t b0, int64_t b1, int64_t p0,
                              float (*const *acc)[16]) {
    const int64_t nb = a.cols / kQK;
    // Lanes 1 and 3 (128-bit) of the broadcast qs take the high nibbles: [lo | hi | lo | hi].
    const __m512i cnt = nibble_shifts();
    const __m512i m4 = _mm512_set1_epi8(0x0F), k8 = _mm512_set1_epi8(8), z = _mm512_setzero_si512();
    __m512 facc[R][P];
    alignas(32) float dv[R][kChunk];
    LMT_UNROLL
    for (int k = 0; k < R; ++k) {
        // this row's next chunk (144 bytes), needed after the group's other rows
        const char *ahead = reinterpret_cast<const char *>(row[k] + (size_t)b1 * kBB);
        _mm_prefetch(ahead, _MM_HINT_T0);
        _mm_prefetch(ahead + 64, _MM_HINT_T0);
        _mm_prefetch(ahead + 128, _MM_HINT_T0);
        LMT_UNROLL
        for (int p = 0; p < P; ++p) facc[k][p] = _mm512_load_ps(acc[k][p]);
        _mm256_store_ps(dv[k], _mm256_cvtph_ps(scales8_f16(row[k] + (size_t)b0 * kBB, (int)(b1 - b0))));
    }
    // e = d * sr for the pass's 8 activation rows in one multiply per weight row; vpermps then
    // spreads pair p's two (lanes 0-7: row 2p, 8-15: row 2p + 1): the same products, fewer FMA-pipe ops.
    __m512i eidx[P];
    LMT_UNROLL
    for (int p = 0; p < P; ++p)
        eidx[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * p)), _mm256_set1_epi32(2 * p + 1), 1);
    const float *srp = a.srp + (p0 / 4) * nb * 8;
    for (int64_t b = b0; b < b1; ++b) {
        __m512 e8[R];
        __m512i q8[R], w0[R], w1[R];
        const __m256 s8 = _mm256_load_ps(srp + b * 8);
        LMT_UNROLL
        for (int k = 0; k < R; ++k) {
            const uint8_t *blk = row[k] + (size_t)b * kBB;
            e8[k] = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(dv[k][b - b0]), s8));
            const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 2)));
            q8[k] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srlv_epi16(v, cnt), m4), k8);
            w0[k] = _mm512_unpacklo_epi8(z, q8[k]);
            w1[k] = _mm512_unpackhi_epi8(z, q8[k]);
        }
        LMT_UNROLL
        for (int p = 0; p < P; ++p) {
            const int64_t pb = (p0 + p) * nb + b;
            const int16_t *ap = a.ap + pb * 64;
            const __m512i R8 = _mm512_load_si512(a.rp + pb * 64), A0 = _mm512_load_si512(ap),
                          A1 = _mm512_load_si512(ap + 32);
            LMT_UNROLL
            for (int k = 0; k < R; ++k) {
                __m512i S = _mm512_dpbusd_epi32(z, R8, q8[k]);
                S = _mm512_dpwssd_epi32(S, A0, w0[k]);
                S = _mm512_dpwssd_epi32(S, A1, w1[k]);
                facc[k][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_permutexvar_ps(eidx[p], e8[k]), facc[k][p]);
            }
        }
    }
    LMT_UNROLL
    for (int k = 0; k < R; ++k)
        LMT_UNROLL
        for (int p = 0; p < P; ++p) _mm512_store_ps(acc[k][p], facc[k][p]);
}

template <int P>
static void rows_pairs(const I24Args &a, int64_t r0, int64_t r1, int64_t p0) {
    const int64_t nb = a.cols / kQK;
    alignas(64) float acc[kGroup][P][16];
    for (int64_t g0 = r0; g0 < r1; g0 += kGroup) {
        const int64_t G = std::min(kGroup, r1 - g0);
        for (int64_t i = 0; i < G; ++i)
            LMT_UNROLL
            for (int p = 0; p < P; ++p) _mm512_store_ps(acc[i][p], _mm512_setzero_ps());
        for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
            const int64_t b1 = std::min(nb, b0 + kChunk);
            int64_t i = 0;
            for (; i + LMT_Q4_0_R <= G; i += LMT_Q4_0_R) {
                const uint8_t *row[LMT_Q4_0_R];
                float(*ac[LMT_Q4_0_R])[16];
                for (int k = 0; k < LMT_Q4_0_R; ++k) {
                    row[k] = a.w + (size_t)(g0 + i + k) * a.row_stride;
                    ac[k] = acc[i + k];
                }
                pairs_step<P, LMT_Q4_0_R>(a, row, b0, b1, p0, ac);
            }
            for (; i < G; ++i) {
                const uint8_t *row[1] = {a.w + (size_t)(g0 + i) * a.row_stride};
                float(*ac[1])[16] = {acc[i]};
                pairs_step<P, 1>(a, row, b0, b1, p0, ac);
            }
        }
        for (int64_t i = 0; i < G; ++i)
            for (int p = 0; p < P; ++p) store_row_pair(a.logits, a.rows, 2 * (p0 + p), g0 + i, _mm512_load_ps(acc[i][p]));
    }
}

}  // namespace

void matvec_i24_avx512(const I24Args &a, int64_t r0, int64_t r1) {
    const int64_t pairs = a.T / 2;
    // Up to 4 pairs (8 activation rows) per pass.
    for (int64_t p0 = 0; p0 < pairs; p0 += 4) {
        switch ((int)std::min<int64_t>(4, pairs - p0)) {
            case 1: rows_pairs<1>(a, r0, r1, p0); break;
            case 2: rows_pairs<2>(a, r0, r1, p0); break;
            case 3: rows_pairs<3>(a, r0, r1, p0); break;
            default: rows_pairs<4>(a, r0, r1, p0); break;
        }
    }
    if (a.T % 2) {
        int64_t r = r0;
        for (; r + 8 <= r1; r += 8) pairs_t1<4>(a, r, a.T - 1);
        for (; r + 2 <= r1; r += 2) pairs_t1<1>(a, r, a.T - 1);
        for (; r < r1; ++r) rows_single<1>(a, r, a.T - 1);
    }
}

}  // namespace lmt::cpu::q4_0
