// Top-k per row in canonical order (value descending, index ascending; NaN last), deterministic.
//
// Every element is ranked by its 64-bit selection key (common.cuh: value_key << 32 | ~index), so
// the wanted set is exactly "the k largest keys" (keys are unique) and the order is "key
// descending". Values keep their exact bits (read back from the key, or from x where the key
// merges values: NaN payloads, the sign of zero).
//
// Default: radix select in one launch (topk_radix), for k up to 459 at n = 202048 (the last
// block's shared memory bounds it). Each block of 512 threads holds 4096 keys in registers (two
// float4 loads per thread) and finds, by 8-bit radix passes over the key, a threshold T with
// k <= #{key >= T} <= k + 32: each pass histograms the next digit of the keys that still share
// the prefix, finds the bin holding the k-th, and stops as soon as everything at or above that
// bin fits. Typical logits need two passes (sign/exponent byte, then 8 more bits); ties push the
// passes into the index bits, which always end with one key per bin, so every case terminates
// exactly. The block writes those candidates (block prefix scan: a fixed layout) and raises the
// row's floor to its T (atomicMax: at least k keys of the row reach any block's T, so the row's
// k-th key is >= the largest of them). The last block of the row to arrive (a per-row counter in
// device memory that it resets, as in argmax.cu) loads the candidates >= the floor into shared
// memory, runs the same passes down to at most k + 64 keys, and ranks those by counting, for
// each, the keys above it: ranks below k are the output, in canonical order. Nothing in the
// output depends on the order in which blocks arrive or atomics land (the floor only prunes keys
// that cannot be in the top k; every set is re-ranked by the full key), so the result is a pure
// function of the row. The per-row counters and floors are global (like argmax's counters), so
// two streams must not run the radix top-k at the same time.
//
// Measured on the H200 (bench/RESULTS.md, same run): k = 40 on one 202048 row 13.6 us device
// (CUDA events, gated launch) against 61.9 us for the bitonic kernels below and 68.0 us for ggml.
// Timeline inside the kernel (probe bench/cuda/topk_prof.cu, k = 40): block loads done 1.2 us,
// block passes 3.6, candidates written 4.4, last block starts 5.5, its loads 6.7, its passes 9.1,
// gather 9.3, ranks and output 10.4 us. The first version (one block histogram with
// __match_any_sync grouping, warp 0 scanning with the state in shared memory, every slot
// reloaded, a block scan to gather) took 16.1 us.
//
// Fallback (k too large for the final block's shared memory, or topk_force_bitonic_for_testing): the
// previous chunk bitonic sort. Each 1024-element chunk is bitonic-sorted by key in shared memory
// and keeps its best min(k, 1024); merge passes load groups of lists into one block, sort and cut
// to k, until one list per row remains (3+ launches; 61.9 us for k = 40 on one 202048 row).
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common.cuh"
#include "launch.hpp"

namespace lmt::cuda {

// ---------------------------------------------------------------------------------------------
// Bitonic fallback.

constexpr int kSortN = 4096;  // keys per merge block (32 KB of shared memory)

__device__ void bitonic_sort_desc(uint64_t *s, int n) {  // n a power of two, blockDim.x threads
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
                const int lo = 2 * i - (i & (stride - 1));
                const int hi = lo + stride;
                const bool desc = ((lo & size) == 0);
                const uint64_t a = s[lo], b = s[hi];
                if ((a < b) == desc) {
                    s[lo] = b;
                    s[hi] = a;
                }
            }
            __syncthreads();
        }
    }
}

__global__ void __launch_bounds__(1024) topk_chunks(const float *__restrict__ x, int n, int n_chunks, int keep,
                                                    uint64_t *__restrict__ lists) {
    __shared__ uint64_t s[1024];
    const int row = blockIdx.y, c = blockIdx.x;
    const int i = c * 1024 + threadIdx.x;
    s[threadIdx.x] = i < n ? select_key(x[(size_t)row * n + i], (uint32_t)i) : 0ull;
    __syncthreads();
    bitonic_sort_desc(s, 1024);
    if (threadIdx.x < keep) lists[((size_t)row * n_chunks + c) * keep + threadIdx.x] = s[threadIdx.x];
}

