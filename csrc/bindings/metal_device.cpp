// Bindings of the Metal backend on an Apple GPU: submodule lmtail._core.metal (backend "metal").
// The same host code (csrc/metal) and op bindings (metal_ops.hpp) as metal-emu, built against
// Apple's metal-cpp with LMT_METAL_NS=metal; the kernels come from lmtail.metallib, compiled at
// build time from metal/*.metal and installed next to the extension module.
// Built on Apple with LMTAIL_METAL (the default there); otherwise bind_metal_device adds nothing.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <exception>
#include <string>
#include <utility>

#include "lmtail/cpu.hpp"

namespace py = pybind11;

#if defined(LMTAIL_HAVE_METAL)
#define LMT_METAL_NS metal
#include "metal/backend.hpp"

namespace be = lmt::metal;
#include "bindings/metal_ops.hpp"
#endif

void bind_metal_device(py::module_ &m) {
#if defined(LMTAIL_HAVE_METAL)
    py::module_ e = m.def_submodule("metal", "Metal backend on an Apple GPU (backend 'metal')");
    e.attr("NAME") = "metal";
    bind_ops(e);
    e.def(
        "probe",
        []() -> std::pair<bool, std::string> {
            // Creates the device context (device, queue, library) once; a machine without a
            // Metal device or a missing metallib reports why instead of raising.
            try {
                return {true, be::device_name()};
            } catch (const std::exception &ex) {
                return {false, ex.what()};
            }
        },
        "(True, device name) when a Metal device and the kernel library load, else (False, reason).");
#else
    (void)m;
#endif
}
