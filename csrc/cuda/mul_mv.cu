// y[t][r] = sum_c W[r][c] x[t][c] for every weight type the CUDA backend runs (Q6_K, Q8_0, Q4_0,
// Q4_K, Q5_K, F16, BF16, F32), f32 activations and f32 accumulation, T >= 1 tokens.
//
// The quantised types with 16-byte aligned rows run on integer tensor cores instead
// (mul_mv_imma.cuh, included below; batch invariant too, by exact int32 sums). The f32 kernel here
// runs the floats and quantised rows of other strides (docs/DESIGN.md, "CUDA backend"):
// * Lane L of a warp owns columns [256 s + 8 L, 256 s + 8 L + 8) of step s, whatever the type (a
//   quarter of a Q8_0/Q4_0 block, an eighth of a K sub-block pair, 8 floats). Those 8 weights
//   share one block scale (and min), so the lane's partial for one row and token is
//       S = sum_i q_i x_i  (8 exact small integers q_i, or the float weights themselves)
//       p = scale * S - min * sum_i x_i          (the min term for Q4_K/Q5_K only)
//   and the lane adds p to its accumulator: 8-term chains, then one add per step (a blocked sum;
//   <= 2.5e-7 normwise from f64 at 6656 columns), then a fixed xor-shuffle tree over the 32 lanes.
// * Batch invariance by construction: each lane decodes its weights once per step and applies
//   them to the TG tokens of its group in registers, with the same instruction sequence for every
//   token (explicit fmaf/__fmul_rn/__fadd_rn, and the library builds with --fmad=false, so nothing
//   is contracted differently per instantiation). The rows per warp (R) and the token group (TG)
//   change which rows and tokens a warp holds, never the order of one (row, token)'s sums: the
//   logits of a token are the same bytes at T = 1 and inside any batch.
// * Selection rule (launch_mul_mv): tokens in groups of 8 (one launch per group, each reading the
//   weights once); a group of n < 8 tokens runs the smallest TG in {1, 2, 4, 8} >= n (the extra
//   token slots carry zeros and are not stored). 4 warps per CTA, R = 4 rows per warp for every TG
//   (each lane's x loads are shared by 4 rows), one step of weight bytes in flight per lane. The
//   geometry (bench/cuda/mv_sweep.sh) changes no result; nothing else (no environment variable,
//   no device query) chooses anything.
#include "common.cuh"
#include "launch.hpp"

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

namespace lmt::cuda {

namespace {

#include "mul_mv_imma.cuh"

bool g_force_f32 = false;  // mul_mv_force_f32_for_testing (bench A/B only)

constexpr float kMagic = 8388608.0f;  // 2^23: the float with bits 0x4B000000

// Byte e of `w` as the float 2^23 + byte (one PRMT), so (2^23 + byte) - (2^23 + offset) is the
// exact integer byte - offset in one FADD (no I2F, a quarter-rate instruction).
template <int E>
__device__ __forceinline__ float byte_magic(uint32_t w) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (uint32_t)E));
}
template <int OFFSET>
__device__ __forceinline__ void bytes_to_q(uint32_t w0, uint32_t w1, float (&q)[8]) {
    constexpr float base = kMagic + (float)OFFSET;
    q[0] = __fsub_rn(byte_magic<0>(w0), base);
    q[1] = __fsub_rn(byte_magic<1>(w0), base);
    q[2] = __fsub_rn(byte_magic<2>(w0), base);
    q[3] = __fsub_rn(byte_magic<3>(w0), base);
    q[4] = __fsub_rn(byte_magic<0>(w1), base);
    q[5] = __fsub_rn(byte_magic<1>(w1), base);
    q[6] = __fsub_rn(byte_magic<2>(w1), base);
    q[7] = __fsub_rn(byte_magic<3>(w1), base);
}

