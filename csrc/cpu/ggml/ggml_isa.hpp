// The ggml build whose bytes Precision::Ggml reproduces. ggml compiles its CPU kernels for one
// ISA (GGML_NATIVE picks the build machine's), and its x86 paths round differently between an
// AVX2 and an AVX-512 build for some types, so the emulated build is a parameter: `isa` names
// it, and Auto means the build ggml would compile natively on this CPU.
#pragma once

#include "lmtail/cpu.hpp"

namespace lmt::cpu {

// Auto -> the host's best ISA (an AVX-512 host builds ggml's AVX-512 paths); anything else is
// returned as given: each type's ggml route checks that it reproduces that build and that this
// CPU can run its emulation, and raises UnsupportedError otherwise.
inline Isa ggml_isa(Isa requested) {
    if (requested != Isa::Auto) return requested;
    if (isa_available(Isa::Avx512)) return Isa::Avx512;
    if (isa_available(Isa::Avx2)) return Isa::Avx2;
    if (isa_available(Isa::Neon)) return Isa::Neon;
    return Isa::Scalar;
}

}  // namespace lmt::cpu
