// Top-k per row in canonical order (value descending, index ascending; NaN last), deterministic.
// Phase 1: each 1024-element chunk is bitonic-sorted by its 64-bit selection key in shared
// memory and keeps its best min(k, 1024). Merge passes: groups of lists are loaded into one
// block, sorted, and cut to k, until one list per row remains. Values are gathered from x by
// index, so they keep their exact bits.
#include <vector>

#include "common.cuh"
#include "launch.hpp"

namespace lmt::cuda {

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

// Scratch needed by launch_topk_rows, in uint64 elements.
size_t topk_scratch_elems(int rows, int n, int k) {
    const int n_chunks = (n + 1023) / 1024;
    const int keep = k < 1024 ? k : 1024;
    return 2 * (size_t)rows * n_chunks * (size_t)(keep > k ? keep : k) + (size_t)rows * k;
}

void launch_topk_rows(const float *x, int rows, int n, int k, uint64_t *scratch, uint32_t *ids, float *vals,
                      cudaStream_t stream) {
    if (k < 1 || k > n || k > kSortN / 2) throw std::invalid_argument("cuda topk: k must be in [1, min(n, 2048)]");
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
    LMT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lmt::cuda
