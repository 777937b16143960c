// Q5_K matvec for T >= 1 activation rows with f32 activations (ggml's CUDA path quantises them to
// q8_1 and loses about 7e-3 relative; lmtail keeps the activations' 24 bits).
//
// Two kernels live here:
//
// * v2 (default, `mmv_tc`): tensor cores with an exact operand split. The 5-bit weight times its
//   6-bit sub-block scale, q * sc <= 31 * 63 = 1953, is an integer below 2^11 and therefore exact
//   in f16; each activation x (scaled by a power of two 2^e per token so |x| < 2^14) is split as
//   x = hi + lo with hi = f16(x), lo = f16(x - hi), which keeps 22 of x's 24 bits. One
//   mma.m16n8k16 (f16 x f16 -> f32) multiplies 16 weight rows by 8 columns = {hi, lo} of 4 tokens,
//   so T <= 4 costs one MMA per 16 x 16 weights and T <= 8 two. The sub-block minimum term
//   dmin * m_j * sum(x over sub-block j) is one more MMA per block (m_j exact in f16; the
//   per-sub-block sums of x are precomputed by `prep_x`, also split hi/lo). The weight stream is
//   a persistent, multi-stage cp.async pipeline: each CTA owns tiles of 128 rows and streams them
//   block column by block column (128 x 176 B + the 4.3 KB activation fragment per stage), so
//   about 150 KB per SM are in flight, which HBM3e needs.
//   Decode cost per weight: the nibble/high-bit merge (LOP3/SHF, shared by 4 weights), one PRMT
//   per two weights to form f16 (1024 + q) and one HFMA2 per two weights computing
//   (1024 + q) * sc - 1024 * sc = q * sc exactly: about 2 issue slots per weight against about 4.3
//   for the f32 CUDA-core decode of v1, which is why v1 stayed compute-bound near 0.57 ms.
//   H200, 202048 x 6656, same run as ggml (bench/RESULTS.md): T = 1 0.380 ms (ggml 0.387, v1
//   0.576), T = 8 0.427 ms (ggml 1.052, v1 1.279); relative L2 from an f64 reference 2.3e-7
//   (ggml 7.4e-3). Nsight Compute: DRAM 50%, L2 67%, SM 57%, 2 warps per scheduler (shared
//   memory bound): latency between the per-item barrier and the decode chain, not bandwidth,
//   holds T = 1 at 57% of the copy bandwidth.
// * v1 (`mul_mv_q5_K_f32`, LMTAIL_CUDA_MMV=v1, or when no scratch is passed): one warp per row,
//   f32 CUDA-core FMAs. Kept as the reference path and for before/after measurements.
#include "common.cuh"
#include "launch.hpp"

#include <cstdlib>
#include <cstring>

