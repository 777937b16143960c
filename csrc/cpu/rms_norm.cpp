// Final RMSNorm with ggml's CPU arithmetic, so the bytes match llama.cpp's
// ggml_rms_norm -> ggml_mul on the same input:
//   sum   = sum_i double(x_i * x_i)          (float square, double accumulation, index order)
//   mean  = float(sum / cols)
//   scale = 1.0f / sqrtf(mean + eps)
//   y_i   = (x_i * scale) * gamma_i
#include <cmath>

#include "cpu/internal.hpp"

namespace lmt::cpu {

void rms_norm(const float *x, const float *gamma, float *y, int64_t n_rows, int64_t cols, float eps) {
    if (cols <= 0 || n_rows < 0) fail_arg("rms_norm: need cols > 0 and n_rows >= 0");
    if (!(eps >= 0.0f)) fail_arg("rms_norm: eps must be >= 0");
    for (int64_t t = 0; t < n_rows; ++t) {
        const float *xr = x + t * cols;
        float *yr = y + t * cols;
        double sum = 0.0;
        for (int64_t i = 0; i < cols; ++i) sum += (double)(xr[i] * xr[i]);
        const float mean = (float)(sum / (double)cols);
        const float scale = 1.0f / std::sqrt(mean + eps);
        if (gamma) {
            for (int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] * scale) * gamma[i];
        } else {
            for (int64_t i = 0; i < cols; ++i) yr[i] = xr[i] * scale;
        }
    }
}

}  // namespace lmt::cpu
