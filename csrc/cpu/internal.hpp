// Internals shared by the CPU kernel translation units (not installed).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"

#if defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)
#include <xmmintrin.h>
#define LMT_FPENV_SSE 1
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define LMT_FPENV_A64 1
#endif
#include "lmtail/cpu.hpp"

// The integer kernels are built at -O2 (CMakeLists.txt), which does not unroll small fixed loops
// over rows / activation rows: their accumulator arrays would live on the stack. LMT_UNROLL
// before such a loop keeps them in registers.
#if defined(__clang__)
#define LMT_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define LMT_UNROLL _Pragma("GCC unroll 8")
#else
#define LMT_UNROLL
#endif

namespace lmt::cpu {

Isa resolve_isa(Isa isa);
// The kernel family of a resolved isa: the two superset tiers run their base tier's kernels
// (same bytes) wherever a type has no kernel of its own for them.
// * NeonDot (NEON + sdot/udot): matvec() hands every type Neon plus MatvecCall::dotprod, which
//   only the integer kernels with a dotprod variant read.
// * AvxVnni (AVX2 + VEX vpdpbusd/vpdpwssd): matvec() hands a type AvxVnni for the precisions it
//   has a *_avxvnni kernel for (CpuTypeImpl::avx_vnni_precisions), else Avx2; such a type maps
//   the rest of its dispatch (the F32 rows of an I24 batch, its activation layouts) through here.
constexpr Isa kernel_family(Isa isa) {
    return isa == Isa::NeonDot ? Isa::Neon : isa == Isa::AvxVnni ? Isa::Avx2 : isa;
}

// A 64-byte aligned view of n elements of a growable scratch vector: the AVX-512 kernels' zmm
// loads then never split a cache line (a split 512-bit load costs about two).
template <class T>
T *aligned64(std::vector<T> &v, size_t n) {
    const size_t pad = 64 / sizeof(T);
    if (v.size() < n + pad) v.resize(n + pad);
    const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
    return reinterpret_cast<T *>((p + 63) & ~(uintptr_t)63);
}

// IEEE half -> float, exact (subnormals, inf, NaN). Portable: no F16C needed.
static inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);
    } else if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
        }
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}

// IEEE binary32 -> binary16 as ggml converts (GGML_FP32_TO_FP16, with or without F16C): round to
// nearest, ties to even; magnitudes from 65520 (the midpoint above 65504) round to inf; gradual
// underflow; a NaN becomes the quiet NaN 0x7E00 with the sign kept (the payload is dropped).
// Every quantiser's fp16 scales and the F16 type's weights go through this one function.
static inline uint16_t f32_to_f16_rne(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00u;
    if (a >= 0x477FF000u) return sign | 0x7C00u;
    if (a >= 0x38800000u) {  // normal half: rebias the exponent, round 13 mantissa bits away
        const uint32_t h = (a - (112u << 23)) >> 13, rem = a & 0x1FFFu;
        return sign | (uint16_t)(h + (rem > 0x1000u || (rem == 0x1000u && (h & 1u))));
    }
    // Subnormal half (units of 2^-24): value = m * 2^(e - 150) with the implicit bit in m.
    const uint32_t e = a >> 23;
    const uint32_t m = e ? (a & 0x7FFFFFu) | 0x800000u : a;
    const uint32_t s = 126u - (e ? e : 1u);  // value * 2^24 = m >> s (s >= 14)
    if (s > 24u) return sign;                // < half a unit: rounds to zero
    const uint32_t r = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    return sign | (uint16_t)(r + (rem > half || (rem == half && (r & 1u))));  // r + 1 may reach 0x400: the least normal
}

// The quantisers' bytes depend on IEEE defaults: round to nearest even and gradual underflow. A
// library built with -ffast-math can switch a process to flush-to-zero / denormals-are-zero when
// it is loaded, and a caller may have unmasked FP exceptions (inf*0 happens inside ggml's
// reference algorithms for huge finite inputs). Each quantiser worker runs under the default
// mode and restores the caller's afterwards.
class DefaultFpMode {
  public:
#if defined(LMT_FPENV_SSE)
    DefaultFpMode() : saved_(_mm_getcsr()) {
        // Clear FTZ (bit 15), DAZ (bit 6) and rounding control (bits 13-14); mask all
        // exceptions (bits 7-12).
        _mm_setcsr((saved_ & ~0xE040u) | 0x1F80u);
    }
    ~DefaultFpMode() { _mm_setcsr(saved_); }

