// Q5_K LM-head matvec, logits[t, r] = sum_c dequant(W)[r, c] * x[t, c] (mirrors
// csrc/cpu/types/q5_k/q5_k.cpp; host code csrc/metal/matvec_q5_k.cpp).
//
// Shape: two 32-lane SIMD-groups per threadgroup, one row per SIMD-group (the known-good shape
// of ggml's kernel_mul_mv_q5_K_f32; alternatives not measured yet). Lane l owns weights
// [8l, 8l + 8) of every 256-weight block (sub-block l / 4), dequantises them once per block
// with the shared header's unpacking, and applies them to up to 4 activation rows at a time,
// so the weights are streamed ceil(T / 4) times. Lane partials are combined with simd_sum.
#include <metal_stdlib>

#include "lmtail/kernel_abi.h"

using namespace metal;

#define LMT_MV_TOKENS 4u

kernel void mul_mv_q5_K_f32(
    device const uchar *w [[buffer(0)]],
    device const float *x [[buffer(1)]],
    device float *y [[buffer(2)]],
    constant lmt_args_mul_mv_q5_K &args [[buffer(3)]],
    uint tgid [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    const uint row = tgid * nsg + sg;
    if (row >= args.rows) return;  // whole SIMD-group; this kernel has no threadgroup barrier
    device const lmt_block_q5_K *blocks =
        (device const lmt_block_q5_K *)(w + args.weight_offset + (ulong)row * args.row_bytes);
    const uint nb = args.cols / LMT_QK_K;
    const uint j = lane / 4u, i0 = lane * 8u;
    for (uint t0 = 0u; t0 < args.n_tokens; t0 += LMT_MV_TOKENS) {
        const uint tn = min(LMT_MV_TOKENS, args.n_tokens - t0);
        float acc[LMT_MV_TOKENS] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (uint b = 0u; b < nb; ++b) {
            device const lmt_block_q5_K *blk = blocks + b;
            const float d = float(as_type<half>(blk->d));
            const float dmin = float(as_type<half>(blk->dmin));
            const float d1 = d * float(lmt_q5k_scale(blk->scales, (int)j));
            const float m1 = dmin * float(lmt_q5k_min(blk->scales, (int)j));
            float wv[8];
            for (uint e = 0u; e < 8u; ++e) wv[e] = fma(float(lmt_q5k_q(blk->qs, blk->qh, (int)(i0 + e))), d1, -m1);
            for (uint t = 0u; t < tn; ++t) {
                device const float *xt = x + (ulong)(t0 + t) * args.cols + b * LMT_QK_K + i0;
                float s = 0.0f;
                for (uint e = 0u; e < 8u; ++e) s = fma(wv[e], xt[e], s);
                acc[t] = acc[t] + s;
            }
        }
        for (uint t = 0u; t < LMT_MV_TOKENS; ++t) {
            const float r = simd_sum(acc[t]);
            if (lane == 0u && t < tn) y[(ulong)(t0 + t) * args.rows + row] = r;
        }
    }
}