__device__ __forceinline__ float f16_at(uint32_t w, int hi) {
    return __half2float(__ushort_as_half((unsigned short)(hi ? w >> 16 : w & 0xFFFFu)));
}
// 8 bytes at a 2-byte aligned address (Q6_K, Q8_0 and Q4_0 blocks are 210, 34 and 18 bytes).
__device__ __forceinline__ uint2 ld8_a2(const uint8_t *p) {
    const unsigned short *h = reinterpret_cast<const unsigned short *>(p);
    uint2 r;
    r.x = (uint32_t)__ldg(h) | ((uint32_t)__ldg(h + 1) << 16);
    r.y = (uint32_t)__ldg(h + 2) | ((uint32_t)__ldg(h + 3) << 16);
    return r;
}
__device__ __forceinline__ uint32_t ld2_a2(const uint8_t *p) {
    return (uint32_t)__ldg(reinterpret_cast<const unsigned short *>(p));
}

// Steps per chunk for the quantised types (see mul_mv); performance only, 1 measured best.
#ifndef LMT_MV_AHEAD
#define LMT_MV_AHEAD 1
#endif

// ---- the types: Raw (what a lane loads for one row and step), load, decode ----------------------
// decode gives the 8 q (exact) and the chunk's scale (and min for the K4/K5 pair).

struct TypeQ5K {
    static constexpr int kAhead = LMT_MV_AHEAD;
    static constexpr bool kMin = true, kScaled = true;
    struct Raw { uint4 hd; uint2 qs, qh; };
    static __device__ __forceinline__ void load(const uint8_t *row, int s, int L, Raw &r) {
        const uint8_t *b = row + (size_t)s * LMT_Q5K_BLOCK_BYTES;
        const int j = L >> 2, g = j >> 1, k = L & 3;
        r.hd = __ldg(reinterpret_cast<const uint4 *>(b));
        r.qh = __ldg(reinterpret_cast<const uint2 *>(b + 16 + 8 * k));
        r.qs = __ldg(reinterpret_cast<const uint2 *>(b + 48 + 32 * g + 8 * k));
    }
    static __device__ __forceinline__ void scale_min(const uint4 hd, int j, float &scale, float &mn) {
        const int jj = j & 3;
        const uint32_t b0 = (hd.y >> (8 * jj)) & 0xFFu;  // scales[jj]
        const uint32_t b1 = (hd.z >> (8 * jj)) & 0xFFu;  // scales[jj + 4]
        const uint32_t b2 = (hd.w >> (8 * jj)) & 0xFFu;  // scales[jj + 8]
        const uint32_t sc = j >= 4 ? ((b2 & 0xFu) | ((b0 >> 6) << 4)) : (b0 & 63u);
        const uint32_t m = j >= 4 ? ((b2 >> 4) | ((b1 >> 6) << 4)) : (b1 & 63u);
        scale = __fmul_rn(f16_at(hd.x, 0), (float)sc);
        mn = __fmul_rn(f16_at(hd.x, 1), (float)m);
    }
    static __device__ __forceinline__ void decode(const Raw &r, int L, float (&q)[8], float &scale, float &mn) {
        const int j = L >> 2, g = j >> 1, up = j & 1;
        const int hs = 2 * g + up;
        const uint32_t w0 = ((r.qs.x >> (4 * up)) & 0x0F0F0F0Fu) | (((r.qh.x >> hs) & 0x01010101u) << 4);
        const uint32_t w1 = ((r.qs.y >> (4 * up)) & 0x0F0F0F0Fu) | (((r.qh.y >> hs) & 0x01010101u) << 4);
        bytes_to_q<0>(w0, w1, q);
        scale_min(r.hd, j, scale, mn);
    }
};

struct TypeQ4K {
    static constexpr int kAhead = LMT_MV_AHEAD;
    static constexpr bool kMin = true, kScaled = true;
    struct Raw { uint4 hd; uint2 qs; };
    static __device__ __forceinline__ void load(const uint8_t *row, int s, int L, Raw &r) {
        const uint8_t *b = row + (size_t)s * LMT_Q4K_BLOCK_BYTES;
        const int j = L >> 2, g = j >> 1, k = L & 3;
        r.hd = __ldg(reinterpret_cast<const uint4 *>(b));
        r.qs = __ldg(reinterpret_cast<const uint2 *>(b + 16 + 32 * g + 8 * k));
    }
    static __device__ __forceinline__ void decode(const Raw &r, int L, float (&q)[8], float &scale, float &mn) {
        const int j = L >> 2, up = j & 1;
        bytes_to_q<0>((r.qs.x >> (4 * up)) & 0x0F0F0F0Fu, (r.qs.y >> (4 * up)) & 0x0F0F0F0Fu, q);
        TypeQ5K::scale_min(r.hd, j, scale, mn);  // the same 6-bit packing
    }
};