namespace lmt::cuda {

namespace {

// ---- v2: tensor-core path --------------------------------------------------------------------

constexpr int kMmaPerBlock = 17;                      // 16 weight MMAs + 1 minimum MMA per 256 weights
constexpr int kFragBytes = kMmaPerBlock * 32 * 8;     // B fragments of one N-tile of one block: 4352 B
// With T = 1 only columns 0 and 1 (hi, lo) of the 8 are non-zero: the fragments are stored for the
// first CT columns only (CT = 2: 1088 B per block instead of 4352), lanes of later columns use 0.
__host__ __device__ constexpr int frag_bytes(int ct) { return kMmaPerBlock * 4 * ct * 8; }
constexpr int kMaxNT = 2;                             // N-tiles per launch (4 tokens each)

// Where activation column c (within the row) of token-column n goes in the B fragments of one
// (block, N-tile): MMA m = 8h + mm, lane = 4n + tq, half s, for c = 64 tq + 32 h + 4 mm + s.
// The weight side uses the same permutation of k (see mmv_tc), so the product is the dot product.
__device__ __forceinline__ int frag_half_index(int cc, int n, int ct) {
    const int tq = cc >> 6, h = (cc >> 5) & 1, mm = (cc >> 2) & 7, s = cc & 3;
    return (((8 * h + mm) * ct + n) * 4 + tq) * 4 + s;
}

// One block per token-column slot j in [0, 4 * NT): tokens >= T write zeros. Writes the f16 hi/lo
// B fragments of x * 2^e and of its per-sub-block sums (times 2^-4 so they stay below 2^15), and
// 2^-e for the epilogue.
__global__ void __launch_bounds__(256) prep_x(const float *__restrict__ x, int T, int cols, int NT, int CT,
                                              __half *__restrict__ frag, float *__restrict__ unscale) {
    const int t = blockIdx.x, nt = t >> 2, tt = t & 3;
    const int nb = cols / LMT_QK_K;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    __shared__ float red[32];
    const bool live = t < T;
    const float *xr = x + (size_t)(live ? t : 0) * cols;
    float mx = 0.0f;
    if (live)
        for (int i = threadIdx.x; i < cols; i += blockDim.x) mx = fmaxf(mx, fabsf(xr[i]));
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    mx = 0.0f;
    for (int w = 0; w < nwarps; ++w) mx = fmaxf(mx, red[w]);
    // |x| * 2^e < 2^14: hi never overflows f16 (max 65504) and sub-block sums stay < 2^19.
    // Non-finite maxima keep e = 0 so Inf/NaN propagate into the logits as on the CPU.
    int e = 0;
    if (mx > 0.0f && mx <= 3.4e38f) {
        int ex;
        frexpf(mx, &ex);  // mx < 2^ex
        e = 14 - ex;
        e = e > 100 ? 100 : (e < -100 ? -100 : e);
    }
    const float sc = ldexpf(1.0f, e);
    if (threadIdx.x == 0 && live) unscale[t] = ldexpf(1.0f, -e);
    // Each warp takes whole 32-element sub-blocks: lane i holds element i of the sub-block.
    for (int sb = warp; sb < cols / 32; sb += nwarps) {
        const int kb = sb >> 3, c = (sb & 7) * 32 + lane;
        const float v = live ? xr[(size_t)sb * 32 + lane] * sc : 0.0f;
        const __half hi = __float2half_rn(v);
        const __half lo = __float2half_rn(v - __half2float(hi));
        __half *f = frag + (size_t)(kb * NT + nt) * (frag_bytes(CT) / 2);
        f[frag_half_index(c, 2 * tt, CT)] = hi;
        f[frag_half_index(c, 2 * tt + 1, CT)] = lo;
        float s = v;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
        if (lane < 2) {  // lane 0: hi column, lane 1: lo column of this token's sub-block sum
            const float sv = s * 0.0625f;
            const __half shi = __float2half_rn(sv);
            const __half val = lane == 0 ? shi : __float2half_rn(sv - __half2float(shi));
            const int j = sb & 7, tq = j >> 1, which = j & 1, n = 2 * tt + lane;
            __half *m = f + ((16 * CT + n) * 4 + tq) * 4;
            m[which] = val;
            if (which == 0) m[2] = m[3] = __float2half_rn(0.0f);
        }
    }
    (void)nb;
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2 *>(&u); }

// One row's view of one block for lane (gq, tq): scale/min of sub-blocks 2tq and 2tq+1 as f16x2
// operands, d and dmin, and the lane's 32 qs bytes and all 32 qh bytes.
struct RowBlk {
    uint32_t qs[8], qh[8];
    __half2 sc[2], nsc[2];  // per nibble half h: (sc, sc) and (-1024 sc, -1024 sc)
    uint32_t mins;          // f16x2 (m_{2tq}, m_{2tq+1})
    float d, dmin;
};

__device__ __forceinline__ void load_row(const uint8_t *blk, int tq, RowBlk &r) {
    const uint4 hd = *reinterpret_cast<const uint4 *>(blk);
    const uint4 h0 = *reinterpret_cast<const uint4 *>(blk + 16), h1 = *reinterpret_cast<const uint4 *>(blk + 32);
    const uint4 s0 = *reinterpret_cast<const uint4 *>(blk + 48 + 32 * tq);
    const uint4 s1 = *reinterpret_cast<const uint4 *>(blk + 64 + 32 * tq);
    // qh pre-shifted by 2 tq: bit 0 / 1 of each byte is then the 5th bit of the low / high nibble.
    const int sh = 2 * tq;
    r.qh[0] = h0.x >> sh; r.qh[1] = h0.y >> sh; r.qh[2] = h0.z >> sh; r.qh[3] = h0.w >> sh;
    r.qh[4] = h1.x >> sh; r.qh[5] = h1.y >> sh; r.qh[6] = h1.z >> sh; r.qh[7] = h1.w >> sh;
    r.qs[0] = s0.x; r.qs[1] = s0.y; r.qs[2] = s0.z; r.qs[3] = s0.w;
    r.qs[4] = s1.x; r.qs[5] = s1.y; r.qs[6] = s1.z; r.qs[7] = s1.w;
    r.d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xFFFFu)));
    r.dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
    uint32_t mn[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int j = 2 * tq + h, jj = j & 3;
        const uint32_t b0 = (hd.y >> (8 * jj)) & 0xFFu;  // scales[jj]
        const uint32_t b1 = (hd.z >> (8 * jj)) & 0xFFu;  // scales[jj + 4]
        const uint32_t b2 = (hd.w >> (8 * jj)) & 0xFFu;  // scales[jj + 8]
        const uint32_t sc = j >= 4 ? ((b2 & 0xFu) | ((b0 >> 6) << 4)) : (b0 & 63u);
        mn[h] = j >= 4 ? ((b2 >> 4) | ((b1 >> 6) << 4)) : (b1 & 63u);
        const __half sh = __ushort2half_rn((unsigned short)sc);
        r.sc[h] = __half2half2(sh);
        r.nsc[h] = __half2half2(__hmul(sh, __float2half_rn(-1024.0f)));
    }
    r.mins = h2_bits(__halves2half2(__ushort2half_rn((unsigned short)mn[0]), __ushort2half_rn((unsigned short)mn[1])));
}

