// EXPERIMENT (not built, not shipped): the quantised CUDA types on integer tensor cores.
// Status 2026-12-02 (H200): every lmtail_cuda_check type check passes when it replaces the
// quantised rows of csrc/cuda/mul_mv.cu's table (add this file to lmtail_cuda, declare
// launch_mul_mv_int in launch.hpp, point the Q rows at it): 5e-8..1.5e-7 normwise from f64, T = 1..15
// byte-identical to the T = 16 batch, non-finite x -> non-finite row. Speed at 202048 x 6656 is
// below the shipped f32 kernel: T = 1 Q4_0 0.577 ms, Q8_0 0.789, Q4_K 0.580, Q5_K 0.615, Q6_K 1.246
// (31-43 % of copy; T = 8 22-34 %). ncu: Q5_K limited by registers (8 warps / SM before launch
// bounds, 42 % issue), Q6_K by L1 wavefronts (65 % L1 throughput: each 2-byte load of an MMA
// fragment touches 8 rows). Next: stage each CTA's rows through shared memory with coalesced
// 16-byte loads (the 16-row slab is contiguous and 32-byte aligned) and read fragments from there;
// more rows per CTA so the 4-byte-per-element x planes are read once per 64 rows.
// Sweep: bench/cuda/sweep_int.sh (VARIANTS="-DLMT_MVI_MINB=3 ...").
// y[t][r] = sum_c W[r][c] x[t][c] for the quantised weight types (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) on
// integer tensor cores, exact integer products, batch invariant (docs/DESIGN.md, "CUDA backend").
//
// * x is prepared once per call (prep_x): each 32-column group g of each token gets a power-of-two
//   scale sx = 2^e (e from the group's max |x|) and the integer X = rint(x / sx), |X| < 2^31, split
//   into four bytes X = 2^24 p0 + 2^16 p1 + 2^8 p2 + p3 (p0 signed, the rest unsigned). Elements
//   within 2^-7 of the group's max are exact; every element is within max|x_g| 2^-32.
// * W's codes q (the stored integers: unsigned with the type's offset or min kept apart, or signed
//   for Q8_0 and Q6_K's q - 32) multiply the four byte planes on the tensor cores (mma.sync m16n8k32,
//   m16n8k16 for Q6_K's 16-weight scales): S_p = sum q p_p exactly in int32 (|S_p| < 2^21).
// * Per (row, token, scale group) one fixed f32 expression:
//       V = fma(float(256 S0 + S1), 2^16, float(256 S2 + S3)),   u = V * sx   (exact)
//       acc = fma(scale, u, acc),  accm = fma(min, sum_g x, accm)       (min: K types' dmin m, Q4_0's 8 d)
//   Warp w of a CTA takes the groups g = w (mod 8) in order (26-term chains at 6656 columns), and
//   the CTA adds the 8 warps' (acc - accm) in a fixed tree. Nothing depends on T, on which token
//   slot holds a token or on the launch, so a token's logits are the same bytes alone and in any
//   batch; a non-finite x makes sx NaN, so its token's whole row of logits is NaN.
#include "common.cuh"
#include "launch.hpp"

#include <cmath>

namespace lmt::cuda {

namespace {

constexpr int kWarps = 8;    // warps per CTA: warp w takes the column groups g = w (mod 8)
constexpr int kRows = 16;    // rows per CTA (the MMA's M)
constexpr int kSlots = 8;    // token slots per launch (the MMA's N)
#ifndef LMT_MVI_MINB
#define LMT_MVI_MINB 3
#endif
#ifndef LMT_MVI_AHEAD
#define LMT_MVI_AHEAD 1
#endif
constexpr int kAhead = LMT_MVI_AHEAD;  // groups per warp per chunk (performance only)

// ---- x preparation: per (token, group) 128 bytes, [lane c][plane p][word 4c.., word 16+4c..] ----
template <bool kM1>
__global__ void prep_x(const float *__restrict__ x, int T, int cols, uint4 *__restrict__ xq, float2 *__restrict__ meta) {
    const int ng = cols / 32;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * ng) return;
    const int t = i / ng, g = i - t * ng;
    const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)t * cols + 32 * (size_t)g);
    float v[32];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const float4 a = __ldg(xp + k);
        v[4 * k] = a.x; v[4 * k + 1] = a.y; v[4 * k + 2] = a.z; v[4 * k + 3] = a.w;
    }
    float mx = 0.0f, xs = 0.0f;
    bool bad = false;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        bad |= nonfinite(v[k]);
        mx = fmaxf(mx, fabsf(v[k]));
        xs = __fadd_rn(xs, v[k]);
    }
    float sx = 1.0f, inv = 0.0f;
    if (bad) {
        sx = __int_as_float(0x7FC00000);
        xs = sx;
    } else if (mx > 0.0f) {
        // |x| / 2^e < 2^(ilogb + 1 - e) = 2^31. e >= -126 keeps sx a normal float: a group whose max
        // is below 2^-96 keeps fewer than 32 bits (far below any real hidden state).
        int e = ilogbf(mx) - 30;
        if (e < -126) e = -126;
        sx = ldexpf(1.0f, e);
        inv = ldexpf(1.0f, -e);
    }
    uint32_t pw[4][8];  // plane p, word k: bytes 4k .. 4k + 3 of the group
