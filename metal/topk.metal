// Top-k per row in canonical order: value descending, id ascending (mirrors csrc/cpu/topk.cpp).
//
// One threadgroup per row. k selection rounds; round r finds, among the elements ranking below
// the (r-1)-th pick, the highest-ranking one (strided scan per lane, then the same tree as the
// argmax). Ranking uses argmax.metal's keys: NaN below -inf, -0 == +0, ties by lower id.
// O(k * n / lanes) per lane: meant for small k (sampling candidates), not for sorting a row.
#include <metal_stdlib>

#include "lmtail/kernel_abi.h"

using namespace metal;

static inline uint lmt_topk_key(float v) {
    uint b = as_type<uint>(v);
    if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0u) return 0u;
    if (b == 0x80000000u) b = 0u;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

kernel void topk_f32(
    device const float *x [[buffer(0)]],
    device uint *ids [[buffer(1)]],
    device float *vals [[buffer(2)]],
    constant lmt_args_topk &args [[buffer(3)]],
    uint row [[threadgroup_position_in_grid]],
    uint lid [[thread_index_in_threadgroup]],
    uint nth [[threads_per_threadgroup]]) {
    threadgroup uint tg_key[1024];
    threadgroup uint tg_idx[1024];
    device const float *xr = x + (ulong)row * args.n;
    uint pk = 0u, pi = 0u;
    bool first = true;
    for (uint r = 0u; r < args.k; ++r) {
        uint bk = 0u, bi = 0xFFFFFFFFu;  // empty: loses to every element
        for (uint i = lid; i < args.n; i += nth) {
            const uint k = lmt_topk_key(xr[i]);
            const bool below = first || k < pk || (k == pk && i > pi);
            if (below && (bi == 0xFFFFFFFFu || k > bk || (k == bk && i < bi))) {
                bk = k;
                bi = i;
            }
        }
        tg_key[lid] = bk;
        tg_idx[lid] = bi;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint stride = 512u; stride > 0u; stride >>= 1u) {
            if (lid < stride && lid + stride < nth) {
                const uint kb = tg_key[lid + stride], ib = tg_idx[lid + stride];
                const uint ka = tg_key[lid], ia = tg_idx[lid];
                if (ib != 0xFFFFFFFFu && (ia == 0xFFFFFFFFu || kb > ka || (kb == ka && ib < ia))) {
                    tg_key[lid] = kb;
                    tg_idx[lid] = ib;
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        pk = tg_key[0];
        pi = tg_idx[0];
        first = false;
        if (lid == 0u) {
            ids[(ulong)row * args.k + r] = pi;
            vals[(ulong)row * args.k + r] = xr[pi];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);  // everyone read slot 0 before it is reused
    }
}
