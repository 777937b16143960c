// Binding of the token-bitmask kernel (lmtail._core.bitmask_apply), used by
// python/lmtail/grammar/bitmask.py, which validates shapes first; re-checked here before any
// pointer is dereferenced.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "bindings/array_args.hpp"
#include "cpu/bitmask.hpp"

namespace py = pybind11;

void bind_bitmask(py::module_ &m) {
    m.def(
        "bitmask_apply",
        [](py::array &logits, const py::array &bitmask, int threads) {
            using lmt::bind::check_dtype;
            if (logits.ndim() != 2 || bitmask.ndim() != 2)
                throw lmt::ArgumentError("bitmask_apply: expected 2-D logits and bitmask");
            check_dtype<float>(logits, "logits");
            check_dtype<int32_t>(bitmask, "bitmask");
            const int64_t B = logits.shape(0), V = logits.shape(1), W = (V + 31) / 32;
            if (bitmask.shape(0) != B || bitmask.shape(1) != W)
                throw lmt::ArgumentError("bitmask_apply: bitmask shape must be (" + std::to_string(B) + ", " +
                                         std::to_string(W) + ")");
            if (!logits.writeable()) throw lmt::ArgumentError("logits: expected a writable array");
            if (!lmt::bind::is_aligned(logits) || !lmt::bind::is_aligned(bitmask))
                throw lmt::ArgumentError("bitmask_apply: expected aligned arrays");
            // Rows may be strided (a slice of a wider batch); the elements of a row must be contiguous.
            if ((B > 0 && V > 1 && logits.strides(1) != 4) || (W > 1 && bitmask.strides(1) != 4) ||
                logits.strides(0) % 4 || bitmask.strides(0) % 4 || logits.strides(0) < 0 || bitmask.strides(0) < 0)
                throw lmt::ArgumentError("bitmask_apply: each row must be contiguous (strides)");
            float *x = static_cast<float *>(logits.mutable_data());
            const uint32_t *w = static_cast<const uint32_t *>(bitmask.data());
            const int64_t xs = logits.strides(0) / 4, ws = bitmask.strides(0) / 4;
            py::gil_scoped_release nogil;
            lmt::cpu::apply_bitmask(x, xs, w, ws, B, V, threads);
        },
        py::arg("logits"), py::arg("bitmask"), py::arg("threads") = 0,
        "logits[r, i] = -inf where bit i % 32 of bitmask[r, i // 32] is clear (in place).");
}