#pragma unroll
    for (int k = 0; k < 8; ++k) {
#pragma unroll
        for (int p = 0; p < 4; ++p) pw[p][k] = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const uint32_t X = (uint32_t)__float2int_rn(__fmul_rn(v[4 * k + b], inv));
#pragma unroll
            for (int p = 0; p < 4; ++p) pw[p][k] |= ((X >> (24 - 8 * p)) & 0xFFu) << (8 * b);
        }
    }
    uint4 *o = xq + (size_t)i * 8;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const int w0 = kM1 ? 2 * c : c, w1 = kM1 ? 2 * c + 1 : c + 4;
        o[2 * c] = make_uint4(pw[0][w0], pw[0][w1], pw[1][w0], pw[1][w1]);
        o[2 * c + 1] = make_uint4(pw[2][w0], pw[2][w1], pw[3][w0], pw[3][w1]);
    }
    meta[i] = make_float2(sx, xs);
}

// ---- tensor-core products -------------------------------------------------------------------
// A: rows g / g + 8 of the CTA's 16, k slots 4c .. 4c + 3 (a0, a1) and 16 + 4c .. (a2, a3); B: the
// token in slot g, the same k slots; C: rows g / g + 8, token slots 2c, 2c + 1.
template <bool kSignedA, bool kSignedB>
__device__ __forceinline__ void mma_k32(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int (&d)[4]) {
#define LMT_MMA32(AT, BT)                                                                                  \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." AT "." BT ".s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
                 "{%8,%9}, {%10,%11,%12,%13};"                                                             \
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0))
    if (kSignedA && kSignedB) LMT_MMA32("s8", "s8");
    else if (kSignedA) LMT_MMA32("s8", "u8");
    else if (kSignedB) LMT_MMA32("u8", "s8");
    else LMT_MMA32("u8", "u8");
#undef LMT_MMA32
}
template <bool kSignedB>
__device__ __forceinline__ void mma_k16_s8(uint32_t a0, uint32_t a1, uint32_t b0, int (&d)[4]) {
#define LMT_MMA16(BT)                                                                                  \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8." BT ".s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, " \
                 "{%7,%8,%9,%10};"                                                                    \
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])                                     \
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0))
    if (kSignedB) LMT_MMA16("s8");
    else LMT_MMA16("u8");
#undef LMT_MMA16
}

__device__ __forceinline__ float f16_lo(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xFFFFu))); }
__device__ __forceinline__ float f16_hi(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }
__device__ __forceinline__ uint32_t ld_u16(const uint8_t *p) { return (uint32_t)__ldg(reinterpret_cast<const unsigned short *>(p)); }
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t *p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }
__device__ __forceinline__ uint32_t ld_u32(const uint8_t *p) { return __ldg(reinterpret_cast<const uint32_t *>(p)); }

// ---- the types: one row's codes for k slots {4c..4c+3} (lo) and {16+4c..} (hi) of group g, and its
// scale (and min) for that group (Q6_K: a scale per 16-weight half). -------------------------------
struct Codes {
    uint32_t lo, hi;
    float scale, scale_hi, mn;
};

