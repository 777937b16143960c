// Argmax reductions on the GPU (mirrors csrc/cpu/argmax.cpp; host code csrc/metal/argmax.cpp).
//
// Two phases under the 1024-thread limit: phase 1 reduces one chunk of `threads_per_threadgroup`
// elements per threadgroup (grid: chunks x rows) to a (key, index) partial; phase 2 reduces a
// row's partials in one threadgroup. For 202048 logits: 198 chunks, the last holding 320.
//
// Order: greater value wins; equal values keep the LOWER INDEX, compared explicitly. A strided
// tree with a bare `>` keeps the lower index only between partners, not across the chunk.
// Values are compared as order-preserving uint keys: -0 and +0 share a key (they are equal),
// NaN gets key 0, below -inf (NaN never wins), and an out-of-range lane loads key 0 with index
// LMT_ARGMAX_PAD so that it loses even to a NaN (a row of only NaN gives 0, as on the CPU).
//
// Greedy variant: fail closed. Non-finite is tested on the exponent bits, never isnan/isinf
// (Metal compiles with fast math by default). The high bit of every partial index latches
// "non-finite seen" and phase 2 returns LMT_ARGMAX_INVALID; excluded ids (the request's EOG set)
// count as -inf inside the reduction only, and a row with nothing left returns INVALID - 1.
#include <metal_stdlib>

#include "lmtail/kernel_abi.h"

using namespace metal;

#define LMT_ARGMAX_PAD 0x7FFFFFFFu
#define LMT_KEY_NEG_INF 0x007FFFFFu

static inline uint lmt_order_key(float v) {
    uint b = as_type<uint>(v);
    if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0u) return 0u;  // NaN
    if (b == 0x80000000u) b = 0u;                                                   // -0 == +0
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

static inline bool lmt_is_nonfinite(float v) { return (as_type<uint>(v) & 0x7F800000u) == 0x7F800000u; }

// Slot a takes slot b when b ranks higher; the latch bit (greedy) is OR-ed, never compared.
static inline void lmt_argmax_take(threadgroup uint *key, threadgroup uint *idx, uint a, uint b) {
    const uint ka = key[a], kb = key[b], ia = idx[a], ib = idx[b];
    const uint latch = (ia | ib) & LMT_ARGMAX_NONFINITE_BIT;
    const uint ja = ia & ~LMT_ARGMAX_NONFINITE_BIT, jb = ib & ~LMT_ARGMAX_NONFINITE_BIT;
    if (kb > ka || (kb == ka && jb < ja)) {
        key[a] = kb;
        idx[a] = jb | latch;
    } else {
        idx[a] = ja | latch;
    }
}

static inline void lmt_argmax_fold(thread uint &k, thread uint &i, uint kb, uint ib) {
    const uint latch = (i | ib) & LMT_ARGMAX_NONFINITE_BIT;
    uint ja = i & ~LMT_ARGMAX_NONFINITE_BIT;
    const uint jb = ib & ~LMT_ARGMAX_NONFINITE_BIT;
    if (kb > k || (kb == k && jb < ja)) {
        k = kb;
        ja = jb;
    }
    i = ja | latch;
}

// Tree over the group's slots; every pass ends with a barrier because lane l reads what lane
// l + stride wrote in the previous pass.
static inline void lmt_argmax_tree(threadgroup uint *key, threadgroup uint *idx, uint lid, uint nth) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint stride = LMT_ARGMAX_CHUNK / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride && lid + stride < nth) lmt_argmax_take(key, idx, lid, lid + stride);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}

static inline bool lmt_is_excluded(device const uint *excl, uint n_excl, uint id) {
    uint lo = 0u, hi = n_excl;  // sorted ascending (host)
    while (lo < hi) {
        const uint mid = (lo + hi) / 2u;
        if (excl[mid] < id) lo = mid + 1u;
        else hi = mid;
    }
    return lo < n_excl && excl[lo] == id;
}

kernel void argmax_f32_phase1(
    device const float *x [[buffer(0)]],
    device uint *partial_key [[buffer(1)]],
    device uint *partial_idx [[buffer(2)]],
    constant lmt_args_argmax &args [[buffer(3)]],
    uint2 tgid [[threadgroup_position_in_grid]],
    uint lid [[thread_index_in_threadgroup]],
    uint nth [[threads_per_threadgroup]]) {
    threadgroup uint tg_key[LMT_ARGMAX_CHUNK];
    threadgroup uint tg_idx[LMT_ARGMAX_CHUNK];
    const uint gid = tgid.x * nth + lid;
    uint k = 0u, i = LMT_ARGMAX_PAD;
    if (gid < args.n) {
        k = lmt_order_key(x[(ulong)tgid.y * args.n + gid]);
        i = gid;
    }
    tg_key[lid] = k;
    tg_idx[lid] = i;
    lmt_argmax_tree(tg_key, tg_idx, lid, nth);
    if (lid == 0u) {
        partial_key[tgid.y * args.n_chunks + tgid.x] = tg_key[0];
        partial_idx[tgid.y * args.n_chunks + tgid.x] = tg_idx[0];
    }
}

