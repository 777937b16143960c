// MSL compiled as C++: the subset of the Metal Shading Language that metal/*.metal uses.
//
// Included first by every translation unit tools/msl_trampolines.py generates. Standard headers
// come first; the address-space keywords (kernel, device, constant, thread) become macros at the
// very end so they cannot clash with identifiers in those headers. `threadgroup` storage and
// `[[attributes]]` are rewritten by the generator (see docs/DESIGN.md, "metal-emu").
#pragma once

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "emu/runtime.hpp"
#include "lmtail/kernel_abi.h"

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

#ifndef MAXFLOAT
#define MAXFLOAT FLT_MAX
#endif

// Call sites of barriers and simd ops (file:line, and the column where the compiler offers it).
#if defined(__has_builtin)
#if __has_builtin(__builtin_COLUMN)
#define LMT_MSL_COLUMN __builtin_COLUMN()
#endif
#endif
#ifndef LMT_MSL_COLUMN
#define LMT_MSL_COLUMN 0
#endif
#define LMT_MSL_SITE_PARAMS \
    const char *lmt_file_ = __builtin_FILE(), int lmt_line_ = __builtin_LINE(), int lmt_col_ = LMT_MSL_COLUMN
#define LMT_MSL_SITE ::lmt::emu::Site{lmt_file_, lmt_line_, lmt_col_}

namespace metal {

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

// ---- half: IEEE binary16 storage, float arithmetic (rounded back on assignment) ----
struct half {
    uint16_t bits = 0;
    half() = default;
    half(float f) : bits(from_float(f)) {}
    operator float() const { return to_float(bits); }
    static float to_float(uint16_t h) {
        const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
        uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, out;
        if (exp == 0x1F) {
            out = sign | 0x7F800000u | (man << 13);
        } else if (exp == 0) {
            if (man == 0) {
                out = sign;
            } else {  // subnormal half -> normal float
                int e = -1;
                do {
                    man <<= 1;
                    ++e;
                } while (!(man & 0x400u));
                out = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3FFu) << 13);
            }
        } else {
            out = sign | ((exp + 112) << 23) | (man << 13);
        }
        float f;
        std::memcpy(&f, &out, 4);
        return f;
    }
    static uint16_t from_float(float f) {  // round to nearest even
        uint32_t x;
        std::memcpy(&x, &f, 4);
        const uint32_t sign = (x >> 16) & 0x8000u;
        const uint32_t ax = x & 0x7FFFFFFFu;
        if (ax >= 0x7F800000u) return (uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
        if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  // rounds to inf
        if (ax < 0x38800000u) {                                  // subnormal or zero half
            float a;
            std::memcpy(&a, &ax, 4);
            const float scaled = a * 16777216.0f;  // 2^24: half subnormal unit -> 1
            return (uint16_t)(sign | (uint32_t)std::nearbyint(scaled));
        }
        uint32_t m = ax + 0xC8000FFFu + ((ax >> 13) & 1u);  // rebias (-112<<23) + RNE
        return (uint16_t)(sign | (m >> 13));
    }
};

// ---- vectors (element-wise arithmetic; no swizzles) ----
template <class T, int N>
struct vec;
template <class T>
struct vec<T, 2> {
    T x, y;
    vec() = default;
    constexpr vec(T s) : x(s), y(s) {}
    constexpr vec(T a, T b) : x(a), y(b) {}
    template <class U>
    explicit vec(const vec<U, 2> &o) : x(T(o.x)), y(T(o.y)) {}
    T &operator[](int i) { return (&x)[i]; }
    const T &operator[](int i) const { return (&x)[i]; }
};
template <class T>
struct vec<T, 3> {
    T x, y, z;
    vec() = default;
    constexpr vec(T s) : x(s), y(s), z(s) {}
    constexpr vec(T a, T b, T c) : x(a), y(b), z(c) {}
    template <class U>
    explicit vec(const vec<U, 3> &o) : x(T(o.x)), y(T(o.y)), z(T(o.z)) {}
    T &operator[](int i) { return (&x)[i]; }
    const T &operator[](int i) const { return (&x)[i]; }
};
template <class T>
struct alignas(sizeof(T) * 4) vec<T, 4> {
    T x, y, z, w;
    vec() = default;
    constexpr vec(T s) : x(s), y(s), z(s), w(s) {}
    constexpr vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
    template <class U>
    explicit vec(const vec<U, 4> &o) : x(T(o.x)), y(T(o.y)), z(T(o.z)), w(T(o.w)) {}
    T &operator[](int i) { return (&x)[i]; }
    const T &operator[](int i) const { return (&x)[i]; }
};

