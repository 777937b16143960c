// Planted bugs and test hooks for the emulator tests (tests/test_metal_emu*.py): compiled only into
// the test-only module _lmtail_testing (CMake LMTAIL_TESTING=ON), never into lmtail.metallib or
// the shipped metal-emu backend. They prove that the emulator catches what it claims to catch.
#include <metal_stdlib>

#include "lmtail/kernel_abi.h"

using namespace metal;

// Writes a quiet NaN into x[index] (the "NaN between the head and the argmax" hook).
kernel void debug_plant_nan_f32(
    device float *x [[buffer(0)]],
    constant uint &index [[buffer(1)]],
    uint tid [[thread_position_in_grid]]) {
    if (tid == 0u) x[index] = as_type<float>(0x7FC00000u);
}

// PLANTED BUG: argmax phase 1 with the in-loop threadgroup_barrier removed. Lanes read slots
// their partners have not written yet (or already overwrote), so the result depends on the
// lane schedule. Plain float compare, strict '>' then lower index, no NaN handling.
kernel void debug_argmax_f32_phase1_nobarrier(
    device const float *x [[buffer(0)]],
    device uint *partial_idx [[buffer(1)]],
    constant lmt_args_argmax &args [[buffer(2)]],
    uint tgid [[threadgroup_position_in_grid]],
    uint lid [[thread_index_in_threadgroup]],
    uint nth [[threads_per_threadgroup]]) {
    threadgroup float tg_val[LMT_ARGMAX_CHUNK];
    threadgroup uint tg_idx[LMT_ARGMAX_CHUNK];
    const uint gid = tgid * nth + lid;
    tg_val[lid] = gid < args.n ? x[gid] : -INFINITY;
    tg_idx[lid] = gid < args.n ? gid : 0x7FFFFFFFu;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint stride = LMT_ARGMAX_CHUNK / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride && lid + stride < nth) {
            const float v = tg_val[lid + stride];
            const uint i = tg_idx[lid + stride];
            if (v > tg_val[lid] || (v == tg_val[lid] && i < tg_idx[lid])) {
                tg_val[lid] = v;
                tg_idx[lid] = i;
            }
        }
        // (the barrier that belongs here is missing)
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid == 0u) partial_idx[tgid] = tg_idx[0];
}

// PLANTED BUG: a barrier only some lanes reach (divergent control flow).
kernel void debug_divergent_barrier(
    device uint *out [[buffer(0)]],
    uint lid [[thread_index_in_threadgroup]]) {
    if (lid < 16u) threadgroup_barrier(mem_flags::mem_threadgroup);
    out[lid] = lid;
}

// PLANTED BUG: threadgroup memory over the 32 KiB limit.
kernel void debug_threadgroup_overflow(
    device float *out [[buffer(0)]],
    uint lid [[thread_index_in_threadgroup]]) {
    threadgroup float big[9000];
    big[lid] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[lid] = big[lid];
}

// Reads threadgroup memory no lane wrote: the emulator poisons it with NaN.
kernel void debug_read_unwritten(
    device float *out [[buffer(0)]],
    uint lid [[thread_index_in_threadgroup]]) {
    threadgroup float tg[64];
    if (lid == 0u) tg[0] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[lid] = tg[lid];
}