kernel void greedy_argmax_f32_phase1(
    device const float *x [[buffer(0)]],
    device uint *partial_key [[buffer(1)]],
    device uint *partial_idx [[buffer(2)]],
    constant lmt_args_argmax &args [[buffer(3)]],
    device const uint *excluded [[buffer(4)]],
    uint2 tgid [[threadgroup_position_in_grid]],
    uint lid [[thread_index_in_threadgroup]],
    uint nth [[threads_per_threadgroup]]) {
    threadgroup uint tg_key[LMT_ARGMAX_CHUNK];
    threadgroup uint tg_idx[LMT_ARGMAX_CHUNK];
    const uint gid = tgid.x * nth + lid;
    uint k = 0u, i = LMT_ARGMAX_PAD;
    if (gid < args.n) {
        const float v = x[(ulong)tgid.y * args.n + gid];
        k = lmt_is_excluded(excluded, args.n_excluded, gid) ? LMT_KEY_NEG_INF : lmt_order_key(v);
        i = gid | (lmt_is_nonfinite(v) ? LMT_ARGMAX_NONFINITE_BIT : 0u);
    }
    tg_key[lid] = k;
    tg_idx[lid] = i;
    lmt_argmax_tree(tg_key, tg_idx, lid, nth);
    if (lid == 0u) {
        partial_key[tgid.y * args.n_chunks + tgid.x] = tg_key[0];
        partial_idx[tgid.y * args.n_chunks + tgid.x] = tg_idx[0];
    }
}

// Phase 2 (both variants): one threadgroup per row; lane l folds partials l, l + nth, ... in
// order, then the tree. greedy != 0 turns the latch and "nothing left" into the sentinels.
static inline void lmt_argmax_phase2(device const uint *partial_key, device const uint *partial_idx,
                                     device uint *result, constant lmt_args_argmax &args, uint row, uint lid,
                                     uint nth, threadgroup uint *tg_key, threadgroup uint *tg_idx, bool greedy) {
    uint k = 0u, i = LMT_ARGMAX_PAD;
    for (uint c = lid; c < args.n_chunks; c += nth)
        lmt_argmax_fold(k, i, partial_key[row * args.n_chunks + c], partial_idx[row * args.n_chunks + c]);
    tg_key[lid] = k;
    tg_idx[lid] = i;
    lmt_argmax_tree(tg_key, tg_idx, lid, nth);
    if (lid == 0u) {
        const uint best = tg_idx[0];
        if (!greedy) result[row] = best;
        else if (best & LMT_ARGMAX_NONFINITE_BIT) result[row] = LMT_ARGMAX_INVALID;
        else if (tg_key[0] <= LMT_KEY_NEG_INF) result[row] = LMT_ARGMAX_INVALID - 1u;
        else result[row] = best;
    }
}

kernel void argmax_f32_phase2(
    device const uint *partial_key [[buffer(0)]],
    device const uint *partial_idx [[buffer(1)]],
    device uint *result [[buffer(2)]],
    constant lmt_args_argmax &args [[buffer(3)]],
    uint row [[threadgroup_position_in_grid]],
    uint lid [[thread_index_in_threadgroup]],
    uint nth [[threads_per_threadgroup]]) {
    threadgroup uint tg_key[LMT_ARGMAX_CHUNK];
    threadgroup uint tg_idx[LMT_ARGMAX_CHUNK];
    lmt_argmax_phase2(partial_key, partial_idx, result, args, row, lid, nth, tg_key, tg_idx, false);
}

kernel void greedy_argmax_f32_phase2(
    device const uint *partial_key [[buffer(0)]],
    device const uint *partial_idx [[buffer(1)]],
    device uint *result [[buffer(2)]],
    constant lmt_args_argmax &args [[buffer(3)]],
    uint row [[threadgroup_position_in_grid]],
    uint lid [[thread_index_in_threadgroup]],
    uint nth [[threads_per_threadgroup]]) {
    threadgroup uint tg_key[LMT_ARGMAX_CHUNK];
    threadgroup uint tg_idx[LMT_ARGMAX_CHUNK];
    lmt_argmax_phase2(partial_key, partial_idx, result, args, row, lid, nth, tg_key, tg_idx, true);
}
