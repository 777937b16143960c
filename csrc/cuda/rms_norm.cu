// RMSNorm: one block per row; float squares summed in double (exact for typical rows, so the
// result usually equals the CPU backend's bytes), then x * (1/sqrtf(mean + eps)) * gamma; a
// non-finite mean (overflow) makes the whole row NaN so that the tail fails closed.
#include "common.cuh"
#include "launch.hpp"

namespace lmt::cuda {

__global__ void __launch_bounds__(256) rms_norm_kernel(const float *__restrict__ x, const float *__restrict__ gamma,
                                                       float *__restrict__ y, int cols, float eps) {
    __shared__ double red[8];
    const int row = blockIdx.x;
    const float *xr = x + (size_t)row * cols;
    double s = 0.0;
    // float4 loads, 8 in flight per thread when the row is 16-byte aligned: the plain strided loop
    // waited one memory round trip per element of a thread (26 at 6656 columns, the hidden row
    // is cold in the greedy tail) — the same terms (float squares, exact in double) either way.
    const bool vec = (cols & 3) == 0 && (reinterpret_cast<uintptr_t>(xr) & 15u) == 0;
    if (vec) {
        const float4 *x4 = reinterpret_cast<const float4 *>(xr);
#pragma unroll 8
        for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
            const float4 v = x4[i];
            s += (double)(v.x * v.x) + (double)(v.y * v.y) + (double)(v.z * v.z) + (double)(v.w * v.w);
        }
    } else {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) s += (double)(xr[i] * xr[i]);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) t += red[w];
        red[0] = t;
    }
    __syncthreads();
    const float mean = (float)(red[0] / (double)cols);
    // A finite row whose float squares (or mean) overflow gives mean = inf and scale = 0: an
    // all-zero row every later check would take for valid logits (greedy token 0). Poison it
    // with NaN instead, so the pre-cap latch (DeviceHead::run_tail) and the greedy kernel's
    // latch refuse it (the CPU backend raises the same case). Exponent-bit test.
    const bool overflow = (__float_as_uint(mean) & 0x7F800000u) == 0x7F800000u;
    const float scale = overflow ? __uint_as_float(0x7FC00000u) : 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float v = xr[i] * scale;
        y[(size_t)row * cols + i] = gamma ? v * gamma[i] : v;
    }
}

void launch_rms_norm(const float *x, const float *gamma, float *y, int rows, int cols, float eps, cudaStream_t stream) {
    rms_norm_kernel<<<rows, 256, 0, stream>>>(x, gamma, y, cols, eps);
    LMT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lmt::cuda
