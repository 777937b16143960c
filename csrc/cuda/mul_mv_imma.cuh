// The quantised types (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) on integer tensor cores, batch invariant.
// Included by mul_mv.cu (one translation unit; its type table routes these types here).
//
// * x is prepared once per call (imma_prep_x): per token and 256-column step a power of two sx =
//   2^e (|x| / sx < 2^30 over the step) and X = rint(x / sx) as four balanced signed byte planes,
//   X = 2^24 p0 + 2^16 p1 + 2^8 p2 + p3 (every element within 2^-30 max|x_step| of x).
//   K types also get the f32 sum of x over each 32-column sub-block (the min term).
// * W's stored codes as signed bytes (Q4_0 q - 8, Q8_0 q, Q4_K/Q5_K q in 0..31, Q6_K q - 32) times
//   the planes on mma.sync m16n8k32 s8 (two m16n8k16 for Q6_K's 16-weight scales): exact int32
//   sums. The K types' 6-bit or int8 sub-block scales multiply them exactly in int32 (|sum| < 2^28),
//   so their f32 epilogue runs once per 256-column super-block; Q4_0 / Q8_0 (an f16 scale per 32
//   columns) run it once per block. Any tiling gives the same integers.
// * One f32 epilogue per (row, token, scale block), the same instruction sequence whatever T is or
//   which MMA column holds the token: the token's planes (0, 1) and (2, 3) sit in two lanes, each
//   keeping its own f32 accumulator over the row's blocks in column order; y = acc01 + acc23. So a
//   token's logits are the same bytes at T = 1 and inside any batch. A non-finite x makes the
//   step's sx NaN, so the token's logits are NaN.
// * Memory: a warp owns 16 MT rows (MT m16 tiles) over all columns and streams them through a
//   private shared-memory ring of S stages (16-byte cp.async of each row's contiguous block bytes);
//   the MMA fragments are read from there. The x planes come through L1 (T <= 2) or a CTA-wide ring
//   beside it (Geo::XS). Needs 16-byte aligned rows (the caller's rule).
#pragma once

