// Precision::Ggml for Q8_0, Q4_0, F16, BF16 and F32: the entry points each type's row dispatches
// to, and the build check they share. What each reproduces (ggml-cpu of llama-cpp-python 0.3.36,
// x86 AVX2 + FMA + F16C build, LLAMAFILE and CPU_REPACK on) is written at its kernel; the summary
// is in docs/DESIGN.md ("precision='ggml'", the Q8_0/Q4_0/float subsection).
#pragma once

#include <string>

#include "cpu/types/types.hpp"

namespace lmt::cpu {

#if defined(LMTAIL_HAVE_X86)
// The one ggml build these types reproduce is the x86 AVX2 build, emulated with the same AVX2
// instructions, so the host must run AVX2 + FMA + F16C. ggml's AVX-512 build is not reproduced:
// its float types run 16-lane tinyBLAS / GGML_F32_STEP 64 sums and its Q4_0 repack has its own
// AVX512BW gemm, so the bytes differ; NEON and scalar builds take other paths again.
inline void ggml_q0f_require_avx2(Isa isa, const char *type) {
    if (isa != Isa::Avx2)
        throw UnsupportedError(std::string("precision='ggml' reproduces ggml's AVX2 build for ") + type +
                               " (isa='avx2'); ggml's " + isa_name(isa) +
                               " build is not reproduced (its dot-product order differs)");
    if (!isa_available(Isa::Avx2))
        throw UnsupportedError(std::string("precision='ggml' for ") + type +
                               " emulates ggml's AVX2 build with AVX2 + FMA + F16C instructions, which "
                               "this CPU does not have");
}

void q8_0_matvec_ggml_avx2(const MatvecCall &c);
void q4_0_matvec_ggml_avx2(const MatvecCall &c);
void f32_matvec_ggml_avx2(const MatvecCall &c);
void f16_matvec_ggml_avx2(const MatvecCall &c);
void bf16_matvec_ggml_avx2(const MatvecCall &c);
#define LMT_Q0F_GGML(fn) fn
#define LMT_Q0F_GGML_BIT precision_bit(Precision::Ggml)

// The Precision::Ggml branch of a type's matvec: true when it ran.
inline bool ggml_q0f_dispatch(const MatvecCall &c, void (*fn)(const MatvecCall &), const char *type) {
    if (c.precision != Precision::Ggml) return false;
    ggml_q0f_require_avx2(c.isa, type);
    fn(c);
    return true;
}
#else
// Non-x86 builds do not list Precision::Ggml for these types (the row's bit is 0), so the
// table's check refuses it before this branch; kept for a direct call.
#define LMT_Q0F_GGML(fn) nullptr
#define LMT_Q0F_GGML_BIT 0u
inline bool ggml_q0f_dispatch(const MatvecCall &c, void (*)(const MatvecCall &), const char *type) {
    if (c.precision != Precision::Ggml) return false;
    throw UnsupportedError(std::string("precision='ggml' for ") + type + " reproduces ggml's x86 AVX2 build; this is not an x86 build");
}
#endif

}  // namespace lmt::cpu
