// Final RMSNorm (mirrors csrc/cpu/rms_norm.cpp): one threadgroup per row.
//
//   ss    = sum of x_i * x_i: float partials per lane (strided), simd_sum per SIMD-group, then
//           the SIMD-group partials in order (the CPU sums in double: compare with a bound)
//   scale = 1 / sqrt(ss / cols + eps);   y_i = (x_i * scale) * gamma_i
//   (ss / cols non-finite: scale = NaN, the whole row NaN; see below)
#include <metal_stdlib>

#include "lmtail/kernel_abi.h"

using namespace metal;

kernel void rms_norm_f32(
    device const float *x [[buffer(0)]],
    device const float *gamma [[buffer(1)]],
    device float *y [[buffer(2)]],
    constant lmt_args_rms_norm &args [[buffer(3)]],
    uint row [[threadgroup_position_in_grid]],
    uint lid [[thread_index_in_threadgroup]],
    uint nth [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float partial[32];
    device const float *xr = x + (ulong)row * args.cols;
    device float *yr = y + (ulong)row * args.cols;
    float ss = 0.0f;
    for (uint i = lid; i < args.cols; i += nth) {
        const float v = xr[i];
        ss = ss + v * v;
    }
    ss = simd_sum(ss);
    if (lane == 0u) partial[sg] = ss;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint j = 0u; j < nsg; ++j) total = total + partial[j];
    // A sum of squares that overflowed (inf: a finite row of huge values) would give scale 0 and
    // an all-zero row that every later check takes for valid logits (greedy token 0). Poison
    // the row with NaN instead: the fail-closed latches downstream (and the host's check in
    // csrc/metal/rms_norm.cpp) then refuse it. Exponent-bit test: immune to fast-math.
    const float mean = total / float(args.cols);
    const bool overflow = (as_type<uint>(mean) & 0x7F800000u) == 0x7F800000u;
    const float scale = overflow ? as_type<float>(0x7FC00000u) : 1.0f / sqrt(mean + args.eps);
    for (uint i = lid; i < args.cols; i += nth) {
        const float v = xr[i] * scale;
        yr[i] = args.has_gamma != 0u ? v * gamma[i] : v;
    }
}