namespace imma {

enum Family { kFamQ0, kFamK, kFamQ6 };

// Per type: ggml id, bytes per 256 columns (one K block, eight Q4_0/Q8_0 blocks), family, whether it
// has a min term; kBB: bytes of one block.
struct Q40 { static constexpr int kId = 2, kBB = LMT_Q4_0_BLOCK_BYTES, kSB = 8 * kBB; static constexpr Family kFam = kFamQ0; static constexpr bool kMin = false; };
struct Q80 { static constexpr int kId = 8, kBB = LMT_Q8_0_BLOCK_BYTES, kSB = 8 * kBB; static constexpr Family kFam = kFamQ0; static constexpr bool kMin = false; };
struct Q4K { static constexpr int kId = 12, kBB = LMT_Q4K_BLOCK_BYTES, kSB = kBB; static constexpr Family kFam = kFamK; static constexpr bool kMin = true; };
struct Q5K { static constexpr int kId = 13, kBB = LMT_Q5K_BLOCK_BYTES, kSB = kBB; static constexpr Family kFam = kFamK; static constexpr bool kMin = true; };
struct Q6K { static constexpr int kId = 14, kBB = LMT_Q6K_BLOCK_BYTES, kSB = kBB; static constexpr Family kFam = kFamQ6; static constexpr bool kMin = false; };

// Launch geometry per type and regime (NT = n-tiles: 1 for T <= 2, 2 for T <= 4, 4 for more): ring
// stages S, warps per CTA W, m16 tiles per warp MT (16 MT rows), 256-column steps per stage KS, CTAs
// per SM the registers are capped for MB, unroll GU of a step's 8 groups, XS: the x planes staged
// once per CTA in shared memory (its warps then move in step, a CTA barrier per stage) instead of
// each warp reading them through L1. Performance only: the int32 sums are exact and the epilogue is
// per (row, token), so no geometry changes a result.
// Rule (bench/cuda/imma_sweep.sh, H100 and H200, docs/NOTES.md): one warp per 16 rows at T <= 2,
// where each warp's own x reads are cheap; from T = 3 on the x planes (4 bytes per element and
// token) outweigh the weights, so the CTA shares them and the small-block types (<= 176 bytes per
// 256 columns) take 32 rows per warp to read them half as often.
#ifdef LMT_IMMA_SWEEP  // one geometry per regime (T <= 2: NT = 1; more) for every type (the sweep builds)
template <class Ty, int NT>
struct Geo {
    static constexpr int S = NT == 1 ? LMT_G1_S : LMT_G8_S, W = NT == 1 ? LMT_G1_W : LMT_G8_W;
    static constexpr int MT = NT == 1 ? LMT_G1_MT : LMT_G8_MT, MB = NT == 1 ? LMT_G1_MB : LMT_G8_MB;
    static constexpr int KS = NT == 1 ? LMT_G1_KS : LMT_G8_KS;
    static constexpr int GU = NT == 1 ? LMT_G1_GU : LMT_G8_GU;  // unroll of the 8 groups of a step
    static constexpr int XS = NT == 1 ? LMT_G1_XS : LMT_G8_XS;
};
#else
template <class Ty, int NT>
struct Geo {
    static constexpr int S = 3, W = 4, KS = 1, GU = 8, MB = 1;
    static constexpr int XS = NT > 1, MT = NT > 1 && Ty::kSB <= 176 ? 2 : 1;
};
#endif

// Shared-memory row pitch: the stage window (16-byte granules, one extra when it may start
// unaligned), made an odd number of granules so the 8 rows of a fragment load hit distinct banks.
template <class Ty, int KS>
__host__ __device__ constexpr int pitch() {
    constexpr int span = KS * Ty::kSB;
    constexpr int g = (span + 15) / 16 + (span % 16 ? 1 : 0);
    return 16 * (g % 2 ? g : g + 1);
}
// One stage of the CTA's x ring (Geo::XS): the 2 NT tokens' planes of KS steps, 1 KB each.
template <int NT, class G>
__host__ __device__ constexpr int x_stage_bytes() { return G::XS ? 2 * NT * G::KS * 1024 : 0; }
template <class Ty, int NT, class G = Geo<Ty, NT>>
__host__ __device__ constexpr int smem_bytes() {
    return G::W * G::S * 16 * G::MT * pitch<Ty, G::KS>() + G::S * x_stage_bytes<NT, G>();
}

// ---- x preparation: one warp per (token, step); lane L = (group g = L / 4, c = L % 4) holds the
// columns 4c .. 4c + 3 and 16 + 4c .. of group g, the k slots of MMA lane c. ------------------------
// xq[((t * steps + s) * 8 + g) * 16 + 4 p + c] = {plane p of cols 4c.., plane p of cols 16 + 4c..}
__global__ void __launch_bounds__(256) imma_prep_x(const float *__restrict__ x, int T, int cols, int steps,
                                                     uint2 *__restrict__ xq, float *__restrict__ sxv,
                                                     float4 *__restrict__ xsum) {
    const int wid = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, L = threadIdx.x & 31;
    if (wid >= T * steps) return;
    const int t = wid / steps, s = wid - t * steps, g = L >> 2, c = L & 3;
    const int c0 = 256 * s + 32 * g;
    float v[8];
    if (c0 < cols) {  // cols is a multiple of 32: a group is all in or all out
        const float4 *p = reinterpret_cast<const float4 *>(x + (size_t)t * cols + c0);
        const float4 a = __ldg(p + c), b = __ldg(p + 4 + c);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = 0.0f;
    }
    bool bad = false;
    float mx = 0.0f, sm = v[0];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        bad |= nonfinite(v[i]);
        mx = fmaxf(mx, fabsf(v[i]));
        if (i) sm = __fadd_rn(sm, v[i]);
    }
    bad = __any_sync(0xFFFFFFFFu, bad);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    // The sub-block sum (group g): the four lanes' partials in a fixed tree.
    sm = __fadd_rn(sm, __shfl_xor_sync(0xFFFFFFFFu, sm, 1));
    sm = __fadd_rn(sm, __shfl_xor_sync(0xFFFFFFFFu, sm, 2));
    float sx = 1.0f, inv = 0.0f;
    if (bad) {
        sx = __int_as_float(0x7FC00000);
        sm = sx;
    } else if (mx > 0.0f) {
        int e = ilogbf(mx) - 29;  // max |x| / 2^e < 2^30
        if (e < -126) e = -126;
        sx = ldexpf(1.0f, e);
        inv = ldexpf(1.0f, -e);
    }
    uint32_t pw[4][2] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        int X = __float2int_rn(__fmul_rn(v[i], inv));
        int d[4];
#pragma unroll
        for (int p = 3; p > 0; --p) {  // balanced digits: each in [-128, 127]
            d[p] = (int)(int8_t)(X & 0xFF);
            X = (X - d[p]) >> 8;
        }
        d[0] = X;
#pragma unroll
        for (int p = 0; p < 4; ++p) pw[p][i >> 2] |= ((uint32_t)d[p] & 0xFFu) << (8 * (i & 3));
    }
    uint2 *o = xq + ((size_t)wid * 8 + g) * 16 + c;
