// Argmax over rows of logits, plain and greedy-serving.
//
// Candidates are compared by one 64-bit key (value-key << 32 | ~index): greater value wins,
// equal values keep the lower index, NaN ranks lowest, so the max is independent of the
// reduction's shape. Phase 1: one 1024-thread block per 1024-element chunk of a row writes its
// best key (and, for greedy, whether it saw a NaN/Inf). Phase 2: one block per row reduces the
// chunk partials; greedy writes LMT_ARGMAX_INVALID when any chunk latched, kAllExcluded
// (0xFFFFFFFE) when every id was excluded. Exclusion (the request's EOG set) is a bitmask read
// inside the reduction only; logits are never written.
//
// Since the H200 measurement of 11.8 us for one 202048 row (two launches, 198 blocks of 1024
// threads, one float per thread), the default is one launch: blocks of 512 threads read 2048
// floats each as float4, write their partial, and the last block to finish (a per-row arrival
// counter in device memory, reset by that block, so graph replays need no memset) reduces the
// partials: 5.6 us device for one 202048 row against 6.7 us for the two launches in the same run
// (ggml's one-block argmax: 36.7 us). The two-launch form stays for more than kMaxOneLaunchRows
// rows and as a reference (argmax_force_two_phase_for_testing).
// The greedy variant can also apply the soft cap in registers (launch_greedy_softcap_argmax):
// the capped value is computed with the same four roundings as the four-node cap, so the
// winner is the one the capped logits would give, and the latch looks at the pre-cap value.
#include "common.cuh"
#include "launch.hpp"

#include <cstdlib>
#include <cstring>

namespace lmt::cuda {

constexpr int kChunk = 1024;

__device__ __forceinline__ uint64_t block_max_u64(uint64_t v, uint64_t *smem) {
    v = warp_max_u64(v);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) smem[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < (int)(blockDim.x >> 5) ? smem[lane] : 0ull;
        v = warp_max_u64(v);
    }
    return v;  // valid in thread 0
}

template <bool kGreedy>
__global__ void __launch_bounds__(kChunk) argmax_phase1(const float *__restrict__ x, int n, int n_chunks,
                                                       const uint32_t *__restrict__ excl_mask,
                                                       uint64_t *__restrict__ part_key,
                                                       uint32_t *__restrict__ part_bad) {
    __shared__ uint64_t smem[32];
    __shared__ int bad_any;
    const int row = blockIdx.y, c = blockIdx.x;
    const int i = c * kChunk + threadIdx.x;
    if (threadIdx.x == 0) bad_any = 0;
    __syncthreads();
    uint64_t key = 0ull;  // out-of-range lanes never win
    if (i < n) {
        const float v = x[(size_t)row * n + i];
        if (kGreedy) {
            if (nonfinite(v)) bad_any = 1;  // benign race: every writer stores 1
            const bool excluded = excl_mask && ((excl_mask[i >> 5] >> (i & 31)) & 1u);
            key = excluded ? 0ull : select_key(v, (uint32_t)i);
        } else {
            key = select_key(v, (uint32_t)i);
        }
    }
    key = block_max_u64(key, smem);
    __syncthreads();
    if (threadIdx.x == 0) {
        part_key[(size_t)row * n_chunks + c] = key;
        if (kGreedy) part_bad[(size_t)row * n_chunks + c] = (uint32_t)bad_any;
    }
}

template <bool kGreedy>
__global__ void __launch_bounds__(1024) argmax_phase2(const uint64_t *__restrict__ part_key,
                                                     const uint32_t *__restrict__ part_bad, int n_chunks,
                                                     uint32_t *__restrict__ out) {
    __shared__ uint64_t smem[32];
    __shared__ int bad_any;
    const int row = blockIdx.x;
    if (threadIdx.x == 0) bad_any = 0;
    __syncthreads();
    uint64_t key = 0ull;
    for (int c = threadIdx.x; c < n_chunks; c += blockDim.x) {
        const uint64_t k = part_key[(size_t)row * n_chunks + c];
        key = k > key ? k : key;
        if (kGreedy && part_bad[(size_t)row * n_chunks + c]) bad_any = 1;
    }
    key = block_max_u64(key, smem);
    __syncthreads();
    if (threadIdx.x == 0) {
        const bool none = (key >> 32) == 0ull;  // only NaN (plain) or every id excluded (greedy)
        if (kGreedy) out[row] = bad_any ? LMT_ARGMAX_INVALID : none ? LMT_ARGMAX_INVALID - 1u : key_index(key);
        else out[row] = none ? 0u : key_index(key);
    }
}

constexpr int kOneThreads = 512, kOneSpan = 4 * kOneThreads;
constexpr int kMaxOneLaunchRows = 1024;
__device__ unsigned int g_arrivals[kMaxOneLaunchRows];  // zero at load; the last block resets its row

