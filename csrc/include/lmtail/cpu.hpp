// lmtail CPU backend: the LM-head tail kernels on host memory.
//
// Public C++ API for embedding (find_package(lmtail) -> lmtail::core). Every function works on
// caller-owned, C-contiguous memory and allocates nothing per call beyond small stack buffers.
// Results are byte-identical run to run and independent of the thread count: work is split by
// rows (or by whole chunks whose combination is order-independent), never inside a dot product.
// They are also identical across the SIMD paths (scalar, AVX2, AVX-512, NEON, NEON dotprod): every path
// evaluates the same canonical expression tree (see docs/DESIGN.md, "Canonical order").
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "lmtail/kernel_abi.h"
#include "lmtail/weight_type.hpp"

namespace lmt {

// Base of every error the core raises; the Python layer maps subclasses to typed exceptions.
class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};
// A shape/size/argument the kernel cannot accept (maps to Python ValueError subclasses).
class ArgumentError : public Error {
  public:
    using Error::Error;
};
// A NaN or +/-Inf reached a fail-closed reduction (maps to lmtail.NonFiniteLogitsError).
class NonFiniteError : public Error {
  public:
    using Error::Error;
};
// A weight type / precision combination this backend does not run (maps to lmtail.UnsupportedError).
class UnsupportedError : public ArgumentError {
  public:
    using ArgumentError::ArgumentError;
};

