// Final RMSNorm with ggml's CPU arithmetic, so the bytes match llama.cpp's
// ggml_rms_norm -> ggml_mul on the same input:
//   sum   = sum_i double(x_i * x_i)          (float square, double accumulation, index order)
//   mean  = float(sum / cols)
//   scale = 1.0f / sqrtf(mean + eps)
//   y_i   = (x_i * scale) * gamma_i
//
// Fail closed where ggml is silent: a finite row whose float squares (or mean) overflow gets
// mean = inf and scale = 0, i.e. an all-zero output that every later check takes for a valid
// row (all logits 0, greedy token 0). Such a row, and a finite row with mean + eps == 0 (scale
// +inf), throws NonFiniteError instead. Rows holding a NaN or Inf keep ggml's (non-finite)
// bytes: the caller's finite checks own those. Every other row is unchanged.
#include <cmath>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {

[[noreturn]] void degenerate_row(const float *xr, int64_t t, int64_t cols, float mean) {
    float amax = 0.0f;
    for (int64_t i = 0; i < cols; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
    if (!std::isfinite(mean))
        throw NonFiniteError("rms_norm: row " + std::to_string(t) +
                             ": the mean of the squares overflowed float32 (max |x| = " + std::to_string(amax) +
                             "); the row would normalise to all zeros");
    throw NonFiniteError("rms_norm: row " + std::to_string(t) +
                         ": mean(x^2) + eps is 0 (an all-zero row with eps = 0); its scale 1/sqrt(0) is infinite");
}

}  // namespace

void rms_norm(const float *x, const float *gamma, float *y, int64_t n_rows, int64_t cols, float eps) {
    if (cols <= 0 || n_rows < 0) fail_arg("rms_norm: need cols > 0 and n_rows >= 0");
    if (!(eps >= 0.0f) || is_nonfinite(eps)) fail_arg("rms_norm: eps must be finite and >= 0");
    for (int64_t t = 0; t < n_rows; ++t) {
        const float *xr = x + t * cols;
        float *yr = y + t * cols;
        double sum = 0.0;
        for (int64_t i = 0; i < cols; ++i) sum += (double)(xr[i] * xr[i]);
        const float mean = (float)(sum / (double)cols);
        const float scale = 1.0f / std::sqrt(mean + eps);
        // scale is in (0, inf) for every finite row but the two degenerate cases above.
        if (!(scale > 0.0f) || is_nonfinite(scale))
            if (row_finite(xr, cols)) degenerate_row(xr, t, cols, mean);
        if (gamma) {
            for (int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] * scale) * gamma[i];
        } else {
            for (int64_t i = 0; i < cols; ++i) yr[i] = xr[i] * scale;
        }
    }
}

}  // namespace lmt::cpu