// A operand (two f16x2: weights 4mm+0..1 and 4mm+2..3 of the lane's run) of MMA m = 8h + mm.
template <int M>
__device__ __forceinline__ void a_frag(const RowBlk &r, int tq, uint32_t &lo2, uint32_t &hi2) {
    constexpr int h = M >> 3, mm = M & 7;
    const uint32_t q4 = ((r.qs[mm] >> (4 * h)) & 0x0F0F0F0Fu) | ((r.qh[mm] << (4 - h)) & 0x10101010u);
    // bytes (q0, 0x64, q1, 0x64) = f16 (1024 + q0, 1024 + q1); one HFMA2 then gives q * sc exactly.
    const uint32_t p01 = __byte_perm(q4, 0x64646464u, 0x4140u);
    const uint32_t p23 = __byte_perm(q4, 0x64646464u, 0x4342u);
    lo2 = h2_bits(__hfma2(bits_h2(p01), r.sc[h], r.nsc[h]));
    hi2 = h2_bits(__hfma2(bits_h2(p23), r.sc[h], r.nsc[h]));
}

template <int NT, int WARPS, int MT, int S, int KC, int CT>
struct TcCfg {
    static constexpr int RT = WARPS * 16 * MT;                               // rows per tile
    static constexpr int RS = KC * LMT_Q5K_BLOCK_BYTES + (KC > 1 ? 16 : 0);  // smem row stride (no bank conflicts)
    static constexpr int WBYTES = RT * RS;
    static constexpr int BB1 = NT * frag_bytes(CT);                          // B fragments per block column
    static constexpr int STAGE = WBYTES + KC * BB1;
    static constexpr int SMEM = S * STAGE;
};

