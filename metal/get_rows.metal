// Gather rows of a table by token ids that live on the device (mirrors ggml_get_rows).
//
// Route B of the greedy serving path: the argmax result slot never leaves the GPU; the next
// step's embedding row is read straight from it. An invalid id (the 0xFFFFFFFF non-finite
// latch, or anything >= the table's rows) yields a NaN row: fail closed downstream.
#include <metal_stdlib>

#include "lmtail/kernel_abi.h"

using namespace metal;

kernel void get_rows_f32(
    device const float *table [[buffer(0)]],
    device const uint *ids [[buffer(1)]],
    device float *out [[buffer(2)]],
    constant uint2 &shape [[buffer(3)]],  // (table rows, row length)
    uint2 tid [[thread_position_in_grid]]) {
    if (tid.x >= shape.y) return;
    const uint tok = ids[tid.y];
    out[(ulong)tid.y * shape.y + tid.x] =
        tok < shape.x ? table[(ulong)tok * shape.y + tid.x] : as_type<float>(0x7FC00000u);
}
