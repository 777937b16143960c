// Q4_0 kernels shared by the type's translation units (not installed).
//
// Precision::F32 canonical expression (q4_0_scalar in q4_0.cpp is the reference): per weight
//   w[i]   = d * (q[i] - 8)          exact in f32 (a 4-bit integer times an f16 value)
//   acc[l] = fma(w[i], x[i], acc[l])  l = i % 16, over the whole row in increasing i
//   logit  = ((acc[0..7] + acc[8..15]) -> 4 -> 2 -> 1)
// In a 32-weight block, lane l takes the low nibble of qs[l] (weight l) and then its high nibble
// (weight 16 + l), so one 16-byte load feeds the 16 lanes twice with no shuffle across bytes.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cpu/types/types.hpp"
#include "lmtail/blocks/q4_0.h"

namespace lmt::cpu::q4_0 {

// Activation rows in groups of 8, then one group of the rest (1-7): f(std::integral_constant<int,
// N>, first row), so a kernel's row loop is instantiated for each group size it meets.
template <class F>
inline void for_token_groups8(int64_t T, F &&f) {
    int64_t t = 0;
    for (; t + 8 <= T; t += 8) f(std::integral_constant<int, 8>{}, t);
    switch (T - t) {
        case 7: f(std::integral_constant<int, 7>{}, t); break;
        case 6: f(std::integral_constant<int, 6>{}, t); break;
        case 5: f(std::integral_constant<int, 5>{}, t); break;
        case 4: f(std::integral_constant<int, 4>{}, t); break;
        case 3: f(std::integral_constant<int, 3>{}, t); break;
        case 2: f(std::integral_constant<int, 2>{}, t); break;
        case 1: f(std::integral_constant<int, 1>{}, t); break;
        default: break;
    }
}

struct Args {
    const uint8_t *w;
    int64_t rows, cols;
    size_t row_stride;
    const float *x;  // (T, cols)
    int64_t T;
    float *logits;   // (T, rows)
};

void matvec_scalar(const Args &a, int64_t r0, int64_t r1);
void matvec_avx2(const Args &a, int64_t r0, int64_t r1);
void matvec_avx512(const Args &a, int64_t r0, int64_t r1);
// The I24 outlier add-back's weights of 16 rows (cpu/i24_outliers.hpp: Weights16).
bool weights16_avx512(const uint8_t *row0, size_t row_stride, int64_t c, float *w16);
void matvec_neon(const Args &a, int64_t r0, int64_t r1);

// ---- Precision::I24 (the default): 24-bit block fixed-point activations -----------------------
// x is prepared once per call (q4_0.cpp prepare_i24, in double, shared by every ISA): per
// 32-element block b with s = max|x| / 32767,
//   a[i] = clamp(floor(x[i] / s), -32767, 32767)           int16
//   r[i] = clamp(round_even((x[i] - a[i]*s) * 256 / s), 0, 255)   uint8 (x - a*s lies in [0, s))
//   x[i] ~= s * (a[i] + r[i] / 256), error <= s / 512 (max|x| * 2^-24);  sr[b] = (float)(s / 256)
// (a non-finite block: a = r = 0, sr = NaN, so its logits are NaN; an all-zero block: sr = 0).
// Canonical result (matvec_i24_scalar is the reference): with q'[i] = q[i] - 8 in [-8, 7],
//   S[k] = 256 * sum_{i in A_k} q'[i] a[i] + sum_{i in B_k} q'[i] r[i]        k = 0..7, exact int32
//     A_k = {2k, 2k+1, 2k+8, 2k+9} (k < 4), {2k+8, 2k+9, 2k+16, 2k+17} (k >= 4);  B_k = {4k..4k+3}
//     (the lanes of AVX2's vpmaddwd on the unpacked weights and vpmaddubsw + vpmaddwd on r);
//     |S[k]| <= 4 * 8 * (256 * 32767 + 255) < 2^28, so no grouping of the additions can overflow.
//   acc[k] = fma((float)S[k], d * sr[b], acc[k])        blocks in increasing order
//   logit  = ((acc[0..3] + acc[4..7]) -> 2 -> 1)
// The weight side costs nothing extra: q' << 8 as int16 is one byte unpack against zero.
struct I24Args {
    const uint8_t *w;
    int64_t rows, cols;
    size_t row_stride;
    const int16_t *a;  // (T, cols), per block permuted: a[0..7] a[16..23] a[8..15] a[24..31]
    const uint8_t *r;  // (T, cols), natural order
    const float *sr;   // (T, cols / 32)
    int64_t T;
    float *logits;     // (T, rows)
    // Isa::Avx512 with T >= 2 only (q4_0.cpp pair_layout fills them): activation rows 2p and
    // u = 2p + 1 interleaved per block so one zmm serves both rows; per pair p and block b:
    //   ap:  64 words  a_2p[0..15] a_u[0..15] a_2p[16..31] a_u[16..31]   (a's block order above)
    //   rp:  64 bytes  r_2p[0..31] r_u[0..31]
    // and per pass of 4 pairs q and block b, srp: 8 floats sr_8q[b] .. sr_8q+7[b] (0 past the pairs)
    const int16_t *ap = nullptr;  // (T / 2, 2 * cols)
    const uint8_t *rp = nullptr;  // (T / 2, 2 * cols)
    const float *srp = nullptr;   // (ceil(T / 2 / 4), cols / 32, 8)
    // Isa::Avx2 / AvxVnni with T >= 2 only (q4_0.cpp pass_layout fills them): activation rows in passes of
    // pass_rows (the last may be shorter); pass [t0, t0 + n) starts at xp + t0 * (cols / 32) *
    // kI24PassRecord, and holds per block b, per row t of the pass, one kI24PassRecord record:
    //   64 bytes a (a's block order above), 32 bytes r, sr[b] as 8 floats.
    const uint8_t *xp = nullptr;
    int64_t pass_rows = 0;
    // Isa::Avx512 with T odd only (q4_0.cpp fills it): for the last activation row, per block b
    // the 8 int32 lanes c1[8b + k] = -8 * (256 * sum_{A_k} a + sum_{B_k} r), so a kernel can sum
    // the stored codes q (0..15) instead of q - 8 and start S from c1 (the same exact integer).
    const int32_t *c1 = nullptr;  // (cols / 32, 8)
    // Isa::NeonDot only (q4_0.cpp dot_layout fills it): per activation row t and block b one
    // kI24DotRecord record at xd + (t * (cols / 32) + b) * kI24DotRecord, with P the A-lane order
    // of the weights {0,1,8,9, 2,3,10,11, 4,5,12,13, 6,7,14,15} (sdot lane k = bytes 4k..4k+3 = A_k):
    //   bytes  0..31  ah = a >> 8 (int8) of weights P[0..15], then 16 + P[0..15]
    //   bytes 32..63  al = a & 255 (uint8) in the same order      (a = 256 * ah + al exactly)
    //   bytes 64..95  r[0..31], natural order (udot lane k = B_k)
    //   bytes 96..127 c1 as above: 8 int32, so the kernel sums the stored codes q (0..15)
    const uint8_t *xd = nullptr;
};
constexpr int64_t kI24DotRecord = 128;
constexpr int64_t kI24PassRecord = 128;
static inline int i24_a_pos(int i) {  // position of weight i (0..31) in a's block
    return (i & 7) | (((i >> 4) & 1) << 3) | (((i >> 3) & 1) << 4);
}
static inline int i24_a_lane(int i) {  // k with i in A_k
    return ((i >> 4) & 1) * 4 + ((i & 7) >> 1);
}
void matvec_i24_scalar(const I24Args &a, int64_t r0, int64_t r1);
void matvec_i24_avx2(const I24Args &a, int64_t r0, int64_t r1);
void matvec_i24_avxvnni(const I24Args &a, int64_t r0, int64_t r1);
void matvec_i24_avx512(const I24Args &a, int64_t r0, int64_t r1);
void matvec_i24_neon(const I24Args &a, int64_t r0, int64_t r1);
void matvec_i24_neon_dot(const I24Args &a, int64_t r0, int64_t r1);  // needs I24Args::xd
// Fills I24Args::xd (T * cols / 32 records) from a's a, r; c1: scratch of cols / 32 * 8.
void dot_layout(const I24Args &a, int32_t *c1, uint8_t *xd);

static inline float hsum8(const float a[8]) {
    float b[4], c[2];
    for (int l = 0; l < 4; ++l) b[l] = a[l] + a[l + 4];
    for (int l = 0; l < 2; ++l) c[l] = b[l] + b[l + 2];
    return c[0] + c[1];
}

static inline float hsum16(const float a[16]) {
    float b[8], c[4], d[2];
    for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) c[l] = b[l] + b[l + 4];
    for (int l = 0; l < 2; ++l) d[l] = c[l] + c[l + 2];
    return d[0] + d[1];
}

}  // namespace lmt::cpu::q4_0
