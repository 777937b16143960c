// Bindings of the CUDA backend (submodule lmtail._core.cuda), built with LMTAIL_CUDA=ON.
//
// The op functions mirror lmtail._core's CPU entry points on host numpy arrays (each call
// uploads its inputs and downloads its outputs; `threads`/`isa` are accepted and ignored), so
// lmtail.ops runs unchanged with backend="cuda". DeviceHead keeps the weights on the device for
// lmtail.Head (routes A/B/C). Device memory crosses the boundary both ways without a host round
// trip: tensor_info reads any __cuda_array_interface__ / __dlpack__ producer (PyTorch, CuPy, ...),
// and DeviceArray is what lmtail hands back (it exports both protocols).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
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

// ---- DLPack (the public dlpack.h ABI, v0.8 "dltensor" capsules) ----
struct DLDevice {
    int32_t device_type;  // 2 = kDLCUDA, 13 = kDLCUDAManaged
    int32_t device_id;
};
struct DLDataType {
    uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
    uint8_t bits;
    uint16_t lanes;
};
struct DLTensor {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;  // in elements; null = C-contiguous
    uint64_t byte_offset;
};
struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(DLManagedTensor *);
};

int current_device() {
    int d = 0;
    check(cudaGetDevice(&d));
    return d;
}

// The stream argument of the Python API: 0 = the legacy default stream.
cudaStream_t as_stream(uint64_t s) { return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(s)); }

// What a device tensor argument is (validated by lmtail._validate.cuda_tensor, which raises the
// typed errors): data pointer, shape, byte strides (empty = C-contiguous), numpy-style typestr,
// device and whether it is read-only. `keep` holds the DLPack capsule until the call is over.
struct TensorInfo {
    uint64_t ptr = 0;
    std::vector<int64_t> shape, strides;
    std::string typestr;
    int device = -1;
    bool readonly = false;
    std::string protocol;
    py::object keep;
};

TensorInfo tensor_info(const py::object &obj, uint64_t stream) {
    TensorInfo t;
    if (py::hasattr(obj, "__cuda_array_interface__")) {
        t.protocol = "__cuda_array_interface__";
        const py::dict cai = obj.attr("__cuda_array_interface__");
        const py::tuple data = cai["data"];
        t.ptr = data[0].cast<uint64_t>();
        t.readonly = data[1].cast<bool>();
        for (auto v : cai["shape"].cast<py::tuple>()) t.shape.push_back(v.cast<int64_t>());
        if (cai.contains("strides") && !cai["strides"].is_none())
            for (auto v : cai["strides"].cast<py::tuple>()) t.strides.push_back(v.cast<int64_t>());
        t.typestr = cai["typestr"].cast<std::string>();
        if (cai.contains("mask") && !cai["mask"].is_none()) throw lmt::ArgumentError("masked arrays are not supported");
        if (t.ptr == 0) {
            t.device = current_device();  // a zero-size array has no allocation
        } else {
            cudaPointerAttributes at{};
            check(cudaPointerGetAttributes(&at, reinterpret_cast<void *>(t.ptr)));
            if (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged)
                throw lmt::ArgumentError("__cuda_array_interface__ points to memory that is not CUDA device memory");
            t.device = at.device;
        }
        // Version 3: the producer's stream; the consumer's stream waits for it (no host sync).
        if (cai.contains("stream") && !cai["stream"].is_none()) {
            const uint64_t ps = cai["stream"].cast<uint64_t>();
            const cudaStream_t producer = ps == 1 ? cudaStreamLegacy : ps == 2 ? cudaStreamPerThread : as_stream(ps);
            if (producer != as_stream(stream)) {
                cudaEvent_t ev;
                check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
                check(cudaEventRecord(ev, producer));
                check(cudaStreamWaitEvent(as_stream(stream), ev, 0));
                check(cudaEventDestroy(ev));
            }
        }
        return t;
    }
    t.protocol = "__dlpack__";
    // The producer orders its work before our stream (DLPack: 1 = the legacy default stream).
    py::object cap = obj.attr("__dlpack__")(py::arg("stream") = stream == 0 ? 1 : stream);
    if (!PyCapsule_IsValid(cap.ptr(), "dltensor"))
        throw lmt::ArgumentError("__dlpack__ did not return a 'dltensor' capsule");
    auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    const DLTensor &d = m->dl_tensor;
    t.keep = cap;  // not renamed: when it goes, the producer's capsule destructor frees the tensor
    if (d.device.device_type != 2 && d.device.device_type != 13)
        throw lmt::ArgumentError("__dlpack__: a tensor on DLPack device type " + std::to_string(d.device.device_type) +
                                 ", not CUDA memory");
    t.device = d.device.device_id;
    t.ptr = reinterpret_cast<uint64_t>(d.data) + d.byte_offset;
    const char kind = d.dtype.code == 0 ? 'i' : d.dtype.code == 1 ? 'u' : d.dtype.code == 2 ? 'f' : d.dtype.code == 4 ? 'b' : '?';
    t.typestr = d.dtype.lanes != 1 ? std::string("vector") : std::string("<") + kind + std::to_string(d.dtype.bits / 8);
    if (kind == 'b') t.typestr = "bfloat" + std::to_string(d.dtype.bits);
    for (int i = 0; i < d.ndim; ++i) t.shape.push_back(d.shape[i]);
    if (d.strides)
        for (int i = 0; i < d.ndim; ++i) t.strides.push_back(d.strides[i] * (int64_t)(d.dtype.bits / 8));
    return t;
}

