// Bindings of the CUDA backend (submodule lmtail._core.cuda), built with LMTAIL_CUDA=ON.
//
// The op functions mirror lmtail._core's CPU entry points on host numpy arrays (each call
// uploads its inputs and downloads its outputs; `threads`/`isa` are accepted and ignored), so
// lmtail.ops runs unchanged with backend="cuda". DeviceHead keeps the weights on the device for
// lmtail.Head (routes A/B/C).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <vector>

namespace py = pybind11;

#if defined(LMTAIL_HAVE_CUDA)
#include <cuda_runtime.h>

#include "cuda/head.hpp"
#include "bindings/array_args.hpp"
#include "lmtail/cpu.hpp"
#include "cuda/launch.hpp"
#include "lmtail/kernel_abi.h"

namespace {

using lmt::bind::data_of;
using lmt::bind::dim;

struct DevBuf {
    void *p = nullptr;
    explicit DevBuf(size_t bytes) {
        if (bytes && cudaMalloc(&p, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    }
    ~DevBuf() {
        if (p) cudaFree(p);
    }
    template <typename T>
    T *as() const { return static_cast<T *>(p); }
};

void check(cudaError_t e) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(e));
}

// The exclusion bitmask (one bit per token id) the device kernels take; empty when none.
std::vector<uint32_t> exclusion_mask(const py::array &excluded, int64_t n) {
    const lmt::bind::IdsArg e = lmt::bind::excluded_arg(excluded, n);
    std::vector<uint32_t> mask;
    if (e.size == 0) return mask;
    mask.assign((size_t)(n + 31) / 32, 0u);
    for (int64_t i = 0; i < e.size; ++i) mask[e.p[i] >> 5] |= 1u << (e.p[i] & 31);
    return mask;
}

void unary(py::array &x, float s, float cap, int mode) {  // mode 0 scale, 1 tanh, 2 four-pass cap, 3 fused
    float *h = data_of<float>(x, "x", true);
    const int64_t n = (int64_t)x.size();
    DevBuf d(n * 4);
    check(cudaMemcpy(d.p, h, n * 4, cudaMemcpyHostToDevice));
    if (mode == 0) lmt::cuda::launch_softcap(d.as<float>(), n, s, 0.0f, true, 0);  // cap <= 0: scale only
    else lmt::cuda::launch_softcap(d.as<float>(), n, s, cap, mode == 2, 0);
    check(cudaMemcpy(h, d.p, n * 4, cudaMemcpyDeviceToHost));
}

}  // namespace

