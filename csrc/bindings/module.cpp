// pybind11 bindings of the CPU core (module lmtail._core).
//
// The Python layer (python/lmtail/ops.py, head.py) validates shapes and dtypes and raises the
// typed lmtail errors; these bindings re-check everything they dereference (a wrong call from
// Python must raise, never crash) and release the GIL around every kernel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

#include "bindings/array_args.hpp"
#include "cpu/bandwidth.hpp"  // read_bytes_checksum: internal, not in the public cpu.hpp
#include "lmtail/cpu.hpp"

namespace py = pybind11;
using lmt::bind::data_of;
using lmt::bind::dim;
using lmt::bind::expect_shape;
using lmt::bind::parse_isa;
using lmt::cpu::Isa;

namespace {

lmt::cpu::Precision parse_precision(const std::string &s) {
    if (s == "f32") return lmt::cpu::Precision::F32;
    if (s == "i16") return lmt::cpu::Precision::I16;
    if (s == "i24") return lmt::cpu::Precision::I24;
    throw lmt::ArgumentError("precision: expected 'f32', 'i16' or 'i24'; found '" + s + "'");
}

}  // namespace

void bind_sampling(py::module_ &m);  // csrc/bindings/sampling.cpp
void bind_metal(py::module_ &m);     // csrc/bindings/metal.cpp
void bind_metal_device(py::module_ &m);  // csrc/bindings/metal_device.cpp
void bind_cuda(py::module_ &m);      // csrc/bindings/cuda.cpp