// Merge `group` consecutive lists of length `len` into one list of length `out_len`.
__global__ void __launch_bounds__(1024) topk_merge(const uint64_t *__restrict__ in, int n_lists, int len, int group,
                                                   int out_len, uint64_t *__restrict__ out) {
    extern __shared__ uint64_t s[];
    const int row = blockIdx.y, gidx = blockIdx.x;
    const int n_out_lists = (n_lists + group - 1) / group;
    const int first = gidx * group;
    const int count = min(group, n_lists - first) * len;
    int padded = 1;
    while (padded < group * len) padded <<= 1;
    for (int i = threadIdx.x; i < padded; i += blockDim.x)
        s[i] = i < count ? in[((size_t)row * n_lists + first) * len + i] : 0ull;
    __syncthreads();
    bitonic_sort_desc(s, padded);
    for (int i = threadIdx.x; i < out_len; i += blockDim.x)
        out[((size_t)row * n_out_lists + gidx) * out_len + i] = s[i];
}

__global__ void topk_emit(const uint64_t *__restrict__ keys, const float *__restrict__ x, int n, int k,
                          uint32_t *__restrict__ ids, float *__restrict__ vals) {
    const int row = blockIdx.x;
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
        const uint64_t key = keys[(size_t)row * k + j];
        const uint32_t idx = key_index(key);
        ids[(size_t)row * k + j] = idx;
        vals[(size_t)row * k + j] = x[(size_t)row * n + idx];
    }
}

static size_t bitonic_scratch_elems(int rows, int n, int k) {
    const int n_chunks = (n + 1023) / 1024;
    const int keep = k < 1024 ? k : 1024;
    return 2 * (size_t)rows * n_chunks * (size_t)(keep > k ? keep : k) + (size_t)rows * k;
}

static void launch_bitonic(const float *x, int rows, int n, int k, uint64_t *scratch, uint32_t *ids, float *vals,
                           cudaStream_t stream) {
    const int n_chunks = (n + 1023) / 1024;
    const int keep = k < 1024 ? k : 1024;
    uint64_t *a = scratch, *b = scratch + (size_t)rows * n_chunks * k;
    topk_chunks<<<dim3(n_chunks, rows), 1024, 0, stream>>>(x, n, n_chunks, keep, a);
    int n_lists = n_chunks, len = keep;
    static bool attr_set = false;
    if (!attr_set) {
        LMT_CUDA_CHECK(cudaFuncSetAttribute(topk_merge, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            kSortN * (int)sizeof(uint64_t)));
        attr_set = true;
    }
    while (n_lists > 1 || len != k) {
        int group = kSortN / len;
        if (group < 2) group = 2;
        if (group > n_lists) group = n_lists;
        const int out_len = k < group * len ? k : group * len;
        const int n_out = (n_lists + group - 1) / group;
        int padded = 1;
        while (padded < group * len) padded <<= 1;
        topk_merge<<<dim3(n_out, rows), 1024, padded * sizeof(uint64_t), stream>>>(a, n_lists, len, group, out_len, b);
        uint64_t *t = a;
        a = b;
        b = t;
        n_lists = n_out;
        len = out_len;
    }
    topk_emit<<<rows, 128, 0, stream>>>(a, x, n, k, ids, vals);
}

// ---------------------------------------------------------------------------------------------
// Radix select, one launch.

// 512 threads x 8 keys per block: 50 blocks for 202048. In the probe (bench/cuda/topk_prof.cu,
// kernel span for k = 40) 1024 x 4 was no faster (12.8 vs 11.7 us) and 256 x 16 slower (about
// 1.5x: passes of 16 keys per thread). The slacks: a block stops its passes once at most k + 32
// keys reach its T; the last block stops once at most k + 64 do and ranks those by counting.
// Block slack 8 or 32 and final slack 32, 64 or 128: k = 40 spans 10.3-10.4 us, within noise.
constexpr int kRsThreads = 512, kRsSpan = 4096, kRsPer = kRsSpan / kRsThreads;
constexpr int kRsWarps = kRsThreads / 32;
constexpr int kRsMaxRows = 1024;   // rows per launch (one arrival counter each)
constexpr int kRsSlack = 32;       // a block hands on k to k + 32 candidates
constexpr int kRsFinalSlack = 64;  // the last block ranks k to k + 64 keys
constexpr int kRsMaxSmem = 200 * 1024;  // last block's dynamic shared memory (+16.5 KB static <= 227 KB)
__device__ unsigned int g_topk_arrivals[kRsMaxRows];  // zero at load; the last block resets its row
__device__ unsigned long long g_topk_floor[kRsMaxRows];  // max of the blocks' thresholds; reset likewise