struct TypeQ6K {
    static constexpr int kAhead = LMT_MV_AHEAD;
    static constexpr bool kMin = false, kScaled = true;
    struct Raw { uint2 ql, qh; uint32_t sd; };  // sd: int8 scale (low byte), f16 d (high half)
    static __device__ __forceinline__ void load(const uint8_t *row, int s, int L, Raw &r) {
        const uint8_t *b = row + (size_t)s * LMT_Q6K_BLOCK_BYTES;
        const int h = L >> 4, quarter = (L >> 2) & 3, l = 8 * (L & 3);
        r.ql = ld8_a2(b + 64 * h + 32 * (quarter & 1) + l);
        r.qh = ld8_a2(b + 128 + 32 * h + l);
        r.sd = (uint32_t)__ldg(b + 192 + (L >> 1)) | (ld2_a2(b + 208) << 16);  // scales[L / 2], d
    }
    static __device__ __forceinline__ void decode(const Raw &r, int L, float (&q)[8], float &scale, float &mn) {
        const int quarter = (L >> 2) & 3, ns = 4 * (quarter >> 1), hs = 2 * quarter;
        const uint32_t w0 = ((r.ql.x >> ns) & 0x0F0F0F0Fu) | (((r.qh.x >> hs) & 0x03030303u) << 4);
        const uint32_t w1 = ((r.ql.y >> ns) & 0x0F0F0F0Fu) | (((r.qh.y >> hs) & 0x03030303u) << 4);
        bytes_to_q<32>(w0, w1, q);
        scale = __fmul_rn(f16_at(r.sd, 1), (float)(int8_t)(r.sd & 0xFFu));
        mn = 0.0f;
    }
};

struct TypeQ8_0 {
    static constexpr int kAhead = LMT_MV_AHEAD;
    static constexpr bool kMin = false, kScaled = true;
    struct Raw { uint2 qs; uint32_t d; };
    static __device__ __forceinline__ void load(const uint8_t *row, int s, int L, Raw &r) {
        const uint8_t *b = row + (size_t)(8 * s + (L >> 2)) * LMT_Q8_0_BLOCK_BYTES;
        r.qs = ld8_a2(b + 2 + 8 * (L & 3));
        r.d = ld2_a2(b);
    }
    static __device__ __forceinline__ void decode(const Raw &r, int, float (&q)[8], float &scale, float &mn) {
        bytes_to_q<128>(r.qs.x ^ 0x80808080u, r.qs.y ^ 0x80808080u, q);  // int8 + 128 as a byte
        scale = f16_at(r.d, 0);
        mn = 0.0f;
    }
};

struct TypeQ4_0 {
    static constexpr int kAhead = LMT_MV_AHEAD;
    static constexpr bool kMin = false, kScaled = true;
    struct Raw { uint2 qs; uint32_t d; };
    static __device__ __forceinline__ void load(const uint8_t *row, int s, int L, Raw &r) {
        const uint8_t *b = row + (size_t)(8 * s + (L >> 2)) * LMT_Q4_0_BLOCK_BYTES;
        r.qs = ld8_a2(b + 2 + 8 * (L & 1));  // weights 8k.. : low nibbles (k < 2), high (k >= 2)
        r.d = ld2_a2(b);
    }
    static __device__ __forceinline__ void decode(const Raw &r, int L, float (&q)[8], float &scale, float &mn) {
        const int ns = 4 * ((L >> 1) & 1);
        bytes_to_q<8>((r.qs.x >> ns) & 0x0F0F0F0Fu, (r.qs.y >> ns) & 0x0F0F0F0Fu, q);
        scale = f16_at(r.d, 0);
        mn = 0.0f;
    }
};

