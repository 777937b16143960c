// Two-phase argmax over rows of logits, plain and greedy-serving.
//
// Candidates are compared by one 64-bit key (value-key << 32 | ~index): greater value wins,
// equal values keep the lower index, NaN ranks lowest, so the max is independent of the
// reduction's shape. Phase 1: one 1024-thread block per 1024-element chunk of a row writes its
// best key (and, for greedy, whether it saw a NaN/Inf). Phase 2: one block per row reduces the
// chunk partials; greedy writes LMT_ARGMAX_INVALID when any chunk latched, kAllExcluded
// (0xFFFFFFFE) when every id was excluded. Exclusion (the request's EOG set) is a bitmask read
// inside the reduction only; logits are never written.
#include "common.cuh"
#include "launch.hpp"

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

// Scratch: part_key (rows * n_chunks) and part_bad (rows * n_chunks), caller-provided.
void launch_argmax_rows(const float *x, int rows, int n, bool greedy, const uint32_t *excl_mask, uint64_t *part_key,
                        uint32_t *part_bad, uint32_t *out, cudaStream_t stream) {
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
