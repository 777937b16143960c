// Q4_K / Q5_K: the 12 packed scale bytes -> 8 scales then 8 mins, one byte each (6 bits, ggml's
// packing), as four words: u[0..1] the scales, u[2..3] the mins. Scalar integer code, shared by
// the AVX2 and the 512-bit emulations of ggml's K-quant dot products.
#pragma once

#include <cstdint>
#include <cstring>

namespace lmt::cpu::ggml_x86 {

// static: each ISA's file keeps its own copy (the linker never hands one to another ISA's caller).
static inline void k_scales_mins(const uint8_t *scales12, uint32_t u[4]) {
    uint32_t a[3];
    std::memcpy(a, scales12, 12);
    u[0] = a[0] & 0x3f3f3f3fu;
    u[1] = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
    u[2] = a[1] & 0x3f3f3f3fu;
    u[3] = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
}

}  // namespace lmt::cpu::ggml_x86
