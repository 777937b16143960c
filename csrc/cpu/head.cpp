// lmt::Head (csrc/include/lmtail/head.hpp): the CPU tail as one object. Every stage is an
// existing kernel (rms_norm / layer_norm, cpu::matvec, softcap, the selections), so the bytes
// equal the op-by-op pipeline's; what this file adds is validation, the fail-closed checks
// between stages and publish-after-check into the caller's buffers.
#include "lmtail/head.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "cpu/internal.hpp"

namespace lmt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

[[noreturn]] void bad_arg(const std::string &msg) { throw ArgumentError("Head: " + msg); }

std::string num(float v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", (double)v);
    return buf;
}

// The first non-finite value of an n_rows x n matrix, reported as (row, column): the failure
// path only (the hot path uses the threaded all_finite scan).
[[noreturn]] void nonfinite_at(const char *what, const float *x, int64_t n_rows, int64_t n) {
    for (int64_t i = 0; i < n_rows * n; ++i)
        if (cpu::is_nonfinite(x[i]))
            throw NonFiniteError(std::string(what) + ": non-finite value " + num(x[i]) + " at (" +
                                 std::to_string(i / n) + ", " + std::to_string(i % n) + ")");
    throw NonFiniteError(std::string(what) + ": non-finite value");
}

}  // namespace

HeadWorkspace::HeadWorkspace(float *normed, size_t normed_floats, float *logits, size_t logits_floats)
    : normed_(normed), logits_(logits), normed_cap_(normed ? normed_floats : 0), logits_cap_(logits ? logits_floats : 0),
      owned_(false) {}

void HeadWorkspace::reserve(size_t normed_floats, size_t logits_floats) {
    if (!owned_) {
        if (normed_floats > normed_cap_)
            throw ArgumentError("HeadWorkspace: the normed buffer holds " + std::to_string(normed_cap_) +
                                " floats; this call needs " + std::to_string(normed_floats));
        if (logits_floats > logits_cap_)
            throw ArgumentError("HeadWorkspace: the logits buffer holds " + std::to_string(logits_cap_) +
                                " floats; this call needs " + std::to_string(logits_floats));
        return;
    }
    // Grow both before swapping either in: a bad_alloc leaves the workspace as it was.
    std::vector<float> n2, l2;
    if (normed_floats > own_normed_.size()) n2.resize(normed_floats);
    if (logits_floats > own_logits_.size()) l2.resize(logits_floats);
    if (!n2.empty()) own_normed_.swap(n2);
    if (!l2.empty()) own_logits_.swap(l2);
    normed_ = own_normed_.data();
    logits_ = own_logits_.data();
    normed_cap_ = own_normed_.size();
    logits_cap_ = own_logits_.size();
}

Head::Head(const void *weight, WeightType type, int64_t rows, int64_t cols, size_t row_stride,
           const HeadOptions &o)
    : weight_(static_cast<const uint8_t *>(weight)), type_(type), rows_(rows), cols_(cols), row_stride_(row_stride),
      norm_(o.norm), eps_(o.eps), scale_(o.logit_scale), cap_(o.softcap), four_pass_(o.softcap_four_pass),
      precision_(o.precision), threads_(o.threads) {
    if (!cpu::type_supported(type))
        throw UnsupportedError("Head: weight type " + std::to_string((int)type) + " (" +
                                    weight_type_name(type) + ") is not run by the cpu backend");
    if (!weight) bad_arg("weight is null");
    if (rows < 1 || rows >= ((int64_t)1 << 31))
        bad_arg("rows must be in [1, 2^31) (token ids are 31-bit); found " + std::to_string(rows));
    const size_t row_bytes = cpu::row_bytes(type, cols);  // throws naming the type's block
    if (row_stride < row_bytes)
        bad_arg("row_stride " + std::to_string(row_stride) + " is below the row's " + std::to_string(row_bytes) +
                " bytes");
    if (o.norm != NormKind::None && o.norm != NormKind::Rms && o.norm != NormKind::Layer)
        bad_arg("norm: unknown kind " + std::to_string((int)o.norm));
    if (o.gamma) {
        if (o.norm == NormKind::None) bad_arg("gamma given without a norm (NormKind::None)");
        gamma_.assign(o.gamma, o.gamma + cols);
        for (int64_t i = 0; i < cols; ++i)
            if (!std::isfinite(gamma_[(size_t)i]))
                bad_arg("gamma[" + std::to_string(i) + "] = " + num(gamma_[(size_t)i]) + " is not finite");
    }
    if (!std::isfinite(o.eps) || o.eps < 0.0f) bad_arg("eps must be finite and >= 0; found " + num(o.eps));
    if (!std::isfinite(o.logit_scale) || o.logit_scale == 0.0f)
        bad_arg("logit_scale must be finite and != 0; found " + num(o.logit_scale));
    if (!std::isfinite(o.softcap) || o.softcap < 0.0f)
        bad_arg("softcap must be finite and >= 0 (0 disables the cap); found " + num(o.softcap));
    if (precision_ == cpu::Precision::Default) precision_ = cpu::default_precision(type);
    const int pi = (int)precision_;
    if (pi < 0 || pi > 31 || !(cpu::type_precisions(type) & (1u << pi)))
        throw UnsupportedError(std::string("Head: precision ") + cpu::precision_name(precision_) +
                                    " is not run for " + weight_type_name(type) + " on the cpu backend");
    if (o.threads < 0 || o.threads > kMaxThreads)
        bad_arg("threads must be 0 (default) or in [1, " + std::to_string(kMaxThreads) + "]; found " +
                std::to_string(o.threads));
}