PYBIND11_MODULE(_core, m) {
    m.doc() = "lmtail C++ core (CPU backend kernels)";

    // Map core exceptions to the typed Python errors defined in lmtail.errors.
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const lmt::NonFiniteError &e) {
            py::object cls = py::module_::import("lmtail.errors").attr("NonFiniteLogitsError");
            PyErr_SetString(cls.ptr(), e.what());
        } catch (const lmt::ArgumentError &e) {
            py::object cls = py::module_::import("lmtail.errors").attr("ParameterError");
            PyErr_SetString(cls.ptr(), e.what());
        } catch (const lmt::Error &e) {
            py::object cls = py::module_::import("lmtail.errors").attr("LmtailError");
            PyErr_SetString(cls.ptr(), e.what());
        }
    });

    m.attr("ARGMAX_INVALID") = py::int_(LMT_ARGMAX_INVALID);
    m.attr("ARGMAX_ALL_EXCLUDED") = py::int_(lmt::cpu::kAllExcluded);
    m.attr("Q5K_BLOCK_BYTES") = py::int_(LMT_Q5K_BLOCK_BYTES);
    m.attr("QK_K") = py::int_(LMT_QK_K);

    m.def("isa_name", [](const std::string &isa) { return std::string(lmt::cpu::isa_name(parse_isa(isa))); },
          py::arg("isa") = "auto", "SIMD path that `isa` resolves to on this CPU.");
    m.def("isa_available", [](const std::string &isa) { return lmt::cpu::isa_available(parse_isa(isa)); },
          py::arg("isa"));
    m.def("default_threads", &lmt::cpu::default_threads);

    // Row norms share one binding shape: x (T, cols), optional gamma (cols,), out (T, cols), eps.
    using NormFn = void (*)(const float *, const float *, float *, int64_t, int64_t, float);
    auto bind_norm = [&m](const char *name, NormFn fn) {
        m.def(
            name,
            [fn](const py::array &x, const py::object &gamma, py::array &out, float eps) {
                const lmt::bind::NormArgs a = lmt::bind::norm_args(x, gamma, out);
                py::gil_scoped_release nogil;
                fn(a.x, a.gamma, a.out, a.T, a.cols, eps);
            },
            py::arg("x"), py::arg("gamma"), py::arg("out"), py::arg("eps"));
    };
    bind_norm("rms_norm", &lmt::cpu::rms_norm);
    bind_norm("layer_norm", &lmt::cpu::layer_norm);

    m.def(
        "matvec_q5_k",
        [](const py::array &w, int64_t cols, const py::array &x, py::array &out, int threads, const std::string &isa,
           const std::string &precision) {
            if (w.ndim() != 2) throw lmt::ArgumentError("w: expected 2-D (rows, row_bytes)");
            if (!w.dtype().is(py::dtype::of<uint8_t>())) throw py::type_error("w: expected dtype uint8");
            if (w.strides(1) != 1 || w.strides(0) < 0) throw py::type_error("w: rows must be contiguous bytes");
            const int64_t rows = (int64_t)w.shape(0);
            if (cols <= 0 || cols % LMT_QK_K) throw lmt::ArgumentError("cols must be a positive multiple of 256");
            const int64_t row_bytes = cols / LMT_QK_K * LMT_Q5K_BLOCK_BYTES;
            expect_shape(w, "w", {rows, row_bytes});
            const int64_t T = dim(x, 0, "x");
            expect_shape(x, "x", {T, cols});
            expect_shape(out, "out", {T, rows});
            const float *xp = data_of<float>(x, "x", false);
            float *op = data_of<float>(out, "out", true);
            const auto *wp = static_cast<const uint8_t *>(w.data());
            const size_t stride = rows > 1 ? (size_t)w.strides(0) : (size_t)row_bytes;
            const Isa is = parse_isa(isa);
            const lmt::cpu::Precision prec = parse_precision(precision);
            py::gil_scoped_release nogil;
            lmt::cpu::matvec_q5_k(wp, rows, cols, stride, xp, T, op, threads, is, prec);
        },
        py::arg("w"), py::arg("cols"), py::arg("x"), py::arg("out"), py::arg("threads") = 0, py::arg("isa") = "auto",
        py::arg("precision") = "i24");

    m.def(
        "scale",
        [](py::array &x, float s, int threads) {
            float *p = data_of<float>(x, "x", true);
            const int64_t n = (int64_t)x.size();
            py::gil_scoped_release nogil;
            lmt::cpu::scale(p, n, s, threads);
        },
        py::arg("x"), py::arg("s"), py::arg("threads") = 0);
    m.def(
        "tanh",
        [](py::array &x, int threads) {
            float *p = data_of<float>(x, "x", true);
            const int64_t n = (int64_t)x.size();
            py::gil_scoped_release nogil;
            lmt::cpu::tanh(p, n, threads);
        },
        py::arg("x"), py::arg("threads") = 0);
    m.def(
        "softcap",
        [](py::array &x, float s, float cap, bool four_pass, int threads) {
            float *p = data_of<float>(x, "x", true);
            const int64_t n = (int64_t)x.size();
            py::gil_scoped_release nogil;
            lmt::cpu::softcap(p, n, s, cap, four_pass, threads);
        },
        py::arg("x"), py::arg("s"), py::arg("cap"), py::arg("four_pass") = true, py::arg("threads") = 0);
    m.def(
        "all_finite",
        [](const py::array &x, int threads) {
            const float *p = data_of<float>(x, "x", false);
            const int64_t n = (int64_t)x.size();
            py::gil_scoped_release nogil;
            return lmt::cpu::all_finite(p, n, threads);
        },
        py::arg("x"), py::arg("threads") = 0);

    m.def(
        "argmax_rows",
        [](const py::array &x, py::array &out, int threads) {
            const lmt::bind::RowsArg r = lmt::bind::rows_arg(x);
            uint32_t *op = lmt::bind::out_of<uint32_t>(out, "out", {r.R});
            py::gil_scoped_release nogil;
            lmt::cpu::argmax_rows(r.p, r.R, r.n, op, threads);
        },
        py::arg("x"), py::arg("out"), py::arg("threads") = 0);
    m.def(
        "greedy_argmax_rows",
        [](const py::array &x, const py::array &excluded, py::array &out, int threads) {
            const lmt::bind::RowsArg r = lmt::bind::rows_arg(x);
            uint32_t *op = lmt::bind::out_of<uint32_t>(out, "out", {r.R});
            const lmt::bind::IdsArg e = lmt::bind::excluded_arg(excluded, r.n);
            py::gil_scoped_release nogil;
            lmt::cpu::greedy_argmax_rows(r.p, r.R, r.n, e.p, e.size, op, threads);
        },
        py::arg("x"), py::arg("excluded"), py::arg("out"), py::arg("threads") = 0);
    m.def(
        "topk_rows",
        [](const py::array &x, int64_t k, py::array &ids, py::array &values, int threads) {
            const lmt::bind::RowsArg r = lmt::bind::rows_arg(x);
            uint32_t *ip = lmt::bind::out_of<uint32_t>(ids, "ids", {r.R, k});
            float *vp = lmt::bind::out_of<float>(values, "values", {r.R, k});
            py::gil_scoped_release nogil;
            lmt::cpu::topk_rows(r.p, r.R, r.n, k, ip, vp, threads);
        },
        py::arg("x"), py::arg("k"), py::arg("ids"), py::arg("values"), py::arg("threads") = 0);

    m.def(
        "quantize_q5_k",
        [](const py::array &src, py::array &dst, int threads) {
            const int64_t rows = dim(src, 0, "src"), cols = dim(src, 1, "src");
            expect_shape(src, "src", {rows, cols});
            if (cols <= 0 || cols % LMT_QK_K) throw lmt::ArgumentError("cols must be a positive multiple of 256");
            expect_shape(dst, "dst", {rows, cols / LMT_QK_K * LMT_Q5K_BLOCK_BYTES});
            const float *sp = data_of<float>(src, "src", false);
            uint8_t *dp = data_of<uint8_t>(dst, "dst", true);
            py::gil_scoped_release nogil;
            lmt::cpu::quantize_q5_k(sp, dp, rows, cols, threads);
        },
        py::arg("src"), py::arg("dst"), py::arg("threads") = 0);
    m.def(
        "dequantize_q5_k",
        [](const py::array &src, py::array &dst, int threads) {
            const int64_t rows = dim(src, 0, "src"), nbytes = dim(src, 1, "src");
            expect_shape(src, "src", {rows, nbytes});
            if (nbytes <= 0 || nbytes % LMT_Q5K_BLOCK_BYTES)
                throw lmt::ArgumentError("row bytes must be a positive multiple of 176");
            const int64_t cols = nbytes / LMT_Q5K_BLOCK_BYTES * LMT_QK_K;
            expect_shape(dst, "dst", {rows, cols});
            const uint8_t *sp = data_of<uint8_t>(src, "src", false);
            float *dp = data_of<float>(dst, "dst", true);
            py::gil_scoped_release nogil;
            lmt::cpu::dequantize_q5_k(sp, dp, rows, cols, threads);
        },
        py::arg("src"), py::arg("dst"), py::arg("threads") = 0);

    bind_sampling(m);
    bind_metal(m);
    bind_metal_device(m);
    bind_cuda(m);

    m.def(
        "read_bytes_checksum",
        [](const py::array &buf, int threads) {
            const uint8_t *p = data_of<uint8_t>(buf, "buf", false);
            const size_t n = (size_t)buf.size();
            py::gil_scoped_release nogil;
            return lmt::cpu::read_bytes_checksum(p, n, threads);
        },
        py::arg("buf"), py::arg("threads") = 0,
        "Read every byte of buf once with `threads` threads (bandwidth probe for benchmarks).");
}