// K types' 6-bit (scale, min) of sub-block j from the 12 packed bytes (hd.y, hd.z, hd.w).
__device__ __forceinline__ void k_scale_min(const uint4 hd, int j, float &scale, float &mn) {
    const int jj = j & 3;
    const uint32_t b0 = (hd.y >> (8 * jj)) & 0xFFu, b1 = (hd.z >> (8 * jj)) & 0xFFu, b2 = (hd.w >> (8 * jj)) & 0xFFu;
    const uint32_t sc = j >= 4 ? ((b2 & 0xFu) | ((b0 >> 6) << 4)) : (b0 & 63u);
    const uint32_t m = j >= 4 ? ((b2 >> 4) | ((b1 >> 6) << 4)) : (b1 & 63u);
    scale = __fmul_rn(f16_lo(hd.x), (float)sc);
    mn = __fmul_rn(f16_hi(hd.x), (float)m);
}

// Each type: Raw (what a lane loads for one row and group, so the next groups' loads can be in flight
// while this one is decoded), load, and decode to Codes.
// Q4_K and Q5_K: one unit = one 256-block (8 groups), 8 contiguous bytes per lane per 32-byte row
// piece (k slots 4c.. / 16 + 4c.. hold weights 8c.. / 8c + 4..: mapping kM1 of prep_x).
struct IntQ4K {
    static constexpr bool kSigned = false, kMin = true, kHalves = false, kM1 = true;
    static constexpr int kG = 8;
    struct Raw { uint4 hd; };
    static __device__ __forceinline__ void load(const uint8_t *row, int u, int c, Raw &r) {
        r.hd = __ldg(reinterpret_cast<const uint4 *>(row + (size_t)u * LMT_Q4K_BLOCK_BYTES));
    }
    static __device__ __forceinline__ void decode(const Raw &r, const uint8_t *row, int g, int c, Codes &k) {
        const int j = g & 7, sh = 4 * (j & 1);
        const uint2 q = __ldg(reinterpret_cast<const uint2 *>(row + (size_t)(g >> 3) * LMT_Q4K_BLOCK_BYTES + 16 +
                                                              32 * (j >> 1) + 8 * c));
        k.lo = (q.x >> sh) & 0x0F0F0F0Fu;
        k.hi = (q.y >> sh) & 0x0F0F0F0Fu;
        k_scale_min(r.hd, j, k.scale, k.mn);
    }
};

struct IntQ5K {
    static constexpr bool kSigned = false, kMin = true, kHalves = false, kM1 = true;
    static constexpr int kG = 8;
    struct Raw { uint4 hd; uint2 qh; };
    static __device__ __forceinline__ void load(const uint8_t *row, int u, int c, Raw &r) {
        const uint8_t *b = row + (size_t)u * LMT_Q5K_BLOCK_BYTES;
        r.hd = __ldg(reinterpret_cast<const uint4 *>(b));
        r.qh = __ldg(reinterpret_cast<const uint2 *>(b + 16 + 8 * c));
    }
    static __device__ __forceinline__ void decode(const Raw &r, const uint8_t *row, int g, int c, Codes &k) {
        const int j = g & 7, sh = 4 * (j & 1);
        const uint2 q = __ldg(reinterpret_cast<const uint2 *>(row + (size_t)(g >> 3) * LMT_Q5K_BLOCK_BYTES + 48 +
                                                              32 * (j >> 1) + 8 * c));
        k.lo = ((q.x >> sh) & 0x0F0F0F0Fu) | (((r.qh.x >> j) & 0x01010101u) << 4);
        k.hi = ((q.y >> sh) & 0x0F0F0F0Fu) | (((r.qh.y >> j) & 0x01010101u) << 4);
        k_scale_min(r.hd, j, k.scale, k.mn);
    }
};

// Bytes q in 0..63 to the signed bytes q - 32 (no carries between bytes).
__device__ __forceinline__ uint32_t minus32(uint32_t q) {
    const uint32_t t = q ^ 0x20202020u;
    return t | ((t & 0x20202020u) * 6u);
}