  private:
    unsigned int saved_;
#elif defined(LMT_FPENV_A64)
    DefaultFpMode() {
        __asm__ __volatile__("mrs %0, fpcr" : "=r"(saved_));
        // Clear FZ (bit 24), RMode (bits 22-23) and the trap enables (bits 8-12, 15).
        const uint64_t v = saved_ & ~((1ull << 24) | (3ull << 22) | (0x1Full << 8) | (1ull << 15));
        __asm__ __volatile__("msr fpcr, %0" : : "r"(v));
    }
    ~DefaultFpMode() { __asm__ __volatile__("msr fpcr, %0" : : "r"(saved_)); }

  private:
    uint64_t saved_;
#else
    DefaultFpMode() = default;
#endif
    DefaultFpMode(const DefaultFpMode &) = delete;
    DefaultFpMode &operator=(const DefaultFpMode &) = delete;
};
// Non-finite test on the exponent bits: immune to -ffast-math style assumptions.
static inline bool is_nonfinite(float x) { return (f32_bits(x) & 0x7F800000u) == 0x7F800000u; }
// Serial scan of one row (the norms' overflow diagnosis tells a non-finite row from an overflow).
static inline bool row_finite(const float *xr, int64_t cols) {
    for (int64_t i = 0; i < cols; ++i)
        if (is_nonfinite(xr[i])) return false;
    return true;
}

// The canonical Q4_K / Q5_K weight of code q at index i of the block at b (d, dmin and the packed
// scales at its start): fma(q, d * sc[j], -(dmin * m[j])), j = i / 32.
static inline float k_weight_at(const uint8_t *b, int i, uint32_t q) {
    uint16_t d, dmin;
    std::memcpy(&d, b, 2);
    std::memcpy(&dmin, b + 2, 2);
    const float d1 = f16_to_f32(d) * (float)lmt_q5k_scale(b + 4, i / 32);
    const float m1 = f16_to_f32(dmin) * (float)lmt_q5k_min(b + 4, i / 32);
    return std::fma((float)q, d1, -m1);
}

// Per-block constants of the canonical Q5_K weight: w = fma(q, d1[j], -m1[j]) for sub-block j,
// d1[j] = d * sc[j], m1[j] = dmin * m[j] (one rounding each, as ggml's dequantiser).
static inline void q5k_block_scales(const lmt_block_q5_K *b, float d1[8], float m1[8]) {
    const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
    for (int j = 0; j < 8; ++j) {
        d1[j] = d * (float)lmt_q5k_scale(b->scales, j);
        m1[j] = dmin * (float)lmt_q5k_min(b->scales, j);
    }
}

