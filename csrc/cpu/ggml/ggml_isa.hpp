// The ggml build whose bytes Precision::Ggml reproduces. ggml compiles its CPU kernels for one
// ISA (GGML_NATIVE picks the build machine's), and its x86 paths round differently between an
// AVX2 and an AVX-512 build for some types, so the emulated build is a parameter: `isa` names
// it, and Auto means the build ggml would compile natively on this CPU.
#pragma once

#include "lmtail/cpu.hpp"

namespace lmt::cpu {

// Auto -> the build ggml compiles natively on this CPU: GGML_NATIVE turns on its AVX-512 paths
// wherever the CPU has AVX512F (lmtail's own avx512 tier needs more, so it is not the test);
// anything else is returned as given: each type's ggml route checks that it reproduces that build
// and that this CPU can run its emulation, and raises UnsupportedError otherwise.
inline Isa ggml_isa(Isa requested) {
    if (requested != Isa::Auto) return requested;
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
    if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
#endif
    if (isa_available(Isa::Avx2)) return Isa::Avx2;
    if (isa_available(Isa::Neon)) return Isa::Neon;
    return Isa::Scalar;
}

// Every type's ggml route reproduces one build so far, ggml's x86 AVX2 build (the one verified
// against the oracle here), emulated with AVX2 code. So the capability table offers "ggml" only
// where that is the native build and this CPU runs the emulation: on an AVX-512 CPU a native
// llama.cpp takes other code for these types, and offering "ggml" there would promise bytes it
// does not give. (When a type reproduces another build this becomes a field of its row.)
inline bool ggml_native_build_reproduced() {
    return ggml_isa(Isa::Auto) == Isa::Avx2 && isa_available(Isa::Avx2);
}

}  // namespace lmt::cpu
