// Q5_K block (ggml type 13): layout and scalar unpack, shared by C++, MSL and CUDA.
#pragma once

#include "lmtail/blocks/common.h"

// ---- Q5_K (ggml type 13) -------------------------------------------------------------------
// A super-block of 256 weights in 176 bytes (5.5 bits/weight):
//   w = d * sc[j] * q - dmin * m[j]   for sub-block j (32 weights), q in [0, 31]
// where q = low nibble from qs | (bit from qh) << 4 and (sc, m) are 6-bit values packed in
// scales[12] (see lmt_q5k_scale_min). Layout is ggml's block_q5_K, byte for byte.
#ifndef LMT_QK_K
#define LMT_QK_K 256  // weights per K-quant super-block
#endif
#define LMT_Q5K_BLOCK_BYTES 176
#define LMT_Q5K_SUBBLOCKS 8

typedef struct {
    lmt_f16_bits d;        // super-block scale for the 6-bit sub-block scales
    lmt_f16_bits dmin;     // super-block scale for the 6-bit sub-block mins
    uint8_t scales[12];    // 8 scales and 8 mins, 6 bits each
    uint8_t qh[32];        // high (5th) bit of each weight: bit 2k / 2k+1 for sub-blocks 2k / 2k+1
    uint8_t qs[128];       // low 4 bits: byte l of group g holds weight 64g+l (low nibble) and 64g+32+l
} lmt_block_q5_K;

static_assert(sizeof(lmt_block_q5_K) == LMT_Q5K_BLOCK_BYTES, "Q5_K block must be 176 bytes");
static_assert(offsetof(lmt_block_q5_K, scales) == 4, "Q5_K scales at byte 4");
static_assert(offsetof(lmt_block_q5_K, qh) == 16, "Q5_K qh at byte 16");
static_assert(offsetof(lmt_block_q5_K, qs) == 48, "Q5_K qs at byte 48");

// Sub-block j's 6-bit scale and min from the 12 packed bytes (j in [0, 8)). Generic over the
// pointer type so MSL address spaces (device/threadgroup/thread) deduce.
template <typename BytePtr>
LMT_INLINE uint32_t lmt_q5k_scale(BytePtr q, int j) {
    return j < 4 ? (uint32_t)(q[j] & 63) : (uint32_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
}
template <typename BytePtr>
LMT_INLINE uint32_t lmt_q5k_min(BytePtr q, int j) {
    return j < 4 ? (uint32_t)(q[j + 4] & 63) : (uint32_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
}
// Weight i (in [0, 256)) of a block as the 5-bit integer q.
template <typename BytePtr>
LMT_INLINE uint32_t lmt_q5k_q(BytePtr qs, BytePtr qh, int i) {
    const int group = i >> 6, l = i & 31, upper = (i >> 5) & 1;
    const uint32_t lo = upper ? (uint32_t)(qs[32 * group + l] >> 4) : (uint32_t)(qs[32 * group + l] & 0xF);
    const uint32_t hi = (uint32_t)(qh[l] >> (2 * group + upper)) & 1u;
    return lo | (hi << 4);
}
