// Bindings of the Metal backend's emulator: submodule lmtail._core.metal_emu (backend
// "metal-emu"). The op entry points are shared with the real-Metal module (metal_ops.hpp); the
// rest configures and inspects the emulator for tests and benches.
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
#include "bindings/metal_ops.hpp"

namespace {

lmt::emu::Order parse_order(const std::string &s) {
    if (s == "forward") return lmt::emu::Order::Forward;
    if (s == "reverse") return lmt::emu::Order::Reverse;
    if (s == "random") return lmt::emu::Order::Random;
    throw lmt::ArgumentError("order: expected forward, reverse or random; found '" + s + "'");
}

}  // namespace
#endif

void bind_metal(py::module_ &m) {
#if defined(LMTAIL_HAVE_METAL_EMU)
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const lmt::emu::HazardError &e) {
            py::object cls = py::module_::import("lmtail.errors").attr("HazardError");
            PyErr_SetString(cls.ptr(), e.what());
        } catch (const lmt::emu::KernelError &e) {
            py::object cls = py::module_::import("lmtail.errors").attr("LmtailError");
            PyErr_SetString(cls.ptr(), e.what());
        }
    });

    py::module_ e = m.def_submodule("metal_emu", "Metal backend on the CPU emulator (backend 'metal-emu')");
    e.attr("NAME") = "metal-emu";
    bind_ops(e);

    // ---- emulator control ----
    e.def(
        "configure",
        [](const std::string &order, uint64_t seed, const std::string &hazards) {
            auto &c = lmt::emu::config();
            c.order = parse_order(order);
            c.seed = seed;
            if (hazards == "raise") c.hazards = lmt::emu::HazardMode::Raise;
            else if (hazards == "snapshot") c.hazards = lmt::emu::HazardMode::Snapshot;
            else throw lmt::ArgumentError("hazards: expected 'raise' or 'snapshot'; found '" + hazards + "'");
        },
        py::arg("order") = "forward", py::arg("seed") = 1, py::arg("hazards") = "raise",
        "Lane schedule order (forward, reverse, random with seed) and hazard mode (raise, snapshot).");
    e.def("config", [] {
        const auto &c = lmt::emu::config();
        py::dict d;
        d["order"] = lmt::emu::order_name(c.order);
        d["seed"] = c.seed;
        d["hazards"] = c.hazards == lmt::emu::HazardMode::Raise ? "raise" : "snapshot";
        return d;
    });
    e.def("take_hazards", &lmt::emu::take_hazard_log, "Hazards recorded in snapshot mode since the last call.");
    e.def("counters", [] {
        const auto &c = lmt::emu::counters();
        py::dict d;
        d["dispatches"] = c.dispatches;
        d["groups"] = c.groups;
        d["lanes"] = c.lanes;
        d["switches"] = c.switches;
        return d;
    });
    e.def("kernels", [] {
        py::list out;
        for (const auto *k : lmt::emu::all_kernels()) {
            py::dict d;
            d["name"] = k->name;
            d["file"] = k->file;
            py::list ps;
            for (int i = 0; i < k->n_params; ++i) {
                py::dict p;
                p["name"] = k->params[i].name;
                p["type"] = k->params[i].type;
                p["index"] = k->params[i].index;
                p["access"] = k->params[i].access == lmt::emu::Access::Write ? "write" : "read";
                ps.append(p);
            }
            d["buffers"] = ps;
            out.append(d);
        }
        return out;
    });
#else
    (void)m;
#endif
}
