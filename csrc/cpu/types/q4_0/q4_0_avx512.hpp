// AVX-512 helpers of the Q4_0 kernels (included only by translation units built with the AVX-512
// flags; everything static).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "lmtail/blocks/q4_0.h"

namespace lmt::cpu::q4_0 {
namespace {

// The f16 scales d of n <= 8 consecutive blocks from p (block j's d is word 9j of the 128 bytes
// from p), as 8 words: two loads and one vpermt2w for 8 blocks instead of a scalar load, move and
// convert per block. With n < 8 only the n blocks' bytes are read (the row may end there).
static inline __m128i scales8_f16(const uint8_t *p, int n) {
    static_assert(LMT_Q4_0_BLOCK_BYTES == 18, "d of block j is word 9j");
    const __m512i idx = _mm512_castsi128_si512(_mm_setr_epi16(0, 9, 18, 27, 36, 45, 54, 63));
    __m512i lo, hi;
    if (n == 8) {
        lo = _mm512_loadu_si512(p);
        hi = _mm512_loadu_si512(p + 64);
    } else {
        const int words = 9 * n;  // <= 63
        const __mmask32 ml = words >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << words) - 1);
        const __mmask32 mh = words > 32 ? (((__mmask32)1 << (words - 32)) - 1) : 0;
        lo = _mm512_maskz_loadu_epi16(ml, p);
        hi = _mm512_maskz_loadu_epi16(mh, p + 64);
    }
    return _mm512_castsi512_si128(_mm512_permutex2var_epi16(lo, idx, hi));
}

// Per-word shift counts [0 | 4 | 0 | 4] by 128-bit lane: srlv of a broadcast 16 qs bytes gives
// the low nibbles in lanes 0 and 2, the high nibbles in lanes 1 and 3 (before the mask).
static inline __m512i nibble_shifts() {
    return _mm512_setr_epi64(0, 0, 0x0004000400040004LL, 0x0004000400040004LL, 0, 0, 0x0004000400040004LL,
                             0x0004000400040004LL);
}

}  // namespace
}  // namespace lmt::cpu::q4_0
