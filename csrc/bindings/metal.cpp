// Bindings of the Metal backend's emulator: submodule lmtail._core.metal_emu (backend
// "metal-emu"). The op entry points are shared with the real-Metal module (metal_ops.hpp), the
// emulator controls with the test-only module (metal_emu_control.hpp). No test hooks here: the
// planted bugs live in the test-only module _lmtail_testing (csrc/bindings/metal_testing.cpp).
// Built when LMTAIL_EMU is on (the default); otherwise bind_metal adds nothing.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "lmtail/cpu.hpp"

namespace py = pybind11;

#if defined(LMTAIL_HAVE_METAL_EMU)
#define LMT_METAL_NS metal_emu
#include "emu/runtime.hpp"
#include "metal/backend.hpp"

namespace be = lmt::metal_emu;
#include "bindings/metal_emu_control.hpp"
#include "bindings/metal_ops.hpp"
#endif

void bind_metal(py::module_ &m) {
#if defined(LMTAIL_HAVE_METAL_EMU)
    register_emu_translators();
    py::module_ e = m.def_submodule("metal_emu", "Metal backend on the CPU emulator (backend 'metal-emu')");
    e.attr("NAME") = "metal-emu";
    bind_ops(e);
    bind_emu_control(e);
#else
    (void)m;
#endif
}
