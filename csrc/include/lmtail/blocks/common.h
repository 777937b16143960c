// Shared by every block header: the macros that let one header compile as C++17, MSL 2.x and CUDA.
#pragma once

#if defined(__METAL_VERSION__)
#include <metal_stdlib>
#define LMT_INLINE inline
typedef ushort lmt_f16_bits;  // raw IEEE half bits; MSL converts with as_type<half>
#elif defined(__CUDACC__)
#include <stdint.h>
#define LMT_INLINE __host__ __device__ inline
typedef uint16_t lmt_f16_bits;
#else
#include <cstddef>
#include <cstdint>
#define LMT_INLINE inline
typedef uint16_t lmt_f16_bits;
#endif
