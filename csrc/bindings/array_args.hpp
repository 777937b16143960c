// Checked access to numpy arguments, shared by every binding translation unit (module.cpp,
// metal_ops.hpp, cuda.cpp): the bindings re-check everything they dereference, so a wrong call
// from Python raises a typed error instead of crashing, with the same checks and messages on
// every backend.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "lmtail/cpu.hpp"

// Hidden like pybind11's own namespace (these hold py::array members; the module is built with
// hidden visibility anyway).
namespace lmt {
namespace [[gnu::visibility("hidden")]] bind {

namespace py = pybind11;

// A wrong dtype (or byte order) in a binding argument: mapped to lmtail.errors.DTypeError.
class DTypeError : public lmt::ArgumentError {
  public:
    using lmt::ArgumentError::ArgumentError;
};

// The array's data is aligned for its dtype (np.frombuffer at an odd offset is not).
inline bool is_aligned(const py::array &a) { return (a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) != 0; }

inline bool host_little_endian() {
    const uint16_t one = 1;
    return *reinterpret_cast<const uint8_t *>(&one) == 1;
}

// True when `d` holds T values in the host's byte order. Compared by kind and item size, not by
// identity: dtype objects are not singletons (an array over a ctypes buffer, e.g. llama-cpp-
// python's logits, carries its own '<f4' instance), and pybind11's dtype::is() compares pointers.
template <typename T>
bool dtype_matches(const py::dtype &d) {
    const py::dtype want = py::dtype::of<T>();
    if (d.kind() != want.kind() || d.itemsize() != want.itemsize() || d.has_fields()) return false;
    const char bo = d.byteorder();
    return bo == '=' || bo == '|' || (bo == '<') == host_little_endian();
}

// Throws DTypeError unless `a` has T's dtype in native byte order (naming a byte-swapped one).
template <typename T>
void check_dtype(const py::array &a, const char *name) {
    if (dtype_matches<T>(a.dtype())) return;
    const py::dtype want = py::dtype::of<T>();
    const std::string found = std::string(py::str(a.dtype().attr("str")));
    if (a.dtype().kind() == want.kind() && a.dtype().itemsize() == want.itemsize() && !a.dtype().has_fields())
        throw DTypeError(std::string(name) + ": expected " + std::string(py::str(want)) +
                         " in the machine's byte order; found byte-swapped '" + found +
                         "' (convert with .astype(np." + std::string(py::str(want)) + "))");
    throw DTypeError(std::string(name) + ": expected dtype " + std::string(py::str(want)) + "; found " +
                     std::string(py::str(a.dtype())) + " ('" + found + "')");
}

// Raw pointer into a numpy array after checking dtype, C-contiguity and (optionally) writability.
template <typename T>
T *data_of(const py::array &a, const char *name, bool writable) {
    check_dtype<T>(a, name);
    if (!(a.flags() & py::array::c_style)) throw DTypeError(std::string(name) + ": expected a C-contiguous array");
    if (!lmt::bind::is_aligned(a)) throw DTypeError(std::string(name) + ": expected an aligned array");
    if (writable && !a.writeable()) throw lmt::ArgumentError(std::string(name) + ": expected a writable array");
    return static_cast<T *>(const_cast<void *>(a.data()));
}

inline void expect_shape(const py::array &a, const char *name, std::initializer_list<int64_t> shape) {
    bool ok = a.ndim() == (py::ssize_t)shape.size();
    if (ok) {
        int d = 0;
        for (int64_t s : shape) ok = ok && a.shape(d++) == s;
    }
    if (!ok) {
        std::string want = "(", got = "(";
        for (int64_t s : shape) want += std::to_string(s) + ",";
        for (py::ssize_t d = 0; d < a.ndim(); ++d) got += std::to_string(a.shape(d)) + ",";
        throw lmt::ArgumentError(std::string(name) + ": expected shape " + want + ") found " + got + ")");
    }
}

inline int64_t dim(const py::array &a, int d, const char *name) {
    if (a.ndim() <= d) throw lmt::ArgumentError(std::string(name) + ": too few dimensions");
    return (int64_t)a.shape(d);
}

inline lmt::cpu::Isa parse_isa(const std::string &s) {
    using lmt::cpu::Isa;
    if (s == "auto") return Isa::Auto;
    if (s == "scalar") return Isa::Scalar;
    if (s == "avx2") return Isa::Avx2;
    if (s == "avx512") return Isa::Avx512;
    if (s == "avx_vnni") return Isa::AvxVnni;
    if (s == "neon") return Isa::Neon;
    if (s == "neon_dotprod") return Isa::NeonDot;
    if (s == "amx") return Isa::Amx;  // a ggml build (precision "ggml") only
    throw lmt::ArgumentError("isa: expected one of auto, scalar, avx2, avx_vnni, avx512, neon, neon_dotprod, amx; found '" +
                             s + "'");
}

// The operands shared by every backend's op bindings, checked once here.

// Writable output of exactly `shape`.
template <typename T>
T *out_of(py::array &a, const char *name, std::initializer_list<int64_t> shape) {
    expect_shape(a, name, shape);
    return data_of<T>(a, name, true);
}

// x: (R, n) float32 rows to reduce or select from.
struct RowsArg {
    const float *p;
    int64_t R, n;
};
inline RowsArg rows_arg(const py::array &x) {
    const int64_t R = dim(x, 0, "x"), n = dim(x, 1, "x");
    expect_shape(x, "x", {R, n});
    return {data_of<float>(x, "x", false), R, n};
}

// The excluded ids of a greedy call: a 1-D uint32 array, every id below n.
struct IdsArg {
    const uint32_t *p;
    int64_t size;
};
inline IdsArg excluded_arg(const py::array &excluded, int64_t n) {
    if (excluded.ndim() != 1) throw lmt::ArgumentError("excluded: expected a 1-D array");
    const uint32_t *p = data_of<uint32_t>(excluded, "excluded", false);
    const int64_t size = (int64_t)excluded.shape(0);
    for (int64_t i = 0; i < size; ++i)
        if ((int64_t)p[i] >= n)
            throw lmt::ArgumentError("excluded: token id " + std::to_string(p[i]) + " out of range [0, " +
                                     std::to_string(n) + ")");
    return {p, size};
}

// A norm call: x (T, cols), optional gamma (cols), out (T, cols). `gamma_ref` keeps a converted
// gamma alive while its pointer is used.
struct NormArgs {
    const float *x, *gamma;
    float *out;
    int64_t T, cols;
    py::array gamma_ref;
};
inline NormArgs norm_args(const py::array &x, const py::object &gamma, py::array &out) {
    NormArgs a{};
    a.T = dim(x, 0, "x");
    a.cols = dim(x, 1, "x");
    expect_shape(x, "x", {a.T, a.cols});
    expect_shape(out, "out", {a.T, a.cols});
    a.x = data_of<float>(x, "x", false);
    a.out = data_of<float>(out, "out", true);
    if (!gamma.is_none()) {
        a.gamma_ref = gamma.cast<py::array>();
        expect_shape(a.gamma_ref, "gamma", {a.cols});
        a.gamma = data_of<float>(a.gamma_ref, "gamma", false);
    }
    return a;
}

}  // namespace bind
}  // namespace lmt
