// Bindings of the sampler hot loops (functions lmtail._core.sampling_*), used by
// python/lmtail/sampling. Each takes the candidate buffer (a 1-D numpy array of 12-byte records
// laid out like llama_token_data) plus the [offset, offset + size) window the chain is using,
// re-checks everything it dereferences, and releases the GIL around the loop.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bindings/array_args.hpp"
#include "core/thread_pool.hpp"
#include "cpu/sampling.hpp"
#include "cpu/speculative.hpp"
#include "lmtail/cpu.hpp"

namespace py = pybind11;
namespace smp = lmt::sampling;

namespace {

smp::TokenData *window(const py::array &buf, size_t offset, size_t size, bool writable = true) {
    if (buf.ndim() != 1 || buf.itemsize() != (py::ssize_t)sizeof(smp::TokenData))
        throw lmt::ArgumentError("candidates: expected a 1-D array of 12-byte token records; found ndim=" +
                                 std::to_string(buf.ndim()) + " itemsize=" + std::to_string(buf.itemsize()));
    if (!(buf.flags() & py::array::c_style)) throw lmt::ArgumentError("candidates: expected a C-contiguous buffer");
    if (writable && !buf.writeable()) throw lmt::ArgumentError("candidates: expected a writable buffer");
    if (offset > (size_t)buf.shape(0) || size > (size_t)buf.shape(0) - offset)
        throw lmt::ArgumentError("candidates: window [" + std::to_string(offset) + ", " +
                                 std::to_string(offset + size) + ") exceeds the buffer of " +
                                 std::to_string(buf.shape(0)));
    return static_cast<smp::TokenData *>(const_cast<void *>(buf.data())) + offset;
}

template <typename T>
const T *vec_of(const py::array &a, const char *name) {
    if (!lmt::bind::dtype_matches<T>(a.dtype()) || a.ndim() != 1 || !(a.flags() & py::array::c_style) ||
        !lmt::bind::is_aligned(a)) {
        lmt::bind::check_dtype<T>(a, name);  // names a byte-swapped dtype precisely
        throw lmt::ArgumentError(std::string(name) + ": expected a C-contiguous, aligned 1-D array of " +
                                 std::string(py::str(py::dtype::of<T>())) + "; found " +
                                 std::string(py::str(a.dtype())) + " with ndim " + std::to_string(a.ndim()));
    }
    return static_cast<const T *>(a.data());
}

// An optional second probability row (None -> nullptr) of the same length V as the first.
const float *optional_row(const py::object &q, size_t V) {
    if (q.is_none()) return nullptr;
    py::array qa = q.cast<py::array>();
    const float *qq = vec_of<float>(qa, "q");
    if ((size_t)qa.shape(0) != V) throw lmt::ArgumentError("q: expected the length of p");
    return qq;
}

void need_nonempty(size_t size, const char *what) {
    if (size == 0) throw lmt::ArgumentError(std::string(what) + ": the candidate array is empty");
}

// The logits of sampling_run_rows / SamplingRows: 2-D float32 with contiguous, aligned rows.
void check_rows_logits(const py::array &x) {
    lmt::bind::check_dtype<float>(x, "logits");
    if (x.ndim() != 2 || x.strides(1) != (py::ssize_t)sizeof(float) || !lmt::bind::is_aligned(x) ||
        x.strides(0) % (py::ssize_t)sizeof(float) != 0 || x.shape(1) == 0)
        throw lmt::ArgumentError("logits: expected a 2-D float32 array with non-empty, contiguous, aligned rows");
}

// One (row index, candidate buffer, ops, mask or None) tuple into a RowPlan, every argument
// checked (with the GIL held). The arrays it points into are appended to `keep`.
void parse_row(smp::RowPlan &pl, const py::array &x, const py::handle &item, std::vector<py::object> &keep) {
    const size_t B = (size_t)x.shape(0), n = (size_t)x.shape(1);
    py::tuple t = item.cast<py::tuple>();
    if (t.size() != 4) throw lmt::ArgumentError("rows: expected (row, buffer, ops, mask) tuples");
    const int64_t r = t[0].cast<int64_t>();
    if (r < 0 || (size_t)r >= B) throw lmt::ArgumentError("rows: row index out of range");
    pl.x = reinterpret_cast<const float *>(static_cast<const char *>(x.data()) + r * x.strides(0));
    pl.n = n;
    py::array buf = t[1].cast<py::array>();
    pl.d = window(buf, 0, n);
    keep.push_back(buf);
    if (!t[3].is_none()) {
        py::array mk = t[3].cast<py::array>();
        if (mk.ndim() != 1 || (size_t)mk.shape(0) != n || mk.itemsize() != 1 || mk.dtype().kind() != 'b' ||
            !(mk.flags() & py::array::c_style))
            throw lmt::ArgumentError("mask: expected a C-contiguous bool array of n_vocab entries");
        keep.push_back(mk);
        pl.mask = static_cast<const uint8_t *>(mk.data());
    }
    py::list ops = t[2].cast<py::list>();
    if (py::len(ops) > 64) throw lmt::ArgumentError("ops: at most 64 per row");
    pl.ops.resize(py::len(ops));
    for (size_t j = 0; j < pl.ops.size(); ++j) {
        py::tuple o = ops[j].cast<py::tuple>();
        if (o.size() == 0) throw lmt::ArgumentError("ops: expected (kind, ...) tuples");
        smp::RowOp &op = pl.ops[j];
        op.kind = o[0].cast<int32_t>();
        auto need = [&](size_t k) {
            if (o.size() != k)
                throw lmt::ArgumentError("ops: op " + std::to_string(op.kind) + " expects " + std::to_string(k - 1) +
                                         " arguments");
        };
        auto f = [&](size_t k) { return (float)o[k].cast<double>(); };
        switch (op.kind) {
        case smp::kOpPenalties: {
            need(6);
            py::array c = o[1].cast<py::array>();
            op.counts = vec_of<int32_t>(c, "counts");
            op.n_counts = (size_t)c.shape(0);
            keep.push_back(c);
            op.ids = o[2].cast<std::vector<int32_t>>();  // read only while the array is fresh
            op.f0 = f(3), op.f1 = f(4), op.f2 = f(5);
            break;
        }
        case smp::kOpBias:
            need(3);
            op.ids = o[1].cast<std::vector<int32_t>>();
            op.vals = o[2].cast<std::vector<float>>();
            if (op.ids.size() != op.vals.size()) throw lmt::ArgumentError("ops: bias ids and values differ in length");
            for (size_t q = 0; q < j; ++q)
                if (pl.ops[q].kind != smp::kOpPenalties && pl.ops[q].kind != smp::kOpBias)
                    throw lmt::ArgumentError("ops: a logit-bias op must come before every other kind");
            break;
        case smp::kOpTopK:
            need(2);
            op.z0 = o[1].cast<size_t>();
            if (op.z0 == 0) throw lmt::ArgumentError("ops: top-k needs k > 0");
            break;
        case smp::kOpTopP:
        case smp::kOpMinP:
        case smp::kOpTypical:
            need(3);
            op.f0 = f(1);
            op.z0 = o[2].cast<size_t>();
            break;
        case smp::kOpTemp:
        case smp::kOpTopNSigma:
            need(2);
            op.f0 = f(1);
            break;
        case smp::kOpTempExtDyn:
            need(4);
            op.f0 = f(1), op.f1 = f(2), op.f2 = f(3);
            break;
        case smp::kOpGreedy:
        case smp::kOpGreedyFresh:
            need(1);
            break;
        case smp::kOpDist:
            need(2);
            op.u = o[1].cast<double>();
            break;
        default:
            throw lmt::ArgumentError("ops: unknown op kind " + std::to_string(op.kind));
        }
    }
}

// (offset, size, selected, sorted, used, error) of a row that has run: used has bit j set when
// op j consumed its draw.
py::tuple row_result(const smp::RowPlan &pl) {
    uint64_t used = 0;
    for (size_t j = 0; j < pl.ops.size(); ++j)
        if (pl.ops[j].used) used |= (uint64_t)1 << j;
    return py::make_tuple(pl.offset, pl.size, pl.selected, pl.sorted, used, pl.error);
}

// lmtail._core.SamplingRows: a RowsJob and the Python objects its rows point into (released
// only after close(): no thread touches them then).
struct PyRowsJob {
    py::array x;
    smp::RowsJob job;
    size_t n, added = 0;
    std::vector<py::object> keep;
    bool closed = false;
    PyRowsJob(py::array x_, size_t n_, int threads) : x(std::move(x_)), job(n_, threads), n(n_) {}
    ~PyRowsJob() { job.close(); }
};

}  // namespace

