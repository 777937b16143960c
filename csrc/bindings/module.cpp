// pybind11 bindings of the CPU core (module lmtail._core).
//
// The Python layer (python/lmtail/ops.py, head.py) validates shapes and dtypes and raises the
// typed lmtail errors; these bindings re-check everything they dereference (a wrong call from
// Python must raise, never crash) and release the GIL around every kernel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "bindings/array_args.hpp"
#include "bindings/errors.hpp"
#include "cpu/bandwidth.hpp"  // read_bytes_checksum: internal, not in the public cpu.hpp
#include "lmtail/cpu.hpp"
#include "lmtail/head.hpp"

namespace py = pybind11;
using lmt::bind::data_of;
using lmt::bind::dim;
using lmt::bind::expect_shape;
using lmt::bind::parse_isa;
using lmt::cpu::Isa;

namespace {

lmt::cpu::Precision parse_precision(const std::string &s) {
    if (s == "default") return lmt::cpu::Precision::Default;
    if (s == "f32") return lmt::cpu::Precision::F32;
    if (s == "i16") return lmt::cpu::Precision::I16;
    if (s == "i24") return lmt::cpu::Precision::I24;
    if (s == "ggml") return lmt::cpu::Precision::Ggml;
    throw lmt::ArgumentError("precision: expected 'default', 'f32', 'i16', 'i24' or 'ggml'; found '" + s + "'");
}

// lmtail._core.CpuHead: lmt::Head (lmtail/head.hpp) for lmtail.Head(backend="cpu"). It holds a
// reference to the weight array (the Head reads that memory without copying it). Every compute
// method takes the calling thread's scratch (normed: >= T*cols floats or None without a norm;
// staging: >= T*rows floats) and returns the stage timings (norm, head, cap, select) in seconds.
struct PyCpuHead {
    py::object weight_ref;
    std::unique_ptr<lmt::Head> head;
};

lmt::HeadWorkspace workspace_of(const lmt::Head &h, const py::object &normed, py::array &staging) {
    float *np_ = nullptr;
    size_t nn = 0;
    if (!normed.is_none()) {
        py::array na = normed.cast<py::array>();
        np_ = data_of<float>(na, "normed", true);
        nn = (size_t)na.size();
    } else if (h.norm() != lmt::NormKind::None) {
        throw lmt::ArgumentError("normed: this head has a norm; pass its scratch rows");
    }
    float *sp = data_of<float>(staging, "staging", true);
    return lmt::HeadWorkspace(np_, nn, sp, (size_t)staging.size());
}

int64_t hidden_rows(const lmt::Head &h, const py::array &hidden) {
    const int64_t T = dim(hidden, 0, "hidden");
    expect_shape(hidden, "hidden", {T, h.cols()});
    return T;
}

py::tuple timings_of(const lmt::HeadWorkspace &ws) {
    const lmt::HeadTimings &t = ws.timings();
    return py::make_tuple(t.norm, t.head, t.cap, t.select);
}

void bind_cpu_head(py::module_ &m) {
    py::class_<PyCpuHead>(m, "CpuHead", "lmt::Head: the fail-closed CPU tail (used by lmtail.Head).")
        .def(py::init([](const py::array &w, int64_t cols, const py::object &gamma, const std::string &norm, float eps,
                         float logit_scale, float softcap, const std::string &precision, int threads, int weight_type) {
                 if (w.ndim() != 2) throw lmt::ArgumentError("weight: expected 2-D (rows, row_bytes)");
                 lmt::bind::check_dtype<uint8_t>(w, "weight");
                 if (w.strides(1) != 1 || w.strides(0) < 0)
                     throw lmt::bind::DTypeError("weight: rows must be contiguous bytes");
                 lmt::HeadOptions o;
                 if (norm == "none") o.norm = lmt::NormKind::None;
                 else if (norm == "rms") o.norm = lmt::NormKind::Rms;
                 else if (norm == "layer") o.norm = lmt::NormKind::Layer;
                 else throw lmt::ArgumentError("norm: expected 'none', 'rms' or 'layer'; found '" + norm + "'");
                 py::array g;
                 if (!gamma.is_none()) {
                     g = gamma.cast<py::array>();
                     expect_shape(g, "gamma", {cols});
                     o.gamma = data_of<float>(g, "gamma", false);
                 }
                 o.eps = eps;
                 o.logit_scale = logit_scale;
                 o.softcap = softcap;
                 o.precision = parse_precision(precision);
                 o.threads = threads;
                 const int64_t rows = (int64_t)w.shape(0);
                 const size_t stride = rows > 1 ? (size_t)w.strides(0) : (size_t)w.shape(1);
                 const auto wt = static_cast<lmt::WeightType>(weight_type);
                 if ((size_t)w.shape(1) != lmt::cpu::row_bytes(wt, cols))
                     throw lmt::ArgumentError("weight: " + std::to_string(w.shape(1)) + " bytes per row do not hold " +
                                              std::to_string(cols) + " " + lmt::weight_type_name(wt) + " columns");
                 auto h = std::make_unique<lmt::Head>(w.data(), static_cast<lmt::WeightType>(weight_type), rows, cols,
                                                      stride, o);
                 return PyCpuHead{py::reinterpret_borrow<py::object>(w), std::move(h)};
             }),
             py::arg("weight"), py::arg("cols"), py::arg("gamma"), py::arg("norm"), py::arg("eps"),
             py::arg("logit_scale"), py::arg("softcap"), py::arg("precision"), py::arg("threads"),
             py::arg("weight_type") = (int)lmt::WeightType::Q5_K)
        .def_property_readonly("rows", [](const PyCpuHead &h) { return h.head->rows(); })
        .def_property_readonly("precision",
                               [](const PyCpuHead &h) { return std::string(lmt::cpu::precision_name(h.head->precision())); })
        .def_property_readonly("cols", [](const PyCpuHead &h) { return h.head->cols(); })
        .def(
            "logits",
            [](const PyCpuHead &self, const py::array &hidden, py::array &out, const py::object &normed,
               py::array &staging) {
                const lmt::Head &h = *self.head;
                const int64_t T = hidden_rows(h, hidden);
                const float *hp = data_of<float>(hidden, "hidden", false);
                float *op = lmt::bind::out_of<float>(out, "out", {T, h.rows()});
                lmt::HeadWorkspace ws = workspace_of(h, normed, staging);
                {
                    py::gil_scoped_release nogil;
                    h.logits(hp, T, op, ws);
                }
                return timings_of(ws);
            },
            py::arg("hidden"), py::arg("out"), py::arg("normed"), py::arg("staging"),
            "Capped logits into out (written only when every check passed); the rows stay in staging.")
        .def(
            "greedy",
            [](const PyCpuHead &self, const py::array &hidden, const py::array &excluded, py::array &out,
               const py::object &normed, py::array &staging) {
                const lmt::Head &h = *self.head;
                const int64_t T = hidden_rows(h, hidden);
                const float *hp = data_of<float>(hidden, "hidden", false);
                uint32_t *op = lmt::bind::out_of<uint32_t>(out, "out", {T});
                const lmt::bind::IdsArg e = lmt::bind::excluded_arg(excluded, h.rows());
                lmt::HeadWorkspace ws = workspace_of(h, normed, staging);
                {
                    py::gil_scoped_release nogil;
                    h.greedy(hp, T, op, ws, e.p, e.size);
                }
                return timings_of(ws);
            },
            py::arg("hidden"), py::arg("excluded"), py::arg("out"), py::arg("normed"), py::arg("staging"))
        .def(
            "topk",
            [](const PyCpuHead &self, const py::array &hidden, int64_t k, py::array &ids, py::array &values,
               const py::object &normed, py::array &staging) {
                const lmt::Head &h = *self.head;
                const int64_t T = hidden_rows(h, hidden);
                const float *hp = data_of<float>(hidden, "hidden", false);
                uint32_t *ip = lmt::bind::out_of<uint32_t>(ids, "ids", {T, k});
                float *vp = lmt::bind::out_of<float>(values, "values", {T, k});
                lmt::HeadWorkspace ws = workspace_of(h, normed, staging);
                {
                    py::gil_scoped_release nogil;
                    h.topk(hp, T, k, ip, vp, ws);
                }
                return timings_of(ws);
            },
            py::arg("hidden"), py::arg("k"), py::arg("ids"), py::arg("values"), py::arg("normed"), py::arg("staging"));
}

}  // namespace

