// BF16 weights (ggml type 30): the high 16 bits of an IEEE binary32, block of 1. The float
// value is the bits shifted left by 16 (exact).
#pragma once

#include "lmtail/blocks/common.h"

#define LMT_BF16_BLOCK_ELEMS 1
#define LMT_BF16_BLOCK_BYTES 2
typedef uint16_t lmt_bf16_bits;

LMT_INLINE uint32_t lmt_bf16_to_f32_bits(lmt_bf16_bits h) { return (uint32_t)h << 16; }
