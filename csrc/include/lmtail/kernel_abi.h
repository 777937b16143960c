// lmtail kernel ABI: the block layouts of every weight type and the kernel-argument structs.
//
// This one header is included by the C++ core, by the Metal shaders (metal/*.metal) and, later,
// by the CUDA kernels, so that "must stay in sync" is enforced by the compiler rather than by
// review. Keep it to plain structs of fixed-width scalars and tiny inline helpers that compile
// as C++17, MSL 2.x and CUDA alike.
#pragma once

// One header per weight type (layout, sizes static_asserted, scalar unpack).
#include "lmtail/blocks/common.h"
#include "lmtail/blocks/f32.h"
#include "lmtail/blocks/f16.h"
#include "lmtail/blocks/bf16.h"
#include "lmtail/blocks/q4_0.h"
#include "lmtail/blocks/q8_0.h"
#include "lmtail/blocks/q4_k.h"
#include "lmtail/blocks/q5_k.h"
#include "lmtail/blocks/q6_k.h"

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

// The matvec of every weight type (metal/matvec.metal, mul_mv_<type>_f32).
typedef struct {
    uint32_t rows;          // output rows (vocabulary)
    uint32_t cols;          // input size (a multiple of the type's block)
    uint32_t n_tokens;      // T >= 1 activation rows, weights read once per 4 of them
    uint32_t row_bytes;     // byte stride between weight rows (>= cols / block * block bytes)
    uint64_t weight_offset; // byte offset of the tensor inside its bound buffer (GGUF mmap)
} lmt_args_mul_mv;

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
static_assert(sizeof(lmt_args_mul_mv) == 24, "lmt_args_mul_mv layout");
static_assert(sizeof(lmt_args_unary) == 8, "lmt_args_unary layout");
static_assert(sizeof(lmt_args_softcap) == 16, "lmt_args_softcap layout");
static_assert(sizeof(lmt_args_argmax) == 16, "lmt_args_argmax layout");
static_assert(sizeof(lmt_args_topk) == 16, "lmt_args_topk layout");
