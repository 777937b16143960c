// apply_bitmask: -inf on the logits whose bit is clear (see bitmask.hpp for the layout).
//
// Grammar masks are mostly all-clear (structural positions) or mostly all-set (inside a string),
// so whole words are handled first: an all-set word is skipped, an all-clear word is eight
// stores; a mixed word is one branch-free select per element.
#include <algorithm>
#include <limits>

#include "core/thread_pool.hpp"
#include "cpu/bitmask.hpp"

namespace lmt::cpu {
namespace {


// 1 << j as a table: a constant-vector AND + compare per 4/8 lanes, which SSE2 vectorises
// (a per-lane variable shift would need AVX2).
alignas(64) constexpr uint32_t kBit[32] = {
    1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,  1u << 8,  1u << 9,  1u << 10,
    1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15, 1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21,
    1u << 22, 1u << 23, 1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};

void apply_words(float *x, const uint32_t *w, int64_t w0, int64_t w1, int64_t V) {
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int64_t k = w0; k < w1; ++k) {
        uint32_t clear = ~w[k];
        const int64_t base = k * 32;
        const int64_t n = std::min<int64_t>(32, V - base);
        if (n < 32) clear &= (uint32_t(1) << n) - 1;  // bits past V are ignored
        if (clear == 0) continue;
        if (clear == 0xFFFFFFFFu) {
            std::fill(x + base, x + base + 32, ninf);
            continue;
        }
        // a mixed word: a branch-free select per element (the compiler vectorises it)
        float *xr = x + base;
        if (n == 32) {
            for (int j = 0; j < 32; ++j) xr[j] = (clear & kBit[j]) ? ninf : xr[j];
        } else {  // the last, partial word: never touch past V
            for (int j = 0; j < n; ++j) xr[j] = (clear & kBit[j]) ? ninf : xr[j];
        }
    }
}

}  // namespace

void apply_bitmask(float *x, int64_t x_stride, const uint32_t *words, int64_t w_stride, int64_t B, int64_t V,
                   int n_threads) {
    if (B <= 0 || V <= 0) return;
    const int64_t W = (V + 31) / 32;
    // One task per row: a row is 30-60 us (V = 128K-256K); splitting a row, or waking the pool
    // for one row, cost more than it saved on the 2-vCPU bench machine (B = 1, V = 262144:
    // 3.5 ms with 4096-word tasks on two threads vs ~60 us inline).
    auto task = [&](int64_t r) { apply_words(x + r * x_stride, words + r * w_stride, 0, W, V); };
    if (B == 1) {
        task(0);
        return;
    }
    core::parallel_for(core::resolve_threads(n_threads), B, task);
}

}  // namespace lmt::cpu