#pragma unroll
    for (int p = 0; p < 4; ++p) o[4 * p] = make_uint2(pw[p][0], pw[p][1]);
    if (L == 0) sxv[wid] = sx;
    if (xsum != nullptr && c == 0) reinterpret_cast<float *>(xsum)[(size_t)wid * 8 + g] = sm;
}

__device__ __forceinline__ void mma_k32(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1,
                                        int (&d)[4]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}
__device__ __forceinline__ void mma_k16(uint32_t a0, uint32_t a1, uint32_t b0, int (&d)[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}

__device__ __forceinline__ uint32_t lds32(const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); }
// 4 bytes at p + a (p 4-byte aligned, a in {0, 2}: the caller's uniform misalignment). The second
// word is inside the 210-byte block for every offset the Q6_K decode reads.
__device__ __forceinline__ uint32_t lds32_sh(const uint8_t *p, int a) {
    return __funnelshift_r(lds32(p), lds32(p + 4), 8 * a);
}
__device__ __forceinline__ uint32_t lds16(const uint8_t *p) { return *reinterpret_cast<const unsigned short *>(p); }
__device__ __forceinline__ float f16f(uint32_t h) { return __half2float(__ushort_as_half((unsigned short)h)); }
// Bytes q in 0..63 to the signed bytes q - 32: q + 96 <= 159 has no carry out of its byte, and
// adding 128 (mod 256) is flipping the top bit.
__device__ __forceinline__ uint32_t minus32(uint32_t q) { return (q + 0x60606060u) ^ 0x80808080u; }
// K4/K5 6-bit scale and min of sub-block j from the packed bytes (h.y, h.z, h.w = scales[0..11]).
__device__ __forceinline__ void k_sc_m(const uint4 &h, int j, int &sc, int &m) {
    const int jj = j & 3;
    const uint32_t b0 = (h.y >> (8 * jj)) & 0xFFu, b1 = (h.z >> (8 * jj)) & 0xFFu, b2 = (h.w >> (8 * jj)) & 0xFFu;
    sc = (int)(j >= 4 ? ((b2 & 0xFu) | ((b0 >> 6) << 4)) : (b0 & 63u));
    m = (int)(j >= 4 ? ((b2 >> 4) | ((b1 >> 6) << 4)) : (b1 & 63u));
}

__device__ __forceinline__ void cp16(uint32_t dst, const void *src, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n));
}

