// Q4_K block (ggml type 12): a super-block of 256 weights in 144 bytes (4.5 bits/weight):
//   w = d * sc[j] * q - dmin * m[j]   for sub-block j (32 weights), q in [0, 15]
// with (sc, m) 6-bit values packed in scales[12] exactly as Q5_K's (lmt_q5k_scale / lmt_q5k_min
// read them). qs byte l of group g (64 weights) holds weight 64g + l in its low nibble and
// 64g + 32 + l in its high nibble. Layout is ggml's block_q4_K, byte for byte.
#pragma once

#include "lmtail/blocks/common.h"
#include "lmtail/blocks/q5_k.h"  // the shared 6-bit scale/min packing (lmt_q5k_scale, lmt_q5k_min)

#define LMT_Q4K_BLOCK_BYTES 144

typedef struct {
    lmt_f16_bits d;      // super-block scale for the 6-bit sub-block scales
    lmt_f16_bits dmin;   // super-block scale for the 6-bit sub-block mins
    uint8_t scales[12];  // 8 scales and 8 mins, 6 bits each (same packing as Q5_K)
    uint8_t qs[128];     // low/high nibbles as above
} lmt_block_q4_K;

static_assert(sizeof(lmt_block_q4_K) == LMT_Q4K_BLOCK_BYTES, "Q4_K block must be 144 bytes");
static_assert(offsetof(lmt_block_q4_K, scales) == 4, "Q4_K scales at byte 4");
static_assert(offsetof(lmt_block_q4_K, qs) == 16, "Q4_K qs at byte 16");

// Weight i (in [0, 256)) of a block as the 4-bit integer q.
template <typename BytePtr>
LMT_INLINE uint32_t lmt_q4k_q(BytePtr qs, int i) {
    const int group = i >> 6, l = i & 31, upper = (i >> 5) & 1;
    return upper ? (uint32_t)(qs[32 * group + l] >> 4) : (uint32_t)(qs[32 * group + l] & 0xF);
}