// One pipeline item = RT rows x KC consecutive blocks (KC * 176 contiguous bytes per row).
template <int NT, int WARPS, int MT, int S, int KC, int CT>
__global__ void __launch_bounds__(WARPS * 32) mmv_tc(const uint8_t *__restrict__ w, size_t row_stride, int rows, int nb,
                                                     const uint8_t *__restrict__ frag, const float *__restrict__ unscale,
                                                     int T, float *__restrict__ y, int n_tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // never launched: the host picks v1 below compute capability 8.0
#else
    using C = TcCfg<NT, WARPS, MT, S, KC, CT>;
    extern __shared__ __align__(16) uint8_t smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gq = lane >> 2, tq = lane & 3;
    const int n_chunks = (nb + KC - 1) / KC;
    const int my_tiles = blockIdx.x < n_tiles ? (n_tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const int n_items = my_tiles * n_chunks;

    // Each thread copies the same (row, piece) slots of every item: their shared-memory and
    // tile-relative global offsets are computed once (the first version recomputed a division,
    // a clamp and a 64-bit product per 16-byte piece, about 15% of the loop's instructions).
    constexpr int kPieces = C::RT * KC * 11, kPer = (kPieces + WARPS * 32 - 1) / (WARPS * 32);
    int soff[kPer], goff[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int c = threadIdx.x + j * WARPS * 32;
        const int r = c / (KC * 11), q = c - r * (KC * 11);
        soff[j] = r * C::RS + q * 16;
        goff[j] = r * (int)row_stride + q * 16;  // RT * row_stride < 2^31 (checked by the launcher)
    }
    auto issue = [&](int item) {
        if (item < n_items) {
            const int tile = blockIdx.x + (item / n_chunks) * gridDim.x, kb0 = (item % n_chunks) * KC;
            const int nq = (nb - kb0 < KC ? nb - kb0 : KC) * 11;  // 16-byte pieces per row
            uint8_t *st = smem + (item % S) * C::STAGE;
            const uint8_t *src = w + (size_t)kb0 * LMT_Q5K_BLOCK_BYTES;
            if ((tile + 1) * C::RT <= rows && nq == KC * 11) {
                const uint8_t *base = src + (size_t)tile * C::RT * row_stride;
#pragma unroll
                for (int j = 0; j < kPer; ++j)
                    if (kPieces % (WARPS * 32) == 0 || threadIdx.x + j * WARPS * 32 < kPieces)
                        cp_async16(st + soff[j], base + goff[j]);
            } else {
                for (int c = threadIdx.x; c < kPieces; c += WARPS * 32) {
                    const int r = c / (KC * 11), q = c - r * (KC * 11);
                    int row = tile * C::RT + r;
                    row = row < rows ? row : rows - 1;
                    if (q < nq) cp_async16(st + r * C::RS + q * 16, src + (size_t)row * row_stride + q * 16);
                }
            }
            const uint8_t *bsrc = frag + (size_t)kb0 * C::BB1;
            for (int c = threadIdx.x; c < nq / 11 * C::BB1 / 16; c += WARPS * 32)
                cp_async16(st + C::WBYTES + c * 16, bsrc + c * 16);
        }
        cp_async_commit();  // empty groups keep the wait_group count uniform
    };
#pragma unroll
    for (int i = 0; i < S - 1; ++i) issue(i);

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

    for (int item = 0; item < n_items; ++item) {
        cp_async_wait<S - 2>();
        __syncthreads();
        issue(item + S - 1);  // refills the stage every thread finished before the barrier
        const uint8_t *st = smem + (item % S) * C::STAGE;
        const int kb0 = (item % n_chunks) * KC;
#pragma unroll
        for (int kc = 0; kc < KC; ++kc) {
            if (kb0 + kc >= nb) break;  // uniform across the CTA
            const uint2 *bf = reinterpret_cast<const uint2 *>(st + C::WBYTES + kc * C::BB1);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int r0 = (warp * MT + mt) * 16 + gq;
                RowBlk ra, rb;
                load_row(st + r0 * C::RS + kc * LMT_Q5K_BLOCK_BYTES, tq, ra);
                load_row(st + (r0 + 8) * C::RS + kc * LMT_Q5K_BLOCK_BYTES, tq, rb);
                // Two accumulator chains per N-tile (nibble halves) shorten the dependent-MMA chain
                // and keep each f32 tensor-core partial to 128 products.
                float c[2][NT][4], cm[NT][4];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) c[0][nt][i] = c[1][nt][i] = cm[nt][i] = 0.0f;
#pragma unroll
                for (int m = 0; m < 16; ++m) {
                    uint32_t a0, a1, a2, a3;
                    switch (m) {  // compile-time M for the register arrays
#define LMT_AF(M) case M: a_frag<M>(ra, tq, a0, a2); a_frag<M>(rb, tq, a1, a3); break;
                        LMT_AF(0) LMT_AF(1) LMT_AF(2) LMT_AF(3) LMT_AF(4) LMT_AF(5) LMT_AF(6) LMT_AF(7)
                        LMT_AF(8) LMT_AF(9) LMT_AF(10) LMT_AF(11) LMT_AF(12) LMT_AF(13) LMT_AF(14) LMT_AF(15)
#undef LMT_AF
                    }
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        const uint2 b = (CT == 8 || gq < CT) ? bf[((nt * kMmaPerBlock + m) * CT + gq) * 4 + tq]
                                                             : make_uint2(0u, 0u);
                        mma16816(c[m >> 3][nt], a0, a1, a2, a3, b.x, b.y);
                    }
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const uint2 b = (CT == 8 || gq < CT) ? bf[((nt * kMmaPerBlock + 16) * CT + gq) * 4 + tq]
                                                         : make_uint2(0u, 0u);
                    mma16816(cm[nt], ra.mins, rb.mins, 0u, 0u, b.x, b.y);
                    const float ma = 16.0f * ra.dmin, mb = 16.0f * rb.dmin;
                    acc[mt][nt][0] += ra.d * (c[0][nt][0] + c[1][nt][0]) - ma * cm[nt][0];
                    acc[mt][nt][1] += ra.d * (c[0][nt][1] + c[1][nt][1]) - ma * cm[nt][1];
                    acc[mt][nt][2] += rb.d * (c[0][nt][2] + c[1][nt][2]) - mb * cm[nt][2];
                    acc[mt][nt][3] += rb.d * (c[0][nt][3] + c[1][nt][3]) - mb * cm[nt][3];
                }
            }
        }
        if (item % n_chunks == n_chunks - 1) {  // tile done: lane (gq, tq) holds token tq's hi and lo sums
            const int tile = blockIdx.x + (item / n_chunks) * gridDim.x;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int row = tile * C::RT + (warp * MT + mt) * 16 + gq;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int t = nt * 4 + tq;
                    if (t < T) {
                        const float u = unscale[t];
                        if (row < rows) y[(size_t)t * rows + row] = (acc[mt][nt][0] + acc[mt][nt][1]) * u;
                        if (row + 8 < rows) y[(size_t)t * rows + row + 8] = (acc[mt][nt][2] + acc[mt][nt][3]) * u;
                    }
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
                }
            }
        }
    }
    cp_async_wait<0>();
