// Bindings that configure and inspect the Metal emulator (csrc/emu): lane order, hazard mode,
// the hazard log, counters, the kernel registry; and the translation of its errors. Shared by
// the shipped module lmtail._core.metal_emu (csrc/bindings/metal.cpp) and the test-only module
// _lmtail_testing (csrc/bindings/metal_testing.cpp), each of which holds its own emulator.
//
// Requires, before inclusion: <pybind11/stl.h> and "emu/runtime.hpp".
#pragma once

#include <string>

namespace py = pybind11;

namespace {

inline lmt::emu::Order parse_order(const std::string &s) {
    if (s == "forward") return lmt::emu::Order::Forward;
    if (s == "reverse") return lmt::emu::Order::Reverse;
    if (s == "random") return lmt::emu::Order::Random;
    throw lmt::ArgumentError("order: expected forward, reverse or random; found '" + s + "'");
}

// HazardError -> lmtail.errors.HazardError, KernelError (a fault inside a kernel) -> LmtailError.
inline void register_emu_translators() {
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
}

inline void bind_emu_control(py::module_ &e) {
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
    e.def(
        "config",
        [] {
            const auto &c = lmt::emu::config();
            py::dict d;
            d["order"] = lmt::emu::order_name(c.order);
            d["seed"] = c.seed;
            d["hazards"] = c.hazards == lmt::emu::HazardMode::Raise ? "raise" : "snapshot";
            return d;
        },
        "The emulator's configuration: {'order', 'seed', 'hazards'}.");
    e.def("take_hazards", &lmt::emu::take_hazard_log, "Hazards recorded in snapshot mode since the last call.");
    e.def(
        "counters",
        [] {
            const auto &c = lmt::emu::counters();
            py::dict d;
            d["dispatches"] = c.dispatches;
            d["groups"] = c.groups;
            d["lanes"] = c.lanes;
            d["switches"] = c.switches;
            return d;
        },
        "Cumulative emulator counters: dispatches, threadgroups, lanes, fiber switches.");
    e.def(
        "kernels",
        [] {
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
        },
        "The kernels compiled into this emulator: name, source file, buffer parameters and their access.");
}

}  // namespace
