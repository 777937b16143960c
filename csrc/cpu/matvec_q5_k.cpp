// Q5_K matvec dispatch: argument checks, ISA selection, row split over threads.
#include <algorithm>
#include <string>

#include "cpu/internal.hpp"

namespace lmt::cpu {

void matvec_q5_k(const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride, const float *x, int64_t T,
                 float *logits, int n_threads, Isa isa) {
    if (cols <= 0 || cols % LMT_QK_K != 0)
        fail_arg("matvec_q5_k: cols must be a positive multiple of 256; found " + std::to_string(cols));
    if (rows < 0 || T < 1)
        fail_arg("matvec_q5_k: need rows >= 0 and T >= 1; found rows=" + std::to_string(rows) +
                 " T=" + std::to_string(T));
    const size_t row_bytes = (size_t)(cols / LMT_QK_K) * LMT_Q5K_BLOCK_BYTES;
    if (row_stride < row_bytes)
        fail_arg("matvec_q5_k: row stride " + std::to_string(row_stride) + " < row bytes " + std::to_string(row_bytes));
    if (rows == 0) return;
    const MatvecArgs a{w, rows, cols, row_stride, x, T, logits};
    void (*kernel)(const MatvecArgs &, int64_t, int64_t) = nullptr;
    switch (resolve_isa(isa)) {
#if defined(LMTAIL_HAVE_X86)
        case Isa::Avx512: kernel = matvec_q5_k_avx512; break;
        case Isa::Avx2: kernel = matvec_q5_k_avx2; break;
#endif
#if defined(LMTAIL_HAVE_NEON)
        case Isa::Neon: kernel = matvec_q5_k_neon; break;
#endif
        default: kernel = matvec_q5_k_scalar; break;
    }
    // 64 rows per task: ~290 KB of weights, large enough to amortise scheduling, small enough
    // that two threads finish within a few microseconds of each other.
    constexpr int64_t kRowsPerTask = 64;
    const int64_t n_tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
    core::parallel_for(n_threads, n_tasks, [&](int64_t task) {
        const int64_t r0 = task * kRowsPerTask;
        kernel(a, r0, std::min(rows, r0 + kRowsPerTask));
    });
}

}  // namespace lmt::cpu
