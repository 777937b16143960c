// The test-only module _lmtail_testing (CMake LMTAIL_TESTING=ON, built by tests/_metal_testing.py;
// never installed, never in a wheel): its own copy of the Metal emulator, the host code compiled
// with LMTAIL_METAL_TESTING (barriers a test may remove, a NaN plant in the head graph, raw
// dispatches) and the kernels of metal/*.metal plus the planted bugs of tests/metal/debug.metal.
// Submodule metal_emu has the same entry points as lmtail._core.metal_emu, plus set_debug,
// barrier_names and dispatch.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings/errors.hpp"
#include "lmtail/cpu.hpp"

#if !defined(LMTAIL_METAL_TESTING)
#error "metal_testing.cpp is the test-only module: build it only through LMTAIL_TESTING=ON"
#endif

namespace py = pybind11;

#include "emu/runtime.hpp"
#include "metal/backend.hpp"

namespace be = lmt::LMT_METAL_NS;
#include "bindings/metal_emu_control.hpp"
#include "bindings/metal_ops.hpp"

PYBIND11_MODULE(_lmtail_testing, m) {
    m.doc() = "lmtail test hooks: the Metal emulator with planted bugs (test-only; never installed)";
    // This module's own copies of the core's error types, mapped as lmtail._core maps them.
    lmt::bind::register_core_translator();
    register_emu_translators();  // registered last: tried first (HazardError before lmt::Error)
    py::module_ e = m.def_submodule("metal_emu", "metal-emu with the test hooks (set_debug, dispatch)");
    e.attr("NAME") = "metal-emu-testing";
    bind_ops(e);
    bind_emu_control(e);
}