struct IntQ6K {
    static constexpr int kG = 1;
    static constexpr bool kM1 = false;
    static constexpr bool kSigned = true, kMin = false, kHalves = true;
    struct Raw { uint32_t l0, l1, h0, h1, sd; };  // sd: scales[8h + 2qq], [+1] (low half), f16 d (high)
    static __device__ __forceinline__ void load(const uint8_t *row, int g, int c, Raw &r) {
        const int j = g & 7, h = j >> 2, qq = j & 3;  // half h, quarter qq: weights 128 h + 32 qq + l
        const uint8_t *b = row + (size_t)(g >> 3) * LMT_Q6K_BLOCK_BYTES;
        const uint8_t *ql = b + 64 * h + 32 * (qq & 1), *qh = b + 128 + 32 * h;
        r.l0 = ld_u32_a2(ql + 4 * c);
        r.l1 = ld_u32_a2(ql + 16 + 4 * c);
        r.h0 = ld_u32_a2(qh + 4 * c);
        r.h1 = ld_u32_a2(qh + 16 + 4 * c);
        r.sd = ld_u16(b + 192 + 8 * h + 2 * qq) | (ld_u16(b + 208) << 16);
    }
    static __device__ __forceinline__ void decode(const Raw &r, const uint8_t *, int g, int, Codes &k) {
        const int qq = g & 3, ns = 4 * (qq >> 1), hs = 2 * qq;
        k.lo = minus32(((r.l0 >> ns) & 0x0F0F0F0Fu) | (((r.h0 >> hs) & 0x03030303u) << 4));
        k.hi = minus32(((r.l1 >> ns) & 0x0F0F0F0Fu) | (((r.h1 >> hs) & 0x03030303u) << 4));
        const float d = f16_hi(r.sd);
        k.scale = __fmul_rn(d, (float)(int8_t)(r.sd & 0xFFu));
        k.scale_hi = __fmul_rn(d, (float)(int8_t)((r.sd >> 8) & 0xFFu));
        k.mn = 0.0f;
    }
};

struct IntQ8_0 {
    static constexpr int kG = 1;
    static constexpr bool kM1 = false;
    static constexpr bool kSigned = true, kMin = false, kHalves = false;
    struct Raw { uint32_t q0, q1, d; };
    static __device__ __forceinline__ void load(const uint8_t *row, int g, int c, Raw &r) {
        const uint8_t *b = row + (size_t)g * LMT_Q8_0_BLOCK_BYTES;
        r.q0 = ld_u32_a2(b + 2 + 4 * c);
        r.q1 = ld_u32_a2(b + 18 + 4 * c);
        r.d = ld_u16(b);
    }
    static __device__ __forceinline__ void decode(const Raw &r, const uint8_t *, int, int, Codes &k) {
        k.lo = r.q0;
        k.hi = r.q1;
        k.scale = f16_lo(r.d);
        k.mn = 0.0f;
    }
};

struct IntQ4_0 {
    static constexpr int kG = 1;
    static constexpr bool kM1 = false;
    static constexpr bool kSigned = false, kMin = true, kHalves = false;
    struct Raw { uint32_t q, d; };
    static __device__ __forceinline__ void load(const uint8_t *row, int g, int c, Raw &r) {
        const uint8_t *b = row + (size_t)g * LMT_Q4_0_BLOCK_BYTES;
        r.q = ld_u32_a2(b + 2 + 4 * c);  // weights 4c.. (low nibbles) and 16 + 4c.. (high)
        r.d = ld_u16(b);
    }
    static __device__ __forceinline__ void decode(const Raw &r, const uint8_t *, int, int, Codes &k) {
        k.lo = r.q & 0x0F0F0F0Fu;
        k.hi = (r.q >> 4) & 0x0F0F0F0Fu;
        k.scale = f16_lo(r.d);
        k.mn = __fmul_rn(k.scale, 8.0f);  // d (q - 8)
    }
};

// The per-group combine (file comment): exact int sums of the four planes -> the f32 expression.
__device__ __forceinline__ float planes_value(int s0, int s1, int s2, int s3) {
    return fmaf(__int2float_rn(s0 * 256 + s1), 65536.0f, __int2float_rn(s2 * 256 + s3));
}