struct TypeF16 {
    static constexpr int kAhead = 1;
    static constexpr bool kMin = false, kScaled = false;
    struct Raw { uint4 v; };
    static __device__ __forceinline__ void load(const uint8_t *row, int s, int L, Raw &r) {
        r.v = __ldg(reinterpret_cast<const uint4 *>(row + 2 * ((size_t)s * 256 + 8 * L)));
    }
    static __device__ __forceinline__ void decode(const Raw &r, int, float (&q)[8], float &scale, float &mn) {
        const uint32_t w[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            q[2 * i] = f16_at(w[i], 0);
            q[2 * i + 1] = f16_at(w[i], 1);
        }
        scale = 1.0f;
        mn = 0.0f;
    }
};

struct TypeBF16 {
    static constexpr int kAhead = 1;
    static constexpr bool kMin = false, kScaled = false;
    struct Raw { uint4 v; };
    static __device__ __forceinline__ void load(const uint8_t *row, int s, int L, Raw &r) {
        r.v = __ldg(reinterpret_cast<const uint4 *>(row + 2 * ((size_t)s * 256 + 8 * L)));
    }
    static __device__ __forceinline__ void decode(const Raw &r, int, float (&q)[8], float &scale, float &mn) {
        const uint32_t w[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            q[2 * i] = __uint_as_float(w[i] << 16);
            q[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
        }
        scale = 1.0f;
        mn = 0.0f;
    }
};

struct TypeF32 {
    static constexpr int kAhead = 1;
    static constexpr bool kMin = false, kScaled = false;
    struct Raw { float4 a, b; };
    static __device__ __forceinline__ void load(const uint8_t *row, int s, int L, Raw &r) {
        const float4 *p = reinterpret_cast<const float4 *>(row + 4 * ((size_t)s * 256 + 8 * L));
        r.a = __ldg(p);
        r.b = __ldg(p + 1);
    }
    static __device__ __forceinline__ void decode(const Raw &r, int, float (&q)[8], float &scale, float &mn) {
        q[0] = r.a.x; q[1] = r.a.y; q[2] = r.a.z; q[3] = r.a.w;
        q[4] = r.b.x; q[5] = r.b.y; q[6] = r.b.z; q[7] = r.b.w;
        scale = 1.0f;
        mn = 0.0f;
    }
};

// Launch geometry: performance only (a (row, token)'s sums do not depend on it). The defaults are
// the measured choice (docs/NOTES.md); bench/cuda/mv_sweep.sh rebuilds with other values.
#ifndef LMT_MV_WARPS
#define LMT_MV_WARPS 4
#endif
#ifndef LMT_MV_ROWS
#define LMT_MV_ROWS 4
#endif
constexpr int kWarps = LMT_MV_WARPS;  // warps per CTA
constexpr int kRows = LMT_MV_ROWS;    // rows per warp (R)

// The matvec. Warp w of CTA b computes rows [R (4 b + w), +R) for the TG tokens at x (T <= TG of
// them live); lane L owns columns 256 s + 8 L .. + 8 of each step s. See the file comment.
template <class Ty, int TG, int R>
__global__ void __launch_bounds__(kWarps * 32) mul_mv(const uint8_t *__restrict__ w, size_t row_stride, int rows,
                                                      int cols, const float *__restrict__ x, int T,
                                                      float *__restrict__ y) {
    const int L = threadIdx.x & 31;
    const int row0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * R;
    if (row0 >= rows) return;
    const int steps = (cols + 255) / 256;
    const uint8_t *rp[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rp[r] = w + (size_t)(row0 + r < rows ? row0 + r : rows - 1) * row_stride;
    float acc[R][TG];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < TG; ++t) acc[r][t] = 0.0f;

    // Steps go in chunks of A: chunk c + 1's bytes (A steps x R rows per lane) are in flight while
    // chunk c is decoded and applied. A = 1 for every type: A = 2 or 4 for the quantised types
    // (more bytes in flight) measured slower, the extra registers cost more occupancy than the
    // loads gained (docs/NOTES.md).
    constexpr int A = Ty::kAhead;
    const int chunks = (steps + A - 1) / A;
    typename Ty::Raw cur[A][R], nxt[A][R];
    auto load_chunk = [&](int ch, typename Ty::Raw (&buf)[A][R]) {
#pragma unroll
        for (int a = 0; a < A; ++a) {
            const int st = ch * A + a;
            if (st < steps && 256 * st + 8 * L < cols) {
#pragma unroll
                for (int r = 0; r < R; ++r) Ty::load(rp[r], st, L, buf[a][r]);
            }
        }
    };
    load_chunk(0, cur);
    for (int ch = 0; ch < chunks; ++ch) {
        if (ch + 1 < chunks) load_chunk(ch + 1, nxt);
#pragma unroll
        for (int a = 0; a < A; ++a) {
            const int s = ch * A + a;
            const int c0 = 256 * s + 8 * L;
            if (s >= steps || c0 >= cols) continue;
            float xv[TG][8];
#pragma unroll
            for (int t = 0; t < TG; ++t) {
                if (t < T) {
                    const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)t * cols + c0);
                    const float4 u = __ldg(xp), v = __ldg(xp + 1);
                    xv[t][0] = u.x; xv[t][1] = u.y; xv[t][2] = u.z; xv[t][3] = u.w;
                    xv[t][4] = v.x; xv[t][5] = v.y; xv[t][6] = v.z; xv[t][7] = v.w;
                } else {
#pragma unroll
                    for (int i = 0; i < 8; ++i) xv[t][i] = 0.0f;
                }
            }
            float xs[TG];
            if (Ty::kMin) {
#pragma unroll
                for (int t = 0; t < TG; ++t) {
                    float u = xv[t][0];
#pragma unroll
                    for (int i = 1; i < 8; ++i) u = __fadd_rn(u, xv[t][i]);
                    xs[t] = u;
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float q[8], scale, mn;
                Ty::decode(cur[a][r], L, q, scale, mn);
#pragma unroll
                for (int t = 0; t < TG; ++t) {
                    float S = __fmul_rn(q[0], xv[t][0]);
#pragma unroll
                    for (int i = 1; i < 8; ++i) S = fmaf(q[i], xv[t][i], S);
                    float p = S;
                    if (Ty::kMin) p = fmaf(scale, S, -__fmul_rn(mn, xs[t]));
                    else if (Ty::kScaled) p = __fmul_rn(scale, S);
                    acc[r][t] = __fadd_rn(acc[r][t], p);
                }
            }
        }
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int r = 0; r < R; ++r) cur[a][r] = nxt[a][r];
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < TG; ++t) {
            float a = acc[r][t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) a = __fadd_rn(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
            if (L == 0 && row0 + r < rows && t < T) y[(size_t)t * rows + row0 + r] = a;
        }
}

