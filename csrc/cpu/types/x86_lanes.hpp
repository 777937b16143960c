// Small x86 helpers shared by the integer kernels: horizontal sums of the canonical 8 f32 lanes,
// L1 prefetch of a few cache lines (static inline: each translation unit compiles its own copy
// with its own target flags).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace lmt::cpu {
namespace {

// Canonical hsum8 (cpu/internal.hpp): (a[l] + a[l+4]) -> (b[0]+b[2], b[1]+b[3]) -> c0 + c1.
static inline float hsum8_lanes(__m256 a) {
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// The N 64-byte lines from p into L1 (performance only).
template <int N>
static inline void prefetch_lines(const void *p) {
    const char *c = static_cast<const char *>(p);
    for (int i = 0; i < N; ++i) _mm_prefetch(c + 64 * i, _MM_HINT_T0);
}

// Rows [r0, r1) of a T > 1 call: R weight rows at a time (the rest one by one), each row group
// over every block of `per` activation rows, so the group's weights are read from DRAM once and
// from L1 for the later blocks. tile(std::integral_constant<int, R'>, r, t0, nt) computes one tile.
template <int R, class Tile>
static inline void for_row_groups(int64_t r0, int64_t r1, int64_t T, int64_t per, Tile &&tile) {
    int64_t r = r0;
    for (; r + R <= r1; r += R)
        for (int64_t t0 = 0; t0 < T; t0 += per)
            tile(std::integral_constant<int, R>{}, r, t0, (int)std::min<int64_t>(per, T - t0));
    for (; r < r1; ++r)
        for (int64_t t0 = 0; t0 < T; t0 += per)
            tile(std::integral_constant<int, 1>{}, r, t0, (int)std::min<int64_t>(per, T - t0));
}

#if defined(__AVX512F__)
// One zmm of a row-pair kernel: lanes 0-7 are activation row t's canonical lanes, 8-15 row t + 1's.
static inline void store_row_pair(float *logits, int64_t rows, int64_t t, int64_t r, __m512 v) {
    logits[t * rows + r] = hsum8_lanes(_mm512_castps512_ps256(v));
    logits[(t + 1) * rows + r] = hsum8_lanes(_mm512_extractf32x8_ps(v, 1));
}
#endif

}  // namespace
}  // namespace lmt::cpu
