#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(LMTAIL_HAVE_X86)
#include <cpuid.h>
#endif
#if defined(LMTAIL_HAVE_NEON) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if defined(LMTAIL_HAVE_NEON) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include "lmtail/cpu.hpp"

namespace lmt::cpu {

#if defined(LMTAIL_HAVE_X86)
namespace {
// F16C from CPUID.1:ECX bit 29 (clang 14's __builtin_cpu_supports has no "f16c").
bool has_f16c() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
// AVX-VNNI (the VEX encoding) from CPUID.(EAX=7, ECX=1):EAX bit 4: clang's
// __builtin_cpu_supports does not know "avxvnni" in every version CI builds with.
[[maybe_unused]] bool has_avx_vnni() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}
}  // namespace
#endif

#if defined(LMTAIL_HAVE_NEON)
namespace {
// ARMv8.2 dot product (sdot / udot): the kernel files built with +dotprod run only where this
// says so, so a plain ARMv8.0 CPU never meets an sdot.
bool has_dotprod() {
#if defined(__linux__)
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)  // arch/arm64/include/uapi/asm/hwcap.h (older libc headers lack it)
#endif
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &n, nullptr, 0) == 0 && v != 0;
#else
    return false;
#endif
}
}  // namespace
#endif

bool isa_available(Isa isa) {
    switch (isa) {
        case Isa::Auto:
        case Isa::Scalar:
            return true;
#if defined(LMTAIL_HAVE_X86)
        case Isa::Avx2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
        case Isa::Avx512:
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") && has_f16c();
        case Isa::AvxVnni:
#if defined(LMTAIL_NO_AVXVNNI)
            return false;  // the compiler had no -mavxvnni (CMakeLists.txt)
#else
            return isa_available(Isa::Avx2) && has_avx_vnni();
#endif
#endif
#if defined(LMTAIL_HAVE_NEON)
        case Isa::Neon:
            return true;
        case Isa::NeonDot:
            return has_dotprod();
#endif
        default:
            return false;
    }
}

namespace {
Isa env_isa() {
    const char *e = std::getenv("LMTAIL_ISA");
    if (!e || !*e) return Isa::Auto;
    if (!std::strcmp(e, "scalar")) return Isa::Scalar;
    if (!std::strcmp(e, "avx2")) return Isa::Avx2;
    if (!std::strcmp(e, "avx512")) return Isa::Avx512;
    if (!std::strcmp(e, "avx_vnni")) return Isa::AvxVnni;
    if (!std::strcmp(e, "neon")) return Isa::Neon;
    if (!std::strcmp(e, "neon_dotprod")) return Isa::NeonDot;
    throw ArgumentError(std::string("LMTAIL_ISA: expected one of scalar, avx2, avx_vnni, avx512, neon, neon_dotprod; "
                                    "found '") +
                        e + "'");
}
}  // namespace

// Resolve Auto (and the LMTAIL_ISA override) to a concrete, available path.
Isa resolve_isa(Isa isa) {
    if (isa == Isa::Auto) isa = env_isa();
    if (isa == Isa::Auto) {
        if (isa_available(Isa::Avx512)) return Isa::Avx512;
        if (isa_available(Isa::AvxVnni)) return Isa::AvxVnni;
        if (isa_available(Isa::Avx2)) return Isa::Avx2;
        if (isa_available(Isa::NeonDot)) return Isa::NeonDot;
        if (isa_available(Isa::Neon)) return Isa::Neon;
        return Isa::Scalar;
    }
    if (!isa_available(isa)) throw ArgumentError(std::string("SIMD path '") + isa_name(isa) + "' is not available on this CPU/build");
    return isa;
}

const char *isa_name(Isa isa) {
    switch (isa) {
        case Isa::Auto: return isa_name(resolve_isa(Isa::Auto));
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
        case Isa::Neon: return "neon";
        case Isa::Amx: return "amx";
        case Isa::NeonDot: return "neon_dotprod";
        case Isa::AvxVnni: return "avx_vnni";
    }
    return "unknown";
}

int default_threads() {
    if (const char *e = std::getenv("LMTAIL_NUM_THREADS")) {
        const int n = std::atoi(e);
        if (n > 0) return n;
    }
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    const unsigned n = std::thread::hardware_concurrency();
    return n > 0 ? (int)n : 1;
}

}  // namespace lmt::cpu