// Rows [16 MT (W b + w), +16 MT) for tokens [0, 2 NT) of this launch (T live). See the file comment.
template <class Ty, int NT, class G = Geo<Ty, NT>>
__global__ void __launch_bounds__(G::W * 32, G::MB) mul_mv_imma(const uint8_t *__restrict__ w, size_t row_stride, int rows,
                                                          int cols, const uint2 *__restrict__ xq,
                                                          const float *__restrict__ sxv, const float4 *__restrict__ xsum,
                                                          int T, int steps, float *__restrict__ y) {
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int KS = G::KS, P = pitch<Ty, KS>(), SB = Ty::kSB, GMAX = P / 16;
    constexpr int kStages = G::S, kWarps = G::W, kMT = G::MT, kRW = 16 * kMT;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const int gi = lane >> 2, c = lane & 3;
    const int row0 = (blockIdx.x * kWarps + wp) * kRW;
    // With the CTA's x ring every warp copies and meets the barriers; rows past the end are clamped.
    if (!G::XS && row0 >= rows) return;
    uint8_t *ring = smem + (size_t)wp * kStages * kRW * P;
    constexpr int XB = x_stage_bytes<NT, G>();
    const uint8_t *xring = smem + (size_t)kWarps * kStages * kRW * P;
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);
    // Q4_0 / Q8_0 rows may end inside a step (cols % 256 == 32 k); the K types' never do.
    const size_t row_bytes = Ty::kFam == kFamQ0 ? (size_t)cols / 32 * Ty::kBB : (size_t)steps * SB;
    const int nst = (steps + KS - 1) / KS;

    // Issue stage st's copies into its slot: every row's window of GMAX 16-byte granules (the
    // pitch), bytes past the stage's end zero-filled (the decode reads only the stage's own blocks)
    // and never read. The slot's granules go in row-major order (copy i of the stage: granule
    // i % GMAX of row i / GMAX), so an instruction reads a few rows' contiguous bytes.
    const int rbytes = (int)row_bytes;  // a row is under 2^31 bytes (cols is an int)
    constexpr int kCopies = (kRW * GMAX + 31) / 32;
    auto issue = [&](int st) {
        if (st < nst) {
            const int o0 = st * KS * SB, o1 = o0 + KS * SB < rbytes ? o0 + KS * SB : rbytes, lo = o0 & ~15;
            const uint32_t slot = ring_s + (uint32_t)((st % kStages) * kRW * P + 16 * lane);
#pragma unroll
            for (int j = 0; j < kCopies; ++j) {
                const int i = lane + 32 * j, r = i / GMAX, k = i - r * GMAX;
                const int n = o1 - lo - 16 * k < 16 ? o1 - lo - 16 * k : 16;
                if ((j < kCopies - 1 || r < kRW) && n > 0) {
                    const int gr = row0 + r < rows ? row0 + r : rows - 1;
                    cp16(slot + (uint32_t)(512 * j), w + (size_t)gr * row_stride + lo + 16 * k, n);
                }
            }
            if constexpr (G::XS != 0) {
                // The CTA's x stage: granule i = (token, step, 16-byte piece); tokens past T zero-filled.
                constexpr int kXG = XB / 16, kThreads = 32 * kWarps;
                const uint32_t xslot = (uint32_t)__cvta_generic_to_shared(xring) + (uint32_t)((st % kStages) * XB);
#pragma unroll
                for (int j = 0; j < (kXG + kThreads - 1) / kThreads; ++j) {
                    const int i = (int)threadIdx.x + kThreads * j;
                    if (kXG % kThreads == 0 || i < kXG) {
                        const int tk = i / (KS * 64), ks = (i / 64) % KS, q = i % 64, s = st * KS + ks;
                        const bool ok = tk < T && s < steps;
                        const uint2 *src = ok ? xq + ((size_t)tk * steps + s) * 128 + 2 * q : xq;
                        cp16(xslot + 16u * (uint32_t)i, src, ok ? 16 : 0);
                    }
                }
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };

    // Tokens of n-tile nt held by this lane as C columns: token 2 nt + (c >> 1), planes 2 (c & 1) + {0, 1}.
    float acc[kMT][NT][2];
    int acci[kMT][NT][4];
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            acc[m][n][0] = acc[m][n][1] = 0.0f;
#pragma unroll
            for (int e = 0; e < 4; ++e) acci[m][n][e] = 0;
        }
    // The lane's B column: token 2 nt + (gi >> 2), plane gi & 3.
    const int btok_off = gi >> 2, bpl = gi & 3;
    const int ctok_off = c >> 1;
    const bool hi_pl = (c & 1) == 0;  // planes 0, 1: weight 2^16

#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue(i);
    for (int st = 0; st < nst; ++st) {
        if constexpr (G::XS != 0) {
            // Stage st landed for every thread, and every warp is done with stage st - 1's slot,
            // which the next issue overwrites.
            asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
            __syncthreads();
            issue(st + kStages - 1);
        } else {
            issue(st + kStages - 1);
            asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1) : "memory");
            __syncwarp();
        }
        const uint8_t *slot = ring + (st % kStages) * kRW * P;
        const int lo = (int)(((size_t)st * KS * SB) & 15);  // the window's start within its granule
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            const int s = st * KS + ks;
            if (s >= steps) break;
            const int sb = lo + ks * SB;  // step s's first byte in the slot rows
            // Per-token step data for the lane's C tokens.
            float sxp[NT];
            float4 xs4[NT];
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const int t = 2 * n + ctok_off;
                const float sx = t < T ? __ldg(sxv + (size_t)t * steps + s) : 0.0f;
                sxp[n] = hi_pl ? __fmul_rn(sx, 65536.0f) : sx;
                if (Ty::kMin) {
                    xs4[n] = t < T ? __ldg(xsum + ((size_t)t * steps + s) * 2 + (c & 1)) : make_float4(0, 0, 0, 0);
                }
            }
            const uint8_t *rowp[kMT][2];
