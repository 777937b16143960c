// Q6_K block (ggml type 14): a super-block of 256 weights in 210 bytes (6.5625 bits/weight):
//   w = d * scales[i / 16] * (q - 32)     q in [0, 63], scales int8 (one per 16 weights)
// q's low 4 bits come from ql, its high 2 bits from qh. Layout is ggml's block_q6_K, byte for
// byte: for half h (128 weights; ql + 64h, qh + 32h) and l in [0, 32):
//   weight 128h + l      : ql[l]      low nibble, qh[l] bits 0-1
//   weight 128h + l + 32 : ql[l + 32] low nibble, qh[l] bits 2-3
//   weight 128h + l + 64 : ql[l]      high nibble, qh[l] bits 4-5
//   weight 128h + l + 96 : ql[l + 32] high nibble, qh[l] bits 6-7
#pragma once

#include "lmtail/blocks/common.h"

#define LMT_Q6K_BLOCK_BYTES 210

typedef struct {
    uint8_t ql[128];    // low 4 bits
    uint8_t qh[64];     // high 2 bits
    int8_t scales[16];  // sub-block scales, one per 16 weights
    lmt_f16_bits d;     // super-block scale
} lmt_block_q6_K;

static_assert(sizeof(lmt_block_q6_K) == LMT_Q6K_BLOCK_BYTES, "Q6_K block must be 210 bytes");
static_assert(offsetof(lmt_block_q6_K, qh) == 128, "Q6_K qh at byte 128");
static_assert(offsetof(lmt_block_q6_K, scales) == 192, "Q6_K scales at byte 192");
static_assert(offsetof(lmt_block_q6_K, d) == 208, "Q6_K d at byte 208");

// Weight i (in [0, 256)) of a block as the signed integer q - 32, in [-32, 31].
template <typename BytePtr>
LMT_INLINE int32_t lmt_q6k_q(BytePtr ql, BytePtr qh, int i) {
    const int h = i >> 7, r = i & 127, l = r & 31, quarter = r >> 5;  // quarter 0..3
    const uint32_t lo = (quarter & 1) ? ql[64 * h + l + 32] : ql[64 * h + l];
    const uint32_t nib = (quarter >> 1) ? (lo >> 4) : (lo & 0xF);
    const uint32_t hi = ((uint32_t)qh[32 * h + l] >> (2 * quarter)) & 3u;
    return (int32_t)(nib | (hi << 4)) - 32;
}