template <bool kGreedy, bool kCap>
__global__ void __launch_bounds__(kOneThreads) argmax_one(const float *__restrict__ x, int n, int nblk, bool vec4,
                                                        const uint32_t *__restrict__ excl_mask, float s, float inv,
                                                        float cap, uint64_t *__restrict__ part_key,
                                                        uint32_t *__restrict__ part_bad, uint32_t *__restrict__ out) {
    __shared__ uint64_t smem[32];
    __shared__ int bad_any, is_last;
    const int row = blockIdx.y, c = blockIdx.x;
    if (threadIdx.x == 0) bad_any = 0;
    __syncthreads();
    const float *xr = x + (size_t)row * n;
    const int i0 = c * kOneSpan + 4 * threadIdx.x;
    float v[4];
    load4(xr, i0, n, vec4, v);
    uint64_t key = 0ull;
    bool bad = false;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int i = i0 + e;
        if (i < n) {
            float val = v[e];
            if (kGreedy) bad |= nonfinite(val);
            if (kCap) {  // same operation order as the four-node cap (x*s, *1/cap, tanh, *cap)
                val = val * s;
                val = val * inv;
                val = tanhf(val);
                val = val * cap;
            }
            const bool excluded = kGreedy && excl_mask && ((excl_mask[i >> 5] >> (i & 31)) & 1u);
            const uint64_t k = excluded ? 0ull : select_key(val, (uint32_t)i);
            key = k > key ? k : key;
        }
    }
    if (kGreedy && bad) bad_any = 1;  // benign race: every writer stores 1
    key = block_max_u64(key, smem);
    __syncthreads();
    if (threadIdx.x == 0) {
        part_key[(size_t)row * nblk + c] = key;
        if (kGreedy) part_bad[(size_t)row * nblk + c] = (uint32_t)bad_any;
        __threadfence();
        const unsigned prev = atomicAdd(&g_arrivals[row], 1u);
        is_last = prev == (unsigned)nblk - 1;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    key = 0ull;
    int badr = 0;
    for (int j = threadIdx.x; j < nblk; j += blockDim.x) {
        const uint64_t k = __ldcg(&part_key[(size_t)row * nblk + j]);
        key = k > key ? k : key;
        if (kGreedy) badr |= (int)__ldcg(&part_bad[(size_t)row * nblk + j]);
    }
    if (threadIdx.x == 0) bad_any = 0;
    __syncthreads();
    if (kGreedy && badr) bad_any = 1;
    key = block_max_u64(key, smem);
    __syncthreads();
    if (threadIdx.x == 0) {
        const bool none = (key >> 32) == 0ull;
        if (kGreedy) out[row] = bad_any ? LMT_ARGMAX_INVALID : none ? LMT_ARGMAX_INVALID - 1u : key_index(key);
        else out[row] = none ? 0u : key_index(key);
        g_arrivals[row] = 0u;  // ready for the next launch (stream order makes this visible to it)
    }
}

std::mutex &selection_lock() {
    static std::mutex m;
    return m;
}

static bool g_two_phase = false;  // the two-launch form for every call (benchmarks; the product never sets it)
static bool use_two_phase() { return g_two_phase; }
void argmax_force_two_phase_for_testing(bool on) { g_two_phase = on; }

template <bool kGreedy, bool kCap>
void launch_one(const float *x, int rows, int n, const uint32_t *excl_mask, float s, float cap, uint64_t *part_key,
                uint32_t *part_bad, uint32_t *out, cudaStream_t stream) {
    const int nblk = (n + kOneSpan - 1) / kOneSpan;  // <= ceil(n / 1024): fits the caller's scratch
    const bool vec4 = n % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
    argmax_one<kGreedy, kCap><<<dim3(nblk, rows), kOneThreads, 0, stream>>>(
        x, n, nblk, vec4, excl_mask, s, kCap ? 1.0f / cap : 1.0f, cap, part_key, part_bad, out);
}

void launch_greedy_softcap_argmax(const float *x, int rows, int n, float s, float cap, const uint32_t *excl_mask,
                                  uint64_t *part_key, uint32_t *part_bad, uint32_t *out, cudaStream_t stream) {
    if (rows > kMaxOneLaunchRows) throw std::invalid_argument("cuda greedy+cap argmax: too many rows");
    if (cap > 0.0f) launch_one<true, true>(x, rows, n, excl_mask, s, cap, part_key, part_bad, out, stream);
    else throw std::invalid_argument("cuda greedy+cap argmax: cap must be > 0");
    LMT_CUDA_CHECK(cudaGetLastError());
}

// Scratch: part_key (rows * n_chunks) and part_bad (rows * n_chunks), caller-provided.
void launch_argmax_rows(const float *x, int rows, int n, bool greedy, const uint32_t *excl_mask, uint64_t *part_key,
                        uint32_t *part_bad, uint32_t *out, cudaStream_t stream) {
    if (rows <= kMaxOneLaunchRows && !use_two_phase()) {
        if (greedy) launch_one<true, false>(x, rows, n, excl_mask, 1.0f, 0.0f, part_key, part_bad, out, stream);
        else launch_one<false, false>(x, rows, n, nullptr, 1.0f, 0.0f, part_key, part_bad, out, stream);
        LMT_CUDA_CHECK(cudaGetLastError());
        return;
    }
    const int n_chunks = (n + kChunk - 1) / kChunk;
    const dim3 g1(n_chunks, rows);
    if (greedy) {
        argmax_phase1<true><<<g1, kChunk, 0, stream>>>(x, n, n_chunks, excl_mask, part_key, part_bad);
        argmax_phase2<true><<<rows, 1024, 0, stream>>>(part_key, part_bad, n_chunks, out);
    } else {
        argmax_phase1<false><<<g1, kChunk, 0, stream>>>(x, n, n_chunks, nullptr, part_key, part_bad);
        argmax_phase2<false><<<rows, 1024, 0, stream>>>(part_key, part_bad, n_chunks, out);
    }
    LMT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lmt::cuda
