// Argmax reductions on the CPU.
//
// Both reductions combine (value, index) candidates with one rule — greater value wins, equal
// values keep the lower index — which is associative and commutative, so any chunking or
// thread count gives the same answer. NaN never wins. The greedy variant is fail-closed: any
// non-finite value (NaN, +/-Inf, excluded ids included) latches and the result is
// LMT_ARGMAX_INVALID, the same contract as the Metal/CUDA kernels' high-bit latch.
#include <algorithm>
#include <atomic>
#include <vector>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {

constexpr int64_t kChunk = 1 << 16;  // 256 KB of logits per task

struct Best {
    float v;
    int64_t i;  // -1: no candidate yet
};

inline void take(Best &b, float v, int64_t i) {
    // v > b.v is false for NaN, so NaN never enters; the first non-NaN value always enters.
    if (v > b.v || (b.i < 0 && v == v)) {
        b.v = v;
        b.i = i;
    }
}

inline void merge(Best &acc, const Best &o) {
    if (o.i < 0) return;
    if (acc.i < 0 || o.v > acc.v || (o.v == acc.v && o.i < acc.i)) acc = o;
}

Best argmax_range(const float *x, int64_t i0, int64_t i1) {
    Best b{0.0f, -1};
    for (int64_t i = i0; i < i1; ++i) take(b, x[i], i);
    return b;
}

struct GreedyPartial {
    Best best;
    bool nonfinite;
};

// excluded: sorted ascending, unique.
GreedyPartial greedy_range(const float *x, int64_t i0, int64_t i1, const std::vector<uint32_t> &excl) {
    GreedyPartial p{{0.0f, -1}, false};
    uint32_t bad = 0;
    auto it = std::lower_bound(excl.begin(), excl.end(), (uint32_t)i0);
    int64_t next_excl = it == excl.end() ? i1 : (int64_t)*it;
    int64_t i = i0;
    while (i < i1) {
        const int64_t stop = std::min(i1, next_excl);
        for (; i < stop; ++i) {
            const float v = x[i];
            bad |= (uint32_t)is_nonfinite(v);
            if (v > p.best.v || p.best.i < 0) {
                p.best.v = v;
                p.best.i = i;
            }
        }
        if (i < i1) {  // i == next_excl: excluded id; still part of the finite check
            bad |= (uint32_t)is_nonfinite(x[i]);
            ++i;
            ++it;
            next_excl = it == excl.end() ? i1 : (int64_t)*it;
        }
    }
    p.nonfinite = bad != 0;
    return p;
}

template <typename Partial, typename RangeFn, typename MergeFn>
Partial chunked(int64_t n, int n_threads, Partial init, RangeFn range, MergeFn mergefn) {
    const int64_t n_tasks = (n + kChunk - 1) / kChunk;
    if (n_tasks <= 1) return range(0, n);
    std::vector<Partial> parts((size_t)n_tasks, init);
    core::parallel_for(n_threads, n_tasks, [&](int64_t t) {
        parts[(size_t)t] = range(t * kChunk, std::min(n, (t + 1) * kChunk));
    });
    Partial acc = init;
    for (const auto &p : parts) mergefn(acc, p);
    return acc;
}

std::vector<uint32_t> sorted_unique(const uint32_t *ids, int64_t n) {
    std::vector<uint32_t> v(ids, ids + n);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
}

uint32_t argmax_one(const float *x, int64_t n, int n_threads) {
    const Best b = chunked<Best>(n, n_threads, Best{0.0f, -1},
                                 [&](int64_t i0, int64_t i1) { return argmax_range(x, i0, i1); },
                                 [](Best &acc, const Best &o) { merge(acc, o); });
    return b.i < 0 ? 0u : (uint32_t)b.i;
}

uint32_t greedy_one(const float *x, int64_t n, const std::vector<uint32_t> &excl, int n_threads) {
    const GreedyPartial g = chunked<GreedyPartial>(
        n, n_threads, GreedyPartial{{0.0f, -1}, false},
        [&](int64_t i0, int64_t i1) { return greedy_range(x, i0, i1, excl); },
        [](GreedyPartial &acc, const GreedyPartial &o) {
            acc.nonfinite = acc.nonfinite || o.nonfinite;
            merge(acc.best, o.best);
        });
    if (g.nonfinite) return LMT_ARGMAX_INVALID;
    if (g.best.i < 0) return kAllExcluded;
    return (uint32_t)g.best.i;
}

void check_n(const char *what, int64_t n) {
    if (n < 1) fail_arg(std::string(what) + ": row length must be >= 1; found " + std::to_string(n));
    if (n >= (int64_t)0x7FFFFFFF)
        fail_arg(std::string(what) + ": row length must fit in 31 bits (the non-finite latch uses the high bit); found " +
                 std::to_string(n));
}

}  // namespace

uint32_t argmax(const float *x, int64_t n, int n_threads) {
    check_n("argmax", n);
    return argmax_one(x, n, n_threads);
}

uint32_t greedy_argmax(const float *x, int64_t n, const uint32_t *excluded, int64_t n_excluded, int n_threads) {
    check_n("greedy_argmax", n);
    return greedy_one(x, n, sorted_unique(excluded, n_excluded), n_threads);
}

void argmax_rows(const float *x, int64_t n_rows, int64_t n, uint32_t *out, int n_threads) {
    check_n("argmax", n);
    if (n_rows == 1) {
        out[0] = argmax_one(x, n, n_threads);
        return;
    }
    core::parallel_for(n_threads, n_rows, [&](int64_t r) { out[r] = argmax_one(x + r * n, n, 1); });
}

void greedy_argmax_rows(const float *x, int64_t n_rows, int64_t n, const uint32_t *excluded, int64_t n_excluded,
                        uint32_t *out, int n_threads) {
    check_n("greedy_argmax", n);
    const auto excl = sorted_unique(excluded, n_excluded);
    if (n_rows == 1) {
        out[0] = greedy_one(x, n, excl, n_threads);
        return;
    }
    core::parallel_for(n_threads, n_rows, [&](int64_t r) { out[r] = greedy_one(x + r * n, n, excl, 1); });
}

}  // namespace lmt::cpu
