// lmtail C++ Head: the whole LM-head tail behind one object, failing closed.
//
//   final norm (none / RMS / Layer, optional gamma) -> head matvec -> x * logit_scale
//   -> soft cap (llama.cpp's four nodes) -> logits, greedy token, or top-k candidates
//
// The same implementation backs lmtail.Head(backend="cpu") in Python, so the fail-closed rules
// live in one place: a non-finite hidden value, a norm whose mean of squares (or variance)
// overflows float, a non-finite logit before the cap (tanh would hide +inf) or after it throws
// lmt::NonFiniteError, and the caller's output buffers are then left untouched (the tail runs
// in a workspace and is published only after every check passed).
//
// Threads: a Head is immutable after construction and its compute methods are const, so one
// Head may serve several threads at once provided each thread uses its own HeadWorkspace (or
// the overloads without one, which use a per-call workspace). Parallel regions of concurrent
// calls are serialised by the core's thread pool; calls with threads = 1 run fully in parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lmtail/cpu.hpp"

namespace lmt {


// The final norm applied to each hidden row before the head.
//   None:  the hidden rows arrive normalised (gamma must then be null).
//   Rms:   x / sqrt(mean(x^2) + eps) * gamma          (lmt::cpu::rms_norm, ggml's arithmetic)
//   Layer: (x - mean) / sqrt(var + eps) * gamma, no bias (lmt::cpu::layer_norm)
enum class NormKind : int { None = 0, Rms = 1, Layer = 2 };

struct HeadOptions {
    NormKind norm = NormKind::None;
    const float *gamma = nullptr;  // cols values, copied by the constructor; null: no per-column scale
    float eps = 1e-5f;             // finite, >= 0
    float logit_scale = 1.0f;      // finite, != 0
    float softcap = 0.0f;          // finite, >= 0; 0 disables the cap (scale only)
    bool softcap_four_pass = true; // llama.cpp's four nodes (x*s, x*(1/cap), tanh, x*cap); false: fused, same bytes
    cpu::Precision precision = cpu::Precision::Default;  // head matvec precision; Default: the type's own
    int threads = 0;               // 0: cpu::default_threads(); else 1..kMaxThreads
};

// Upper bound on HeadOptions::threads (and on lmtail's Python `threads=` arguments).
inline constexpr int kMaxThreads = 1024;

// Wall time of each stage of a workspace's last call, in seconds.
struct HeadTimings {
    double norm = 0, head = 0, cap = 0, select = 0;
};

// Working memory of Head calls: the normalised hidden rows and the logits before they are
// published. Use one per thread (it is the only thing a call writes besides its outputs). The
// default workspace owns its memory and grows on demand (std::bad_alloc leaves it unchanged);
// the other wraps caller memory of fixed capacity.
class HeadWorkspace {
  public:
    HeadWorkspace() = default;
    // Caller memory: `normed` of normed_floats floats (T * cols needed when the head has a norm;
    // may be null otherwise) and `logits` of logits_floats floats (T * rows needed).
    HeadWorkspace(float *normed, size_t normed_floats, float *logits, size_t logits_floats);

    // The capped logits of the last successful call through this workspace (computed_rows() x
    // the head's rows, row-major), e.g. the whole row behind a top-k result. Valid until the next
    // call through this workspace; computed_rows() is 0 after a failed call.
    const float *logits() const { return logits_; }
    int64_t computed_rows() const { return computed_T_; }
    const HeadTimings &timings() const { return timings_; }

  private:
    friend class Head;
    void reserve(size_t normed_floats, size_t logits_floats);
    float *normed_ = nullptr, *logits_ = nullptr;
    size_t normed_cap_ = 0, logits_cap_ = 0;
    bool owned_ = true;
    std::vector<float> own_normed_, own_logits_;
    int64_t computed_T_ = 0;
    HeadTimings timings_{};
};

class Head {
  public:
    // weight: rows x (cols / 256) blocks of `type`, row r at weight + r * row_stride bytes
    // (row_stride >= the row's bytes, e.g. a GGUF tensor in a memory map). The weight memory is
    // NOT copied: it must outlive the Head. gamma (options.gamma) is copied. Throws
    // lmt::ArgumentError on any invalid argument (naming it): an unsupported type, rows < 1 or
    // rows >= 2^31, cols not a positive multiple of 256, a short row stride, a non-finite gamma,
    // eps < 0, logit_scale == 0, softcap < 0, any non-finite scalar, threads out of range.
    Head(const void *weight, WeightType type, int64_t rows, int64_t cols, size_t row_stride,
         const HeadOptions &options = HeadOptions());

    int64_t rows() const { return rows_; }
    int64_t cols() const { return cols_; }
    size_t row_stride() const { return row_stride_; }
    WeightType weight_type() const { return type_; }
    const void *weight() const { return weight_; }
    NormKind norm() const { return norm_; }
    bool has_gamma() const { return !gamma_.empty(); }
    float eps() const { return eps_; }
    float logit_scale() const { return scale_; }
    float softcap() const { return cap_; }
    cpu::Precision precision() const { return precision_; }
    int threads() const { return threads_; }

    // Capped logits of T >= 1 hidden rows (T x cols) into out (T x rows). `out` is written only
    // after every check passed; if `out` is the workspace's own logits memory the tail runs in
    // place (no copy) and a failure leaves unspecified values there.
    void logits(const float *hidden, int64_t T, float *out, HeadWorkspace &ws) const;
    void logits(const float *hidden, int64_t T, float *out) const;

    // Greedy token per row into out (T values): the fail-closed argmax of the capped logits,
    // with `excluded` ids (each < rows; duplicates allowed) masked inside the reduction only.
    // Excluding every id throws lmt::ArgumentError.
    void greedy(const float *hidden, int64_t T, uint32_t *out, HeadWorkspace &ws, const uint32_t *excluded = nullptr,
                int64_t n_excluded = 0) const;
    void greedy(const float *hidden, int64_t T, uint32_t *out, const uint32_t *excluded = nullptr,
                int64_t n_excluded = 0) const;

    // Top-k per row (1 <= k <= rows) into ids / values (T x k each), canonical order: value
    // descending, id ascending among equal values.
    void topk(const float *hidden, int64_t T, int64_t k, uint32_t *ids, float *values, HeadWorkspace &ws) const;
    void topk(const float *hidden, int64_t T, int64_t k, uint32_t *ids, float *values) const;

  private:
    // Norm -> head -> scale/cap into ws.logits_ with every fail-closed check; throws on failure.
    void tail(const float *hidden, int64_t T, HeadWorkspace &ws) const;

    const uint8_t *weight_;
    WeightType type_;
    int64_t rows_, cols_;
    size_t row_stride_;
    NormKind norm_;
    std::vector<float> gamma_;
    float eps_, scale_, cap_;
    bool four_pass_;
    cpu::Precision precision_;
    int threads_;
};

}  // namespace lmt
