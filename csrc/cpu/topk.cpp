// Top-k per row in canonical order: value descending, index ascending among equal values;
// NaN ranks below -inf (a NaN is returned only when fewer than k numbers exist).
//
// One pass with a size-k min-heap: O(n log k). Scanning indices in increasing order means a
// later element equal to the heap minimum can never displace it (it has the larger index), so
// the hot test is a single `v > threshold` on most elements.
#include <algorithm>
#include <vector>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {

struct Cand {
    float v;
    uint32_t i;
};

// Strict canonical "ranks before".
inline bool before(const Cand &a, const Cand &b) {
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an || bn) {
        if (an && bn) return a.i < b.i;
        return bn;  // a is a number, b is NaN
    }
    if (a.v != b.v) return a.v > b.v;
    return a.i < b.i;
}

void topk_one(const float *x, int64_t n, int64_t k, uint32_t *ids, float *values, std::vector<Cand> &heap) {
    heap.clear();
    heap.reserve((size_t)k);
    // Min-heap on canonical rank: heap.front() is the worst kept candidate.
    auto worse = [](const Cand &a, const Cand &b) { return before(a, b); };
    int64_t i = 0;
    for (; i < n && (int64_t)heap.size() < k; ++i) {
        heap.push_back(Cand{x[i], (uint32_t)i});
        std::push_heap(heap.begin(), heap.end(), worse);
    }
    for (; i < n; ++i) {
        const Cand c{x[i], (uint32_t)i};
        if (before(c, heap.front())) {
            std::pop_heap(heap.begin(), heap.end(), worse);
            heap.back() = c;
            std::push_heap(heap.begin(), heap.end(), worse);
        }
    }
    std::sort(heap.begin(), heap.end(), before);
    for (int64_t j = 0; j < k; ++j) {
        ids[j] = heap[(size_t)j].i;
        values[j] = heap[(size_t)j].v;
    }
}

}  // namespace

void topk(const float *x, int64_t n, int64_t k, uint32_t *ids, float *values) {
    topk_rows(x, 1, n, k, ids, values, 1);
}

void topk_rows(const float *x, int64_t n_rows, int64_t n, int64_t k, uint32_t *ids, float *values, int n_threads) {
    if (n < 1 || n >= (int64_t)0xFFFFFFFF) fail_arg("topk: row length must be in [1, 2^32-1); found " + std::to_string(n));
    if (k < 1 || k > n)
        fail_arg("topk: k must be in [1, " + std::to_string(n) + "]; found " + std::to_string(k));
    core::parallel_for(n_threads, n_rows, [&](int64_t r) {
        thread_local std::vector<Cand> heap;
        topk_one(x + r * n, n, k, ids + r * k, values + r * k, heap);
    });
}

}  // namespace lmt::cpu