void Head::tail(const float *hidden, int64_t T, HeadWorkspace &ws) const {
    ws.computed_T_ = 0;  // a failure below leaves no rows to read back
    if (!hidden) bad_arg("hidden is null");
    if (T < 1) bad_arg("T must be >= 1; found " + std::to_string(T));
    if (T > std::numeric_limits<int64_t>::max() / (rows_ > cols_ ? rows_ : cols_) / 4)
        bad_arg("T = " + std::to_string(T) + " is too large");
    ws.reserve(norm_ != NormKind::None ? (size_t)(T * cols_) : 0, (size_t)(T * rows_));
    float *logits = ws.logits_;
    const auto t0 = Clock::now();
    if (!cpu::all_finite(hidden, T * cols_, threads_)) nonfinite_at("hidden", hidden, T, cols_);
    const float *x = hidden;
    const float *g = gamma_.empty() ? nullptr : gamma_.data();
    if (norm_ == NormKind::Rms) {
        cpu::rms_norm(hidden, g, ws.normed_, T, cols_, eps_);
        x = ws.normed_;
    } else if (norm_ == NormKind::Layer) {
        cpu::layer_norm(hidden, g, ws.normed_, T, cols_, eps_);
        x = ws.normed_;
    }
    const auto t1 = Clock::now();
    cpu::matvec(type_, weight_, rows_, cols_, row_stride_, x, T, logits, threads_, cpu::Isa::Auto, precision_);
    const auto t2 = Clock::now();
    // Before the cap: tanh maps +inf to a finite cap, which would hide an overflow.
    if (!cpu::all_finite(logits, T * rows_, threads_)) nonfinite_at("logits before the soft cap", logits, T, rows_);
    cpu::softcap(logits, T * rows_, scale_, cap_, four_pass_, threads_);
    if (!cpu::all_finite(logits, T * rows_, threads_)) nonfinite_at("logits after scale/soft cap", logits, T, rows_);
    const auto t3 = Clock::now();
    ws.timings_ = HeadTimings{seconds(t0, t1), seconds(t1, t2), seconds(t2, t3), 0.0};
    ws.computed_T_ = T;
}

void Head::logits(const float *hidden, int64_t T, float *out, HeadWorkspace &ws) const {
    if (!out) bad_arg("out is null");
    tail(hidden, T, ws);
    if (out != ws.logits_) std::memcpy(out, ws.logits_, (size_t)(T * rows_) * sizeof(float));
}

void Head::logits(const float *hidden, int64_t T, float *out) const {
    HeadWorkspace ws;
    logits(hidden, T, out, ws);
}

void Head::greedy(const float *hidden, int64_t T, uint32_t *out, HeadWorkspace &ws, const uint32_t *excluded,
                  int64_t n_excluded) const {
    if (!out) bad_arg("out is null");
    if (n_excluded < 0 || (n_excluded > 0 && !excluded)) bad_arg("excluded: null or a negative count");
    std::vector<uint32_t> excl(excluded, excluded + n_excluded);
    for (uint32_t id : excl)
        if ((int64_t)id >= rows_)
            bad_arg("excluded: token id " + std::to_string(id) + " out of range [0, " + std::to_string(rows_) + ")");
    std::sort(excl.begin(), excl.end());
    excl.erase(std::unique(excl.begin(), excl.end()), excl.end());
    if ((int64_t)excl.size() >= rows_)
        bad_arg("excluded: excludes all " + std::to_string(rows_) + " token ids; nothing left to choose");
    tail(hidden, T, ws);
    const auto t0 = Clock::now();
    std::vector<uint32_t> ids((size_t)T);
    cpu::greedy_argmax_rows(ws.logits_, T, rows_, excl.data(), (int64_t)excl.size(), ids.data(), threads_);
    for (int64_t t = 0; t < T; ++t)
        if ((int64_t)ids[(size_t)t] >= rows_) {  // unreachable after the checks: kept fail-closed
            ws.computed_T_ = 0;
            throw NonFiniteError("greedy: row " + std::to_string(t) + " returned no valid token (latch " +
                                 std::to_string(ids[(size_t)t]) + ")");
        }
    std::copy(ids.begin(), ids.end(), out);
    ws.timings_.select = seconds(t0, Clock::now());
}

void Head::greedy(const float *hidden, int64_t T, uint32_t *out, const uint32_t *excluded, int64_t n_excluded) const {
    HeadWorkspace ws;
    greedy(hidden, T, out, ws, excluded, n_excluded);
}

void Head::topk(const float *hidden, int64_t T, int64_t k, uint32_t *ids, float *values, HeadWorkspace &ws) const {
    if (!ids || !values) bad_arg("ids / values is null");
    if (k < 1 || k > rows_) bad_arg("k must be in [1, " + std::to_string(rows_) + "]; found " + std::to_string(k));
    tail(hidden, T, ws);
    // The capped logits are all finite here, so the selection cannot fail but for memory.
    const auto t0 = Clock::now();
    cpu::topk_rows(ws.logits_, T, rows_, k, ids, values, threads_);
    ws.timings_.select = seconds(t0, Clock::now());
}

void Head::topk(const float *hidden, int64_t T, int64_t k, uint32_t *ids, float *values) const {
    HeadWorkspace ws;
    topk(hidden, T, k, ids, values, ws);
}

}  // namespace lmt
