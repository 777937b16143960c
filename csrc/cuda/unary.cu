// scale, tanh and the soft cap on the device. llama.cpp's graph: x*s, x*(1/cap), tanh, x*cap with
// 1/cap rounded to float on the host. CUDA's tanhf is not glibc's, so bytes can differ from the
// CPU backend by an ulp of tanh (the cross-backend test states the bound).
#include "common.cuh"
#include "launch.hpp"

namespace lmt::cuda {

__global__ void scale_kernel(float *x, int64_t n, float s) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * s;
}
__global__ void tanh_kernel(float *x, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = tanhf(x[i]);
}
__global__ void softcap_fused_kernel(float *x, int64_t n, float s, float inv, float cap) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = tanhf((x[i] * s) * inv) * cap;
}

void launch_tanh(float *x, int64_t n, cudaStream_t stream) {
    tanh_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, n);
    LMT_CUDA_CHECK(cudaGetLastError());
}

void launch_softcap(float *x, int64_t n, float s, float cap, bool four_pass, cudaStream_t stream) {
    const int bs = 256;
    const unsigned grid = (unsigned)((n + bs - 1) / bs);
    if (!(cap > 0.0f)) {
        scale_kernel<<<grid, bs, 0, stream>>>(x, n, s);
    } else if (four_pass) {
        const float inv = 1.0f / cap;
        scale_kernel<<<grid, bs, 0, stream>>>(x, n, s);
        scale_kernel<<<grid, bs, 0, stream>>>(x, n, inv);
        tanh_kernel<<<grid, bs, 0, stream>>>(x, n);
        scale_kernel<<<grid, bs, 0, stream>>>(x, n, cap);
    } else {
        softcap_fused_kernel<<<grid, bs, 0, stream>>>(x, n, s, 1.0f / cap, cap);
    }
    LMT_CUDA_CHECK(cudaGetLastError());
}

// Grammar masks (XGrammar's int32 layout): logit i of row r becomes -inf where bit i % 32 of
// word i / 32 of mask row r is clear. One thread per logit; bits past V are never read.
__global__ void apply_bitmask_kernel(float *x, const int32_t *mask, int64_t V, int W) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t r = blockIdx.y;
    if (i < V && !(((uint32_t)mask[r * W + (i >> 5)] >> (i & 31)) & 1u)) x[r * V + i] = -INFINITY;
}

void launch_apply_bitmask(float *x, const int32_t *mask, int rows, int64_t V, cudaStream_t stream) {
    const int W = (int)((V + 31) / 32);
    apply_bitmask_kernel<<<dim3((unsigned)((V + 255) / 256), (unsigned)rows), 256, 0, stream>>>(x, mask, V, W);
    LMT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lmt::cuda