#endif
}

bool tc_capable() {
    static const bool ok = [] {
        int dev = 0, major = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        return major >= 8;
    }();
    return ok;
}

int sm_count() {
    static const int n = [] {
        int dev = 0, v = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
        return v > 0 ? v : 1;
    }();
    return n;
}

template <int NT, int WARPS, int MT, int S, int KC = 1, int CT = 8>
void launch_tc(const uint8_t *w, size_t row_stride, int rows, int nb, const uint8_t *frag, const float *unscale, int T,
               float *y, cudaStream_t stream) {
    using C = TcCfg<NT, WARPS, MT, S, KC, CT>;
    static int per_sm = -1;  // per instantiation, set once (outside any capture: first call is eager)
    if (per_sm < 0) {
        LMT_CUDA_CHECK(cudaFuncSetAttribute(mmv_tc<NT, WARPS, MT, S, KC, CT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            C::SMEM));
        LMT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mmv_tc<NT, WARPS, MT, S, KC, CT>, WARPS * 32,
                                                                     C::SMEM));
    }
    const int n_tiles = (rows + C::RT - 1) / C::RT;
    int grid = sm_count() * (per_sm > 0 ? per_sm : 1);
    grid = grid < n_tiles ? grid : n_tiles;
    mmv_tc<NT, WARPS, MT, S, KC, CT><<<grid, WARPS * 32, C::SMEM, stream>>>(w, row_stride, rows, nb, frag, unscale, T, y, n_tiles);
}

// Tuning knob, read per call so a benchmark can compare variants in one process:
// LMTAIL_CUDA_MMV = v1 | a (4 warps x 2 m-tiles, 4 stages, 1 block per item) | b (8 warps x 1
// m-tile, 4 stages) | c (as a, 6 stages, one CTA per SM) | d (4 warps x 1 m-tile, 3 stages, 2 blocks
// per item) | e (8 warps x 1 m-tile, 3 stages, 2 blocks per item) | f (4 warps x 1 m-tile, 2
// stages, 4 blocks per item) | g (4 warps x 1 m-tile, 4 stages: 64-row tiles, 3 CTAs per SM) |
// h (2 warps x 2 m-tiles, 4 stages: 64-row tiles) | A (a without the T = 1 compact fragments).
char mmv_variant() {
    const char *e = std::getenv("LMTAIL_CUDA_MMV");
    if (!e || !*e) return 'a';
    if (std::strcmp(e, "v1") == 0) return '1';
    return e[0];
}

// ---- v1: f32 CUDA-core path ------------------------------------------------------------------