#pragma unroll
            for (int m = 0; m < kMT; ++m) {
                rowp[m][0] = slot + (16 * m + gi) * P + sb;
                rowp[m][1] = slot + (16 * m + gi + 8) * P + sb;
            }
            // Block headers of the K types (one block per step).
            uint4 hd[kMT][2];
            uint32_t qh[kMT][2][2];
            if (Ty::kFam == kFamK) {
#pragma unroll
                for (int m = 0; m < kMT; ++m)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        hd[m][h] = *reinterpret_cast<const uint4 *>(rowp[m][h]);
                        if (Ty::kId == 13) {
                            qh[m][h][0] = lds32(rowp[m][h] + 16 + 4 * c);
                            qh[m][h][1] = lds32(rowp[m][h] + 32 + 4 * c);
                        }
                    }
            }
            // The lane's B column of each n-tile for this step (null past T): 8 groups of 16 uint2.
            const uint2 *bq[NT];
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const int t = 2 * n + btok_off;
                if constexpr (G::XS != 0)
                    bq[n] = reinterpret_cast<const uint2 *>(xring + (st % kStages) * XB + (t * KS + ks) * 1024) + 4 * bpl + c;
                else
                    bq[n] = t < T ? xq + ((size_t)t * steps + s) * 128 + 4 * bpl + c : nullptr;
            }
            // Q6_K: the step's blocks start 2-byte aligned, at the same offset mod 4 in every row (the
            // pitch is a multiple of 16): words at a 4-aligned base, one funnel shift by 8 q6a.
            const int q6a = sb & 3;
            const int ngr = Ty::kFam == kFamQ0 ? min(8, (cols - 256 * s) / 32) : 8;  // groups in this step