// Token slots in use: TG = 1 (slot 0 only: the combine runs for C's first column) or 8.
template <class Ty, int TG>
__global__ void __launch_bounds__(kWarps * 32, LMT_MVI_MINB) mul_mv_int(const uint8_t *__restrict__ w, size_t row_stride, int rows,
                                                          int cols, const uint4 *__restrict__ xq,
                                                          const float2 *__restrict__ meta, int T,
                                                          float *__restrict__ y) {
    __shared__ float red[kWarps][kRows][TG];
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const int gi = lane >> 2, c = lane & 3;  // MMA groupID (row / B token slot) and thread in group
    const int row0 = blockIdx.x * kRows;
    const int ra = min(row0 + gi, rows - 1), rb = min(row0 + gi + 8, rows - 1);
    const uint8_t *pa = w + (size_t)ra * row_stride, *pb = w + (size_t)rb * row_stride;
    const int ng = cols / 32;
    // C element e: rows (gi, gi, gi + 8, gi + 8), token slots (2c, 2c + 1, 2c, 2c + 1).
    const int t0 = TG == 1 ? 0 : min(2 * c, T - 1), t1 = TG == 1 ? 0 : min(2 * c + 1, T - 1);
    const bool loads_b = gi < T && (TG > 1 || gi == 0);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, accm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // Groups in chunks of kAhead per warp: the next chunk's weight bytes are in flight while this
    // one is decoded and multiplied (performance only; the order of each element's sums is fixed).
    constexpr int A = kAhead, G = Ty::kG;
    const int nu = ng / G;  // units (G groups) of the row; warp wp takes units wp, wp + 8, ...
    typename Ty::Raw cur[A][2], nxt[A][2];
    auto load_chunk = [&](int ch, typename Ty::Raw (&buf)[A][2]) {
#pragma unroll
        for (int a = 0; a < A; ++a) {
            const int u = wp + kWarps * (ch * A + a);
            if (u < nu) {
                Ty::load(pa, u, c, buf[a][0]);
                Ty::load(pb, u, c, buf[a][1]);
            }
        }
    };
    const int chunks = (nu - wp + kWarps * A - 1) / (kWarps * A);
    // K units (8 groups) carry enough bytes alone; the one-group types keep the next chunk in flight.
    constexpr bool kPrefetch = G == 1;
    if (kPrefetch && chunks > 0) load_chunk(0, cur);
    for (int ch = 0; ch < chunks; ++ch) {
        if (!kPrefetch) load_chunk(ch, cur);
        else if (ch + 1 < chunks) load_chunk(ch + 1, nxt);
#pragma unroll
    for (int a = 0; a < A; ++a) {
        const int u = wp + kWarps * (ch * A + a);
        if (u >= nu) break;
#pragma unroll 2
    for (int jg = 0; jg < G; ++jg) {
        const int g = u * G + jg;
        Codes ka, kb;
        Ty::decode(cur[a][0], pa, g, c, ka);
        Ty::decode(cur[a][1], pb, g, c, kb);
        uint4 b01 = make_uint4(0, 0, 0, 0), b23 = b01;
        if (loads_b) {
            const uint4 *xp = xq + ((size_t)gi * ng + g) * 8 + 2 * c;
            b01 = __ldg(xp);
            b23 = __ldg(xp + 1);
        }
        const float2 m0 = __ldg(meta + (size_t)t0 * ng + g), m1 = __ldg(meta + (size_t)t1 * ng + g);
        const float sx[4] = {m0.x, m1.x, m0.x, m1.x}, xs[4] = {m0.y, m1.y, m0.y, m1.y};
        const float sc[4] = {ka.scale, ka.scale, kb.scale, kb.scale};
        if (!Ty::kHalves) {
            const uint32_t a[4] = {ka.lo, kb.lo, ka.hi, kb.hi};
            int s0[4], s1[4], s2[4], s3[4];
            mma_k32<Ty::kSigned, true>(a, b01.x, b01.y, s0);
            mma_k32<Ty::kSigned, false>(a, b01.z, b01.w, s1);
            mma_k32<Ty::kSigned, false>(a, b23.x, b23.y, s2);
            mma_k32<Ty::kSigned, false>(a, b23.z, b23.w, s3);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (TG == 1 && (e & 1)) continue;
                const float u = __fmul_rn(planes_value(s0[e], s1[e], s2[e], s3[e]), sx[e]);
                acc[e] = fmaf(sc[e], u, acc[e]);
                if (Ty::kMin) accm[e] = fmaf(e < 2 ? ka.mn : kb.mn, xs[e], accm[e]);
            }
        } else {
            // Q6_K: a scale per 16 weights, so one m16n8k16 per half (k slots 4c.. and 16 + 4c..).
            int l0[4], l1[4], l2[4], l3[4], h0[4], h1[4], h2[4], h3[4];
            mma_k16_s8<true>(ka.lo, kb.lo, b01.x, l0);
            mma_k16_s8<false>(ka.lo, kb.lo, b01.z, l1);
            mma_k16_s8<false>(ka.lo, kb.lo, b23.x, l2);
            mma_k16_s8<false>(ka.lo, kb.lo, b23.z, l3);
            mma_k16_s8<true>(ka.hi, kb.hi, b01.y, h0);
            mma_k16_s8<false>(ka.hi, kb.hi, b01.w, h1);
            mma_k16_s8<false>(ka.hi, kb.hi, b23.y, h2);
            mma_k16_s8<false>(ka.hi, kb.hi, b23.w, h3);
            const float sh[4] = {ka.scale_hi, ka.scale_hi, kb.scale_hi, kb.scale_hi};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (TG == 1 && (e & 1)) continue;
                const float ul = __fmul_rn(planes_value(l0[e], l1[e], l2[e], l3[e]), sx[e]);
                const float uh = __fmul_rn(planes_value(h0[e], h1[e], h2[e], h3[e]), sx[e]);
                acc[e] = fmaf(sh[e], uh, fmaf(sc[e], ul, acc[e]));
            }
        }
    }
    }
        if (kPrefetch) {
#pragma unroll
            for (int a = 0; a < A; ++a) {
                cur[a][0] = nxt[a][0];
                cur[a][1] = nxt[a][1];
            }
        }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int slot = 2 * c + (e & 1), r = gi + 8 * (e >> 1);
        if (slot < TG) red[wp][r][slot] = Ty::kMin ? __fsub_rn(acc[e], accm[e]) : acc[e];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kRows * TG; i += kWarps * 32) {
        const int r = i % kRows, t = i / kRows;
        const float v = __fadd_rn(__fadd_rn(__fadd_rn(red[0][r][t], red[1][r][t]), __fadd_rn(red[2][r][t], red[3][r][t])),
                                  __fadd_rn(__fadd_rn(red[4][r][t], red[5][r][t]), __fadd_rn(red[6][r][t], red[7][r][t])));
        if (row0 + r < rows && t < T) y[(size_t)t * rows + row0 + r] = v;
    }
}

