// lmtail kernel ABI: the Q5_K block layout and the kernel-argument structs.
//
// This one header is included by the C++ core, by the Metal shaders (metal/*.metal) and, later,
// by the CUDA kernels, so that "must stay in sync" is enforced by the compiler rather than by
// review. Keep it to plain structs of fixed-width scalars and tiny inline helpers that compile
// as C++17, MSL 2.x and CUDA alike.
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

// ---- Q5_K (ggml type 13) -------------------------------------------------------------------
// A super-block of 256 weights in 176 bytes (5.5 bits/weight):
//   w = d * sc[j] * q - dmin * m[j]   for sub-block j (32 weights), q in [0, 31]
// where q = low nibble from qs | (bit from qh) << 4 and (sc, m) are 6-bit values packed in
// scales[12] (see lmt_q5k_scale_min). Layout is ggml's block_q5_K, byte for byte.
#define LMT_QK_K 256
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

// ---- Kernel arguments -----------------------------------------------------------------------
// Every backend's encoder fills these and binds them as one constant buffer (Metal setBytes,
// CUDA by value). Sizes are asserted so that MSL and C++ agree on padding.

// Greedy argmax: the high bit of a partial index latches "a non-finite value was seen";
// vocabularies must therefore fit in 31 bits (checked on the host).
#define LMT_ARGMAX_NONFINITE_BIT 0x80000000u
#define LMT_ARGMAX_INVALID 0xFFFFFFFFu
#define LMT_ARGMAX_CHUNK 1024u

typedef struct {
    uint32_t cols;      // hidden size (multiple of 256)
    uint32_t n_rows;    // T: activation rows normalised independently
    float eps;          // RMS epsilon
    uint32_t has_gamma; // 0: plain RMS normalisation
} lmt_args_rms_norm;

typedef struct {
    uint32_t rows;          // output rows (vocabulary)
    uint32_t cols;          // input size (multiple of 256)
    uint32_t n_tokens;      // T >= 1 activation rows, weights read once for all of them
    uint32_t row_bytes;     // cols / 256 * 176
    uint64_t weight_offset; // byte offset of the tensor inside its bound buffer (GGUF mmap)
} lmt_args_mul_mv_q5_K;

typedef struct {
    uint32_t n;      // element count
    float scale;     // multiplier (scale op); unused by tanh
} lmt_args_unary;

typedef struct {
    uint32_t n;       // element count
    float scale;      // logit scale
    float softcap;    // <= 0: scale only
    float inv_softcap;// 1/softcap computed once on the host (as llama.cpp's graph does)
} lmt_args_softcap;

typedef struct {
    uint32_t n;            // row length
    uint32_t n_rows;       // rows (argmax per row)
    uint32_t n_chunks;     // ceil(n / chunk)
    uint32_t n_excluded;   // greedy: count of excluded ids (EOG set for ignore-eos)
} lmt_args_argmax;

typedef struct {
    uint32_t n;       // row length
    uint32_t n_rows;  // rows
    uint32_t k;       // candidates per row
    uint32_t pad;
} lmt_args_topk;

static_assert(sizeof(lmt_args_rms_norm) == 16, "lmt_args_rms_norm layout");
static_assert(sizeof(lmt_args_mul_mv_q5_K) == 24, "lmt_args_mul_mv_q5_K layout");
static_assert(sizeof(lmt_args_unary) == 8, "lmt_args_unary layout");
static_assert(sizeof(lmt_args_softcap) == 16, "lmt_args_softcap layout");
static_assert(sizeof(lmt_args_argmax) == 16, "lmt_args_argmax layout");
static_assert(sizeof(lmt_args_topk) == 16, "lmt_args_topk layout");