#define LMT_MSL_VEC_OP(op)                                                              \
    template <class T, int N>                                                           \
    vec<T, N> operator op(const vec<T, N> &a, const vec<T, N> &b) {                     \
        vec<T, N> r;                                                                    \
        for (int i = 0; i < N; ++i) r[i] = a[i] op b[i];                                \
        return r;                                                                       \
    }                                                                                   \
    template <class T, int N>                                                           \
    vec<T, N> operator op(const vec<T, N> &a, T b) {                                    \
        vec<T, N> r;                                                                    \
        for (int i = 0; i < N; ++i) r[i] = a[i] op b;                                   \
        return r;                                                                       \
    }                                                                                   \
    template <class T, int N>                                                           \
    vec<T, N> operator op(T a, const vec<T, N> &b) {                                    \
        vec<T, N> r;                                                                    \
        for (int i = 0; i < N; ++i) r[i] = a op b[i];                                   \
        return r;                                                                       \
    }                                                                                   \
    template <class T, int N>                                                           \
    vec<T, N> &operator op##=(vec<T, N> &a, const vec<T, N> &b) { return a = a op b; }  \
    template <class T, int N>                                                           \
    vec<T, N> &operator op##=(vec<T, N> &a, T b) { return a = a op b; }
LMT_MSL_VEC_OP(+)
LMT_MSL_VEC_OP(-)
LMT_MSL_VEC_OP(*)
LMT_MSL_VEC_OP(/)
LMT_MSL_VEC_OP(&)
LMT_MSL_VEC_OP(|)
LMT_MSL_VEC_OP(^)
LMT_MSL_VEC_OP(<<)
LMT_MSL_VEC_OP(>>)
#undef LMT_MSL_VEC_OP

typedef vec<float, 2> float2;
typedef vec<float, 3> float3;
typedef vec<float, 4> float4;
typedef vec<uint, 2> uint2;
typedef vec<uint, 3> uint3;
typedef vec<uint, 4> uint4;
typedef vec<int, 2> int2;
typedef vec<int, 4> int4;
typedef vec<ushort, 2> ushort2;
typedef vec<ushort, 4> ushort4;
typedef vec<uchar, 4> uchar4;

// ---- as_type ----
template <class To, class From>
inline To as_type(const From &v) {
    static_assert(sizeof(To) == sizeof(From), "as_type: sizes differ");
    To t;
    std::memcpy((void *)&t, (const void *)&v, sizeof(To));
    return t;
}

