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

namespace lmt::bind {

namespace py = pybind11;

// Raw pointer into a numpy array after checking dtype, C-contiguity and (optionally) writability.
template <typename T>
T *data_of(const py::array &a, const char *name, bool writable) {
    if (!a.dtype().is(py::dtype::of<T>()))
        throw py::type_error(std::string(name) + ": expected dtype " + std::string(py::str(py::dtype::of<T>())) +
                             ", found " + std::string(py::str(a.dtype())));
    if (!(a.flags() & py::array::c_style)) throw py::type_error(std::string(name) + ": expected a C-contiguous array");
    if (writable && !a.writeable()) throw py::type_error(std::string(name) + ": expected a writable array");
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
    if (s == "neon") return Isa::Neon;
    throw lmt::ArgumentError("isa: expected one of auto, scalar, avx2, avx512, neon; found '" + s + "'");
}

}  // namespace lmt::bind