#pragma unroll G::GU
            for (int g = 0; g < 8; ++g) {
                if (g >= ngr) break;
                // B fragments of the NT n-tiles.
                uint2 b[NT];
#pragma unroll
                for (int n = 0; n < NT; ++n) {
                    if constexpr (G::XS != 0) b[n] = bq[n][16 * g];
                    else b[n] = bq[n] != nullptr ? __ldg(bq[n] + 16 * g) : make_uint2(0, 0);
                }
#pragma unroll
                for (int m = 0; m < kMT; ++m) {
                    uint32_t alo[2], ahi[2];  // rows gi, gi + 8: cols 4c.. and 16 + 4c..
                    int sc[2], sc2[2];
                    float dq[2];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const uint8_t *rp = rowp[m][h];
                        if constexpr (Ty::kFam == kFamQ0) {
                            // Block g starts at kBB g (sb is 16-aligned: kSB is a multiple of 16), its
                            // codes 2 bytes in: 4-aligned for odd g, 2 off for even g (kBB = 2 mod 4).
                            const uint8_t *bk = rp + Ty::kBB * g;
                            const uint8_t *ab = bk + 4 * c + (g & 1 ? 2 : 0);
                            auto word = [&](int o) { return g & 1 ? lds32(ab + o) : lds32_sh(ab + o, 2); };
                            if constexpr (Ty::kId == 8) {
                                alo[h] = word(0);
                                ahi[h] = word(16);
                            } else {  // q - 8 as s8: q + 120 <= 135 has no carry, then flip the top bit
                                const uint32_t q = word(0);
                                alo[h] = ((q & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u;
                                ahi[h] = (((q >> 4) & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u;
                            }
                            dq[h] = f16f(lds16(bk));
                        } else if constexpr (Ty::kId == 12) {
                            const uint8_t *qs = rp + 16 + 32 * (g >> 1) + 4 * c;
                            const int sh = 4 * (g & 1);
                            alo[h] = (lds32(qs) >> sh) & 0x0F0F0F0Fu;
                            ahi[h] = (lds32(qs + 16) >> sh) & 0x0F0F0F0Fu;
                            int mm;
                            k_sc_m(hd[m][h], g, sc[h], mm);
                        } else if constexpr (Ty::kId == 13) {
                            const uint8_t *qs = rp + 48 + 32 * (g >> 1) + 4 * c;
                            const int sh = 4 * (g & 1);
                            alo[h] = ((lds32(qs) >> sh) & 0x0F0F0F0Fu) | (((qh[m][h][0] >> g) & 0x01010101u) << 4);
                            ahi[h] = ((lds32(qs + 16) >> sh) & 0x0F0F0F0Fu) | (((qh[m][h][1] >> g) & 0x01010101u) << 4);
                            int mm;
                            k_sc_m(hd[m][h], g, sc[h], mm);
                        } else {  // Q6_K: group g = (half hh = g / 4, quarter qq = g % 4)
                            const int hh = g >> 2, qq = g & 3, ns = 4 * (qq >> 1), hs = 2 * qq;
                            const uint8_t *ab = rp - q6a + 4 * c;  // 4-byte aligned
                            const int ql = 64 * hh + 32 * (qq & 1), qhp = 128 + 32 * hh;
                            alo[h] = minus32(((lds32_sh(ab + ql, q6a) >> ns) & 0x0F0F0F0Fu) |
                                             (((lds32_sh(ab + qhp, q6a) >> hs) & 0x03030303u) << 4));
                            ahi[h] = minus32(((lds32_sh(ab + ql + 16, q6a) >> ns) & 0x0F0F0F0Fu) |
                                             (((lds32_sh(ab + qhp + 16, q6a) >> hs) & 0x03030303u) << 4));
                            const uint32_t s2 = lds16(rp + 192 + 2 * g);
                            sc[h] = (int)(int8_t)(s2 & 0xFFu);
                            sc2[h] = (int)(int8_t)(s2 >> 8);
                        }
                    }
#pragma unroll
                    for (int n = 0; n < NT; ++n) {
                        if constexpr (Ty::kFam == kFamQ0) {
                            // The f32 epilogue per 32-column block: planes (0, 1) or (2, 3) combined in
                            // int32 (|256 d0 + d1| < 2^28) and converted once (the same rounding as
                            // fmaf(d0, 256, d1) in floats), times d 2^e (exact), added in column order.
                            int d[4];
                            mma_k32(alo[0], alo[1], ahi[0], ahi[1], b[n].x, b[n].y, d);
#pragma unroll
                            for (int h = 0; h < 2; ++h)
                                acc[m][n][h] = fmaf(__int2float_rn(d[2 * h] * 256 + d[2 * h + 1]), __fmul_rn(dq[h], sxp[n]),
                                                    acc[m][n][h]);
                        } else if constexpr (Ty::kFam == kFamQ6) {
                            int dl[4], dh[4];
                            mma_k16(alo[0], alo[1], b[n].x, dl);
                            mma_k16(ahi[0], ahi[1], b[n].y, dh);
#pragma unroll
                            for (int e = 0; e < 4; ++e)
                                acci[m][n][e] += sc[e >> 1] * dl[e] + sc2[e >> 1] * dh[e];
                        } else {
                            int d[4];
                            mma_k32(alo[0], alo[1], ahi[0], ahi[1], b[n].x, b[n].y, d);
#pragma unroll
                            for (int e = 0; e < 4; ++e) acci[m][n][e] += sc[e >> 1] * d[e];
                        }
                    }
                }
            }
            if constexpr (Ty::kFam != kFamQ0) {
                // The f32 epilogue per super-block: d * (planes) * sx - dmin * sum_j m_j xs_j.
#pragma unroll
                for (int m = 0; m < kMT; ++m)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        float d, dmin = 0.0f;
                        int mj[4] = {0, 0, 0, 0};
                        if constexpr (Ty::kFam == kFamK) {
                            d = f16f(hd[m][h].x & 0xFFFFu);
                            dmin = f16f(hd[m][h].x >> 16);
#pragma unroll
                            for (int i = 0; i < 4; ++i) {
                                int scx;
                                k_sc_m(hd[m][h], 4 * (c & 1) + i, scx, mj[i]);
                            }
                        } else {
                            d = f16f(lds16(rowp[m][h] + 208));
                        }
#pragma unroll
                        for (int n = 0; n < NT; ++n) {
                            const float f = fmaf(__int2float_rn(acci[m][n][2 * h]), 256.0f, __int2float_rn(acci[m][n][2 * h + 1]));
                            float a = fmaf(d, __fmul_rn(f, sxp[n]), acc[m][n][h]);
                            if constexpr (Ty::kMin) {
                                float mn = __fmul_rn((float)mj[0], xs4[n].x);
                                mn = fmaf((float)mj[1], xs4[n].y, mn);
                                mn = fmaf((float)mj[2], xs4[n].z, mn);
                                mn = fmaf((float)mj[3], xs4[n].w, mn);
                                a = fmaf(-dmin, mn, a);
                            }
                            acc[m][n][h] = a;
                            acci[m][n][2 * h] = acci[m][n][2 * h + 1] = 0;
                        }
                    }
            }
        }
        if constexpr (G::XS == 0) __syncwarp();  // every lane done with this slot before a later issue overwrites it
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float lo23 = __shfl_xor_sync(0xFFFFFFFFu, acc[m][n][h], 1);
                const int r = row0 + 16 * m + gi + 8 * h, t = 2 * n + ctok_off;
                if (hi_pl && r < rows && t < T) y[(size_t)t * rows + r] = __fadd_rn(acc[m][n][h], lo23);
            }
}