namespace cpu {

// SIMD implementation selected at run time. `Auto` picks the best the CPU supports; the others
// force a path (tests use this to prove the paths agree byte for byte). `Amx` names a ggml build
// only (precision "ggml": ggml's AVX-512 build with its AMX-INT8 buffer); lmtail's own kernels
// have no AMX path, so isa_available(Amx) is false. Two superset tiers give their base tier's
// bytes: `NeonDot` is NEON plus the ARMv8.2 dot product (sdot / udot: Cortex-A76+, Neoverse N1+ /
// Graviton2+, Apple M1+), `AvxVnni` the AVX2 tier plus the VEX AVX-VNNI dot products (Alder Lake
// and later clients, Zen 5); the integer kernels that have such a variant run it, every other
// kernel the base tier's.
enum class Isa : int { Auto = 0, Scalar = 1, Avx2 = 2, Avx512 = 3, Neon = 4, Amx = 5, NeonDot = 6, AvxVnni = 7 };

// Name of the path `isa` resolves to on this CPU ("avx512", "avx_vnni", "avx2", "neon_dotprod",
// "neon", "scalar").
const char *isa_name(Isa isa = Isa::Auto);
// True when this CPU (and this build) can run `isa`.
bool isa_available(Isa isa);

// Threads used when a call passes n_threads <= 0: LMTAIL_NUM_THREADS if set, else the number of
// CPUs this process may run on.
int default_threads();

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * gamma   (gamma may be null: no scale)
// Sum of squares in double, in index order (cols is small; this is the accuracy-first choice).
// Throws NonFiniteError for a finite row whose mean of squares overflows float (ggml then
// outputs all zeros, silently) or whose mean + eps is 0; rows holding NaN/Inf propagate them.
// Rows before the failing one are already written.
void rms_norm(const float *x, const float *gamma, float *y, int64_t n_rows, int64_t cols, float eps);

// y[t, :] = (x[t, :] - mean) / sqrt(var + eps) * gamma   (LayerNorm without bias; gamma may be null)
// Mean and variance accumulated in double in index order. Throws NonFiniteError for a finite
// row whose variance overflows float or whose var + eps is 0, as rms_norm does.
void layer_norm(const float *x, const float *gamma, float *y, int64_t n_rows, int64_t cols, float eps);

// Activation precision of the Q5_K matvec (see docs/DESIGN.md, "Canonical order").
//   F32: activations stay f32; w = fma(q, d*sc, -dmin*m) per weight, 16 f32 lanes. The exact
//        reference (normwise error ~4e-7); the other backends (metal-emu, cuda) match it.
//   I16: each 256-element block of x is quantised once per call to int16 (scale max|x|/32767,
//        round to nearest even); sc*q*x is summed exactly in int32 per super-block, then scaled
//        in f32 in one fixed expression. Fastest (integer multiply-adds); error ~3e-5 normwise.
//   I24: two pieces per element: each 256-block of x as s*(a + b/255) (a int16, b uint8), a
//        24-bit fixed point whose step is max|x|*2^-23; both summed exactly in int32 against the
//        weights centred on 16, then scaled in f32. Normwise error ~2e-7 (below F32's ~4e-7) at
//        1.1-1.2x the I16 cost: the CPU default (docs/DESIGN.md, "Activation precision").
// All are byte-identical across SIMD paths and thread counts, and batch invariant.
// Default (-1) asks for the weight type's default precision (default_precision below).
// Ggml: the bytes of ggml's CPU mul_mat (llama.cpp's logits) for the ggml build named by the isa.
enum class Precision : int { Default = -1, F32 = 0, I16 = 1, I24 = 2, Ggml = 3 };
// "f32" / "i16" / "i24" / "ggml" / "default"
const char *precision_name(Precision p);

// ---- Weight types (the CPU column of the capability table) --------------------------------
// True when the CPU backend runs `type` (any precision).
bool type_supported(WeightType type);
// Bit (1 << (int)p) set for every precision the CPU matvec runs for `type`; 0 if unsupported.
// Ggml only where ggml's native build on this CPU is one lmtail reproduces (cpu/ggml/ggml_isa.hpp).
uint32_t type_precisions(WeightType type);
// Bit (1 << (int)isa) set for every ggml build whose bytes Precision::Ggml reproduces for `type`
// (an isa= the ggml route accepts); 0 without a ggml route or for an unsupported type.
uint32_t type_ggml_builds(WeightType type);
// The ggml build a native (GGML_NATIVE) llama.cpp compiles on this CPU: what isa=Auto
// reproduces under Precision::Ggml.
Isa ggml_native_build();
// The precision `Precision::Default` means for `type` (the accurate fast path: normwise error
// <= 1e-6 against float64). Throws UnsupportedError for a type the CPU does not run.
Precision default_precision(WeightType type);
// Bytes of one row of `cols` weights; throws ArgumentError unless cols is a positive multiple of
// the type's block (naming the type and its block), UnsupportedError for an unknown type.
size_t row_bytes(WeightType type, int64_t cols);

// logits[t, r] = sum_c W[r, c] * x[t, c] for t in [0, T), r in [0, rows), W of any supported type:
// rows of row_bytes(type, cols) bytes at row_stride (>= row bytes). Byte-identical across SIMD
// paths and thread counts, batch invariant (row t of a T-row call equals the row alone).
// Throws UnsupportedError for a type/precision the CPU does not run.
void matvec(WeightType type, const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride, const float *x,
            int64_t T, float *logits, int n_threads = 0, Isa isa = Isa::Auto,
            Precision precision = Precision::Default);
// ggml's quantize_row_*_ref (ggml_quantize_chunk without an importance matrix), byte for byte;
// for F16 / BF16 / F32 the conversions ggml_fp32_to_fp16_row / _bf16_row / a copy.
// src: rows x cols f32, dst: rows x row_bytes(type, cols).
void quantize(WeightType type, const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads = 0);
// ggml's dequantize_row_* (= gguf-py's dequantize), bit for bit. dst: rows x cols f32.
void dequantize(WeightType type, const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads = 0);

// logits[t, r] = sum_c dequant(W)[r, c] * x[t, c] for t in [0, T), r in [0, rows).
// W: rows x (cols/256) Q5_K blocks, row stride row_stride bytes (>= cols/256*176).
// Reads every weight block once for all T activation rows. A non-finite activation makes every
// logit of its row non-finite (F32: by IEEE propagation; I16/I24: the block's scale becomes NaN).
void matvec_q5_k(const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride, const float *x,
                 int64_t T, float *logits, int n_threads = 0, Isa isa = Isa::Auto,
                 Precision precision = Precision::I24);

// In place: x *= s (ggml_scale with bias 0: one rounding per element).
void scale(float *x, int64_t n, float s, int n_threads = 0);
// In place: x = tanhf(x), the platform libm's tanhf (ggml's CPU tanh calls the same function).
void tanh(float *x, int64_t n, int n_threads = 0);
// In place soft cap as llama.cpp's graph computes it: x*s, x*(1/cap), tanhf, x*cap, as four
// passes (four_pass=true, the node-per-op route) or one fused pass evaluating the same
// expression tree (four_pass=false). Both produce identical bytes on the CPU. cap <= 0: scale only.
void softcap(float *x, int64_t n, float s, float cap, bool four_pass, int n_threads = 0);

// Index of the maximum; lowest index among equal maxima; NaN never wins (a row of only NaN
// returns 0). n >= 1.
uint32_t argmax(const float *x, int64_t n, int n_threads = 0);

// Fail-closed greedy argmax. Any non-finite value anywhere in the row (excluded ids included)
// returns LMT_ARGMAX_INVALID (the latch); ids in `excluded` are skipped inside the reduction only
// (x is read-only). If every finite candidate is excluded, returns LMT_ARGMAX_INVALID - 1.
// Requires n < 2^31. Duplicate or out-of-range excluded ids are the caller's to validate.
inline constexpr uint32_t kAllExcluded = LMT_ARGMAX_INVALID - 1u;
uint32_t greedy_argmax(const float *x, int64_t n, const uint32_t *excluded, int64_t n_excluded,
                       int n_threads = 0);

// Top-k of one row in canonical order: value descending, index ascending among equal values.
// NaN is ordered below -inf (never selected ahead of a number). k in [1, n].
void topk(const float *x, int64_t n, int64_t k, uint32_t *ids, float *values);

// Bulk: each of n_rows rows, distributed over threads.
void argmax_rows(const float *x, int64_t n_rows, int64_t n, uint32_t *out, int n_threads = 0);
void greedy_argmax_rows(const float *x, int64_t n_rows, int64_t n, const uint32_t *excluded,
                        int64_t n_excluded, uint32_t *out, int n_threads = 0);
void topk_rows(const float *x, int64_t n_rows, int64_t n, int64_t k, uint32_t *ids, float *values,
               int n_threads = 0);

// True when every value is finite (exponent bits test; immune to fast-math).
bool all_finite(const float *x, int64_t n, int n_threads = 0);

// Q5_K quantisation, byte-identical to ggml's quantize_row_q5_K_ref (no importance matrix).
// src: rows x cols f32, dst: rows x (cols/256*176) bytes. cols % 256 == 0.
void quantize_q5_k(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads = 0);
// Dequantisation, bit-identical to ggml's dequantize_row_q5_K (and gguf-py's dequantize).
void dequantize_q5_k(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads = 0);

}  // namespace cpu
}  // namespace lmt