template <class Ty>
void launch_type(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y,
                 cudaStream_t st) {
    const dim3 grid((unsigned)((rows + kWarps * kRows - 1) / (kWarps * kRows))), block(kWarps * 32);
    for (int t0 = 0; t0 < T; t0 += 8) {
        const int n = T - t0 < 8 ? T - t0 : 8;
        const float *xs = x + (size_t)t0 * cols;
        float *ys = y + (size_t)t0 * rows;
        if (n == 1) mul_mv<Ty, 1, kRows><<<grid, block, 0, st>>>(w, row_stride, rows, cols, xs, n, ys);
        else if (n == 2) mul_mv<Ty, 2, kRows><<<grid, block, 0, st>>>(w, row_stride, rows, cols, xs, n, ys);
        else if (n <= 4) mul_mv<Ty, 4, kRows><<<grid, block, 0, st>>>(w, row_stride, rows, cols, xs, n, ys);
        else mul_mv<Ty, 8, kRows><<<grid, block, 0, st>>>(w, row_stride, rows, cols, xs, n, ys);
    }
}

// Quantised types: integer tensor cores (mul_mv_imma.cuh) whenever the rows are 16-byte aligned
// (row_stride % 16 == 0, as DeviceHead and lmtail_cuda_check store them), else the f32 kernel above.
// The rule reads the stride only, never T, so a token's logits come from the same kernel at every T
// (each is batch invariant). The floats run the f32 kernel (at the copy bandwidth at T = 1).
template <class Ty, class Imma>
void launch_quant(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y,
                  cudaStream_t st) {
    if (row_stride % 16 == 0 && !g_force_f32) imma::launch<Imma>(w, row_stride, rows, cols, x, T, y, st);
    else launch_type<Ty>(w, row_stride, rows, cols, x, T, y, st);
}