template <class Ty>
void launch_int(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y,
                cudaStream_t st) {
    const int ng = cols / 32;
    uint4 *xq = nullptr;
    float2 *meta = nullptr;
    const size_t qbytes = (size_t)T * ng * 128, mbytes = (size_t)T * ng * sizeof(float2);
    LMT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void **>(&xq), qbytes + mbytes, st));
    meta = reinterpret_cast<float2 *>(reinterpret_cast<uint8_t *>(xq) + qbytes);
    prep_x<Ty::kM1><<<(T * ng + 127) / 128, 128, 0, st>>>(x, T, cols, xq, meta);
    const dim3 grid((unsigned)((rows + kRows - 1) / kRows)), block(kWarps * 32);
    for (int t0 = 0; t0 < T; t0 += kSlots) {
        const int n = T - t0 < kSlots ? T - t0 : kSlots;
        const uint4 *q = xq + (size_t)t0 * ng * 8;
        const float2 *m = meta + (size_t)t0 * ng;
        float *ys = y + (size_t)t0 * rows;
        if (n == 1) mul_mv_int<Ty, 1><<<grid, block, 0, st>>>(w, row_stride, rows, cols, q, m, n, ys);
        else mul_mv_int<Ty, kSlots><<<grid, block, 0, st>>>(w, row_stride, rows, cols, q, m, n, ys);
    }
    LMT_CUDA_CHECK(cudaFreeAsync(xq, st));
}

}  // namespace

void launch_mul_mv_int(int type, const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T,
                       float *y, cudaStream_t stream) {
    switch (type) {
        case 2: launch_int<IntQ4_0>(w, row_stride, rows, cols, x, T, y, stream); break;
        case 8: launch_int<IntQ8_0>(w, row_stride, rows, cols, x, T, y, stream); break;
        case 12: launch_int<IntQ4K>(w, row_stride, rows, cols, x, T, y, stream); break;
        case 13: launch_int<IntQ5K>(w, row_stride, rows, cols, x, T, y, stream); break;
        case 14: launch_int<IntQ6K>(w, row_stride, rows, cols, x, T, y, stream); break;
        default: throw std::invalid_argument("cuda integer matvec: ggml type " + std::to_string(type) + " is not quantised");
    }
}

}  // namespace lmt::cuda
