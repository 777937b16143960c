// AVX2 Q4_0 matvec, Precision::I24 (canonical expression in q4_0_kernels.hpp). Each weight block
// is unpacked once (signed nibbles for vpmaddubsw against r, the same bytes << 8 as int16 for
// vpmaddwd against a) and applied to up to 8 activation rows; at T = 1, 4 rows at a time keep 4
// independent FMA chains.
#include <immintrin.h>

#include <cstring>

#include "cpu/types/q4_0/q4_0_kernels.hpp"
#include "cpu/types/x86_lanes.hpp"

namespace lmt::cpu::q4_0 {
namespace {

constexpr int kQK = LMT_Q4_0_BLOCK_ELEMS;
constexpr size_t kBB = LMT_Q4_0_BLOCK_BYTES;

struct WBlock {
    __m256i q8;      // q - 8 as int8: bytes 0-15 weights 0-15, bytes 16-31 weights 16-31
    __m256i w0, w1;  // (q - 8) << 8 as int16: [w0..7 | w16..23], [w8..15 | w24..31]
    __m256 d;
};

static inline WBlock unpack(const uint8_t *blk) {
    WBlock o;
    uint16_t h;
    std::memcpy(&h, blk, 2);
    o.d = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 2));
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    o.q8 = _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
    const __m256i z = _mm256_setzero_si256();
    o.w0 = _mm256_unpacklo_epi8(z, o.q8);
    o.w1 = _mm256_unpackhi_epi8(z, o.q8);
    return o;
}

static inline __m256 block_term(const WBlock &w, const int16_t *xa, const uint8_t *xr, const float *sr, __m256 acc) {
    const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xa));
    const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xa + 16));
    const __m256i r = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xr));
    const __m256i L = _mm256_add_epi32(_mm256_madd_epi16(a0, w.w0), _mm256_madd_epi16(a1, w.w1));
    const __m256i R = _mm256_madd_epi16(_mm256_maddubs_epi16(r, w.q8), _mm256_set1_epi16(1));
    const __m256 e = _mm256_mul_ps(w.d, _mm256_broadcast_ss(sr));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(L, R)), e, acc);
}

template <int R>
static void rows_t1(const I24Args &a, int64_t r) {
    const int64_t nb = a.cols / kQK;
    const uint8_t *row[R];
    __m256 acc[R];
    for (int k = 0; k < R; ++k) {
        row[k] = a.w + (size_t)(r + k) * a.row_stride;
        acc[k] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b)
        LMT_UNROLL
        for (int k = 0; k < R; ++k)
            acc[k] = block_term(unpack(row[k] + (size_t)b * kBB), a.a + b * kQK, a.r + b * kQK, a.sr + b, acc[k]);
    for (int k = 0; k < R; ++k) a.logits[r + k] = hsum8_lanes(acc[k]);
}

template <int TG>
static void row_tg(const I24Args &a, int64_t r, int64_t t0) {
    const int64_t nb = a.cols / kQK;
    const uint8_t *row = a.w + (size_t)r * a.row_stride;
    __m256 acc[TG];
    for (int t = 0; t < TG; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const WBlock w = unpack(row + (size_t)b * kBB);
        LMT_UNROLL
        for (int t = 0; t < TG; ++t) {
            const int64_t o = (t0 + t) * a.cols + b * kQK;
            acc[t] = block_term(w, a.a + o, a.r + o, a.sr + (t0 + t) * nb + b, acc[t]);
        }
    }
    for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r] = hsum8_lanes(acc[t]);
}

}  // namespace

void matvec_i24_avx2(const I24Args &a, int64_t r0, int64_t r1) {
    if (a.T == 1) {
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) rows_t1<4>(a, r);
        for (; r < r1; ++r) rows_t1<1>(a, r);
        return;
    }
    for (int64_t r = r0; r < r1; ++r) {
        int64_t t = 0;
        for (; t + 8 <= a.T; t += 8) row_tg<8>(a, r, t);
        switch (a.T - t) {
            case 7: row_tg<7>(a, r, t); break;
            case 6: row_tg<6>(a, r, t); break;
            case 5: row_tg<5>(a, r, t); break;
            case 4: row_tg<4>(a, r, t); break;
            case 3: row_tg<3>(a, r, t); break;
            case 2: row_tg<2>(a, r, t); break;
            case 1: row_tg<1>(a, r, t); break;
            default: break;
        }
    }
}

}  // namespace lmt::cpu::q4_0