// This thread's current device as one bit; 0 for devices 64 and up (their set-up then runs on
// every call).
inline uint64_t device_bit() {
    int dev = 0;
    LMT_CUDA_CHECK(cudaGetDevice(&dev));
    return dev < 64 ? (uint64_t)1 << dev : 0;
}

template <class Ty, int NT, class G = Geo<Ty, NT>>
void launch_nt(const uint8_t *w, size_t row_stride, int rows, int cols, const uint2 *xq, const float *sxv,
               const float4 *xs, int T, int steps, float *y, cudaStream_t st) {
    // The shared-memory opt-in is per device: once per (kernel, device), racing callers only repeat it.
    static std::atomic<uint64_t> done{0};
    const uint64_t bit = device_bit();
    if (!(done.load(std::memory_order_relaxed) & bit)) {
        LMT_CUDA_CHECK(cudaFuncSetAttribute(mul_mv_imma<Ty, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<Ty, NT>()));
        done.fetch_or(bit, std::memory_order_relaxed);
    }
    constexpr int rows_per_cta = 16 * G::MT * G::W;
    const dim3 grid((unsigned)((rows + rows_per_cta - 1) / rows_per_cta)), block(32 * G::W);
    mul_mv_imma<Ty, NT><<<grid, block, smem_bytes<Ty, NT>(), st>>>(w, row_stride, rows, cols, xq, sxv, xs, T, steps, y);
}