// Device memory lmtail hands out: owns a cudaMalloc'd buffer, exports __cuda_array_interface__
// (v3) and __dlpack__ ("dltensor" capsules), C-contiguous. The allocation lives while the
// DeviceArray or any DLPack consumer holds it.
struct DeviceArray {
    std::shared_ptr<void> mem;
    std::vector<int64_t> shape;
    char kind = 'f';  // 'f' float32, 'u' uint32, 'i' int32 (4-byte items)
    int device = 0;

    DeviceArray(std::vector<int64_t> shp, char k) : shape(std::move(shp)), kind(k), device(current_device()) {
        void *p = nullptr;
        const size_t n = std::max<size_t>(4, bytes());
        check(cudaMalloc(&p, n));
        mem = std::shared_ptr<void>(p, [](void *q) { cudaFree(q); });
    }
    int64_t size() const {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return n;
    }
    size_t bytes() const { return (size_t)size() * 4; }
    float *data() const { return static_cast<float *>(mem.get()); }
    std::string typestr() const { return std::string("<") + kind + "4"; }
};

struct DLPackHolder {  // manager_ctx of an exported capsule
    DLManagedTensor m{};
    std::shared_ptr<void> mem;
    std::vector<int64_t> shape;
};

py::capsule to_dlpack(const DeviceArray &a) {
    auto *h = new DLPackHolder();
    h->mem = a.mem;
    h->shape = a.shape;
    DLTensor &d = h->m.dl_tensor;
    d.data = a.mem.get();
    d.device = {2, a.device};
    d.ndim = (int32_t)a.shape.size();
    d.dtype = {(uint8_t)(a.kind == 'f' ? 2 : a.kind == 'u' ? 1 : 0), 32, 1};
    d.shape = h->shape.data();
    d.strides = nullptr;
    d.byte_offset = 0;
    h->m.manager_ctx = h;
    h->m.deleter = [](DLManagedTensor *m) { delete static_cast<DLPackHolder *>(m->manager_ctx); };
    return py::capsule(&h->m, "dltensor", [](PyObject *cap) {
        // Still named "dltensor": no consumer took it, so the deleter is ours to call.
        if (PyCapsule_IsValid(cap, "dltensor")) {
            auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap, "dltensor"));
            m->deleter(m);
        } else {
            PyErr_Clear();
        }
    });
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
    sub.def("current_device", &current_device);
    sub.def(
        "tensor_info",
        [](const py::object &obj, uint64_t stream) {
            TensorInfo t = tensor_info(obj, stream);
            py::dict d;
            d["ptr"] = t.ptr;
            d["shape"] = py::tuple(py::cast(t.shape));
            d["strides"] = t.strides.empty() ? py::object(py::none()) : py::object(py::tuple(py::cast(t.strides)));
            d["typestr"] = t.typestr;
            d["device"] = t.device;
            d["readonly"] = t.readonly;
            d["protocol"] = t.protocol;
            d["keep"] = t.keep ? t.keep : py::object(py::none());
            return d;
        },
        py::arg("obj"), py::arg("stream") = 0,
        "Pointer, shape, byte strides, typestr, device of a __cuda_array_interface__ or __dlpack__ CUDA tensor "
        "(ordered before `stream`); 'keep' must outlive the use of the pointer.");
    py::class_<DeviceArray, std::shared_ptr<DeviceArray>>(sub, "DeviceArray",
        "A C-contiguous array in CUDA device memory returned by lmtail (float32, uint32 or int32): hand it to "
        "torch.from_dlpack / cupy.from_dlpack / anything reading __cuda_array_interface__, or copy it to the host "
        "with .numpy().")
        .def_static(
            "from_numpy",
            [](const py::array &a) {
                const char k = a.dtype().kind();
                if (a.dtype().itemsize() != 4 || (k != 'f' && k != 'u' && k != 'i'))
                    throw lmt::bind::DTypeError("DeviceArray.from_numpy: expected float32, uint32 or int32");
                std::vector<int64_t> shp(a.shape(), a.shape() + a.ndim());
                auto d = std::make_shared<DeviceArray>(shp, k);
                const py::array c = py::array::ensure(a, py::array::c_style);
                check(cudaMemcpy(d->data(), c.data(), d->bytes(), cudaMemcpyHostToDevice));
                return d;
            },
            py::arg("a"), "Upload a host array (a copy).")
        .def_property_readonly("shape", [](const DeviceArray &a) { return py::tuple(py::cast(a.shape)); })
        .def_property_readonly("dtype", [](const DeviceArray &a) { return py::dtype(a.typestr()); })
        .def_property_readonly("ptr", [](const DeviceArray &a) { return (uint64_t)a.mem.get(); })
        .def_property_readonly("device", [](const DeviceArray &a) { return a.device; })
        .def_property_readonly("__cuda_array_interface__", [](const DeviceArray &a) {
            py::dict d;
            d["shape"] = py::tuple(py::cast(a.shape));
            d["typestr"] = a.typestr();
            d["data"] = py::make_tuple((uint64_t)a.mem.get(), false);
            d["strides"] = py::none();
            d["version"] = 3;
            d["stream"] = py::none();  // complete when lmtail returned it (each call synchronises)
            return d;
        })
        .def("__dlpack__", [](const DeviceArray &a, const py::object &, const py::object &, const py::object &,
                              const py::object &) { return to_dlpack(a); },
             py::arg("stream") = py::none(), py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
             py::arg("copy") = py::none())
        .def("__dlpack_device__", [](const DeviceArray &a) { return py::make_tuple(2, a.device); })
        .def("numpy", [](const DeviceArray &a) {
            py::array out(py::dtype(a.typestr()), a.shape);
            check(cudaMemcpy(out.mutable_data(), a.mem.get(), a.bytes(), cudaMemcpyDeviceToHost));
            return out;
        }, "A host copy.")
        .def("__repr__", [](const DeviceArray &a) {
            return "DeviceArray(shape=" + std::string(py::str(py::tuple(py::cast(a.shape)))) + ", dtype=" +
                   std::string(py::str(py::dtype(a.typestr()))) + ", device=cuda:" + std::to_string(a.device) + ")";
        });
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
    // x: a device pointer to T x cols float32 rows (checked by lmtail._validate.cuda_tensor);
    // the result stays on the device.
    sub.def("matvec_device", [](const py::array &w, int type, int64_t cols, uint64_t xptr, int64_t T, bool flat) {
        lmt::cuda::check_mul_mv_shape(type, (int)cols);
        const int64_t rows = dim(w, 0, "w");
        const size_t row_bytes = lmt::cuda::mul_mv_row_bytes(type, (int)cols);
        const size_t dev_stride = (row_bytes + 15) / 16 * 16;
        DevBuf dw(rows * dev_stride);
        check(cudaMemcpy2D(dw.p, dev_stride, w.data(), rows > 1 ? (size_t)w.strides(0) : row_bytes, row_bytes, rows,
                           cudaMemcpyHostToDevice));
        const float *x = reinterpret_cast<const float *>(xptr);
        DevBuf aligned(xptr % 16 ? T * cols * 4 : 0);  // the kernels' vector loads want 16-byte rows
        if (xptr % 16) {
            check(cudaMemcpy(aligned.p, x, T * cols * 4, cudaMemcpyDeviceToDevice));
            x = aligned.as<float>();
        }
        auto out = std::make_shared<DeviceArray>(flat ? std::vector<int64_t>{rows} : std::vector<int64_t>{T, rows}, 'f');
        lmt::cuda::launch_mul_mv(type, dw.as<uint8_t>(), dev_stride, (int)rows, (int)cols, x, (int)T, out->data(), 0);
        check(cudaDeviceSynchronize());
        return out;
    }, py::arg("w"), py::arg("type"), py::arg("cols"), py::arg("x"), py::arg("T"), py::arg("flat") = false);
    // Grammar masks on device logits (pointers checked by lmtail.grammar.apply_bitmask): the
    // mask is device memory (mask_ptr) or a host int32 array uploaded first (rows x W words).
    sub.def("apply_bitmask_device", [](uint64_t xptr, int64_t rows, int64_t V, uint64_t mask_ptr,
                                       const py::object &host_mask, uint64_t stream) {
        const int64_t W = (V + 31) / 32;
        DevBuf dm(mask_ptr ? 0 : rows * W * 4);
        const int32_t *m = reinterpret_cast<const int32_t *>(mask_ptr);
        const cudaStream_t s = as_stream(stream);
        if (!mask_ptr) {
            const py::array a = host_mask.cast<py::array>();
            if (a.size() != rows * W || !(a.flags() & py::array::c_style))
                throw lmt::ArgumentError("apply_bitmask_device: host mask must be C-contiguous rows x W int32");
            check(cudaMemcpyAsync(dm.p, a.data(), rows * W * 4, cudaMemcpyHostToDevice, s));
            m = dm.as<int32_t>();
        }
        lmt::cuda::launch_apply_bitmask(reinterpret_cast<float *>(xptr), m, (int)rows, V, s);
        check(cudaStreamSynchronize(s));  // dm and the caller's views may go when this returns
    }, py::arg("logits"), py::arg("rows"), py::arg("V"), py::arg("mask_ptr"), py::arg("host_mask"),
       py::arg("stream") = 0);
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
        const std::lock_guard<std::mutex> lock(lmt::cuda::selection_lock());
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
        const std::lock_guard<std::mutex> lock(lmt::cuda::selection_lock());
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
        // hidden: a device pointer to T x cols float32 rows, C-contiguous (checked by the caller,
        // lmtail._validate.cuda_tensor, which also keeps the producer's object alive).
        .def("run_tail_device",
             [](lmt::cuda::DeviceHead &h, uint64_t ptr, int T, bool check_latch) {
                 py::gil_scoped_release nogil;
                 return h.run_tail(reinterpret_cast<const float *>(ptr), T, check_latch, true);
             },
             py::arg("ptr"), py::arg("T"), py::arg("check_latch") = true)
        .def("set_stream", [](lmt::cuda::DeviceHead &h, uint64_t s) { h.set_stream(as_stream(s)); }, py::arg("stream"))
        .def("logits_device",
             [](lmt::cuda::DeviceHead &h, int T) {
                 auto d = std::make_shared<DeviceArray>(std::vector<int64_t>{T, h.rows()}, 'f');
                 {
                     py::gil_scoped_release nogil;
                     h.copy_logits_device(d->data(), T);
                 }
                 return d;
             },
             py::arg("T"), "The last tail's T x rows capped logits as a fresh DeviceArray (device to device).")
        .def("stored_logits_finite",
             [](lmt::cuda::DeviceHead &h, int T) {
                 py::gil_scoped_release nogil;
                 return h.stored_logits_finite(T);
             },
             py::arg("T"))
        .def("copy_logits_to",
             [](lmt::cuda::DeviceHead &h, uint64_t ptr, int T) {
                 py::gil_scoped_release nogil;
                 h.copy_logits_device(reinterpret_cast<float *>(ptr), T);
             },
             py::arg("ptr"), py::arg("T"), "The last tail's capped logits into T x rows float32 device memory.")
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