#ifdef LMT_TOPK_PROFILE  // development only: timestamps for bench/cuda/topk_prof.cu
__device__ unsigned long long g_topk_prof[64][2][10];
__device__ unsigned long long g_topk_pass[2][6][4];
#define LMT_PROF(slot)                                                                             \
    do {                                                                                           \
        if (threadIdx.x == 0 && blockIdx.y == 0 && blockIdx.x < 64) {                              \
            unsigned long long g_;                                                                 \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g_));                                \
            g_topk_prof[blockIdx.x][0][slot] = g_;                                                 \
            g_topk_prof[blockIdx.x][1][slot] = clock64();                                          \
        }                                                                                          \
    } while (0)
#define LMT_PASS(ph, pass, slot)                                                                      \
    do {                                                                                              \
        if (threadIdx.x == 0 && blockIdx.y == 0 && (ph == 1 || blockIdx.x == 0) && pass < 6)          \
            g_topk_pass[ph][pass][slot] = clock64();                                                  \
    } while (0)
void topk_profile_read(unsigned long long *out) {
    LMT_CUDA_CHECK(cudaMemcpyFromSymbol(out, g_topk_prof, sizeof(g_topk_prof)));
    LMT_CUDA_CHECK(cudaMemcpyFromSymbol(out + 64 * 2 * 10, g_topk_pass, sizeof(g_topk_pass)));
}
#else
#define LMT_PROF(slot) \
    do {               \
    } while (0)
#define LMT_PASS(ph, pass, slot) \
    do {                         \
    } while (0)
#endif

// Selection state, kept identical in every thread's registers: the k-th key's top `depth` bits
// are `prefix`; `above` keys are known to rank above that prefix; `rem` = k - above of the
// prefix's keys are still wanted.
struct RsState {
    uint64_t prefix;
    int depth, above, rem;
    bool done;
};

struct RsShared {
    unsigned whist[kRsWarps * 256];  // one histogram per warp: no atomic contention between warps
    unsigned wtot[8];                // per-warp totals of the bin scan
    uint4 pick;                      // {bin, keys above it, keys in it, -}
};

// Radix passes until k <= #{key >= T} <= cap (cap = k: exactly k); returns T. Each pass: every
// live key (top `depth` bits == prefix) adds one to its digit's bin in its warp's histogram
// (plain shared atomics: warps never share an address; the first digit of typical logits takes
// 2-3 values across a block, and on one shared histogram the atomics serialised on the hot bins:
// ~2.2-2.8k cycles of counting per pass with __match_any_sync grouping, slower still with
// warp-vote grouping, ~0.9k now); threads 0-255 each own one bin (thread 0 the top one), sum the warp histograms and
// scan them (shuffles + 8 warp totals); the one thread whose bin holds the rem-th key publishes
// it; every thread advances its own copy of the state. Measured per pass of 4096 keys (H200,
// cycles): count 0.9k + merge/scan 0.57k + pick 0.21k, against 0.8k + 0.34k + 0.96k when warp 0
// scanned 8 bins per lane and kept the state in shared memory (a long chain of dependent shared
// loads while 15 warps waited at the barrier).
// Entry: whist zero; leaves it zero.
template <int kPh, class F>
__device__ __forceinline__ uint64_t rs_threshold(RsState s, int cap, RsShared &sh, F count_live) {
    const int tid = threadIdx.x, lane = tid & 31;
    for (int pass = 0; !s.done; ++pass) {
        LMT_PASS(kPh, pass, 0);
        count_live(s.depth, s.prefix);
        __syncthreads();
        LMT_PASS(kPh, pass, 1);
        unsigned c = 0, incl = 0;
        if (tid < 256) {
            const int bin = 255 - tid;
#pragma unroll
            for (int w = 0; w < kRsWarps; ++w) {
                c += sh.whist[w * 256 + bin];
                sh.whist[w * 256 + bin] = 0u;
            }
            incl = c;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned t = __shfl_up_sync(0xFFFFFFFFu, incl, o);
                if (lane >= o) incl += t;
            }
            if (lane == 31) sh.wtot[tid >> 5] = incl;
        }
        __syncthreads();
        LMT_PASS(kPh, pass, 2);
        if (tid < 256) {
            unsigned excl = incl - c;
            for (int w = 0; w < (tid >> 5); ++w) excl += sh.wtot[w];
            const unsigned rem = (unsigned)s.rem;
            if (excl < rem && rem <= excl + c) sh.pick = make_uint4(255u - tid, excl, c, 0u);
        }
        __syncthreads();
        LMT_PASS(kPh, pass, 3);
        const uint4 p = sh.pick;
        s.above += (int)p.y;
        s.rem -= (int)p.y;
        s.prefix = (s.prefix << 8) | p.x;
        s.depth += 8;
        s.done = s.above + (int)p.z <= cap;
    }
    // A prefix of zeros (the k-th key is a NaN or -inf: value byte 0) would give T = 0 and let
    // the padding keys (0) in; every real key is >= 1.
    const uint64_t t = s.prefix << (64 - s.depth);
    return t ? t : 1ull;
}

