// The LM-head matvec of every weight type, logits[t, r] = sum_c W[r, c] * x[t, c] in f32
// (the CPU backend's "f32" precision; host code csrc/metal/matvec.cpp, one table row per type).
//
// One kernel family: lmt_mul_mv<Tag> is the whole kernel, and a type contributes only
// lmt_mv_slice(Tag, ...): the dequantisation of 8 consecutive weights of a row, written with
// the block header's layout and scalar unpack (lmtail/blocks/*.h, shared with the C++ core and
// CUDA). The kernels below are one-line instantiations under their host names
// (mul_mv_<type>_f32). They are spelled out rather than declared as `template [[host_name]]`
// instantiations because metal-emu's generator (tools/msl_trampolines.py) binds each
// `kernel void` from its parsed signature and takes no template kernels.
//
// Geometry (every type): one row per 32-lane SIMD-group, the host's table sets SIMD-groups per
// threadgroup. A row is cut into 8-weight slices; lane l owns slices l, l + 32, l + 64, ...,
// so one pass of the SIMD-group covers 256 consecutive weights: one K-quant block (176-210
// contiguous bytes), eight Q8_0/Q4_0 blocks (272/144 bytes), 512 bytes of F16/BF16, 1 KiB of
// F32 -- the 32 lanes read one contiguous span, and the activations x[t, 256p .. 256p + 255]
// one contiguous KiB. A lane dequantises its 8 weights once and applies them to up to 4
// activation rows, so the weights are streamed ceil(T / 4) times.
//
// Batch invariance: token t's result is lane l's partial over its slices in slice order, then
// simd_sum of the 32 partials -- the same operations whatever T is and wherever t sits in the
// batch, so row t of a T-row call equals that row computed alone, bit for bit.
#include <metal_stdlib>

#include "lmtail/kernel_abi.h"

using namespace metal;

#define LMT_MV_SLICE 8u   // weights a lane dequantises at a time
#define LMT_MV_TOKENS 4u  // activation rows applied per pass over the weights

// ---- per type: weights [i0, i0 + 8) of row `row` (i0 a multiple of 8) as floats -------------
struct lmt_mv_f32 {};
struct lmt_mv_f16 {};
struct lmt_mv_bf16 {};
struct lmt_mv_q4_0 {};
struct lmt_mv_q8_0 {};
struct lmt_mv_q4_K {};
struct lmt_mv_q5_K {};
struct lmt_mv_q6_K {};