void bind_cuda(py::module_ &m) {
    if (!lmt::cuda::device_available()) {
        m.attr("HAS_CUDA_BUILD") = true;
        auto sub = m.def_submodule("cuda", "CUDA backend (built; no device present)");
        sub.def("available", [] { return false; });
        return;
    }
    auto sub = m.def_submodule("cuda", "CUDA backend");
    m.attr("HAS_CUDA_BUILD") = true;
    sub.def("available", [] { return true; });

    // Page-locked host arrays: route A's retained buffer (the Head's staging rows) is filled by a
    // D2H copy that DMA reaches directly; pageable memory would go through the driver's bounce
    // buffer. The capsule frees the allocation when the last view is gone.
    sub.def(
        "pinned_empty",
        [](int64_t n_rows, int64_t n_cols) {
            if (n_rows < 0 || n_cols < 0) throw lmt::ArgumentError("pinned_empty: negative shape");
            void *p = nullptr;
            check(cudaMallocHost(&p, std::max<size_t>(4, (size_t)(n_rows * n_cols) * sizeof(float))));
            py::capsule owner(p, [](void *q) { cudaFreeHost(q); });
            return py::array_t<float>({n_rows, n_cols}, {n_cols * (int64_t)sizeof(float), (int64_t)sizeof(float)},
                                      static_cast<float *>(p), owner);
        },
        py::arg("n_rows"), py::arg("n_cols"), "An uninitialised (n_rows, n_cols) float32 array in page-locked host memory.");
    sub.def(
        "host_memory_kind",
        [](const py::array &a) {
            cudaPointerAttributes at{};
            if (cudaPointerGetAttributes(&at, a.data()) != cudaSuccess) {
                cudaGetLastError();  // clear the sticky-free error of an unregistered pointer
                return std::string("pageable");
            }
            return std::string(at.type == cudaMemoryTypeHost ? "pinned"
                               : at.type == cudaMemoryTypeDevice ? "device"
                               : at.type == cudaMemoryTypeManaged ? "managed" : "pageable");
        },
        py::arg("array"), "'pinned', 'pageable', 'device' or 'managed': where the array's first byte lives.");

    sub.def("rms_norm", [](const py::array &x, const py::object &gamma, py::array &out, float eps) {
        const lmt::bind::NormArgs a = lmt::bind::norm_args(x, gamma, out);
        const int64_t bytes = a.T * a.cols * 4;
        DevBuf dx(bytes), dy(bytes), dg(a.gamma ? a.cols * 4 : 0);
        check(cudaMemcpy(dx.p, a.x, bytes, cudaMemcpyHostToDevice));
        if (a.gamma) check(cudaMemcpy(dg.p, a.gamma, a.cols * 4, cudaMemcpyHostToDevice));
        lmt::cuda::launch_rms_norm(dx.as<float>(), a.gamma ? dg.as<float>() : nullptr, dy.as<float>(), (int)a.T,
                                   (int)a.cols, eps, 0);
        check(cudaMemcpy(a.out, dy.p, bytes, cudaMemcpyDeviceToHost));
    }, py::arg("x"), py::arg("gamma"), py::arg("out"), py::arg("eps"));
    sub.def("types", [] { return lmt::cuda::mul_mv_types(); }, "ggml type ids the cuda matvec runs.");
    sub.def("matvec", [](const py::array &w, int type, int64_t cols, const py::array &x, py::array &out, int,
                         const std::string &) {
        lmt::cuda::check_mul_mv_shape(type, (int)cols);
        const int64_t rows = dim(w, 0, "w"), T = dim(x, 0, "x");
        const size_t row_bytes = lmt::cuda::mul_mv_row_bytes(type, (int)cols);
        const size_t dev_stride = (row_bytes + 15) / 16 * 16;  // 16-byte aligned rows (see DeviceHead)
        DevBuf dw(rows * dev_stride), dx(T * cols * 4), dy(T * rows * 4);
        check(cudaMemcpy2D(dw.p, dev_stride, w.data(), rows > 1 ? (size_t)w.strides(0) : row_bytes, row_bytes, rows,
                           cudaMemcpyHostToDevice));
        check(cudaMemcpy(dx.p, data_of<float>(x, "x", false), T * cols * 4, cudaMemcpyHostToDevice));
        lmt::cuda::launch_mul_mv(type, dw.as<uint8_t>(), dev_stride, (int)rows, (int)cols, dx.as<float>(), (int)T,
                                 dy.as<float>(), 0);
        check(cudaMemcpy(lmt::bind::out_of<float>(out, "out", {T, rows}), dy.p, T * rows * 4, cudaMemcpyDeviceToHost));
    }, py::arg("w"), py::arg("type"), py::arg("cols"), py::arg("x"), py::arg("out"), py::arg("threads") = 0,
       py::arg("isa") = "auto");
    sub.def("scale", [](py::array &x, float s, int) { unary(x, s, 0.0f, 0); }, py::arg("x"), py::arg("s"),
            py::arg("threads") = 0);
    sub.def("tanh", [](py::array &x, int) {
        float *h = data_of<float>(x, "x", true);
        const int64_t n = (int64_t)x.size();
        DevBuf d(n * 4);
        check(cudaMemcpy(d.p, h, n * 4, cudaMemcpyHostToDevice));
        // tanh alone = soft cap with scale 1, cap 1 is not the same expression; use the unary kernel path
        lmt::cuda::launch_tanh(d.as<float>(), n, 0);
        check(cudaMemcpy(h, d.p, n * 4, cudaMemcpyDeviceToHost));
    }, py::arg("x"), py::arg("threads") = 0);
    sub.def("softcap", [](py::array &x, float s, float cap, bool four_pass, int) { unary(x, s, cap, four_pass ? 2 : 3); },
            py::arg("x"), py::arg("s"), py::arg("cap"), py::arg("four_pass") = true, py::arg("threads") = 0);
    auto argmax_impl = [](const py::array &x, const py::object &excl, py::array &out, bool greedy) {
        const lmt::bind::RowsArg r = lmt::bind::rows_arg(x);
        uint32_t *op = lmt::bind::out_of<uint32_t>(out, "out", {r.R});
        const std::vector<uint32_t> mv = excl.is_none() ? std::vector<uint32_t>{}
                                                        : exclusion_mask(excl.cast<py::array>(), r.n);
        const int64_t R = r.R, n = r.n, chunks = (n + 1023) / 1024;
        DevBuf dx(R * n * 4), dk(R * chunks * 8), db(R * chunks * 4), dout(R * 4), dm((n + 31) / 32 * 4);
        check(cudaMemcpy(dx.p, r.p, R * n * 4, cudaMemcpyHostToDevice));
        const uint32_t *mask = nullptr;
        if (greedy && !mv.empty()) {
            check(cudaMemcpy(dm.p, mv.data(), mv.size() * 4, cudaMemcpyHostToDevice));
            mask = dm.as<uint32_t>();
        }
        lmt::cuda::launch_argmax_rows(dx.as<float>(), (int)R, (int)n, greedy, mask, dk.as<uint64_t>(), db.as<uint32_t>(),
                                      dout.as<uint32_t>(), 0);
        check(cudaMemcpy(op, dout.p, R * 4, cudaMemcpyDeviceToHost));
    };
    sub.def("argmax_rows", [argmax_impl](const py::array &x, py::array &out, int) { argmax_impl(x, py::none(), out, false); },
            py::arg("x"), py::arg("out"), py::arg("threads") = 0);
    sub.def("greedy_argmax_rows", [argmax_impl](const py::array &x, const py::array &excl, py::array &out, int) {
        argmax_impl(x, excl, out, true);
    }, py::arg("x"), py::arg("excluded"), py::arg("out"), py::arg("threads") = 0);
    sub.def("topk_rows", [](const py::array &x, int64_t k, py::array &ids, py::array &vals, int) {
        const lmt::bind::RowsArg r = lmt::bind::rows_arg(x);
        if (k > 2048) throw py::value_error("cuda topk: k must be <= 2048");
        uint32_t *ip = lmt::bind::out_of<uint32_t>(ids, "ids", {r.R, k});
        float *vp = lmt::bind::out_of<float>(vals, "values", {r.R, k});
        const int64_t R = r.R, n = r.n;
        DevBuf dx(R * n * 4), ds(lmt::cuda::topk_scratch_elems((int)R, (int)n, (int)k) * 8), di(R * k * 4), dv(R * k * 4);
        check(cudaMemcpy(dx.p, r.p, R * n * 4, cudaMemcpyHostToDevice));
        lmt::cuda::launch_topk_rows(dx.as<float>(), (int)R, (int)n, (int)k, ds.as<uint64_t>(), di.as<uint32_t>(),
                                    dv.as<float>(), 0);
        check(cudaMemcpy(ip, di.p, R * k * 4, cudaMemcpyDeviceToHost));
        check(cudaMemcpy(vp, dv.p, R * k * 4, cudaMemcpyDeviceToHost));
    }, py::arg("x"), py::arg("k"), py::arg("ids"), py::arg("values"), py::arg("threads") = 0);

    py::class_<lmt::cuda::DeviceHead>(sub, "DeviceHead")
        .def(py::init([](const py::array &w, int cols, const py::object &gamma, int norm_kind, float eps, float scale,
                         float softcap, int max_tokens, int weight_type) {
                 const float *g = gamma.is_none() ? nullptr : data_of<float>(gamma.cast<py::array>(), "gamma", false);
                 const int rows = (int)dim(w, 0, "w");
                 lmt::cuda::check_mul_mv_shape(weight_type, cols);
                 const size_t stride = rows > 1 ? (size_t)w.strides(0) : lmt::cuda::mul_mv_row_bytes(weight_type, cols);
                 return new lmt::cuda::DeviceHead(static_cast<const uint8_t *>(w.data()), weight_type, rows, cols,
                                                  stride, g, norm_kind, eps, scale, softcap, max_tokens);
             }),
             py::arg("w"), py::arg("cols"), py::arg("gamma"), py::arg("norm_kind"), py::arg("eps"), py::arg("scale"),
             py::arg("softcap"), py::arg("max_tokens"), py::arg("weight_type"))
        .def("run_tail",
             [](lmt::cuda::DeviceHead &h, const py::array &hidden, bool check_latch) {
                 const int T = (int)dim(hidden, 0, "hidden");
                 const float *p = data_of<float>(hidden, "hidden", false);
                 py::gil_scoped_release nogil;
                 return h.run_tail(p, T, check_latch);
             },
             py::arg("hidden"), py::arg("check_latch") = true)
        .def("read_logits",
             [](lmt::cuda::DeviceHead &h, py::array &out) {
                 float *p = data_of<float>(out, "out", true);
                 const int T = (int)dim(out, 0, "out");
                 py::gil_scoped_release nogil;
                 h.read_logits(p, T);
             },
             py::arg("out"))
        .def("read_row",
             [](lmt::cuda::DeviceHead &h, int t, py::array &out) {
                 float *p = data_of<float>(out, "out", true);
                 if (out.size() != h.rows()) throw std::invalid_argument("read_row: expected one row of the head's rows");
                 py::gil_scoped_release nogil;
                 h.read_row(t, p);
             },
             py::arg("t"), py::arg("out"))
        .def("greedy",
             [](lmt::cuda::DeviceHead &h, const py::array &excl, py::array &out) {
                 auto mask = exclusion_mask(excl, h.rows());
                 uint32_t *p = data_of<uint32_t>(out, "out", true);
                 const int T = (int)out.size();
                 py::gil_scoped_release nogil;
                 h.greedy(mask, T, p);
             },
             py::arg("excluded"), py::arg("out"))
        .def("topk",
             [](lmt::cuda::DeviceHead &h, int k, py::array &ids, py::array &vals) {
                 uint32_t *ip = data_of<uint32_t>(ids, "ids", true);
                 float *vp = data_of<float>(vals, "values", true);
                 const int T = (int)dim(ids, 0, "ids");
                 py::gil_scoped_release nogil;
                 h.topk(T, k, ip, vp);
             },
             py::arg("k"), py::arg("ids"), py::arg("values"))
        .def_property_readonly("bytes_read_back", &lmt::cuda::DeviceHead::bytes_read_back);
}
#else
void bind_cuda(py::module_ &m) { m.attr("HAS_CUDA_BUILD") = false; }
#endif