__device__ __forceinline__ bool rs_live(uint64_t key, int d, uint64_t prefix) {
    return key != 0ull && (d == 0 || (key >> (64 - d)) == prefix);
}
__device__ __forceinline__ unsigned rs_digit(uint64_t key, int d) { return (unsigned)(key >> (56 - d)) & 255u; }

// Exclusive prefix sum over the block (all threads); *total gets the sum. Reuses wsum: callers
// keep a barrier between two calls.
__device__ __forceinline__ unsigned rs_scan(unsigned v, unsigned *wsum, unsigned *total) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    unsigned incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned t = __shfl_up_sync(0xFFFFFFFFu, incl, o);
        if (lane >= o) incl += t;
    }
    if (lane == 31) wsum[w] = incl;
    __syncthreads();
    unsigned off = 0, tot = 0;
#pragma unroll
    for (int j = 0; j < kRsWarps; ++j) {
        const unsigned t = wsum[j];
        off += j < w ? t : 0u;
        tot += t;
    }
    *total = tot;
    return off + incl - v;
}

__device__ __forceinline__ uint64_t warp_max_u64_all(uint64_t v) {  // every lane gets the max
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t w = __shfl_xor_sync(0xFFFFFFFFu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

__global__ void __launch_bounds__(kRsThreads) topk_radix(const float *__restrict__ x, int n, int nblk, int k, int cap,
                                                         bool vec4, uint64_t *__restrict__ cand,
                                                         uint32_t *__restrict__ ids, float *__restrict__ vals) {
    extern __shared__ uint64_t s_keys[];  // last block: the row's live candidates, then the k winners
    __shared__ RsShared sh;
    __shared__ unsigned wsum[kRsWarps], n_live, n_sel;
    __shared__ unsigned long long s_hi;
    __shared__ int is_last;
    const int row = blockIdx.y, blk = blockIdx.x, tid = threadIdx.x, lane = tid & 31;
    unsigned *const my_hist = sh.whist + (tid >> 5) * 256;
    const float *xr = x + (size_t)row * n;
    const int base = blk * kRsSpan;
    const int valid = min(kRsSpan, n - base);
    LMT_PROF(0);

    uint64_t key[kRsPer];
#pragma unroll
    for (int h = 0; h < kRsPer / 4; ++h) {  // float4 loads, coalesced
        const int i0 = base + h * 4 * kRsThreads + 4 * tid;
        float v[4];
        load4(xr, i0, n, vec4, v);
#pragma unroll
        for (int e = 0; e < 4; ++e) key[4 * h + e] = i0 + e < n ? select_key(v[e], (uint32_t)(i0 + e)) : 0ull;
    }
    for (int i = tid; i < kRsWarps * 256; i += kRsThreads) sh.whist[i] = 0u;
    if (tid == 0) {
        n_live = 0u;
        n_sel = 0u;
        s_hi = 0ull;
    }
    __syncthreads();
    LMT_PROF(1);

    // Block phase: T such that k <= #{key >= T} <= cap (every key when the block has <= cap).
    uint64_t T = 1ull;  // keys are never 0 (~index != 0); 0 marks padding
    if (valid > cap)
        T = rs_threshold<0>(RsState{0ull, 0, 0, k, false}, cap, sh, [&](int d, uint64_t p) {
#pragma unroll
            for (int j = 0; j < kRsPer; ++j)
                if (rs_live(key[j], d, p)) atomicAdd(&my_hist[rs_digit(key[j], d < 56 ? d : 56)], 1u);
        });
    LMT_PROF(2);
    unsigned mine = 0, total;
#pragma unroll
    for (int j = 0; j < kRsPer; ++j) mine += key[j] >= T;
    unsigned pos = rs_scan(mine, wsum, &total);
    uint64_t *out = cand + ((size_t)row * nblk + blk) * cap;
#pragma unroll
    for (int j = 0; j < kRsPer; ++j)
        if (key[j] >= T) out[pos++] = key[j];
    for (int j = (int)total + tid; j < cap; j += kRsThreads) out[j] = 0ull;  // padding for the last block
    LMT_PROF(8);

    // Publish (the barrier orders every thread's stores before thread 0's device-scope fence, the
    // pattern of cooperative groups' grid sync) and count the arrival. The block's T is a floor
    // for the row's k-th key when at least k keys of the block reach it (always, except for a
    // block that handed on everything, whose T = 1 says nothing).
    __syncthreads();
    if (tid == 0) {
        if (T > 1ull) atomicMax(&g_topk_floor[row], (unsigned long long)T);
        __threadfence();
        is_last = atomicAdd(&g_topk_arrivals[row], 1u) == (unsigned)nblk - 1;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    LMT_PROF(3);

    // Last block. Load every block's candidates, keeping only keys >= the floor (the largest block
    // threshold: at least k keys reach it) and their maximum. Each warp keeps its own keys in its
    // own segment of shared memory (warp votes, a count in registers: no shared atomics; one
    // atomic counter for the whole block was 128 serialised atomics on one address), in an order
    // that nothing below depends on.
    const int m = nblk * cap;
    const int seg = (m + kRsThreads - 1) / kRsThreads * 32;  // slots per warp
    const uint64_t *in = cand + (size_t)row * nblk * cap;
    const uint64_t lo = max(__ldcg(&g_topk_floor[row]), 1ull);
    uint64_t *const my_keys = s_keys + (tid >> 5) * seg;
    uint64_t hi = 0ull;
    unsigned cnt = 0;  // keys in this warp's segment
    for (int b0 = 0; b0 < m; b0 += 8 * kRsThreads) {  // eight L2 loads in flight per thread
        uint64_t r[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = b0 + u * kRsThreads + tid;
            r[u] = i < m ? __ldcg(in + i) : 0ull;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const bool keep = r[u] >= lo;
            const unsigned bal = __ballot_sync(0xFFFFFFFFu, keep);
            if (keep) {
                my_keys[cnt + __popc(bal & ((1u << lane) - 1u))] = r[u];
                hi = r[u] > hi ? r[u] : hi;
            }
            cnt += __popc(bal);
        }
    }
    hi = warp_max_u64_all(hi);
    if (lane == 0) {
        if (hi) atomicMax(&s_hi, (unsigned long long)hi);
        atomicAdd(&n_live, cnt);
    }
    __syncthreads();
    LMT_PROF(4);
    if (tid == 0) {  // ready for the next launch (stream order makes this visible); lo was read above
        g_topk_arrivals[row] = 0u;
        g_topk_floor[row] = 0ull;
    }
    // Radix passes down to at most k + kRsFinalSlack keys >= T (none when the live keys already
    // fit); the rank count below then settles the exact k. Every live key lies in [lo, hi], so
    // they share the top bits of lo and hi and the passes start below them (typically skipping
    // the sign/exponent byte).
    const int cap2 = k + kRsFinalSlack;
    hi = s_hi;
    T = lo;
    if ((int)n_live > cap2) {
        const int depth = (__clzll((long long)(lo ^ hi)) / 8) * 8;  // lo < hi here
        const int cnt_up = (int)(cnt + 31u) / 32 * 32;
        T = rs_threshold<1>(RsState{depth ? hi >> (64 - depth) : 0ull, depth, 0, k, false}, cap2, sh,
                            [&](int d, uint64_t p) {
                                for (int i = lane; i < cnt_up; i += 32) {
                                    const uint64_t q = i < (int)cnt ? my_keys[i] : 0ull;
                                    if (rs_live(q, d, p)) atomicAdd(&my_hist[rs_digit(q, d)], 1u);
                                }
                            });
    }
    LMT_PROF(5);
    // Gather the keys >= T (k to cap2 of them; warp votes, any order), then rank each by counting
    // the gathered keys above it; ranks below k are the output. Keys are unique, so the ranks are
    // distinct and the output is the same every run, whatever order the gather left.
    uint64_t *sel = s_keys + (size_t)kRsWarps * seg;
    for (int i0 = 0; i0 < (int)cnt; i0 += 32) {
        const int i = i0 + lane;
        const uint64_t q = i < (int)cnt ? my_keys[i] : 0ull;
        const bool take = q >= T;
        const unsigned bal = __ballot_sync(0xFFFFFFFFu, take);
        if (!bal) continue;
        unsigned at = 0;
        if (lane == 0) at = atomicAdd(&n_sel, (unsigned)__popc(bal));
        at = __shfl_sync(0xFFFFFFFFu, at, 0);
        if (take) sel[at + __popc(bal & ((1u << lane) - 1u))] = q;
    }
    __syncthreads();
    LMT_PROF(6);
    // The value comes back from the key (value_key is invertible) except for the two keys that
    // merge values, 0 (NaN: payload) and 0x80000000 (+-0: sign), which are read from x to keep
    // their exact bits.
    const int ns = (int)n_sel;
    for (int i = tid; i < ns; i += kRsThreads) {
        const uint64_t q = sel[i];
        int rank = 0;
#pragma unroll 8
        for (int j = 0; j < ns; ++j) rank += sel[j] > q;
        if (rank < k) {
            const uint32_t idx = key_index(q), vk = (uint32_t)(q >> 32);
            ids[(size_t)row * k + rank] = idx;
            vals[(size_t)row * k + rank] = (vk == 0u || vk == 0x80000000u)
                                               ? xr[idx]
                                               : __uint_as_float(vk & 0x80000000u ? vk & 0x7FFFFFFFu : ~vk);
        }
    }
    LMT_PROF(7);
}

static int rs_cap(int k) { return k + kRsSlack; }
static int rs_blocks(int n) { return (n + kRsSpan - 1) / kRsSpan; }
// Last block: every warp's segment (the candidate slots rounded up to a whole number of block
// steps) and the gathered keys.
static size_t rs_smem(int n, int k) {
    const size_t m = (size_t)rs_blocks(n) * rs_cap(k);
    return ((m + kRsThreads - 1) / kRsThreads * kRsThreads + (size_t)(k + kRsFinalSlack)) * sizeof(uint64_t);
}
static bool rs_fits(int n, int k) { return rs_smem(n, k) <= (size_t)kRsMaxSmem; }
static size_t rs_scratch_elems(int rows, int n, int k) { return (size_t)rows * rs_blocks(n) * rs_cap(k); }

// The bitonic path for every k (lmtail_cuda_check compares both paths; the product never sets it).
static bool g_force_bitonic = false;
void topk_force_bitonic_for_testing(bool on) { g_force_bitonic = on; }
static bool use_bitonic() { return g_force_bitonic; }

// Scratch needed by launch_topk_rows, in uint64 elements (enough for either path).
size_t topk_scratch_elems(int rows, int n, int k) {
    const size_t a = bitonic_scratch_elems(rows, n, k);
    const size_t b = rs_fits(n, k) ? rs_scratch_elems(rows, n, k) : 0;
    return a > b ? a : b;
}

void launch_topk_rows(const float *x, int rows, int n, int k, uint64_t *scratch, uint32_t *ids, float *vals,
                      cudaStream_t stream) {
    if (k < 1 || k > n || k > kSortN / 2) throw std::invalid_argument("cuda topk: k must be in [1, min(n, 2048)]");
    if (rows < 1) return;
    if (!rs_fits(n, k) || use_bitonic()) {
        launch_bitonic(x, rows, n, k, scratch, ids, vals, stream);
        LMT_CUDA_CHECK(cudaGetLastError());
        return;
    }
    const int nblk = rs_blocks(n), cap = rs_cap(k);
    const size_t smem = rs_smem(n, k);
    static bool attr_set = false;
    if (!attr_set) {  // static + dynamic shared memory may pass 48 KB
        LMT_CUDA_CHECK(cudaFuncSetAttribute(topk_radix, cudaFuncAttributeMaxDynamicSharedMemorySize, kRsMaxSmem));
        attr_set = true;
    }
    const bool vec4 = n % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
    for (int r0 = 0; r0 < rows; r0 += kRsMaxRows) {  // the arrival counters cover kRsMaxRows rows
        const int nr = rows - r0 < kRsMaxRows ? rows - r0 : kRsMaxRows;
        topk_radix<<<dim3(nblk, nr), kRsThreads, smem, stream>>>(
            x + (size_t)r0 * n, n, nblk, k, cap, vec4, scratch + (size_t)r0 * nblk * cap, ids + (size_t)r0 * k,
            vals + (size_t)r0 * k);
    }
    LMT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lmt::cuda
