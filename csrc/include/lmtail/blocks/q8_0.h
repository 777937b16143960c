// Q8_0 block (ggml type 8): 32 weights in 34 bytes, w = d * qs[i], qs int8 in [-128, 127]
// (ggml's quantizer writes [-127, 127]). Layout is ggml's block_q8_0, byte for byte.
#pragma once

#include "lmtail/blocks/common.h"

#define LMT_Q8_0_BLOCK_ELEMS 32
#define LMT_Q8_0_BLOCK_BYTES 34

typedef struct {
    lmt_f16_bits d;  // block scale
    int8_t qs[32];   // weight i = d * qs[i]
} lmt_block_q8_0;

static_assert(sizeof(lmt_block_q8_0) == LMT_Q8_0_BLOCK_BYTES, "Q8_0 block must be 34 bytes");
static_assert(offsetof(lmt_block_q8_0, qs) == 2, "Q8_0 qs at byte 2");
