// The op bindings of the Metal backend, shared by its two builds: included once per backend
// namespace (csrc/bindings/metal.cpp: lmt::metal_emu, backend "metal-emu"; csrc/bindings/
// metal_device.cpp: lmt::metal, backend "metal") after `be` names that namespace, so both
// modules expose exactly the same entry points with the _core CPU signatures (lmtail.ops and
// lmtail.Head run on either unchanged; `threads` and `isa` are accepted and ignored).
//
// Requires, before inclusion: <pybind11/stl.h>, "metal/backend.hpp" for the namespace, and
// `namespace be = lmt::<ns>;`.
#pragma once

#include <string>
#include <vector>

#include "bindings/array_args.hpp"

namespace py = pybind11;

// An anonymous namespace: each including translation unit binds its own `be`.
namespace {

using lmt::bind::data_of;
using lmt::bind::dim;
using lmt::bind::expect_shape;

// `isa` is accepted for signature parity with the CPU functions and ignored, but still checked.
inline void check_isa(const std::string &isa) { (void)lmt::bind::parse_isa(isa); }

// The checked operands of a matvec call (weights of contiguous rows of `type`, x (T, cols) f32).
struct MatvecIn {
    const uint8_t *w;
    int64_t rows, T;
    size_t stride;
    const float *x;
};
inline int64_t weight_rows(const py::array &w, lmt::WeightType type, int64_t cols, size_t *stride) {
    if (w.ndim() != 2 || !lmt::bind::dtype_matches<uint8_t>(w.dtype()) || w.strides(1) != 1 || w.strides(0) < 0)
        throw py::type_error("w: expected a 2-D uint8 array of contiguous rows");
    const int64_t rows = (int64_t)w.shape(0), row_bytes = (int64_t)be::matvec_row_bytes(type, cols);  // names the block
    expect_shape(w, "w", {rows, row_bytes});
    *stride = rows > 1 ? (size_t)w.strides(0) : (size_t)row_bytes;
    return rows;
}
inline MatvecIn matvec_in(const py::array &w, lmt::WeightType type, int64_t cols, const py::array &x,
                          const std::string &isa) {
    check_isa(isa);
    MatvecIn in{};
    in.rows = weight_rows(w, type, cols, &in.stride);
    in.w = static_cast<const uint8_t *>(w.data());
    in.T = dim(x, 0, "x");
    expect_shape(x, "x", {in.T, cols});
    in.x = data_of<float>(x, "x", false);
    return in;
}
inline py::array_t<float> matvec_view(lmt::WeightType type, const py::array &w, int64_t cols, const py::array &x,
                                      const std::string &isa) {
    const MatvecIn in = matvec_in(w, type, cols, x, isa);
    be::SharedFloats y;
    {
        py::gil_scoped_release nogil;
        y = be::matvec_shared(type, in.w, in.rows, cols, in.stride, in.x, in.T);
    }
    // The array views the shared buffer's contents; the capsule keeps the buffer alive.
    auto *keep = new std::shared_ptr<void>(std::move(y.keep));
    py::capsule owner(keep, [](void *p) { delete static_cast<std::shared_ptr<void> *>(p); });
    return py::array_t<float>({in.T, in.rows}, {in.rows * (int64_t)sizeof(float), (int64_t)sizeof(float)}, y.data,
                              owner);
}
inline void matvec_into(lmt::WeightType type, const py::array &w, int64_t cols, const py::array &x, py::array &out,
                        const std::string &isa) {
    const MatvecIn in = matvec_in(w, type, cols, x, isa);
    expect_shape(out, "out", {in.T, in.rows});
    float *op = data_of<float>(out, "out", true);
    py::gil_scoped_release nogil;
    be::matvec(type, in.w, in.rows, cols, in.stride, in.x, in.T, op);
}

#if defined(LMTAIL_METAL_TESTING)
inline uint32_t barrier_mask(const std::vector<std::string> &names) {
    uint32_t m = 0;
    for (const auto &n : names) {
        if (n == "all") {
            m = 0xFFFFFFFFu;
            continue;
        }
        bool found = false;
        for (const auto &[name, bit] : be::barrier_names())
            if (name == n) {
                m |= bit;
                found = true;
            }
        if (!found) throw lmt::ArgumentError("skip_barriers: unknown barrier '" + n + "'");
    }
    return m;
}
#endif


// Every op and the whole-tail graph on submodule `e`; in the test build (LMTAIL_METAL_TESTING:
// module _lmtail_testing only) also the test hooks: set_debug, barrier_names, dispatch.
inline void bind_ops(py::module_ &e) {
    // ---- ops: the _core CPU signatures ----
    e.def(
        "rms_norm",
        [](const py::array &x, const py::object &gamma, py::array &out, float eps) {
            const lmt::bind::NormArgs a = lmt::bind::norm_args(x, gamma, out);
            py::gil_scoped_release nogil;
            be::rms_norm(a.x, a.gamma, a.out, a.T, a.cols, eps);
        },
        py::arg("x"), py::arg("gamma"), py::arg("out"), py::arg("eps"));
    e.def(
        "matvec_types",
        [] {
            std::vector<int> v;
            for (lmt::WeightType t : be::matvec_types()) v.push_back((int)t);
            return v;
        },
        "ggml type ids of the weight types the matvec and the head graph run (csrc/metal/matvec.cpp's table).");
    e.def(
        "matvec",
        [](const py::array &w, int dtype, int64_t cols, const py::array &x, py::array &out, int threads,
           const std::string &isa) {
            (void)threads;
            matvec_into(static_cast<lmt::WeightType>(dtype), w, cols, x, out, isa);
        },
        py::arg("w"), py::arg("dtype"), py::arg("cols"), py::arg("x"), py::arg("out"), py::arg("threads") = 0,
        py::arg("isa") = "auto", "out[t, r] = W[r] . x[t] in f32 for W of ggml type id `dtype` (rows, row_bytes).");
    // precision="ggml": llama.cpp's own kernels from the library the user gave (lmtail._ggml_metal).
    e.def("ggml_kernel_names", [] { return be::ggml_kernel_names(); },
          "host names of the llama.cpp kernels the ggml route dispatches.");
    e.def(
        "ggml_matvec",
        [](const std::string &library, const py::array &w, int dtype, int64_t cols, const py::array &x, py::array &out) {
            const lmt::WeightType type = static_cast<lmt::WeightType>(dtype);
            const MatvecIn in = matvec_in(w, type, cols, x, "auto");
            expect_shape(out, "out", {in.T, in.rows});
            float *op = data_of<float>(out, "out", true);
            py::gil_scoped_release nogil;
            be::ggml_matvec(library, type, in.w, in.rows, cols, in.stride, in.x, in.T, op);
        },
        py::arg("library"), py::arg("w"), py::arg("dtype"), py::arg("cols"), py::arg("x"), py::arg("out"),
        "out[t, r] = W[r] . x[t] by llama.cpp's kernel_mul_mv[_ext]_<type>_f32 (as it selects them, T <= 8) from `library`.");
    e.def(
        "ggml_softcap",
        [](const std::string &library, py::array &x, float s, float cap) {
            float *p = data_of<float>(x, "x", true);
            const int64_t n = (int64_t)x.size();
            py::gil_scoped_release nogil;
            be::ggml_softcap(library, p, n, s, cap);
        },
        py::arg("library"), py::arg("x"), py::arg("s"), py::arg("cap"),
        "x*s, then (cap > 0) the cap, as llama.cpp's four unary nodes from `library`, in place.");
    e.def(
        "ggml_head",
        [](const std::string &library, const py::array &w, int dtype, int64_t cols, const py::object &gamma,
           const py::array &hidden, float eps, float scale, float cap, py::array &out) {
            be::HeadArgs a;
            a.type = static_cast<lmt::WeightType>(dtype);
            a.rows = weight_rows(w, a.type, cols, &a.row_stride);
            a.cols = cols;
            a.w = static_cast<const uint8_t *>(w.data());
            a.T = dim(hidden, 0, "hidden");
            expect_shape(hidden, "hidden", {a.T, cols});
            a.hidden = data_of<float>(hidden, "hidden", false);
            py::array g;
            if (!gamma.is_none()) {
                g = gamma.cast<py::array>();
                expect_shape(g, "gamma", {cols});
                a.gamma = data_of<float>(g, "gamma", false);
            }
            a.eps = eps;
            a.scale = scale;
            a.cap = cap;
            expect_shape(out, "out", {a.T, a.rows});
            float *op = data_of<float>(out, "out", true);
            py::gil_scoped_release nogil;
            return be::ggml_head(library, a, op);
        },
        py::arg("library"), py::arg("w"), py::arg("dtype"), py::arg("cols"), py::arg("gamma"), py::arg("hidden"),
        py::arg("eps"), py::arg("scale"), py::arg("cap"), py::arg("out"),
        "[rms_norm ->] llama.cpp's kernel_mul_mv -> scale -> cap nodes from `library`, one graph. Returns -1 with "
        "`out` (T, rows) filled, or the flat index of the first non-finite pre-cap logit (`out` untouched).");
    e.def(
        "matvec_view",
        [](const py::array &w, int dtype, int64_t cols, const py::array &x, const std::string &isa) {
            return matvec_view(static_cast<lmt::WeightType>(dtype), w, cols, x, isa);
        },
        py::arg("w"), py::arg("dtype"), py::arg("cols"), py::arg("x"), py::arg("isa") = "auto",
        "matvec whose (T, rows) result is a zero-copy view of the shared logits buffer.");
    // The Q5_K spellings of the two (the entry points the device backends share).
    e.def(
        "matvec_q5_k",
        [](const py::array &w, int64_t cols, const py::array &x, py::array &out, int threads, const std::string &isa) {
            (void)threads;
            matvec_into(lmt::WeightType::Q5_K, w, cols, x, out, isa);
        },
        py::arg("w"), py::arg("cols"), py::arg("x"), py::arg("out"), py::arg("threads") = 0, py::arg("isa") = "auto");
    e.def(
        "matvec_q5_k_view",
        [](const py::array &w, int64_t cols, const py::array &x, const std::string &isa) {
            return matvec_view(lmt::WeightType::Q5_K, w, cols, x, isa);
        },
        py::arg("w"), py::arg("cols"), py::arg("x"), py::arg("isa") = "auto",
        "Q5_K matvec whose (T, rows) result is a zero-copy view of the shared logits buffer.");
    e.def(
        "scale",
        [](py::array &x, float s, int) {
            float *p = data_of<float>(x, "x", true);
            const int64_t n = (int64_t)x.size();
            py::gil_scoped_release nogil;
            be::scale(p, n, s);
        },
        py::arg("x"), py::arg("s"), py::arg("threads") = 0);
    e.def(
        "tanh",
        [](py::array &x, int) {
            float *p = data_of<float>(x, "x", true);
            const int64_t n = (int64_t)x.size();
            py::gil_scoped_release nogil;
            be::tanh(p, n);
        },
        py::arg("x"), py::arg("threads") = 0);
    e.def(
        "softcap",
        [](py::array &x, float s, float cap, bool four_pass, int) {
            float *p = data_of<float>(x, "x", true);
            const int64_t n = (int64_t)x.size();
            py::gil_scoped_release nogil;
            be::softcap(p, n, s, cap, four_pass);
        },
        py::arg("x"), py::arg("s"), py::arg("cap"), py::arg("four_pass") = true, py::arg("threads") = 0);
    e.def(
        "argmax_rows",
        [](const py::array &x, py::array &out, int) {
            const lmt::bind::RowsArg r = lmt::bind::rows_arg(x);
            uint32_t *op = lmt::bind::out_of<uint32_t>(out, "out", {r.R});
            py::gil_scoped_release nogil;
            be::argmax_rows(r.p, r.R, r.n, op);
        },
        py::arg("x"), py::arg("out"), py::arg("threads") = 0);
    e.def(
        "greedy_argmax_rows",
        [](const py::array &x, const py::array &excluded, py::array &out, int) {
            const lmt::bind::RowsArg r = lmt::bind::rows_arg(x);
            uint32_t *op = lmt::bind::out_of<uint32_t>(out, "out", {r.R});
            const lmt::bind::IdsArg e = lmt::bind::excluded_arg(excluded, r.n);
            py::gil_scoped_release nogil;
            be::greedy_argmax_rows(r.p, r.R, r.n, e.p, e.size, op);
        },
        py::arg("x"), py::arg("excluded"), py::arg("out"), py::arg("threads") = 0);
    e.def(
        "topk_rows",
        [](const py::array &x, int64_t k, py::array &ids, py::array &values, int) {
            const lmt::bind::RowsArg r = lmt::bind::rows_arg(x);
            uint32_t *ip = lmt::bind::out_of<uint32_t>(ids, "ids", {r.R, k});
            float *vp = lmt::bind::out_of<float>(values, "values", {r.R, k});
            py::gil_scoped_release nogil;
            be::topk_rows(r.p, r.R, r.n, k, ip, vp);
        },
        py::arg("x"), py::arg("k"), py::arg("ids"), py::arg("values"), py::arg("threads") = 0);

    // ---- the whole tail as one graph ----
    e.def(
        "head_greedy",
        [](const py::array &w, int64_t cols, const py::object &gamma, const py::array &hidden, float eps, float scale,
           float cap, const py::array &excluded, py::object logits_out, bool raw, const py::object &embed,
           bool logits_view, int dtype) {
            be::HeadArgs a;
            a.type = static_cast<lmt::WeightType>(dtype);
            a.rows = weight_rows(w, a.type, cols, &a.row_stride);
            a.cols = cols;
            a.w = static_cast<const uint8_t *>(w.data());
            a.T = dim(hidden, 0, "hidden");
            expect_shape(hidden, "hidden", {a.T, cols});
            a.hidden = data_of<float>(hidden, "hidden", false);
            py::array g, em;
            if (!gamma.is_none()) {
                g = gamma.cast<py::array>();
                expect_shape(g, "gamma", {cols});
                a.gamma = data_of<float>(g, "gamma", false);
            }
            a.eps = eps;
            a.scale = scale;
            a.cap = cap;
            a.excluded = data_of<uint32_t>(excluded, "excluded", false);
            a.n_excluded = (int64_t)excluded.size();
            for (int64_t i = 0; i < a.n_excluded; ++i)
                if ((int64_t)a.excluded[i] >= a.rows) throw lmt::ArgumentError("excluded: token id out of range");
            float *lp = nullptr;
            py::array lo;
            if (!logits_out.is_none()) {
                lo = logits_out.cast<py::array>();
                expect_shape(lo, "logits_out", {a.T, a.rows});
                lp = data_of<float>(lo, "logits_out", true);
            }
            py::array_t<float> emb_out;
            if (!embed.is_none()) {
                em = embed.cast<py::array>();
                a.embed_rows = dim(em, 0, "embed");
                a.embed_dim = dim(em, 1, "embed");
                expect_shape(em, "embed", {a.embed_rows, a.embed_dim});
                a.embed = data_of<float>(em, "embed", false);
                emb_out = py::array_t<float>({a.T, a.embed_dim});
            }
            py::array_t<uint32_t> result(a.T);
            uint32_t *rp = result.mutable_data();
            float *ep = a.embed ? emb_out.mutable_data() : nullptr;
            be::SharedView view;
            {
                py::gil_scoped_release nogil;
                be::head_greedy(a, lp, rp, ep, raw, logits_view ? &view : nullptr);
            }
            py::object gathered = a.embed ? py::object(emb_out) : py::object(py::none());
            py::object lv = py::none();
            if (view.data) {
                // A numpy array over the shared buffer's contents(), no copy; the capsule owns the
                // buffer reference. Read-only: the published distribution is not for writing.
                auto *owner = new std::shared_ptr<void>(std::move(view.owner));
                py::capsule base(owner, [](void *p) { delete static_cast<std::shared_ptr<void> *>(p); });
                py::array_t<float> arr({a.T, a.rows}, {a.rows * (py::ssize_t)sizeof(float), (py::ssize_t)sizeof(float)},
                                       static_cast<float *>(view.data), base);
                py::detail::array_proxy(arr.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
                lv = arr;
            }
            return py::tuple(py::make_tuple(result, gathered, lv));
        },
        py::arg("w"), py::arg("cols"), py::arg("gamma"), py::arg("hidden"), py::arg("eps"), py::arg("scale"),
        py::arg("cap"), py::arg("excluded"), py::arg("logits_out") = py::none(), py::arg("raw") = false,
        py::arg("embed") = py::none(), py::arg("logits_view") = false,
        py::arg("dtype") = (int)lmt::WeightType::Q5_K,
        "The tail (weights of ggml type id `dtype`) as one concurrent-encoder graph. Returns (result slots uint32 (T,), gathered embedding rows or "
        "None, logits: a read-only zero-copy view of the retained shared logits buffer when logits_view, else None).");

    e.def("device_name", &be::device_name);
    e.def("set_library_path", &be::set_library_path, py::arg("path"),
          "Where the kernel library (lmtail.metallib) is; read when the device context is first created.");
    e.def("set_source_dir", &be::set_source_dir, py::arg("kernels_dir"), py::arg("include_dir"),
          "Development fallback, read when the context is first created: without a metallib at the library "
          "path, compile every kernels_dir/*.metal at run time (lmtail headers inlined from include_dir).");
    e.def("library_origin", &be::library_origin,
          "Where the context's kernels came from: 'metallib:<path>' or 'source:<n> files from <dir>'.");

#if defined(LMTAIL_METAL_TESTING)
    // ---- test hooks (never in a shipped module) ----
    e.def(
        "set_debug",
        [](const std::vector<std::string> &skip_barriers, int64_t plant_nan) {
            be::debug().skip_barriers = barrier_mask(skip_barriers);
            be::debug().plant_nan = plant_nan;
        },
        py::arg("skip_barriers") = std::vector<std::string>{}, py::arg("plant_nan") = -1,
        "Debug switches of the host code: barriers to omit (names from barrier_names(), or 'all'), and an index "
        "of the head graph's logits to overwrite with NaN after the head (-1: none).");
    e.def(
        "barrier_names",
        [] {
            std::vector<std::string> v;
            for (const auto &[n, bit] : be::barrier_names()) v.push_back(n);
            return v;
        },
        "Names of the encoders' barriers, for set_debug(skip_barriers=...).");
    e.def(
        "dispatch",
        [](const std::string &kernel, std::vector<uint32_t> groups, std::vector<uint32_t> threads, const py::dict &bufs) {
            while (groups.size() < 3) groups.push_back(1);
            while (threads.size() < 3) threads.push_back(1);
            std::vector<be::RawArg> args;
            std::vector<py::array> keep;
            std::vector<std::string> byte_keep;
            byte_keep.reserve(bufs.size());
            for (auto item : bufs) {
                const int index = item.first.cast<int>();
                if (py::isinstance<py::bytes>(item.second)) {
                    byte_keep.push_back(item.second.cast<std::string>());
                    args.push_back({index, (void *)byte_keep.back().data(), byte_keep.back().size(), true, false});
                } else {
                    py::array a = item.second.cast<py::array>();
                    if (!(a.flags() & py::array::c_style)) throw py::type_error("dispatch: arrays must be C-contiguous");
                    keep.push_back(a);
                    args.push_back({index, const_cast<void *>(a.data()), (size_t)a.nbytes(), false, a.writeable()});
                }
            }
            py::gil_scoped_release nogil;
            be::dispatch_raw(kernel, groups.data(), threads.data(), args);
        },
        py::arg("kernel"), py::arg("groups"), py::arg("threads"), py::arg("buffers"),
        "Run one kernel: buffers maps a buffer index to a numpy array (copied in; copied back when writable) or "
        "bytes (setBytes).");
#endif
}

}  // namespace