inline void lmt_mv_slice(lmt_mv_f32, device const uchar *row, uint i0, thread float *wv) {
    device const float *p = (device const float *)row + i0;
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = p[e];
}
inline void lmt_mv_slice(lmt_mv_f16, device const uchar *row, uint i0, thread float *wv) {
    device const lmt_f16_bits *p = (device const lmt_f16_bits *)row + i0;
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = float(as_type<half>(p[e]));
}
inline void lmt_mv_slice(lmt_mv_bf16, device const uchar *row, uint i0, thread float *wv) {
    device const lmt_bf16_bits *p = (device const lmt_bf16_bits *)row + i0;
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = as_type<float>(lmt_bf16_to_f32_bits(p[e]));
}
// Q4_0 / Q8_0: a slice is a quarter of one 32-weight block (w = d * q, exact in f32).
inline void lmt_mv_slice(lmt_mv_q4_0, device const uchar *row, uint i0, thread float *wv) {
    device const lmt_block_q4_0 *blk = (device const lmt_block_q4_0 *)row + i0 / LMT_Q4_0_BLOCK_ELEMS;
    const uint i = i0 % LMT_Q4_0_BLOCK_ELEMS;
    const float d = float(as_type<half>(blk->d));
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = d * float(lmt_q4_0_q(blk->qs, (int)(i + e)));
}
inline void lmt_mv_slice(lmt_mv_q8_0, device const uchar *row, uint i0, thread float *wv) {
    device const lmt_block_q8_0 *blk = (device const lmt_block_q8_0 *)row + i0 / LMT_Q8_0_BLOCK_ELEMS;
    const uint i = i0 % LMT_Q8_0_BLOCK_ELEMS;
    const float d = float(as_type<half>(blk->d));
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = d * float(blk->qs[i + e]);
}
// K-quants: a slice lies inside one sub-block (32 weights for Q4_K/Q5_K, 16 for Q6_K), so it
// has one scale (and min): w = q * (d * sc) - dmin * m, as the CPU's f32 path forms it.
inline void lmt_mv_slice(lmt_mv_q4_K, device const uchar *row, uint i0, thread float *wv) {
    device const lmt_block_q4_K *blk = (device const lmt_block_q4_K *)row + i0 / LMT_QK_K;
    const uint i = i0 % LMT_QK_K, j = i / 32u;
    const float d1 = float(as_type<half>(blk->d)) * float(lmt_q5k_scale(blk->scales, (int)j));
    const float m1 = float(as_type<half>(blk->dmin)) * float(lmt_q5k_min(blk->scales, (int)j));
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = fma(float(lmt_q4k_q(blk->qs, (int)(i + e))), d1, -m1);
}
inline void lmt_mv_slice(lmt_mv_q5_K, device const uchar *row, uint i0, thread float *wv) {
    device const lmt_block_q5_K *blk = (device const lmt_block_q5_K *)row + i0 / LMT_QK_K;
    const uint i = i0 % LMT_QK_K, j = i / 32u;
    const float d1 = float(as_type<half>(blk->d)) * float(lmt_q5k_scale(blk->scales, (int)j));
    const float m1 = float(as_type<half>(blk->dmin)) * float(lmt_q5k_min(blk->scales, (int)j));
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = fma(float(lmt_q5k_q(blk->qs, blk->qh, (int)(i + e))), d1, -m1);
}
inline void lmt_mv_slice(lmt_mv_q6_K, device const uchar *row, uint i0, thread float *wv) {
    device const lmt_block_q6_K *blk = (device const lmt_block_q6_K *)row + i0 / LMT_QK_K;
    const uint i = i0 % LMT_QK_K;
    const float d = float(as_type<half>(blk->d)) * float(blk->scales[i / 16u]);  // exact: 11 x 8 bits
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = d * float(lmt_q6k_q(blk->ql, blk->qh, (int)(i + e)));
}

// The last n < 8 weights of a row, zeros after them (constant trip counts keep wv in registers).
// Only the block-of-1 types can end mid-slice (the host requires cols to be a multiple of the
// block): the others never reach this.
template <typename Tag>
inline void lmt_mv_tail(Tag, device const uchar *, uint, uint, thread float *wv) {
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = 0.0f;
}
inline void lmt_mv_tail(lmt_mv_f32, device const uchar *row, uint i0, uint n, thread float *wv) {
    device const float *p = (device const float *)row + i0;
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = e < n ? p[e] : 0.0f;
}
inline void lmt_mv_tail(lmt_mv_f16, device const uchar *row, uint i0, uint n, thread float *wv) {
    device const lmt_f16_bits *p = (device const lmt_f16_bits *)row + i0;
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = e < n ? float(as_type<half>(p[e])) : 0.0f;
}
inline void lmt_mv_tail(lmt_mv_bf16, device const uchar *row, uint i0, uint n, thread float *wv) {
    device const lmt_bf16_bits *p = (device const lmt_bf16_bits *)row + i0;
    for (uint e = 0u; e < LMT_MV_SLICE; ++e) wv[e] = e < n ? as_type<float>(lmt_bf16_to_f32_bits(p[e])) : 0.0f;
}

