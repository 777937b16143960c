// Q4_0 block (ggml type 2): 32 weights in 18 bytes, w = d * (q - 8) with q in [0, 15]:
// weight i < 16 is the low nibble of qs[i], weight 16 + i its high nibble. Layout is ggml's
// block_q4_0, byte for byte.
#pragma once

#include "lmtail/blocks/common.h"

#define LMT_Q4_0_BLOCK_ELEMS 32
#define LMT_Q4_0_BLOCK_BYTES 18

typedef struct {
    lmt_f16_bits d;  // block scale
    uint8_t qs[16];  // nibbles: low = weight i, high = weight 16 + i
} lmt_block_q4_0;

static_assert(sizeof(lmt_block_q4_0) == LMT_Q4_0_BLOCK_BYTES, "Q4_0 block must be 18 bytes");
static_assert(offsetof(lmt_block_q4_0, qs) == 2, "Q4_0 qs at byte 2");

// Weight i (in [0, 32)) as the signed integer q - 8, in [-8, 7].
template <typename BytePtr>
LMT_INLINE int32_t lmt_q4_0_q(BytePtr qs, int i) {
    return (int32_t)(i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4)) - 8;
}
