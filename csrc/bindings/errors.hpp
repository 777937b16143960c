// The one mapping of core exceptions to lmtail.errors, shared by lmtail._core and the test-only
// module. pybind11 tries translators newest first across every loaded module, so a second
// module with a shorter copy would shadow this one (it once turned UnsupportedError into
// ParameterError for every later call in the process).
#pragma once

#include <pybind11/pybind11.h>

#include <new>

#include "bindings/array_args.hpp"
#include "lmtail/cpu.hpp"

namespace lmt::bind {

inline void register_core_translator() {
    namespace py = pybind11;
    py::register_exception_translator([](std::exception_ptr p) {
        auto raise = [](const char *cls, const char *what) {
            PyErr_SetString(py::module_::import("lmtail.errors").attr(cls).ptr(), what);
        };
        try {
            if (p) std::rethrow_exception(p);
        } catch (const std::bad_alloc &) {
            raise("ResourceError", "out of memory (std::bad_alloc)");
        } catch (const DTypeError &e) {
            raise("DTypeError", e.what());
        } catch (const lmt::NonFiniteError &e) {
            raise("NonFiniteLogitsError", e.what());
        } catch (const lmt::UnsupportedError &e) {
            raise("UnsupportedError", e.what());
        } catch (const lmt::ArgumentError &e) {
            raise("ParameterError", e.what());
        } catch (const lmt::Error &e) {
            raise("LmtailError", e.what());
        }
    });
}

}  // namespace lmt::bind