// Tokens in groups of 8 (one launch each, the weights read once per group); a group of n tokens
// runs ceil(n / 2) n-tiles rounded up to {1, 2, 4}. The scratch (x planes) is stream-ordered.
template <class Ty>
void launch(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y, cudaStream_t st) {
    const int steps = (cols + 255) / 256;
    const size_t nq = (size_t)T * steps * 128, ns = (size_t)T * steps, nx = Ty::kMin ? (size_t)T * steps * 2 : 0;
    // The stream-ordered pool keeps its memory between calls (the default threshold 0 returns it at
    // every synchronisation, and the next call pays for the mapping again).
    static std::atomic<uint64_t> kept{0};
    const uint64_t bit = device_bit();
    if (!(kept.load(std::memory_order_relaxed) & bit)) {
        int dev = 0;
        cudaMemPool_t pool;
        if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
            uint64_t keep = (uint64_t)64 << 20;  // at most 64 MB kept (the planes are 4 B per element)
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        }
        kept.fetch_or(bit, std::memory_order_relaxed);
    }
    uint8_t *buf = nullptr;
    const size_t bytes = nq * sizeof(uint2) + nx * sizeof(float4) + ns * sizeof(float);
    LMT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void **>(&buf), bytes, st));
    uint2 *xq = reinterpret_cast<uint2 *>(buf);
    float4 *xs = Ty::kMin ? reinterpret_cast<float4 *>(buf + nq * sizeof(uint2)) : nullptr;
    float *sxv = reinterpret_cast<float *>(buf + nq * sizeof(uint2) + nx * sizeof(float4));
    const int warps = T * steps;
    imma_prep_x<<<(warps + 7) / 8, 256, 0, st>>>(x, T, cols, steps, xq, sxv, xs);
    for (int t0 = 0; t0 < T; t0 += 8) {
        const int n = T - t0 < 8 ? T - t0 : 8;
        const uint2 *q = xq + (size_t)t0 * steps * 128;
        const float *sv = sxv + (size_t)t0 * steps;
        const float4 *xv = xs ? xs + (size_t)t0 * steps * 2 : nullptr;
        float *ys = y + (size_t)t0 * rows;
        if (n <= 2) launch_nt<Ty, 1>(w, row_stride, rows, cols, q, sv, xv, n, steps, ys, st);
        else if (n <= 4) launch_nt<Ty, 2>(w, row_stride, rows, cols, q, sv, xv, n, steps, ys, st);
        else launch_nt<Ty, 4>(w, row_stride, rows, cols, q, sv, xv, n, steps, ys, st);
    }
    LMT_CUDA_CHECK(cudaFreeAsync(buf, st));
}

}  // namespace imma