void bind_sampling(py::module_ &m);  // csrc/bindings/sampling.cpp
void bind_metal(py::module_ &m);     // csrc/bindings/metal.cpp
void bind_metal_device(py::module_ &m);  // csrc/bindings/metal_device.cpp
void bind_cuda(py::module_ &m);      // csrc/bindings/cuda.cpp
void bind_bitmask(py::module_ &m);   // csrc/bindings/bitmask.cpp

PYBIND11_MODULE(_core, m) {
    m.doc() = "lmtail C++ core (CPU backend kernels)";

    // Map core exceptions to the typed Python errors defined in lmtail.errors.
    lmt::bind::register_core_translator();

    m.attr("ARGMAX_INVALID") = py::int_(LMT_ARGMAX_INVALID);
    m.attr("ARGMAX_ALL_EXCLUDED") = py::int_(lmt::cpu::kAllExcluded);
    m.attr("Q5K_BLOCK_BYTES") = py::int_(LMT_Q5K_BLOCK_BYTES);
    m.attr("QK_K") = py::int_(LMT_QK_K);

    m.def("isa_name", [](const std::string &isa) { return std::string(lmt::cpu::isa_name(parse_isa(isa))); },
          py::arg("isa") = "auto", "SIMD path that `isa` resolves to on this CPU.");
    m.def("ggml_native_build", []() { return std::string(lmt::cpu::isa_name(lmt::cpu::ggml_native_build())); },
          "The ggml build a native llama.cpp compiles on this CPU (what precision='ggml' with isa='auto' reproduces).");
    m.def("isa_available", [](const std::string &isa) { return lmt::cpu::isa_available(parse_isa(isa)); },
          py::arg("isa"));
    m.def("default_threads", &lmt::cpu::default_threads,
          "Threads a call with threads=0 uses: LMTAIL_NUM_THREADS if set, else the CPUs this process may use.");
    m.attr("MAX_THREADS") = py::int_(lmt::kMaxThreads);

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
            lmt::bind::check_dtype<uint8_t>(w, "w");
            if (w.strides(1) != 1 || w.strides(0) < 0) throw lmt::bind::DTypeError("w: rows must be contiguous bytes");
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
        "cpu_types",
        []() {
            py::list out;
            for (const lmt::WeightTypeInfo &i : lmt::kWeightTypes) {
                if (!lmt::cpu::type_supported(i.type)) continue;
                py::list precs;
                const uint32_t bits = lmt::cpu::type_precisions(i.type);
                for (int p = 0; p < 32; ++p)
                    if (bits & (1u << p)) precs.append(lmt::cpu::precision_name((lmt::cpu::Precision)p));
                py::dict d;
                d["id"] = (int)i.type;
                d["name"] = i.name;
                d["block_elems"] = i.block_elems;
                d["block_bytes"] = i.block_bytes;
                d["precisions"] = precs;
                py::list builds;  // the ggml builds precision "ggml" reproduces (its isa= values)
                const uint32_t gb = lmt::cpu::type_ggml_builds(i.type);
                for (lmt::cpu::Isa b : {lmt::cpu::Isa::Scalar, lmt::cpu::Isa::Avx2, lmt::cpu::Isa::Avx512, lmt::cpu::Isa::Neon,
                                          lmt::cpu::Isa::Amx})
                    if (gb & (1u << (int)b)) builds.append(lmt::cpu::isa_name(b));
                d["ggml_builds"] = builds;
                d["default_precision"] = lmt::cpu::precision_name(lmt::cpu::default_precision(i.type));
                out.append(d);
            }
            return out;
        },
        "The CPU column of the weight-type table: one dict per type the CPU runs (id, name, block "
        "sizes, precisions, default precision).");
    m.def(
        "matvec",
        [](const py::array &w, int dtype, int64_t cols, const py::array &x, py::array &out, int threads,
           const std::string &isa, const std::string &precision) {
            const auto wt = static_cast<lmt::WeightType>(dtype);
            if (w.ndim() != 2) throw lmt::ArgumentError("w: expected 2-D (rows, row_bytes)");
            lmt::bind::check_dtype<uint8_t>(w, "w");
            if (w.strides(1) != 1 || w.strides(0) < 0) throw lmt::bind::DTypeError("w: rows must be contiguous bytes");
            const int64_t rows = (int64_t)w.shape(0);
            const int64_t row_bytes = (int64_t)lmt::cpu::row_bytes(wt, cols);
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
            lmt::cpu::matvec(wt, wp, rows, cols, stride, xp, T, op, threads, is, prec);
        },
        py::arg("w"), py::arg("dtype"), py::arg("cols"), py::arg("x"), py::arg("out"), py::arg("threads") = 0,
        py::arg("isa") = "auto", py::arg("precision") = "default",
        "out[t, r] = W[r] . x[t] for W of ggml type id `dtype` as raw bytes (rows, row_bytes).");
    m.def(
        "quantize",
        [](int dtype, const py::array &src, py::array &dst, int threads) {
            const auto wt = static_cast<lmt::WeightType>(dtype);
            const int64_t rows = dim(src, 0, "src"), cols = dim(src, 1, "src");
            expect_shape(src, "src", {rows, cols});
            expect_shape(dst, "dst", {rows, (int64_t)lmt::cpu::row_bytes(wt, cols)});
            const float *sp = data_of<float>(src, "src", false);
            uint8_t *dp = data_of<uint8_t>(dst, "dst", true);
            py::gil_scoped_release nogil;
            lmt::cpu::quantize(wt, sp, dp, rows, cols, threads);
        },
        py::arg("dtype"), py::arg("src"), py::arg("dst"), py::arg("threads") = 0,
        "ggml's reference quantizer for type id `dtype` (no importance matrix), byte for byte.");
    m.def(
        "dequantize",
        [](int dtype, const py::array &src, py::array &dst, int threads) {
            const auto wt = static_cast<lmt::WeightType>(dtype);
            const int64_t rows = dim(src, 0, "src"), cols = dim(dst, 1, "dst");
            expect_shape(src, "src", {rows, (int64_t)lmt::cpu::row_bytes(wt, cols)});
            expect_shape(dst, "dst", {rows, cols});
            const uint8_t *sp = data_of<uint8_t>(src, "src", false);
            float *dp = data_of<float>(dst, "dst", true);
            py::gil_scoped_release nogil;
            lmt::cpu::dequantize(wt, sp, dp, rows, cols, threads);
        },
        py::arg("dtype"), py::arg("src"), py::arg("dst"), py::arg("threads") = 0,
        "ggml's dequantize_row_* for type id `dtype`, bit for bit.");
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

    bind_cpu_head(m);
    bind_sampling(m);
    bind_metal(m);
    bind_metal_device(m);
    bind_cuda(m);
    bind_bitmask(m);

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