struct TypeRow {
    int id;
    const char *name;
    int block_elems, block_bytes;
    int col_multiple;   // cols must be a multiple of this (the block, or 8 for the floats)
    int row_align;      // the kernel's load width for this type: row_stride % row_align == 0
    void (*launch)(const uint8_t *, size_t, int, int, const float *, int, float *, cudaStream_t);
};

// The types the CUDA backend runs (ggml ids). A new type is a row here and a Type struct above.
constexpr TypeRow kTypes[] = {
    {0, "F32", 1, 4, 8, 16, launch_type<TypeF32>},
    {1, "F16", 1, 2, 8, 16, launch_type<TypeF16>},
    {2, "Q4_0", 32, LMT_Q4_0_BLOCK_BYTES, 32, 2, (launch_quant<TypeQ4_0, imma::Q40>)},
    {8, "Q8_0", 32, LMT_Q8_0_BLOCK_BYTES, 32, 2, (launch_quant<TypeQ8_0, imma::Q80>)},
    {12, "Q4_K", 256, LMT_Q4K_BLOCK_BYTES, 256, 16, (launch_quant<TypeQ4K, imma::Q4K>)},
    {13, "Q5_K", 256, LMT_Q5K_BLOCK_BYTES, 256, 16, (launch_quant<TypeQ5K, imma::Q5K>)},
    {14, "Q6_K", 256, LMT_Q6K_BLOCK_BYTES, 256, 2, (launch_quant<TypeQ6K, imma::Q6K>)},
    {30, "BF16", 1, 2, 8, 16, launch_type<TypeBF16>},
};

const TypeRow *find_type(int id) {
    for (const auto &t : kTypes)
        if (t.id == id) return &t;
    return nullptr;
}

const TypeRow &type_or_throw(int id) {
    const TypeRow *t = find_type(id);
    if (!t) throw std::invalid_argument("cuda matvec: ggml type " + std::to_string(id) + " is not run by the cuda backend");
    return *t;
}

}  // namespace

void mul_mv_force_f32_for_testing(bool on) { g_force_f32 = on; }

std::vector<int> mul_mv_types() {
    std::vector<int> ids;
    for (const auto &t : kTypes) ids.push_back(t.id);
    return ids;
}

int mul_mv_col_multiple(int type) { return type_or_throw(type).col_multiple; }

size_t mul_mv_row_bytes(int type, int cols) {
    const TypeRow &t = type_or_throw(type);
    return (size_t)cols / t.block_elems * t.block_bytes;
}

void check_mul_mv_shape(int type, int cols) {
    const TypeRow &t = type_or_throw(type);
    if (cols <= 0 || cols % t.col_multiple != 0)
        throw std::invalid_argument(std::string("cuda matvec: ") + t.name + " needs cols a positive multiple of " +
                                    std::to_string(t.col_multiple) + "; found " + std::to_string(cols));
}

void launch_mul_mv(int type, const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y,
                   cudaStream_t stream) {
    const TypeRow &t = type_or_throw(type);
    check_mul_mv_shape(type, cols);
    if (rows <= 0 || T <= 0) return;
    if (row_stride < mul_mv_row_bytes(type, cols) || row_stride % t.row_align != 0 ||
        reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
        throw std::invalid_argument(std::string("cuda matvec: ") + t.name + " rows must start 16-byte aligned with a stride "
                                    "that is a multiple of " + std::to_string(t.row_align) + " bytes");
    t.launch(w, row_stride, rows, cols, x, T, y, stream);
    LMT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lmt::cuda
