// NEON + ARMv8.2 dot product (Isa::NeonDot) Q4_0 I24 matvec, byte-identical to the scalar
// reference (q4_0_kernels.hpp). Built with -march=armv8.2-a+dotprod (CMakeLists.txt) and run
// only where cpu_features.cpp finds the dot product.
// sdot / udot sum 4 byte products into each int32 lane, which is the shape of both of S's groups:
//   A part: the weights in the A-lane order P (one tbl of the 16 code bytes serves both nibbles),
//           against a = 256 * ah + al from the I24Args::xd record: 256 * sdot(q, ah) + udot(q, al)
//   B part: the weights in natural order against r: udot(q, r) (lane k = B_k = 4k .. 4k + 3)
// The codes q (0..15) are summed as stored and S starts from the record's c1 = -8 * (256 * sum_A a
// + sum_B r), the same exact integer as the reference's sum of (q - 8) terms. Bounds per lane:
// |sdot| <= 4 * 15 * 128, the A sum <= 4 * 15 * 32767 < 2^18, its * 256 and the rest stay below
// 2^30, so the signed / unsigned dots that share a register (mod 2^32 adds) are exact.
// Against the plain NEON kernel, per 32 weights and activation row: 2 sdot + 4 udot + 2 shifts +
// 2 mla (integers) and 2 + 2 + 1 (convert, fma, scale) where it takes 4 widenings, 8 vmull,
// 4 vmul, 4 vpaddl and 8 pair / lane adds; the weight unpack per block is tbl + 2 and + 2 shifts.
#include <arm_neon.h>

#include <cstring>

#include "cpu/types/q4_0/q4_0_kernels.hpp"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "q4_0_neon_dot.cpp needs -march=armv8.2-a+dotprod (CMakeLists.txt LMTAIL_NEON_DOT_FLAGS)"
#endif

namespace lmt::cpu::q4_0 {
namespace {

constexpr int kQK = LMT_Q4_0_BLOCK_ELEMS;
constexpr size_t kBB = LMT_Q4_0_BLOCK_BYTES;

struct WDot {
    uint8x16_t pl, ph;  // codes in the A-lane order P: weights P[0..15], 16 + P[0..15]
    uint8x16_t nl, nh;  // codes in natural order: weights 0..15, 16..31
    float d;
};

static inline WDot unpack(const uint8_t *blk, uint8x16_t perm) {
    WDot w;
    const uint8x16_t qs = vld1q_u8(blk + 2), m4 = vdupq_n_u8(0x0F);
    const uint8x16_t p = vqtbl1q_u8(qs, perm);  // byte l holds weights l and 16 + l: one shuffle for both
    w.pl = vandq_u8(p, m4);
    w.ph = vshrq_n_u8(p, 4);
    w.nl = vandq_u8(qs, m4);
    w.nh = vshrq_n_u8(qs, 4);
    uint16_t h;
    std::memcpy(&h, blk, 2);
    w.d = f16_to_f32(h);  // the scalar reference's conversion (NaN payloads included)
    return w;
}

// S's 4 lanes from codes (A order p, natural n) and one half of a record.
static inline int32x4_t lanes4(uint8x16_t p, uint8x16_t n, int8x16_t ah, uint8x16_t al, uint8x16_t r, int32x4_t c1) {
    const int32x4_t hi = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(p), ah);  // codes <= 15: valid as int8
    const uint32x4_t A = vdotq_u32(vreinterpretq_u32_s32(vshlq_n_s32(hi, 8)), p, al);
    const uint32x4_t B = vdotq_u32(vreinterpretq_u32_s32(c1), n, r);
    return vmlaq_n_s32(vreinterpretq_s32_u32(B), vreinterpretq_s32_u32(A), 256);
}

static inline void block_term(const WDot &w, const uint8_t *rec, float sr, float32x4_t &lo, float32x4_t &hi) {
    const int8x16_t ah0 = vld1q_s8(reinterpret_cast<const int8_t *>(rec)),
                    ah1 = vld1q_s8(reinterpret_cast<const int8_t *>(rec + 16));
    const uint8x16_t al0 = vld1q_u8(rec + 32), al1 = vld1q_u8(rec + 48), r0 = vld1q_u8(rec + 64), r1 = vld1q_u8(rec + 80);
    const int32x4_t c0 = vld1q_s32(reinterpret_cast<const int32_t *>(rec + 96)),
                    c1 = vld1q_s32(reinterpret_cast<const int32_t *>(rec + 112));
    const int32x4_t Slo = lanes4(w.pl, w.nl, ah0, al0, r0, c0), Shi = lanes4(w.ph, w.nh, ah1, al1, r1, c1);
    const float e = w.d * sr;
    lo = vfmaq_n_f32(lo, vcvtq_f32_s32(Slo), e);
    hi = vfmaq_n_f32(hi, vcvtq_f32_s32(Shi), e);
}

// Canonical 8-lane tree: b = lanes 0-3 + lanes 4-7; c[l] = b[l] + b[l + 2]; c[0] + c[1].
static inline float hsum8_neon(float32x4_t lo, float32x4_t hi) {
    const float32x4_t b = vaddq_f32(lo, hi);
    const float c0 = vgetq_lane_f32(b, 0) + vgetq_lane_f32(b, 2), c1 = vgetq_lane_f32(b, 1) + vgetq_lane_f32(b, 3);
    return c0 + c1;
}

// One weight row against activation rows t0 .. t0 + TG - 1: each block unpacked once for all.
template <int TG>
static void row_tg(const I24Args &a, int64_t r, int64_t t0) {
    static const uint8_t kPerm[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
    const uint8x16_t perm = vld1q_u8(kPerm);
    const int64_t nb = a.cols / kQK;
    const uint8_t *row = a.w + (size_t)r * a.row_stride;
    float32x4_t lo[TG], hi[TG];
    for (int t = 0; t < TG; ++t) lo[t] = hi[t] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
        const WDot w = unpack(row + (size_t)b * kBB, perm);
        for (int t = 0; t < TG; ++t) {
            const int64_t tb = (t0 + t) * nb + b;
            block_term(w, a.xd + tb * kI24DotRecord, a.sr[tb], lo[t], hi[t]);
        }
    }
    for (int t = 0; t < TG; ++t) a.logits[(t0 + t) * a.rows + r] = hsum8_neon(lo[t], hi[t]);
}

}  // namespace

void matvec_i24_neon_dot(const I24Args &a, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        for_token_groups8(a.T, [&](auto n, int64_t t) { row_tg<decltype(n)::value>(a, r, t); });
    }
}

}  // namespace lmt::cpu::q4_0
