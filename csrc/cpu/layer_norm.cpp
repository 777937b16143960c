// Final LayerNorm without bias (llama.cpp's LLM_NORM with a weight, as command-r and cohere2 end):
//   mean  = float(sum_i double(x_i) / cols)
//   var   = float(sum_i double((x_i - mean)^2) / cols)      (x_i - mean and its square in float)
//   y_i   = ((x_i - mean) * (1.0f / sqrtf(var + eps))) * gamma_i
// Sums are in double in index order: ggml sums in float with its SIMD build's lane order, so its
// bytes depend on how it was compiled; lmtail's are fixed and at least as accurate (tested
// against a float64 reference and against ggml_norm within a stated bound).
//
// Fail closed as rms_norm does: a finite row whose variance overflows float (scale 0: an
// all-zero output) or whose var + eps is 0 (a constant row with eps = 0: scale +inf) throws
// NonFiniteError; rows holding a NaN or Inf keep their non-finite bytes; all others unchanged.
#include <cmath>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {

[[noreturn]] void degenerate_row(const float *xr, int64_t t, int64_t cols, float var) {
    float amax = 0.0f;
    for (int64_t i = 0; i < cols; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
    if (!std::isfinite(var))
        throw NonFiniteError("layer_norm: row " + std::to_string(t) + ": the variance overflowed float32 (max |x| = " +
                             std::to_string(amax) + "); the row would normalise to all zeros");
    throw NonFiniteError("layer_norm: row " + std::to_string(t) +
                         ": var + eps is 0 (a constant row with eps = 0); its scale 1/sqrt(0) is infinite");
}

}  // namespace

void layer_norm(const float *x, const float *gamma, float *y, int64_t n_rows, int64_t cols, float eps) {
    if (cols <= 0 || n_rows < 0) fail_arg("layer_norm: need cols > 0 and n_rows >= 0");
    if (!(eps >= 0.0f) || is_nonfinite(eps)) fail_arg("layer_norm: eps must be finite and >= 0");
    for (int64_t t = 0; t < n_rows; ++t) {
        const float *xr = x + t * cols;
        float *yr = y + t * cols;
        double sum = 0.0;
        for (int64_t i = 0; i < cols; ++i) sum += (double)xr[i];
        const float mean = (float)(sum / (double)cols);
        double sq = 0.0;
        for (int64_t i = 0; i < cols; ++i) {
            const float d = xr[i] - mean;
            sq += (double)(d * d);
        }
        const float var = (float)(sq / (double)cols);
        const float scale = 1.0f / std::sqrt(var + eps);
        if (!(scale > 0.0f) || is_nonfinite(scale))
            if (row_finite(xr, cols)) degenerate_row(xr, t, cols, var);
        for (int64_t i = 0; i < cols; ++i) {
            const float v = (xr[i] - mean) * scale;
            yr[i] = gamma ? v * gamma[i] : v;
        }
    }
}

}  // namespace lmt::cpu