void bind_sampling(py::module_ &m) {
    m.def("sampling_fill",
          [](py::array buf, py::array logits) {
              const float *l = vec_of<float>(logits, "logits");
              const size_t n = (size_t)logits.shape(0);
              smp::TokenData *d = window(buf, 0, n);
              py::gil_scoped_release nogil;
              smp::fill(d, l, n);
          },
          py::arg("buf"), py::arg("logits"), "buf[i] = {id=i, logit=logits[i], p=0} for every logit");
    m.def("sampling_greedy",
          [](py::array buf, size_t off, size_t n) {
              need_nonempty(n, "greedy");
              smp::TokenData *d = window(buf, off, n, false);
              py::gil_scoped_release nogil;
              return smp::greedy(d, n);
          }, py::arg("buf"), py::arg("off"), py::arg("n"));
    m.def("sampling_temperature", [](py::array buf, size_t off, size_t n, float t) {
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        smp::temperature(d, n, t);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("t"));
    m.def("sampling_sort", [](py::array buf, size_t off, size_t n, size_t npartial) {
        if (npartial > n) throw lmt::ArgumentError("sort: npartial exceeds the size");
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        smp::sort_desc_inplace(d, n, npartial);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("npartial"));
    m.def("sampling_bucket_sort", [](py::array buf, size_t off, size_t n, size_t npartial) {
        if (npartial > n || npartial == 0) throw lmt::ArgumentError("bucket sort: need 0 < npartial <= size");
        smp::TokenData *d = window(buf, off, n, false);
        std::vector<smp::TokenData> out;
        {
            py::gil_scoped_release nogil;
            smp::bucket_sort_desc(d, n, npartial, out);
        }
        py::array res(buf.dtype(), std::vector<py::ssize_t>{(py::ssize_t)out.size()});
        std::memcpy(res.mutable_data(), out.data(), out.size() * sizeof(smp::TokenData));
        return res;
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("npartial"));
    m.def("sampling_softmax", [](py::array buf, size_t off, size_t n, bool sorted) {
        need_nonempty(n, "softmax");
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        smp::softmax(d, n, sorted);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("sorted"));
    m.def("sampling_dist", [](py::array buf, size_t off, size_t n, bool sorted, double u) {
        if (n < 2) throw lmt::ArgumentError("dist kernel: needs at least 2 candidates");
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        return smp::dist(d, n, sorted, u);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("sorted"), py::arg("u"));
    m.def("sampling_top_p", [](py::array buf, size_t off, size_t n, bool sorted, float p, size_t min_keep) {
        need_nonempty(n, "top_p");
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        return smp::top_p(d, n, sorted, p, min_keep);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("sorted"), py::arg("p"), py::arg("min_keep"));
    m.def("sampling_min_p", [](py::array buf, size_t off, size_t n, bool sorted, float p, size_t min_keep) {
        need_nonempty(n, "min_p");
        smp::TokenData *d = window(buf, off, n);
        size_t k;
        {
            py::gil_scoped_release nogil;
            k = smp::min_p(d, n, &sorted, p, min_keep);
        }
        return py::make_tuple(k, sorted);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("sorted"), py::arg("p"), py::arg("min_keep"));
    m.def("sampling_typical", [](py::array buf, size_t off, size_t n, float p, size_t min_keep) {
        need_nonempty(n, "typical");
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        return smp::typical(d, n, p, min_keep);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("p"), py::arg("min_keep"));
    m.def("sampling_temp_ext_dynamic", [](py::array buf, size_t off, size_t n, float t, float delta, float e) {
        if (n < 2) throw lmt::ArgumentError("temp_ext kernel: needs at least 2 candidates");
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        smp::temp_ext_dynamic(d, n, t, delta, e);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("t"), py::arg("delta"), py::arg("e"));
    m.def("sampling_xtc_shift", [](py::array buf, size_t off, size_t n, float threshold, size_t min_keep) {
        smp::TokenData *d = window(buf, off, n, false);
        return smp::xtc_shift(d, n, threshold, min_keep);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("threshold"), py::arg("min_keep"));
    m.def("sampling_top_n_sigma", [](py::array buf, size_t off, size_t n, float nsigma) {
        need_nonempty(n, "top_n_sigma");
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        smp::top_n_sigma(d, n, nsigma);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("nsigma"));
    m.def("sampling_mirostat_k", [](py::array buf, size_t off, size_t n, int32_t m_, int32_t n_vocab, float mu) {
        need_nonempty(n, "mirostat");
        smp::TokenData *d = window(buf, off, n, false);
        return smp::mirostat_k(d, n, m_, n_vocab, mu);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("m"), py::arg("n_vocab"), py::arg("mu"));
    m.def("sampling_mirostat_v2_cut", [](py::array buf, size_t off, size_t n, float mu) {
        smp::TokenData *d = window(buf, off, n, false);
        return smp::mirostat_v2_cut(d, n, mu);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("mu"));
    m.def("sampling_mirostat_mu", &smp::mirostat_mu, py::arg("mu"), py::arg("eta"), py::arg("tau"), py::arg("p"));
    m.def("sampling_penalties", [](py::array buf, size_t off, size_t n, py::array counts, float repeat, float freq,
                                   float present) {
        smp::TokenData *d = window(buf, off, n);
        const int32_t *c = vec_of<int32_t>(counts, "counts");
        const size_t nc = (size_t)counts.shape(0);
        py::gil_scoped_release nogil;
        smp::penalties(d, n, c, nc, repeat, freq, present);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("counts"), py::arg("repeat"), py::arg("freq"), py::arg("present"));
    m.def("sampling_dry", [](py::array buf, size_t off, size_t n, py::array max_len, float mult, float base,
                             int32_t allowed) {
        smp::TokenData *d = window(buf, off, n);
        const int32_t *ml = vec_of<int32_t>(max_len, "max_len");
        const size_t nl = (size_t)max_len.shape(0);
        py::gil_scoped_release nogil;
        smp::dry(d, n, ml, nl, mult, base, allowed);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("max_len"), py::arg("mult"), py::arg("base"), py::arg("allowed"));
    m.def("sampling_adaptive_transform", [](py::array buf, size_t off, size_t n, float target) {
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        smp::adaptive_transform(d, n, target);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("target"));
    m.def("sampling_discrete", [](py::array buf, size_t off, size_t n, double u, bool libcxx) {
        need_nonempty(n, "discrete");
        smp::TokenData *d = window(buf, off, n, false);
        py::gil_scoped_release nogil;
        return smp::discrete(d, n, u, libcxx);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("u"), py::arg("libcxx"));
    m.def("sampling_server_probs", [](py::array buf, size_t off, size_t n, size_t n_top) {
        need_nonempty(n, "server_probs");
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        smp::server_probs(d, n, n_top);
    }, py::arg("buf"), py::arg("off"), py::arg("n"), py::arg("n_top"));
    m.def("sampling_sort_by_p", [](py::array buf, size_t off, size_t n) {
        smp::TokenData *d = window(buf, off, n);
        py::gil_scoped_release nogil;
        smp::sort_by_p_desc(d, n);
    }, py::arg("buf"), py::arg("off"), py::arg("n"));
    // Fresh-array kernels (fill fused with the chain's first sampler).
    m.def("sampling_greedy_fresh", [](py::array logits) {
        const float *x = vec_of<float>(logits, "logits");
        const size_t n = (size_t)logits.shape(0);
        need_nonempty(n, "greedy");
        py::gil_scoped_release nogil;
        return smp::greedy_fresh(x, n);
    }, py::arg("logits"));
    m.def("sampling_fill_top_k", [](py::array buf, py::array logits, size_t k) {
        const float *x = vec_of<float>(logits, "logits");
        const size_t n = (size_t)logits.shape(0);
        if (k == 0 || k > n) throw lmt::ArgumentError("fill_top_k: need 0 < k <= n");
        smp::TokenData *d = window(buf, 0, n);
        py::gil_scoped_release nogil;
        smp::fill_top_k(d, x, n, k);
    }, py::arg("buf"), py::arg("logits"), py::arg("k"));
    m.def("sampling_fill_min_p", [](py::array buf, py::array logits, float p, size_t min_keep) {
        const float *x = vec_of<float>(logits, "logits");
        const size_t n = (size_t)logits.shape(0);
        need_nonempty(n, "min_p");
        smp::TokenData *d = window(buf, 0, n);
        bool sorted = false;
        size_t k;
        {
            py::gil_scoped_release nogil;
            k = smp::fill_min_p(d, x, n, p, min_keep, &sorted);
        }
        return py::make_tuple(k, sorted);
    }, py::arg("buf"), py::arg("logits"), py::arg("p"), py::arg("min_keep"));
    m.def("sampling_fill_temperature", [](py::array buf, py::array logits, float t) {
        const float *x = vec_of<float>(logits, "logits");
        const size_t n = (size_t)logits.shape(0);
        smp::TokenData *d = window(buf, 0, n);
        py::gil_scoped_release nogil;
        smp::fill_temperature(d, x, n, t);
    }, py::arg("buf"), py::arg("logits"), py::arg("t"));
    m.def("sampling_fill_penalties", [](py::array buf, py::array logits, py::array counts, float repeat, float freq,
                                        float present) {
        const float *x = vec_of<float>(logits, "logits");
        const size_t n = (size_t)logits.shape(0);
        const int32_t *c = vec_of<int32_t>(counts, "counts");
        const size_t nc = (size_t)counts.shape(0);
        smp::TokenData *d = window(buf, 0, n);
        py::gil_scoped_release nogil;
        smp::fill_penalties(d, x, n, c, nc, repeat, freq, present);
    }, py::arg("buf"), py::arg("logits"), py::arg("counts"), py::arg("repeat"), py::arg("freq"), py::arg("present"));
    // Many rows in one call (lmtail.common_sampling.common_sample_rows): rows is a list of
    // (row index into x, candidate buffer, ops, mask or None); every argument is checked here, with
    // the GIL held, then the rows run on the pool without it. Returns row_result() per row.
    m.def("sampling_run_rows", [](py::array x, py::list rows, int threads) {
        check_rows_logits(x);
        const size_t nr = (size_t)py::len(rows);
        std::vector<smp::RowPlan> plans(nr);
        std::vector<py::object> keep;
        for (size_t i = 0; i < nr; ++i) parse_row(plans[i], x, rows[i], keep);
        {
            py::gil_scoped_release nogil;
            smp::run_rows(plans.data(), plans.size(), lmt::core::resolve_threads(threads));
        }
        py::list out(nr);
        for (size_t i = 0; i < nr; ++i) out[i] = row_result(plans[i]);
        return out;
    }, py::arg("x"), py::arg("rows"), py::arg("threads"));
    // The same rows, started as they are added (helpers run them while the caller plans the
    // next row or finishes the last one): add(row tuple) in order, result(k) for k in order,
    // close() (also on destruction) before the arrays go away.
    py::class_<PyRowsJob>(m, "SamplingRows")
        .def(py::init([](py::array x, size_t n, int threads) {
                 check_rows_logits(x);
                 if (n == 0) throw lmt::ArgumentError("SamplingRows: expected at least one row");
                 return new PyRowsJob(x, n, lmt::core::resolve_threads(threads));
             }),
             py::arg("x"), py::arg("n"), py::arg("threads"))
        .def("add", [](PyRowsJob &j, py::handle item) {
            if (j.closed) throw lmt::ArgumentError("SamplingRows: closed");
            if (j.added >= j.n) throw lmt::ArgumentError("SamplingRows: every row is already added");
            parse_row(j.job.slot(j.added), j.x, item, j.keep);
            j.job.add(j.added++);
        }, py::arg("row"))
        .def("result", [](PyRowsJob &j, size_t k) {
            if (j.closed) throw lmt::ArgumentError("SamplingRows: closed");
            if (k >= j.added) throw lmt::ArgumentError("SamplingRows: row " + std::to_string(k) + " was not added");
            const smp::RowPlan *pl;
            {
                py::gil_scoped_release nogil;
                pl = &j.job.wait(k);
            }
            return row_result(*pl);
        }, py::arg("k"))
        .def("close", [](PyRowsJob &j) {
            {
                py::gil_scoped_release nogil;
                j.job.close();
            }
            j.closed = true;
            j.keep.clear();
        });
    m.def("sampling_set_threads", &smp::set_threads, py::arg("n"));
    m.def("sampling_get_threads", &smp::get_threads);
    // Scalar libm helpers (the platform's, as the reference build calls them).
    m.def("sampling_expf", [](float x) { return expf(x); }, py::arg("x"));
    m.def("sampling_logf", [](float x) { return logf(x); }, py::arg("x"));
    m.def("sampling_log2f", [](float x) { return log2f(x); }, py::arg("x"));
    m.def("sampling_powf", [](float x, float y) { return powf(x, y); }, py::arg("x"), py::arg("y"));
    m.def("sampling_f2i", &smp::float_to_int_like_cpu, py::arg("x"));

    // Speculative verification (python/lmtail/speculative.py): residual weights over an order,
    // the blocked selection walk, and probability-row checks.
    m.def("spec_residual_weights",
          [](py::array p, py::object q, py::object order, py::array out_w, py::object out_blocks, int threads) {
              const float *pp = vec_of<float>(p, "p");
              const size_t V = (size_t)p.shape(0);
              const float *qq = optional_row(q, V);
              // order None: ascending ids (every token, nothing to validate)
              const int32_t *o = order.is_none() ? nullptr : vec_of<int32_t>(order.cast<py::array>(), "order");
              const size_t no = order.is_none() ? V : (size_t)order.cast<py::array>().shape(0);
              if (!out_w.writeable()) throw lmt::ArgumentError("out_w: expected a writable array");
              float *ow = const_cast<float *>(vec_of<float>(out_w, "out_w"));
              if ((size_t)out_w.shape(0) < no) throw lmt::ArgumentError("out_w: expected room for len(order) entries");
              double *ob = nullptr;
              if (!out_blocks.is_none()) {
                  py::array a = out_blocks.cast<py::array>();
                  if (!a.writeable()) throw lmt::ArgumentError("out_blocks: expected a writable array");
                  ob = const_cast<double *>(vec_of<double>(a, "out_blocks"));
                  if ((size_t)a.shape(0) < (no + lmt::spec::kSelectBlock - 1) / lmt::spec::kSelectBlock)
                      throw lmt::ArgumentError("out_blocks: expected room for one sum per 32 weights");
              }
              const int th = lmt::core::resolve_threads(threads);
              py::gil_scoped_release nogil;
              return lmt::spec::residual_weights(pp, qq, V, o, no, ow, ob, th);
          },
          py::arg("p"), py::arg("q"), py::arg("order"), py::arg("out_w"), py::arg("out_blocks") = py::none(),
          py::arg("threads") = 0);
    m.def("spec_residual_support",
          [](py::array p, py::object q) {
              const float *pp = vec_of<float>(p, "p");
              const size_t V = (size_t)p.shape(0);
              const float *qq = optional_row(q, V);
              py::gil_scoped_release nogil;
              return lmt::spec::residual_support(pp, qq, V);
          },
          py::arg("p"), py::arg("q"));
    m.def("spec_select",
          [](py::array w, size_t n, double u, py::object blocks) {
              const float *ww = vec_of<float>(w, "w");
              if (n > (size_t)w.shape(0)) throw lmt::ArgumentError("n exceeds the weights");
              const double *bb = nullptr;
              if (!blocks.is_none()) {
                  py::array a = blocks.cast<py::array>();
                  bb = vec_of<double>(a, "blocks");
                  if ((size_t)a.shape(0) < (n + lmt::spec::kSelectBlock - 1) / lmt::spec::kSelectBlock)
                      throw lmt::ArgumentError("blocks: expected one sum per 32 weights");
              }
              py::gil_scoped_release nogil;
              return lmt::spec::blocked_select(ww, n, u, bb);
          },
          py::arg("w"), py::arg("n"), py::arg("u"), py::arg("blocks") = py::none());
    // Every sparse row of one verify step in one call (the top-k route's per-row cost is Python
    // overhead otherwise): rows is a sequence of (ids int32, probs float32) pairs, toks[i] the
    // token to look up in row i (-1: none). Returns (sums, p_tok, error) with error None or
    // (row, what, value): what = "bad_prob" (value: index), "out_of_range" or "repeated" (value:
    // the id); rows that are not int32/float32 C-contiguous pairs raise ArgumentError.
    m.def("spec_sparse_rows",
          [](py::sequence rows, size_t V, py::sequence toks) -> py::tuple {
              const size_t n = (size_t)py::len(rows);
              py::array_t<double> sums(n);
              py::array_t<float> ptok(n);
              auto s = sums.mutable_unchecked<1>();
              auto pt = ptok.mutable_unchecked<1>();
              const size_t nt = (size_t)py::len(toks);
              for (size_t i = 0; i < n; ++i) {
                  py::object r = rows[i];
                  if (!py::isinstance<py::tuple>(r) || py::len(r) != 2)
                      throw lmt::ArgumentError("row " + std::to_string(i) + ": expected an (ids, probs) pair");
                  py::tuple t = r.cast<py::tuple>();
                  py::array ids = t[0].cast<py::array>(), p = t[1].cast<py::array>();
                  const int32_t *ii = vec_of<int32_t>(ids, "ids");
                  const float *pp = vec_of<float>(p, "probs");
                  if (ids.shape(0) != p.shape(0)) throw lmt::ArgumentError("ids and probs: expected one length");
                  const int64_t tok = i < nt ? toks[i].cast<int64_t>() : -1;
                  const auto info = lmt::spec::sparse_row(ii, pp, (size_t)ids.shape(0), V, tok);
                  if (info.found_bad)
                      return py::make_tuple(sums, ptok,
                                            py::make_tuple(i, std::string(info.repeated ? "repeated" : "out_of_range"),
                                                           (int64_t)info.bad_id));
                  if (info.n_bad) {
                      size_t j = 0;
                      while (j < (size_t)p.shape(0) && pp[j] >= 0.0f && std::fabs(pp[j]) <= FLT_MAX) ++j;
                      return py::make_tuple(sums, ptok, py::make_tuple(i, std::string("bad_prob"), (int64_t)j));
                  }
                  s(i) = info.sum;
                  pt(i) = info.p_tok;
              }
              return py::make_tuple(sums, ptok, py::none());
          },
          py::arg("rows"), py::arg("n_vocab"), py::arg("toks"));
    m.def("spec_accept_run",
          [](const std::vector<double> &p, const std::vector<double> &q, const std::vector<uint32_t> &raw, int stdlib) {
              if (q.size() != p.size() || raw.size() < p.size())
                  throw lmt::ArgumentError("accept_run: expected equal lengths and one raw word per draft");
              return lmt::spec::accept_run(p.data(), q.data(), raw.data(), p.size(), stdlib);
          },
          py::arg("p"), py::arg("q"), py::arg("raw"), py::arg("stdlib"));
    m.def("spec_row_stats",
          [](py::array x, int threads) {
              const float *xx = vec_of<float>(x, "row");
              const size_t n = (size_t)x.shape(0);
              const int th = lmt::core::resolve_threads(threads);
              double sum = 0.0;
              size_t bad = 0;
              {
                  py::gil_scoped_release nogil;
                  lmt::spec::row_stats(xx, n, &sum, &bad, th);
              }
              return py::make_tuple(sum, bad);
          },
          py::arg("row"), py::arg("threads") = 0);
    m.def("spec_rows_stats",
          [](py::array x, int threads) {
              lmt::bind::check_dtype<float>(x, "rows");
              if (x.ndim() != 2 || !(x.flags() & py::array::c_style) || !lmt::bind::is_aligned(x))
                  throw lmt::ArgumentError("rows: expected a C-contiguous 2-D float32 array; found " +
                                           std::string(py::str(x.dtype())) + " with ndim " + std::to_string(x.ndim()));
              const size_t rows = (size_t)x.shape(0), n = (size_t)x.shape(1);
              py::array_t<double> sums((py::ssize_t)rows);
              py::array_t<uint64_t> bads((py::ssize_t)rows);
              std::vector<size_t> nb(rows);
              const int th = lmt::core::resolve_threads(threads);
              {
                  py::gil_scoped_release nogil;
                  lmt::spec::rows_stats(static_cast<const float *>(x.data()), rows, n, n, sums.mutable_data(), nb.data(), th);
              }
              for (size_t r = 0; r < rows; ++r) bads.mutable_data()[r] = nb[r];
              return py::make_tuple(sums, bads);
          },
          py::arg("rows"), py::arg("threads") = 0);
}
