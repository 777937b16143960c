// Unary ops and the soft cap, with llama.cpp's CPU bytes:
//   ggml_scale (bias 0): x * s, one rounding          ggml_tanh: libm tanhf
// The soft cap graph llama.cpp builds is scale(s) -> scale(1/cap) -> tanh -> scale(cap), with
// 1/cap rounded to float once. The fused route evaluates that same tree per element in one
// pass, so both routes give identical bytes here (on Metal the tanh differs; see DESIGN.md).
#include <algorithm>
#include <atomic>
#include <cmath>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {
// 16K floats per task: 64 KB, large enough that tanhf dominates the scheduling cost.
constexpr int64_t kChunk = 16384;

template <typename F>
void for_chunks(int64_t n, int n_threads, F &&f) {
    const int64_t n_tasks = (n + kChunk - 1) / kChunk;
    if (n_tasks <= 1) {
        if (n > 0) f(0, n);
        return;
    }
    core::parallel_for(n_threads, n_tasks, [&](int64_t task) {
        const int64_t i0 = task * kChunk;
        f(i0, std::min(n, i0 + kChunk));
    });
}
}  // namespace

void scale(float *x, int64_t n, float s, int n_threads) {
    for_chunks(n, n_threads, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) x[i] = x[i] * s;
    });
}

void tanh(float *x, int64_t n, int n_threads) {
    for_chunks(n, n_threads, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) x[i] = ::tanhf(x[i]);
    });
}

void softcap(float *x, int64_t n, float s, float cap, bool four_pass, int n_threads) {
    if (!(cap > 0.0f)) {  // cap <= 0 (or NaN): scale only, as llama.cpp skips the cap nodes
        scale(x, n, s, n_threads);
        return;
    }
    const float inv = 1.0f / cap;
    if (four_pass) {
        scale(x, n, s, n_threads);
        scale(x, n, inv, n_threads);
        tanh(x, n, n_threads);
        scale(x, n, cap, n_threads);
        return;
    }
    for_chunks(n, n_threads, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const float a = x[i] * s;
            const float b = a * inv;
            x[i] = ::tanhf(b) * cap;
        }
    });
}

bool all_finite(const float *x, int64_t n, int n_threads) {
    // Exponent-bit test, vectorisable; chunked so a 202048-row scan stays on one thread.
    constexpr int64_t kScan = 1 << 20;
    const int64_t n_tasks = (n + kScan - 1) / kScan;
    std::atomic<bool> ok{true};
    auto scan = [&](int64_t i0, int64_t i1) {
        uint32_t bad = 0;
        for (int64_t i = i0; i < i1; ++i) {
            uint32_t u;
            std::memcpy(&u, x + i, 4);
            bad |= (uint32_t)((u & 0x7F800000u) == 0x7F800000u);
        }
        if (bad) ok.store(false, std::memory_order_relaxed);
    };
    if (n_tasks <= 1) {
        scan(0, n);
    } else {
        core::parallel_for(n_threads, n_tasks, [&](int64_t t) { scan(t * kScan, std::min(n, (t + 1) * kScan)); });
    }
    return ok.load();
}

}  // namespace lmt::cpu