// ---- math (scalar + element-wise float4) ----
inline float sqrt(float x) { return std::sqrt(x); }
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline float fabs(float x) { return std::fabs(x); }
inline float abs(float x) { return std::fabs(x); }
inline int abs(int x) { return x < 0 ? -x : x; }
inline float exp(float x) { return std::exp(x); }
inline float log(float x) { return std::log(x); }
inline float tanh(float x) { return ::tanhf(x); }  // the host libm's tanhf (Metal's differs)
inline float fma(float a, float b, float c) { return std::fma(a, b, c); }
inline float floor(float x) { return std::floor(x); }
inline float fmax(float a, float b) { return std::fmax(a, b); }
inline float fmin(float a, float b) { return std::fmin(a, b); }
inline bool isnan(float x) { return std::isnan(x); }
inline bool isinf(float x) { return std::isinf(x); }
template <class T>
inline T max(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return std::fmax(a, b);
    else return a > b ? a : b;
}
template <class T>
inline T min(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return std::fmin(a, b);
    else return a < b ? a : b;
}
template <class T>
inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <class T>
inline T select(T a, T b, bool c) { return c ? b : a; }
inline float4 tanh(float4 v) { return float4(tanh(v.x), tanh(v.y), tanh(v.z), tanh(v.w)); }
inline float dot(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
namespace precise {
using metal::tanh;
using metal::sqrt;
using metal::exp;
}  // namespace precise
namespace fast {
using metal::tanh;
using metal::sqrt;
using metal::exp;
}  // namespace fast

// ---- synchronisation ----
enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags((unsigned)a | (unsigned)b); }
inline void threadgroup_barrier(mem_flags, LMT_MSL_SITE_PARAMS) { ::lmt::emu::barrier(LMT_MSL_SITE); }
// Lanes of a SIMD-group run in lock step on the GPU; the emulator treats this as a rendezvous.
inline void simdgroup_barrier(mem_flags, LMT_MSL_SITE_PARAMS) {
    const unsigned char z = 0;
    (void)::lmt::emu::simd_exchange(&z, 1, LMT_MSL_SITE);
}

// ---- SIMD-group functions: a rendezvous of the live lanes of the SIMD-group ----
namespace detail {
template <class T>
inline T slot(const ::lmt::emu::SimdView &s, uint32_t lane) {
    T v;
    std::memcpy((void *)&v, s.slots[lane], sizeof(T));
    return v;
}
template <class T>
inline ::lmt::emu::SimdView xchg(const T &v, ::lmt::emu::Site site) {
    static_assert(sizeof(T) <= 16 && std::is_trivially_copyable_v<T>, "simd op: value type over 16 bytes");
    return ::lmt::emu::simd_exchange(&v, sizeof(T), site);
}
}  // namespace detail

// Sum in lane order (the GPU's order differs: compare with a tolerance).
template <class T>
inline T simd_sum(T v, LMT_MSL_SITE_PARAMS) {
    auto s = detail::xchg(v, LMT_MSL_SITE);
    bool first = true;
    T acc{};
    for (uint32_t l = 0; l < ::lmt::emu::kSimdWidth; ++l)
        if (s.mask >> l & 1u) {
            acc = first ? detail::slot<T>(s, l) : T(acc + detail::slot<T>(s, l));
            first = false;
        }
    return acc;
}
template <class T>
inline T simd_max(T v, LMT_MSL_SITE_PARAMS) {
    auto s = detail::xchg(v, LMT_MSL_SITE);
    T acc = v;
    for (uint32_t l = 0; l < ::lmt::emu::kSimdWidth; ++l)
        if (s.mask >> l & 1u) acc = max(acc, detail::slot<T>(s, l));
    return acc;
}
template <class T>
inline T simd_min(T v, LMT_MSL_SITE_PARAMS) {
    auto s = detail::xchg(v, LMT_MSL_SITE);
    T acc = v;
    for (uint32_t l = 0; l < ::lmt::emu::kSimdWidth; ++l)
        if (s.mask >> l & 1u) acc = min(acc, detail::slot<T>(s, l));
    return acc;
}
// Reading a lane that is not live is undefined on the GPU: the emulator raises.
template <class T>
inline T simd_read_(const ::lmt::emu::SimdView &s, uint32_t src, const T &own) {
    if (src >= ::lmt::emu::kSimdWidth) return own;
    if (!(s.mask >> src & 1u)) ::lmt::emu::kernel_fault("simd shuffle reads lane " + std::to_string(src) + ", which is not live");
    return detail::slot<T>(s, src);
}
template <class T>
inline T simd_shuffle_down(T v, ushort delta, LMT_MSL_SITE_PARAMS) {
    auto s = detail::xchg(v, LMT_MSL_SITE);
    return simd_read_(s, s.lane + delta, v);
}
template <class T>
inline T simd_shuffle_up(T v, ushort delta, LMT_MSL_SITE_PARAMS) {
    auto s = detail::xchg(v, LMT_MSL_SITE);
    return s.lane < delta ? v : simd_read_(s, s.lane - delta, v);
}
template <class T>
inline T simd_shuffle_xor(T v, ushort mask, LMT_MSL_SITE_PARAMS) {
    auto s = detail::xchg(v, LMT_MSL_SITE);
    return simd_read_(s, s.lane ^ mask, v);
}
template <class T>
inline T simd_shuffle(T v, ushort lane, LMT_MSL_SITE_PARAMS) {
    auto s = detail::xchg(v, LMT_MSL_SITE);
    return simd_read_(s, lane, v);
}
template <class T>
inline T simd_broadcast(T v, ushort lane, LMT_MSL_SITE_PARAMS) {
    auto s = detail::xchg(v, LMT_MSL_SITE);
    return simd_read_(s, lane, v);
}
template <class T>
inline T simd_broadcast_first(T v, LMT_MSL_SITE_PARAMS) {
    auto s = detail::xchg(v, LMT_MSL_SITE);
    return detail::slot<T>(s, (uint32_t)__builtin_ctz(s.mask));
}

}  // namespace metal

