// RMSNorm encoder and op (kernel: metal/rms_norm.metal; CPU reference: csrc/cpu/rms_norm.cpp).
// One threadgroup of 256 lanes (8 SIMD-groups) per row.
#include <cmath>
#include <string>

#include "lmtail/cpu.hpp"
#include "metal/context.hpp"

namespace lmt::LMT_METAL_NS {

void encode_rms_norm(Context &c, MTL::ComputeCommandEncoder *enc, View x, View gamma, bool has_gamma, View y,
                     uint32_t n_rows, uint32_t cols, float eps) {
    const lmt_args_rms_norm args{cols, n_rows, eps, has_gamma ? 1u : 0u};
    enc->setComputePipelineState(c.pipeline("rms_norm_f32"));
    enc->setBuffer(x.buf, x.offset, 0);
    enc->setBuffer(gamma.buf, gamma.offset, 1);  // bound even without gamma (never read then)
    enc->setBuffer(y.buf, y.offset, 2);
    enc->setBytes(&args, sizeof args, 3);
    enc->dispatchThreadgroups(size3(n_rows), size3(256));
}

void rms_norm(const float *x, const float *gamma, float *y, int64_t n_rows, int64_t cols, float eps) {
    if (cols <= 0 || n_rows < 0) throw lmt::ArgumentError("rms_norm: need cols > 0 and n_rows >= 0");
    if (!(eps >= 0.0f)) throw lmt::ArgumentError("rms_norm: eps must be >= 0");
    if (n_rows == 0) return;
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    const size_t bytes = (size_t)(n_rows * cols) * sizeof(float);
    auto xb = c.upload(x, bytes, "hidden");
    auto gb = gamma ? c.upload(gamma, (size_t)cols * sizeof(float), "norm_gamma") : c.buffer(4, "norm_gamma_unused");
    auto yb = c.buffer(bytes, "normed");
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        encode_rms_norm(c, enc, View{xb.get(), 0}, View{gb.get(), 0}, gamma != nullptr, View{yb.get(), 0},
                        u32(n_rows, "rows"), u32(cols, "cols"), eps);
    });
    std::memcpy(y, yb->contents(), bytes);
    // The kernel poisons a row whose mean of squares is non-finite with NaN. For a finite input
    // row that is an overflow (the CPU reference raises the same); rows holding NaN/Inf
    // propagate, as on the CPU.
    for (int64_t t = 0; t < n_rows; ++t) {
        const float *yr = y + t * cols, *xr = x + t * cols;
        if (lmt::cpu::all_finite(yr, cols, 1) || !lmt::cpu::all_finite(xr, cols, 1)) continue;
        float amax = 0.0f;
        for (int64_t i = 0; i < cols; ++i) amax = std::fmax(amax, std::fabs(xr[i]));
        throw lmt::NonFiniteError("rms_norm: row " + std::to_string(t) +
                                  ": the mean of the squares overflowed float32 (max |x| = " + std::to_string(amax) +
                                  "); the row would normalise to all zeros");
    }
}

}  // namespace lmt::LMT_METAL_NS
