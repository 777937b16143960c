// Precision::Ggml for Q8_0, Q4_0, F16, BF16 and F32: the entry points each type's row dispatches
// to, and the build check they share. What each reproduces (ggml-cpu of llama-cpp-python 0.3.36,
// x86 AVX2 + FMA + F16C build, LLAMAFILE and CPU_REPACK on) is written at its kernel; the summary
// is in docs/DESIGN.md ("precision='ggml'", the Q8_0/Q4_0/float subsection). Q8_0 and Q4_0 also
// reproduce ggml's AVX-512 build (same bytes: cpu/ggml/ggml_isa.hpp), the float types by their
// own emulation of it (float_ggml_x86.hpp; which AVX-512 variants: ggml_isa.hpp).
#pragma once

#include <string>

#include "cpu/ggml/ggml_isa.hpp"
#include "cpu/types/types.hpp"

namespace lmt::cpu {

// Why the builds outside a row's ggml_builds are refused (the error names it).
constexpr const char *kGgmlQ0NotReproduced = "ggml's NEON and scalar builds use other dot products";
constexpr const char *kGgmlFloatNotReproduced =
    "BF16's AVX-512 build on a CPU without AVX512_BF16 takes unverified code; NEON and scalar builds use "
    "other orders";

#if defined(LMTAIL_HAVE_X86)

void q8_0_matvec_ggml_avx2(const MatvecCall &c);
void q4_0_matvec_ggml_avx2(const MatvecCall &c);
void f32_matvec_ggml_avx2(const MatvecCall &c);
void f16_matvec_ggml_avx2(const MatvecCall &c);
void bf16_matvec_ggml_avx2(const MatvecCall &c);
#define LMT_Q0F_GGML(fn) fn
#define LMT_Q0F_GGML_BIT precision_bit(Precision::Ggml)

// The Precision::Ggml branch of a type's matvec: true when it ran. builds: the row's
// ggml_builds (matvec checked c.isa against it already; checked again for a direct call).
inline bool ggml_q0f_dispatch(const MatvecCall &c, void (*fn)(const MatvecCall &), const char *type, uint32_t builds) {
    if (c.precision != Precision::Ggml) return false;
    ggml_require_build(builds, c.isa, type);
    fn(c);
    return true;
}
#else
// Non-x86 builds do not list Precision::Ggml for these types (the row's bit is 0), so the
// table's check refuses it before this branch; kept for a direct call.
#define LMT_Q0F_GGML(fn) nullptr
#define LMT_Q0F_GGML_BIT 0u
inline bool ggml_q0f_dispatch(const MatvecCall &c, void (*)(const MatvecCall &), const char *type, uint32_t) {
    if (c.precision != Precision::Ggml) return false;
    throw UnsupportedError(std::string("precision='ggml' for ") + type + " reproduces ggml's x86 AVX2 build; this is not an x86 build");
}
#endif

}  // namespace lmt::cpu
