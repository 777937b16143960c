// The ggml builds whose bytes Precision::Ggml reproduces. ggml compiles its CPU kernels for one
// ISA (GGML_NATIVE picks the build machine's), and its x86 paths round differently between an
// AVX2 and an AVX-512 build for some types, so the emulated build is a parameter: `isa` names
// it, and Auto means the build ggml would compile natively on this CPU. Which builds a type
// reproduces is data: its row's ggml_builds mask (cpu/types/types.hpp).
#pragma once

#include <cstdint>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "lmtail/cpu.hpp"

namespace lmt::cpu {

// CPUID.(7, 0):EDX bit `bit` (read directly: clang's __builtin_cpu_supports lacks some names,
// e.g. avx512fp16 and the AMX ones in clang 14).
inline bool cpuid7_edx(int bit) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << bit));
#else
    (void)bit;
    return false;
#endif
}

// ggml's native build on a CPU with AMX-INT8 and AVX512-VNNI compiles its AMX extra buffer
// (ggml-cpu/amx: -march=native defines __AMX_INT8__), which exists at run time when the kernel
// grants the tile state (its ggml_amx_init asks ARCH_REQ_XCOMP_PERM); llama.cpp then loads the
// weights that buffer supports into it (before CPU_REPACK). Here the kernel's support is read
// with ARCH_GET_XCOMP_SUPP, which changes nothing in the process.
inline bool ggml_amx_native() {
#if defined(__linux__) && defined(__x86_64__)
    static const bool yes = [] {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx512vnni") || !cpuid7_edx(24) || !cpuid7_edx(25))  // AMX-TILE, AMX-INT8
            return false;
        unsigned long features = 0;
        return syscall(SYS_arch_prctl, 0x1021 /* ARCH_GET_XCOMP_SUPP */, &features) == 0 &&
               (features & (1ul << 18)) != 0;  // XFEATURE_XTILEDATA
    }();
    return yes;
#else
    return false;
#endif
}

// Auto -> the build ggml compiles natively on this CPU: GGML_NATIVE turns on its AVX-512 paths
// wherever the CPU has AVX512F (lmtail's own avx512 tier needs more, so it is not the test);
// anything else is returned as given: matvec checks it against the type's ggml_builds mask.
inline Isa ggml_isa(Isa requested) {
    if (requested != Isa::Auto) return requested;
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
    if (ggml_amx_native()) return Isa::Amx;
    if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
#endif
    if (isa_available(Isa::Avx2)) return Isa::Avx2;
    if (isa_available(Isa::Neon)) return Isa::Neon;
    return Isa::Scalar;
}

constexpr uint32_t ggml_build_bit(Isa build) { return 1u << (int)build; }

// The builds each family reproduces (x86 lmtail builds only: every emulation is AVX2 code).
// Verified against the oracle: an AVX2 build (earlier sessions) and a native AVX-512 build
// (Zen 4: AVX512F/BW/VL/DQ/VNNI/BF16/VBMI; llama-cpp-python 0.3.36).
// * Q8_0, Q4_0, Q4_K, Q5_K, Q6_K: ggml's AVX-512 build gives the AVX2 build's bytes on every
//   path (vec_dot, llamafile sgemm, the tiled K-quant matmul with its VNNI microtile, the
//   CPU_REPACK gemv / gemm with their AVX512 loops, quantize_row_q8_0 / q8_K): its 512-bit and
//   VNNI code changes only exact integer sums, and every float is formed in the same order.
//   ggml's AVX-512 builds without VNNI take the AVX2 integer code, so they agree too.
// * F32, F16: the AVX-512 build sums 16 lanes (vec_dot's GGML_F32_STEP 64, tinyBLAS<16, __m512>);
//   its own emulation (cpu/ggml/float_ggml_x86.hpp, 16 lanes as two AVX2 halves). With
//   AVX512_FP16 ggml's F16 vec_dot still accumulates in f32 (its GGML_F16_DOT_* macros: the same
//   16-lane sums) and tinyBLAS is the same: verified SHA-equal on an AVX512_FP16 + AMX Xeon.
// * BF16: the AVX-512 build with AVX512_BF16 sums bf16 pairs by vdpbf16ps (emulated, DAZ / FTZ
//   included); on an AVX-512 CPU without AVX512_BF16 ggml's BF16 code is another (unverified)
//   variant, so there the BF16 row lists the AVX2 build only.
// * The AMX build (Isa::Amx: AVX-512 plus the AMX buffer, ggml_amx.hpp): the weights it takes
//   (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K with rows % 32 == 0) run its own kernels, emulated by
//   ggml_amx_matvec, and so do F16 weights (rows % 32 == 0, cols % 16 == 0: the buffer's
//   AVX-512 kernel on f32 x); every other weight (F32, BF16, other shapes) runs as in the
//   AVX-512 build.
#if defined(LMTAIL_HAVE_X86)
constexpr uint32_t kGgmlBuildsInt = ggml_build_bit(Isa::Avx2) | ggml_build_bit(Isa::Avx512) | ggml_build_bit(Isa::Amx);
constexpr uint32_t kGgmlBuildsF32 = ggml_build_bit(Isa::Avx2) | ggml_build_bit(Isa::Avx512) | ggml_build_bit(Isa::Amx);
// Read once when the BF16 row is initialised (a dynamic initialiser, before any call): which
// AVX-512 variant a native ggml build here is decides whether it is the one reproduced.
inline uint32_t ggml_builds_bf16() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") ? kGgmlBuildsF32 : ggml_build_bit(Isa::Avx2);
}
#else
constexpr uint32_t kGgmlBuildsInt = 0;
constexpr uint32_t kGgmlBuildsF32 = 0;
inline uint32_t ggml_builds_bf16() { return 0; }
#endif

// "avx2, avx512" (or "none").
inline std::string ggml_build_names(uint32_t builds) {
    std::string s;
    for (Isa b : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Amx})
        if (builds & ggml_build_bit(b)) s += (s.empty() ? "" : ", ") + std::string(isa_name(b));
    return s.empty() ? "none" : s;
}

// The capability table lists "ggml" for a type where ggml's native build on this CPU is one the
// type reproduces and this CPU runs the emulation (AVX2 + FMA + F16C): it promises llama.cpp's
// bytes here, so a native build with other code must not be offered.
inline bool ggml_build_offered(uint32_t builds) {
    return (builds & ggml_build_bit(ggml_isa(Isa::Auto))) != 0 && isa_available(Isa::Avx2);
}

// Throws UnsupportedError unless `build` (resolved, never Auto) is one of `builds` and this CPU
// runs the emulation. `why_not` says what the refused build does differently.
inline void ggml_require_build(uint32_t builds, Isa build, const char *type, const char *why_not = nullptr) {
    if (!(builds & ggml_build_bit(build)))
        throw UnsupportedError(std::string("matvec: precision='ggml' for ") + type + " reproduces ggml's x86 " +
                               ggml_build_names(builds) + " build(s); ggml's " + isa_name(build) +
                               " build is not reproduced" + (why_not ? std::string(" (") + why_not + ")" : "") +
                               (builds ? " -- pass isa= one of: " + ggml_build_names(builds) : std::string()));
    if (!isa_available(Isa::Avx2))
        throw UnsupportedError(std::string("matvec: precision='ggml' for ") + type + " emulates ggml's " +
                               isa_name(build) + " build with AVX2 + FMA + F16C instructions, which this CPU "
                               "does not have");
}

}  // namespace lmt::cpu