// Lane l of a warp owns 8 weights of every 256-weight block: sub-block j = l/4, slice k = l%4.
// A warp computes R consecutive rows so each lane's 8 activations per block are loaded once
// (from L1) for R rows: x traffic, not weight traffic, limits a one-row-per-warp kernel.
template <int T, int R>
__global__ void __launch_bounds__(128) mul_mv_q5_K_f32(const uint8_t *__restrict__ w, size_t row_stride, int rows,
                                                       int cols, const float *__restrict__ x,
                                                       float *__restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5)) * R;
    if (row0 >= rows) return;
    const int j = lane >> 2, k = lane & 3;
    const int g = j >> 1, upper = j & 1;
    const int jj = j & 3, hi_sc = j >> 2;  // scale byte index and whether it is a split 6-bit value
    const int qshift = 2 * g + upper;
    const int i0 = 32 * j + 8 * k;
    const int nb = cols / LMT_QK_K;
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
    // Software pipeline: block b+1's bytes are in flight while block b is decoded and applied.
    const uint8_t *rowp[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rowp[r] = w + (size_t)(row0 + r < rows ? row0 + r : rows - 1) * row_stride;
    uint4 hd[R];
    uint2 qh[R], ql[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        hd[r] = __ldg(reinterpret_cast<const uint4 *>(rowp[r]));
        qh[r] = __ldg(reinterpret_cast<const uint2 *>(rowp[r] + 16 + 8 * k));
        ql[r] = __ldg(reinterpret_cast<const uint2 *>(rowp[r] + 48 + 32 * g + 8 * k));
    }
    for (int b = 0; b < nb; ++b) {
        uint4 hd_n[R];
        uint2 qh_n[R], ql_n[R];
        const int bn = b + 1 < nb ? b + 1 : b;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t *blk = rowp[r] + (size_t)bn * LMT_Q5K_BLOCK_BYTES;
            hd_n[r] = __ldg(reinterpret_cast<const uint4 *>(blk));
            qh_n[r] = __ldg(reinterpret_cast<const uint2 *>(blk + 16 + 8 * k));
            ql_n[r] = __ldg(reinterpret_cast<const uint2 *>(blk + 48 + 32 * g + 8 * k));
        }
        float xv[T][8];
#pragma unroll
        for (int t = 0; t < T; ++t) {
            const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)t * cols + b * LMT_QK_K + i0);
            const float4 xa = __ldg(xp), xb = __ldg(xp + 1);
            xv[t][0] = xa.x; xv[t][1] = xa.y; xv[t][2] = xa.z; xv[t][3] = xa.w;
            xv[t][4] = xb.x; xv[t][5] = xb.y; xv[t][6] = xb.z; xv[t][7] = xb.w;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint4 head = hd[r];
            const uint32_t b0 = (head.y >> (8 * jj)) & 0xFFu;   // scales[jj]
            const uint32_t b1 = (head.z >> (8 * jj)) & 0xFFu;   // scales[jj + 4]
            const uint32_t b2 = (head.w >> (8 * jj)) & 0xFFu;   // scales[jj + 8]
            const uint32_t sc = hi_sc ? ((b2 & 0xFu) | ((b0 >> 6) << 4)) : (b0 & 63u);
            const uint32_t mn = hi_sc ? ((b2 >> 4) | ((b1 >> 6) << 4)) : (b1 & 63u);
            const float d = __half2float(__ushort_as_half((unsigned short)(head.x & 0xFFFFu)));
            const float dmin = __half2float(__ushort_as_half((unsigned short)(head.x >> 16)));
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            const uint32_t qlw[2] = {ql[r].x, ql[r].y}, qhw[2] = {qh[r].x, qh[r].y};
#pragma unroll
            for (int wi = 0; wi < 2; ++wi) {
                // Four 5-bit weights per 32-bit word, then each to float without I2F (a
                // quarter-rate instruction that bounded the first version at 0.95 ms): the
                // byte goes under exponent 2^23 (PRMT) and 2^23 is subtracted, exactly q.
                const uint32_t q4 = ((qlw[wi] >> (4 * upper)) & 0x0F0F0F0Fu) | (((qhw[wi] >> qshift) & 0x01010101u) << 4);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float qf = __uint_as_float(__byte_perm(q4, 0x4B000000u, 0x7540u | (uint32_t)e)) - 8388608.0f;
                    const float wv = fmaf(qf, d1, -m1);
#pragma unroll
                    for (int t = 0; t < T; ++t) acc[r][t] = fmaf(wv, xv[t][4 * wi + e], acc[r][t]);
                }
            }
            hd[r] = hd_n[r];
            qh[r] = qh_n[r];
            ql[r] = ql_n[r];
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) {
            float a = acc[r][t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xFFFFFFFFu, a, o);
            if (lane == 0 && row0 + r < rows) y[(size_t)t * rows + row0 + r] = a;
        }
}

