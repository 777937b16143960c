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
#include <tuple>
#include <type_traits>

#include <string>

#include "emu/lane_abi.hpp"
#if !defined(LMT_MSL_FOREIGN)  // lmtail's own kernels; a foreign library (llama.cpp's) brings its own
#include "lmtail/kernel_abi.h"
#endif

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
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

#if defined(LMT_MSL_FOREIGN)
// A foreign library (llama.cpp's block structs put halves in anonymous unions, and mixes half
// and float in ?:) needs half as an arithmetic type: the compiler's _Float16.
typedef _Float16 half;
#else
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
#endif

// ---- bfloat: bfloat16 storage, float arithmetic, round to nearest even ----
struct bfloat {
    uint16_t bits = 0;
    bfloat() = default;
    bfloat(float f) {
        uint32_t x;
        std::memcpy(&x, &f, 4);
        if ((x & 0x7FFFFFFFu) > 0x7F800000u) bits = (uint16_t)((x >> 16) | 0x40u);  // quiet NaN
        else bits = (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
    }
    operator float() const {
        const uint32_t x = (uint32_t)bits << 16;
        float f;
        std::memcpy(&f, &x, 4);
        return f;
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

template <class S>
struct is_vec : std::false_type {};
template <class T, int N>
struct is_vec<vec<T, N>> : std::true_type {};
// A scalar operand of a vector op (MSL converts it to the element type).
template <class S, class T>
using scalar_for = std::enable_if_t<!is_vec<S>::value && std::is_convertible_v<S, T>, int>;

#define LMT_MSL_VEC_OP(op)                                                              \
    template <class T, int N>                                                           \
    vec<T, N> operator op(const vec<T, N> &a, const vec<T, N> &b) {                     \
        vec<T, N> r;                                                                    \
        for (int i = 0; i < N; ++i) r[i] = a[i] op b[i];                                \
        return r;                                                                       \
    }                                                                                   \
    template <class T, int N, class S, scalar_for<S, T> = 0>                            \
    vec<T, N> operator op(const vec<T, N> &a, S b) {                                    \
        vec<T, N> r;                                                                    \
        for (int i = 0; i < N; ++i) r[i] = a[i] op T(b);                                \
        return r;                                                                       \
    }                                                                                   \
    template <class T, int N, class S, scalar_for<S, T> = 0>                            \
    vec<T, N> operator op(S a, const vec<T, N> &b) {                                    \
        vec<T, N> r;                                                                    \
        for (int i = 0; i < N; ++i) r[i] = T(a) op b[i];                                \
        return r;                                                                       \
    }                                                                                   \
    template <class T, int N>                                                           \
    vec<T, N> &operator op##=(vec<T, N> &a, const vec<T, N> &b) { return a = a op b; }  \
    template <class T, int N, class S, scalar_for<S, T> = 0>                            \
    vec<T, N> &operator op##=(vec<T, N> &a, S b) { return a = a op T(b); }
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
#define LMT_MSL_VEC_CMP(op)                                                             \
    template <class T, int N>                                                           \
    vec<bool, N> operator op(const vec<T, N> &a, const vec<T, N> &b) {                  \
        vec<bool, N> r;                                                                 \
        for (int i = 0; i < N; ++i) r[i] = a[i] op b[i];                                \
        return r;                                                                       \
    }                                                                                   \
    template <class T, int N, class S, scalar_for<S, T> = 0>                            \
    vec<bool, N> operator op(const vec<T, N> &a, S b) {                                 \
        vec<bool, N> r;                                                                 \
        for (int i = 0; i < N; ++i) r[i] = a[i] op T(b);                                \
        return r;                                                                       \
    }
LMT_MSL_VEC_CMP(<)
LMT_MSL_VEC_CMP(>)
LMT_MSL_VEC_CMP(<=)
LMT_MSL_VEC_CMP(>=)
#undef LMT_MSL_VEC_CMP
template <class T, int N>
vec<T, N> operator-(const vec<T, N> &a) {
    vec<T, N> r;
    for (int i = 0; i < N; ++i) r[i] = T(-a[i]);
    return r;
}

#define LMT_MSL_VEC_TYPES(t)      \
    typedef vec<t, 2> t##2;       \
    typedef vec<t, 3> t##3;       \
    typedef vec<t, 4> t##4;
LMT_MSL_VEC_TYPES(float)
LMT_MSL_VEC_TYPES(half)
LMT_MSL_VEC_TYPES(bfloat)
LMT_MSL_VEC_TYPES(int)
LMT_MSL_VEC_TYPES(uint)
LMT_MSL_VEC_TYPES(short)
LMT_MSL_VEC_TYPES(ushort)
LMT_MSL_VEC_TYPES(char)
LMT_MSL_VEC_TYPES(uchar)
LMT_MSL_VEC_TYPES(bool)
#undef LMT_MSL_VEC_TYPES
// packed_* of 1- and 2-byte elements have the layout of the plain vectors here
typedef vec<char, 4> packed_char4;
typedef vec<uchar, 4> packed_uchar4;
typedef vec<short, 4> packed_short4;
typedef vec<ushort, 4> packed_ushort4;

// ---- matrices: C columns of R-vectors (m[i] is column i) ----
template <class T, int C, int R = C>
struct matrix {
    vec<T, R> cols[C];
    vec<T, R> &operator[](int i) { return cols[i]; }
    const vec<T, R> &operator[](int i) const { return cols[i]; }
};
typedef matrix<float, 4, 4> float4x4;
typedef matrix<float, 2, 4> float2x4;
typedef matrix<half, 4, 4> half4x4;
typedef matrix<half, 2, 4> half2x4;

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
inline float sin(float x) { return std::sin(x); }
inline float cos(float x) { return std::cos(x); }
inline float ceil(float x) { return std::ceil(x); }
inline float round(float x) { return std::round(x); }
inline float trunc(float x) { return std::trunc(x); }
inline float log2(float x) { return std::log2(x); }
inline float exp2(float x) { return std::exp2(x); }
inline float pow(float x, float y) { return std::pow(x, y); }
inline float sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : (x == x ? x : 0.0f); }
#define LMT_MSL_VEC_FN1(fn)                                \
    template <class T, int N>                              \
    inline vec<T, N> fn(const vec<T, N> &a) {              \
        vec<T, N> r;                                       \
        for (int i = 0; i < N; ++i) r[i] = T(fn(a[i]));    \
        return r;                                          \
    }
LMT_MSL_VEC_FN1(sqrt)
LMT_MSL_VEC_FN1(fabs)
LMT_MSL_VEC_FN1(abs)
LMT_MSL_VEC_FN1(exp)
LMT_MSL_VEC_FN1(log)
LMT_MSL_VEC_FN1(tanh)
LMT_MSL_VEC_FN1(floor)
LMT_MSL_VEC_FN1(sin)
LMT_MSL_VEC_FN1(cos)
LMT_MSL_VEC_FN1(ceil)
LMT_MSL_VEC_FN1(round)
LMT_MSL_VEC_FN1(trunc)
LMT_MSL_VEC_FN1(sign)
#undef LMT_MSL_VEC_FN1
#define LMT_MSL_VEC_FN2(fn)                                                     \
    template <class T, int N>                                                   \
    inline vec<T, N> fn(const vec<T, N> &a, const vec<T, N> &b) {               \
        vec<T, N> r;                                                            \
        for (int i = 0; i < N; ++i) r[i] = T(fn(a[i], b[i]));                   \
        return r;                                                               \
    }                                                                           \
    template <class T, int N, class S, scalar_for<S, T> = 0>                    \
    inline vec<T, N> fn(const vec<T, N> &a, S b) { return fn(a, vec<T, N>(T(b))); } \
    template <class T, int N, class S, scalar_for<S, T> = 0>                    \
    inline vec<T, N> fn(S a, const vec<T, N> &b) { return fn(vec<T, N>(T(a)), b); }
LMT_MSL_VEC_FN2(fmax)
LMT_MSL_VEC_FN2(fmin)
#undef LMT_MSL_VEC_FN2
template <class T, int N, class S>
inline vec<T, N> clamp(const vec<T, N> &x, S lo, S hi) { return fmin(fmax(x, lo), hi); }
template <class T, int N>
inline vec<T, N> select(const vec<T, N> &a, const vec<T, N> &b, const vec<bool, N> &c) {
    vec<T, N> r;
    for (int i = 0; i < N; ++i) r[i] = c[i] ? b[i] : a[i];
    return r;
}
inline float dot(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
namespace precise {
using metal::tanh;
using metal::sqrt;
using metal::exp;
using metal::sin;
using metal::cos;
using metal::log;
}  // namespace precise
namespace fast {
using metal::tanh;
using metal::sqrt;
using metal::exp;
using metal::sin;
using metal::cos;
using metal::log;
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
    } else {
        using E = decltype(T{}.x);
        if constexpr (sizeof(T) == 2 * sizeof(E)) return T((E)d.x, (E)d.y);
        else return T((E)d.x, (E)d.y, (E)d.z);
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
// The i-th parameter type of a kernel function (run-time libraries bind by the function's type,
// so template kernels need no parsing of their parameter types).
template <class F>
struct fn_args;
template <class R, class... A>
struct fn_args<R (*)(A...)> {
    template <size_t I>
    using at = std::tuple_element_t<I, std::tuple<A...>>;
};
template <class A>
inline A bind_buffer(const ::lmt::emu::Bindings &b, int index, const char *kernel, const char *name) {
    if constexpr (std::is_reference_v<A>) return buffer_ref<std::remove_cv_t<std::remove_reference_t<A>>>(b, index, kernel, name);
    else return buffer_ptr<A>(b, index, kernel, name);
}
// A [[threadgroup(n)]] parameter: the length the host set with setThreadgroupMemoryLength.
template <class A>
inline A bind_threadgroup(const ::lmt::emu::Bindings &b, int index, const char *key) {
    if (!b.tg_len[index]) return nullptr;
    return (A)::lmt::emu::tg_alloc(key, b.tg_len[index], 16);
}
template <class T>
inline T function_constant(int index) {
    T v;
    std::memcpy((void *)&v, ::lmt::emu::function_constant(index, sizeof(T)), sizeof(T));
    return v;
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
