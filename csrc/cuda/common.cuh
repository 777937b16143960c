// Shared CUDA helpers for lmtail's kernels. Kernel names and semantics mirror csrc/cpu and metal/.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "lmtail/kernel_abi.h"

#define LMT_CUDA_CHECK(expr)                                                                        \
    do {                                                                                            \
        cudaError_t err_ = (expr);                                                                  \
        if (err_ != cudaSuccess)                                                                    \
            throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(err_) + " at " + \
                                     __FILE__ + ":" + std::to_string(__LINE__) + " (" #expr ")");   \
    } while (0)

namespace lmt::cuda {

// Canonical selection key: larger key = ranks first (value descending, index ascending).
// NaN maps to value-key 0 (below -inf), -0.0 to +0.0 so equal values tie by index.
__device__ __forceinline__ uint32_t value_key(float v) {
    uint32_t b = __float_as_uint(v);
    if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu)) return 0u;  // NaN
    if (b == 0x80000000u) b = 0u;                                            // -0.0 -> +0.0
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ uint64_t select_key(float v, uint32_t idx) {
    return ((uint64_t)value_key(v) << 32) | (uint64_t)(~idx);
}
__device__ __forceinline__ uint32_t key_index(uint64_t k) { return ~(uint32_t)k; }
// Four consecutive values x[i0 .. i0+3] of a row of n: one float4 load when the row is 16-byte
// aligned (vec4) and all four are in range, else element by element with 0 past the end.
__device__ __forceinline__ void load4(const float *__restrict__ x, int i0, int n, bool vec4, float v[4]) {
    if (vec4 && i0 + 3 < n) {
        const float4 q = __ldg(reinterpret_cast<const float4 *>(x + i0));
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = i0 + e < n ? x[i0 + e] : 0.0f;
    }
}
__device__ __forceinline__ bool nonfinite(float v) { return (__float_as_uint(v) & 0x7F800000u) == 0x7F800000u; }

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t w = __shfl_xor_sync(0xFFFFFFFFu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

}  // namespace lmt::cuda