// Matvec kernels per ISA: rows [r0, r1) of W for all T activation rows.
// logits is (T, rows) with row stride `rows`.
struct MatvecArgs {
    const uint8_t *w;
    int64_t rows, cols;
    size_t row_stride;
    const float *x;  // (T, cols)
    int64_t T;
    float *logits;   // (T, rows)
};
void matvec_q5_k_scalar(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q5_k_avx2(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q5_k_avx512(const MatvecArgs &a, int64_t r0, int64_t r1);
void matvec_q5_k_neon(const MatvecArgs &a, int64_t r0, int64_t r1);

// ---- int16-activation path (Precision::I16) -------------------------------------------------
// Activations prepared once per call (prepare_x_i16, matvec_q5_k.cpp), shared by every ISA:
//   xq  (T, cols) int16, each 256-block quantised as round_even(x * 32767/max|x|), |xq| <= 32767,
//       stored PERMUTED within each 64-weight group g of a block so that the x86 unpack needs no
//       shuffles: [x(64g+2w)]_{w<16} [x(64g+2w+1)] [x(64g+32+2w)] [x(64g+32+2w+1)]
//       (see xi16_pos); a block whose x has a NaN/Inf gets xq = 0 and dx = NaN.
//   xsum (T, cols/32) f32: sum of xq over each 32-weight sub-block (for the dmin*m term),
//       an integer of at most 32 * 32767 < 2^24, so exact in f32.
//   dx   (T, cols/256) f32: the block's scale max|x|/32767 (0 for an all-zero block).
//
// The canonical result (matvec_q5_k_i16_scalar is the reference). For activation row t and
// super-block b (256 weights, 6-bit scales sc[j] / mins m[j], j = sub-block of 32):
//   L[k]  = sum_{i : (i >> 2) & 7 == k} sc[i>>5] * q[i] * xq[i]       k in 0..7, exact int32
//   M[k]  = m[k] * xsum[b][k]          exact int32; (float)M[k] == (float)m[k] * xsum_f32 (one rounding)
//   acc[k] = fma((float)L[k], d * dx[b], acc[k]);                    (float)int: round to nearest
//   acc[k] = fma(-(float)M[k], dmin * dx[b], acc[k]);                in block order b = 0, 1, ...
//   logit = ((acc[0..3] + acc[4..7]) -> 2 -> 1)                       ("hsum8")
// Integer bounds: |L[k]| <= 32 * 31 * 63 * 32767 = 2,047,806,432 < 2^31 (lane k holds 32 weights
// of the block), so any grouping of the integer additions is exact, and every ISA may build L
// its own way as long as lane k holds exactly those 32 products. |M[k]| <= 63 * 32 * 32767.
static inline int xi16_pos(int i) {  // position of weight i (0..255) in its block's xq
    const int g = i >> 6, half = (i >> 5) & 1, l = i & 31;
    return 64 * g + 32 * half + 16 * (l & 1) + (l >> 1);
}
//
// ---- 24-bit block fixed point (Precision::I24) ---------------------------------------------
// Two pieces per element, with s = max|x|/32767 per 256-block (double):
//   a = clamp(floor(x / s), -32767, 32767)              int16, xq's permuted layout
//   b = clamp(round_even((x - a*s) * 255 / s), 0, 255)  uint8: x - a*s lies in [0, s)
//   x ~= s * (a + b/255)        step s/255 = max|x| / 8,355,585 ~ max|x| * 2^-23
// i.e. f32's 24-bit significand relative to the block's largest element: the representation
// error is at most max|x| * 2^-24 (plus the f32 roundings of dx and dxr).
//   xr    (T, cols) uint8 b in NATURAL order (the x86 vpmaddubsw takes it as the unsigned
//         operand against the unpacked weight bytes), 0 for a non-finite or all-zero block.
//   dx    (float)s;  dxr (T, cols/256) f32: (float)(s / 255)  (NaN / 0 as dx).
//   xsum  (T, cols/32) f32: HERE X = (float)(dx * sum(a) + dxr * sum(b)) over each sub-block:
//         the represented x's sum, rounded once (NaN for a non-finite block).
// Canonical result (matvec_q5_k_i16_scalar with xr != nullptr is the reference). Both pieces are
// summed against weights CENTRED on 16, w = d*sc*(q - 16) + C with C = 16*d*sc - dmin*m, so the
// integer sums and the f32 roundings act at the scale of w itself, not of d*sc*q (~3.6x larger
// for quantised Gaussian weights; uncentred, the roundings gave 4.4-5.8e-7 normwise):
//   L[k] = sum_{(i >> 2) & 7 == k} sc[i>>5] * (q[i] - 16) * a[i]      |L| <= 32*16*63*32767 < 2^30
//   R[k] = sum_{(i >> 2) & 7 == k} sc[i>>5] * (q[i] - 16) * b[i]      |R| <= 32*16*63*255 < 2^23
//   C[k] = fma(16*d, sc[k], -(dmin*m[k]))                             one rounding
//   acc[k] = fma((float)L[k], d*dx, acc[k]);  acc[k] = fma((float)R[k], d*dxr, acc[k]);
//   acc[k] = fma(C[k], xsum[b][k], acc[k]);                           in block order
//   logit = hsum8(acc)
// The centring is free on x86: the unpack yields q - 16 as a signed byte (q5k_split_group<G, true>).
// Measured (600 x 6656 quantised Gaussian weights, Gaussian x, 3 rows): see docs/DESIGN.md.
// An outlier block is not computed this way as it is: its largest elements are taken out (and
// added back in f32) or the row takes the type's F32 kernel (cpu/i24_outliers.hpp; Q5_K, Q4_K
// and, per 32-block, Q4_0).
// ---- I24 activation outliers (cpu/i24_outliers.hpp) -----------------------------------------
// I24's representation step is absolute within a block: every element is held to ~max|x_b|/2^23,
// so an element far below its block's max keeps few significant bits. With activation outliers
// (a few elements 100-1000x the rest) and weights that are large where x is ordinary (the usual
// case: outlier channels of x and of W are different columns), the logit is dominated by
// ordinary elements whose relative error is ~ (max|x_b| / |x_i|) * 2^-24: measured 2e-6 to 1.5e-5
// normwise. A block whose NONZERO elements have a median magnitude below max|x_b| / 8 is therefore
// not run as it is: its largest elements are taken out (and added back in f32) until it passes, or
// the row takes the F32 kernel (i24_outliers.hpp). No criterion on x alone can bound the error for
// every W (a W that weights only x's tiniest elements defeats any of them), so the threshold is
// measured: over Gaussian / uniform / Laplace / Student-t3 blocks with 1-16 outliers at 2-24x the
// median and 300x weight spikes, blocks below max/median = 8 reached 7.7e-7 normwise (below 16:
// 1.0e-6, unbounded: 2.3e-5); the rest of I24's error (~3e-7 with spiky weights) is the centring
// term C*X cancelling against L in f32. Exact zeros are represented exactly and do not count. A
// Gaussian block has max/median ~ 4.5 (it needs a >5-sigma max to trip).

// Runs fn(x_sub, T_sub, logits_sub) on the activation rows `sel` of x (T, cols) -> logits (T,
// rows): in place when sel is every row, else through gathered copies (xg, lg: caller scratch).
template <class Fn>
inline void for_row_subset(const int64_t *sel, int64_t n, const float *x, int64_t T, int64_t cols, float *logits,
                           int64_t rows, float *xg, float *lg, Fn &&fn) {
    if (n == 0) return;
    if (n == T) {
        fn(x, T, logits);
        return;
    }
    for (int64_t k = 0; k < n; ++k) std::memcpy(xg + k * cols, x + sel[k] * cols, sizeof(float) * (size_t)cols);
    fn(xg, n, lg);
    for (int64_t k = 0; k < n; ++k) std::memcpy(logits + sel[k] * rows, lg + k * rows, sizeof(float) * (size_t)rows);
}

// x (T, cols) -> the I16 layout above, or with xr/dxr non-null the I24 layout (csrc/cpu/activations_k.cpp;
// Q5_K's I16/I24 and Q4_K's I24 read these bytes).
void prepare_x_i16(const float *x, int64_t T, int64_t cols, int16_t *xq, float *xsum, float *dx, uint8_t *xr,
                   float *dxr);

// The AVX-512 integer kernels (types/q5_k/k_avx512.hpp) read the prepared activations in their
// own order, applied in place by the dispatch (Isa::Avx512 only; the values are unchanged):
//  - pass-major: activation rows are taken in passes of kK512Pass (t0 = 0, 8, ..; the last pass
//    has tg = min(8, T - t0) rows) and within a pass every per-(row, block) record is stored
//    block-major, record (t0 + t, b) at pass offset b * tg + t (xq, xr: 256 elements; xsum: 8;
//    dx, dxr: 1), so one pointer per array serves all the pass's rows with constant offsets;
//  - xq's middle two 16-element chunks of every 64-weight group swapped ([E2g O2g E2g+1 O2g+1]
//    -> [E2g E2g+1 O2g O2g+1], E/O the even / odd weights of a sub-block), so each vpdpwssd
//    operand is one contiguous zmm.
constexpr int kK512Pass = 8;
void k512_activation_layout(int64_t T, int64_t cols, int16_t *xq, float *xsum, float *dx, uint8_t *xr, float *dxr);

struct MatvecI16Args {
    const uint8_t *w;
    int64_t rows, cols;
    size_t row_stride;
    const int16_t *xq;    // (T, cols), permuted as above
    const float *xsum;    // (T, cols/32): I16 integer sums of xq; I24 sums of x (see below)
    const float *dx;      // (T, cols/256)
    int64_t T;
    float *logits;        // (T, rows)
    const uint8_t *xr = nullptr;    // I24 only: (T, cols) residual, natural order
    const float *dxr = nullptr;     // I24 only: (T, cols/256)
    const int8_t *xd = nullptr;     // Isa::NeonDot I24 only: k_dot_layout's records
};

// The I24 activations as byte planes for the NEON dotprod kernels (types/q5_k/k_neon_dot.hpp),
// per activation row t and block b one kKDotRecord record at xd + (t * cols/256 + b) * kKDotRecord,
// each plane in NATURAL weight order (sdot lane = 4 consecutive weights = one canonical lane):
//   [0, 256)    ah = a >> 8             (a = 256 * ah + al exactly, al = a & 255 in [0, 255])
//   [256, 512)  al - 128                (signed: the dot product has no signed x unsigned form)
//   [512, 768)  b - 128
// The two -128 offsets come back as 128 * (the weights' sum), a weight-only term.
constexpr int64_t kKDotRecord = 768;
void k_dot_layout(const int16_t *xq, const uint8_t *xr, int64_t T, int64_t cols, int8_t *xd);

void matvec_q5_k_i16_scalar(const MatvecI16Args &a, int64_t r0, int64_t r1);
void matvec_q5_k_i16_avx2(const MatvecI16Args &a, int64_t r0, int64_t r1);
void matvec_q5_k_i16_avxvnni(const MatvecI16Args &a, int64_t r0, int64_t r1);
void matvec_q5_k_i16_avx512(const MatvecI16Args &a, int64_t r0, int64_t r1);
// The I24 outlier add-back's weights of 16 rows (cpu/i24_outliers.hpp: Weights16).
bool q5_k_weights16_avx512(const uint8_t *row0, size_t row_stride, int64_t c, float *w16);
void matvec_q5_k_i16_neon(const MatvecI16Args &a, int64_t r0, int64_t r1);
void matvec_q5_k_i24_neon_dot(const MatvecI16Args &a, int64_t r0, int64_t r1);  // I24, needs xd

// Canonical 8-lane horizontal sum of the I16 path.
static inline float hsum8_canonical(const float a[8]) {
    float b[4], c[2];
    for (int l = 0; l < 4; ++l) b[l] = a[l] + a[l + 4];
    for (int l = 0; l < 2; ++l) c[l] = b[l] + b[l + 2];
    return c[0] + c[1];
}

// The 6-bit scales and mins of a block as bytes sc[0..7] | m[0..7] (little-endian u64 each).
static inline void q5k_scale_min_bytes(const lmt_block_q5_K *b, uint64_t *sc, uint64_t *mm) {
    uint32_t a, bb, c;
    std::memcpy(&a, b->scales + 0, 4);
    std::memcpy(&bb, b->scales + 4, 4);
    std::memcpy(&c, b->scales + 8, 4);
    // Bytes 0-3 hold sc[0..3] | hi bits of sc[4..7]; 4-7 m[0..3] | hi bits of m[4..7];
    // 8-11 the low nibbles of sc[4..7] (low) and m[4..7] (high).
    *sc = (uint64_t)(a & 0x3F3F3F3Fu) | ((uint64_t)((c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u)) << 32);
    *mm = (uint64_t)(bb & 0x3F3F3F3Fu) | ((uint64_t)(((c >> 4) & 0x0F0F0F0Fu) | ((bb >> 2) & 0x30303030u)) << 32);
}

[[noreturn]] inline void fail_arg(const std::string &msg) { throw ArgumentError(msg); }

}  // namespace lmt::cpu