namespace lmt_msl {
// Built-in attribute values in the parameter's declared type (uint, ushort, uint2, uint3).
template <class T>
inline T builtin(const ::lmt::emu::Dim3 &d) {
    if constexpr (std::is_integral_v<T>) {
        return (T)d.x;
    } else if constexpr (sizeof(T) == 2 * sizeof(d.x) || std::is_same_v<T, metal::uint2>) {
        return T((decltype(T{}.x))d.x, (decltype(T{}.x))d.y);
    } else {
        return T((decltype(T{}.x))d.x, (decltype(T{}.x))d.y, (decltype(T{}.x))d.z);
    }
}
template <class T>
inline T builtin(uint32_t v) { return (T)v; }

template <class T>
inline T buffer_ptr(const ::lmt::emu::Bindings &b, int index, const char *kernel, const char *name) {
    void *p = b.buf[index].ptr;
    if (!p)
        ::lmt::emu::kernel_fault(std::string("buffer(") + std::to_string(index) + ") '" + name + "' of kernel '" +
                                 kernel + "' is not bound");
    return (T)p;
}
template <class T>
inline const T &buffer_ref(const ::lmt::emu::Bindings &b, int index, const char *kernel, const char *name) {
    const T *p = buffer_ptr<const T *>(b, index, kernel, name);
    if (b.buf[index].size < sizeof(T))
        ::lmt::emu::kernel_fault(std::string("buffer(") + std::to_string(index) + ") '" + name + "': " +
                                 std::to_string(b.buf[index].size) + " bytes bound, " + std::to_string(sizeof(T)) +
                                 " needed");
    return *p;
}
// Threadgroup storage declared inside a kernel (rewritten by the generator).
template <class T, size_t N>
inline T (&tg_array(const char *key))[N] {
    return *static_cast<T(*)[N]>(::lmt::emu::tg_alloc(key, sizeof(T) * N, alignof(T) < 16 ? 16 : alignof(T)));
}
template <class T>
inline T &tg_scalar(const char *key) {
    return *static_cast<T *>(::lmt::emu::tg_alloc(key, sizeof(T), alignof(T) < 16 ? 16 : alignof(T)));
}
}  // namespace lmt_msl

// ---- MSL keywords (last: after every standard header) ----
#define kernel
#define device
#define constant const
#define thread
