// Element-wise ops on the logits, in place (mirrors csrc/cpu/unary.cpp).
//
// scale: x * s (ggml_scale with bias 0: one rounding). tanh: precise::tanh. The soft cap as
// llama.cpp's graph computes it is four of these nodes (x*s, x*(1/cap), tanh, x*cap) with a
// barrier between each; scale_softcap_f32 is the fused fallback evaluating the same expression
// tree in one pass. The _4 variants take float4 when the count is a multiple of 4.
#include <metal_stdlib>

#include "lmtail/kernel_abi.h"

using namespace metal;

kernel void scale_f32(
    device float *x [[buffer(0)]],
    constant lmt_args_unary &args [[buffer(1)]],
    uint tid [[thread_position_in_grid]]) {
    if (tid < args.n) x[tid] = x[tid] * args.scale;
}

kernel void scale_f32_4(
    device float4 *x [[buffer(0)]],
    constant lmt_args_unary &args [[buffer(1)]],  // n counts float4s
    uint tid [[thread_position_in_grid]]) {
    if (tid < args.n) x[tid] = x[tid] * args.scale;
}

kernel void tanh_f32(
    device float *x [[buffer(0)]],
    constant lmt_args_unary &args [[buffer(1)]],
    uint tid [[thread_position_in_grid]]) {
    if (tid < args.n) x[tid] = precise::tanh(x[tid]);
}

kernel void tanh_f32_4(
    device float4 *x [[buffer(0)]],
    constant lmt_args_unary &args [[buffer(1)]],
    uint tid [[thread_position_in_grid]]) {
    if (tid < args.n) x[tid] = precise::tanh(x[tid]);
}

kernel void scale_softcap_f32(
    device float *x [[buffer(0)]],
    constant lmt_args_softcap &args [[buffer(1)]],
    uint tid [[thread_position_in_grid]]) {
    if (tid < args.n) {
        float v = x[tid] * args.scale;
        if (args.softcap > 0.0f) {
            v = v * args.inv_softcap;
            v = precise::tanh(v);
            v = v * args.softcap;
        }
        x[tid] = v;
    }
}