template <int T, int R>
static void launch_t(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, float *y,
                     cudaStream_t stream) {
    const int warps = 4;
    const dim3 grid((rows + warps * R - 1) / (warps * R)), block(32 * warps);
    mul_mv_q5_K_f32<T, R><<<grid, block, 0, stream>>>(w, row_stride, rows, cols, x, y);
}

void launch_v1(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y,
               cudaStream_t stream) {
    for (int t0 = 0; t0 < T; t0 += 8) {
        const int tg = T - t0 < 8 ? T - t0 : 8;
        const float *xs = x + (size_t)t0 * cols;
        float *ys = y + (size_t)t0 * rows;
        static const int r1 = [] {
            const char *e = std::getenv("LMTAIL_CUDA_R1");  // tuning knob for the T = 1 rows per warp
            return e ? std::atoi(e) : 4;
        }();
        switch (tg) {
            case 1:
                if (r1 == 1) launch_t<1, 1>(w, row_stride, rows, cols, xs, ys, stream);
                else if (r1 == 2) launch_t<1, 2>(w, row_stride, rows, cols, xs, ys, stream);
                else if (r1 == 8) launch_t<1, 8>(w, row_stride, rows, cols, xs, ys, stream);
                else launch_t<1, 4>(w, row_stride, rows, cols, xs, ys, stream);
                break;
            case 2: launch_t<2, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 3: launch_t<3, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 4: launch_t<4, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 5: launch_t<5, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 6: launch_t<6, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 7: launch_t<7, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            default: launch_t<8, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
        }
    }
    LMT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t mul_mv_q5_K_scratch_bytes(int cols) { return (size_t)(cols / LMT_QK_K) * kMaxNT * kFragBytes + 64; }

void launch_mul_mv_q5_K(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y,
                        void *scratch, cudaStream_t stream) {
    const char v = mmv_variant();
    if (!scratch || v == '1' || !tc_capable() || row_stride > (size_t)(1u << 23) || row_stride % 16 != 0 || (reinterpret_cast<uintptr_t>(w) & 15u) != 0) {
        launch_v1(w, row_stride, rows, cols, x, T, y, stream);
        return;
    }
    const int nb = cols / LMT_QK_K;
    uint8_t *frag = static_cast<uint8_t *>(scratch);
    float *unscale = reinterpret_cast<float *>(frag + (size_t)nb * kMaxNT * kFragBytes);
    for (int t0 = 0; t0 < T; t0 += 4 * kMaxNT) {
        const int tg = T - t0 < 4 * kMaxNT ? T - t0 : 4 * kMaxNT;
        const int NT = tg > 4 ? 2 : 1;
        // T = 1 with variant a or d: compact fragments (2 live columns); see frag_bytes.
        const int CT = (tg == 1 && (v == 'a' || v == 'd')) ? 2 : 8;
        prep_x<<<CT == 2 ? 1 : 4 * NT, 256, 0, stream>>>(x + (size_t)t0 * cols, tg, cols, NT, CT,
                                                         reinterpret_cast<__half *>(frag), unscale);
        float *ys = y + (size_t)t0 * rows;
        if (NT == 1) {
            if (v == 'b') launch_tc<1, 8, 1, 4>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'c') launch_tc<1, 4, 2, 6>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'd' && CT == 2) launch_tc<1, 4, 1, 3, 2, 2>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'd') launch_tc<1, 4, 1, 3, 2>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'e') launch_tc<1, 8, 1, 3, 2>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'f') launch_tc<1, 4, 1, 2, 4>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'g') launch_tc<1, 4, 1, 4>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'h') launch_tc<1, 2, 2, 4>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (CT == 2) launch_tc<1, 4, 2, 4, 1, 2>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else launch_tc<1, 4, 2, 4>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
        } else {
            if (v == 'b') launch_tc<2, 8, 1, 3>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'c') launch_tc<2, 4, 2, 5>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'd') launch_tc<2, 4, 1, 3, 2>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'e') launch_tc<2, 8, 1, 3, 2>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'f') launch_tc<2, 4, 1, 2, 4>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'g') launch_tc<2, 4, 1, 3>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else if (v == 'h') launch_tc<2, 2, 2, 3>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
            else launch_tc<2, 4, 2, 3>(w, row_stride, rows, nb, frag, unscale, tg, ys, stream);
        }
    }
    LMT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lmt::cuda
