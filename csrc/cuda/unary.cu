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

}  // namespace lmt::cuda