// ---- the kernel, shared by every type ---------------------------------------------------------
template <typename Tag>
inline void lmt_mul_mv(Tag tag, device const uchar *w, device const float *x, device float *y,
                       constant lmt_args_mul_mv &args, uint tgid, uint sg, uint lane, uint nsg) {
    const uint row = tgid * nsg + sg;
    if (row >= args.rows) return;  // whole SIMD-group; this kernel has no threadgroup barrier
    device const uchar *wr = w + args.weight_offset + (ulong)row * args.row_bytes;
    const uint full = args.cols / LMT_MV_SLICE, slices = (args.cols + LMT_MV_SLICE - 1u) / LMT_MV_SLICE;
    for (uint t0 = 0u; t0 < args.n_tokens; t0 += LMT_MV_TOKENS) {
        const uint tn = min(LMT_MV_TOKENS, args.n_tokens - t0);
        float acc[LMT_MV_TOKENS] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (uint s = lane; s < slices; s += 32u) {
            const uint i0 = s * LMT_MV_SLICE;
            float wv[LMT_MV_SLICE];
            if (s < full) {
                lmt_mv_slice(tag, wr, i0, wv);
                // constant trip counts with a guard: acc[] stays in registers (no dynamic index)
                for (uint t = 0u; t < LMT_MV_TOKENS; ++t) {
                    if (t >= tn) break;
                    device const float *xt = x + (ulong)(t0 + t) * args.cols + i0;
                    float d = 0.0f;
                    for (uint e = 0u; e < LMT_MV_SLICE; ++e) d = fma(wv[e], xt[e], d);
                    acc[t] = acc[t] + d;
                }
            } else {
                const uint n = args.cols - i0;
                lmt_mv_tail(tag, wr, i0, n, wv);
                for (uint t = 0u; t < LMT_MV_TOKENS; ++t) {
                    if (t >= tn) break;
                    device const float *xt = x + (ulong)(t0 + t) * args.cols + i0;
                    float d = 0.0f;
                    for (uint e = 0u; e < LMT_MV_SLICE; ++e) d = fma(wv[e], e < n ? xt[e] : 0.0f, d);
                    acc[t] = acc[t] + d;
                }
            }
        }
        for (uint t = 0u; t < LMT_MV_TOKENS; ++t) {
            const float r = simd_sum(acc[t]);
            if (lane == 0u && t < tn) y[(ulong)(t0 + t) * args.rows + row] = r;
        }
    }
}

// ---- the instantiations (host names: csrc/metal/matvec.cpp's table) --------------------------
kernel void mul_mv_f32_f32(
    device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]], device float *y [[buffer(2)]],
    constant lmt_args_mul_mv &args [[buffer(3)]], uint tgid [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    lmt_mul_mv(lmt_mv_f32(), w, x, y, args, tgid, sg, lane, nsg);
}
kernel void mul_mv_f16_f32(
    device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]], device float *y [[buffer(2)]],
    constant lmt_args_mul_mv &args [[buffer(3)]], uint tgid [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    lmt_mul_mv(lmt_mv_f16(), w, x, y, args, tgid, sg, lane, nsg);
}
kernel void mul_mv_bf16_f32(
    device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]], device float *y [[buffer(2)]],
    constant lmt_args_mul_mv &args [[buffer(3)]], uint tgid [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    lmt_mul_mv(lmt_mv_bf16(), w, x, y, args, tgid, sg, lane, nsg);
}
kernel void mul_mv_q4_0_f32(
    device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]], device float *y [[buffer(2)]],
    constant lmt_args_mul_mv &args [[buffer(3)]], uint tgid [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    lmt_mul_mv(lmt_mv_q4_0(), w, x, y, args, tgid, sg, lane, nsg);
}
kernel void mul_mv_q8_0_f32(
    device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]], device float *y [[buffer(2)]],
    constant lmt_args_mul_mv &args [[buffer(3)]], uint tgid [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    lmt_mul_mv(lmt_mv_q8_0(), w, x, y, args, tgid, sg, lane, nsg);
}
kernel void mul_mv_q4_K_f32(
    device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]], device float *y [[buffer(2)]],
    constant lmt_args_mul_mv &args [[buffer(3)]], uint tgid [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    lmt_mul_mv(lmt_mv_q4_K(), w, x, y, args, tgid, sg, lane, nsg);
}
kernel void mul_mv_q5_K_f32(
    device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]], device float *y [[buffer(2)]],
    constant lmt_args_mul_mv &args [[buffer(3)]], uint tgid [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    lmt_mul_mv(lmt_mv_q5_K(), w, x, y, args, tgid, sg, lane, nsg);
}
kernel void mul_mv_q6_K_f32(
    device const uchar *w [[buffer(0)]], device const float *x [[buffer(1)]], device float *y [[buffer(2)]],
    constant lmt_args_mul_mv &args [[buffer(3)]], uint tgid [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    lmt_mul_mv(lmt_mv_q6_K(), w, x, y, args, tgid, sg, lane, nsg);
}
