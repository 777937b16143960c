// Q5_K matvec encoder and op (kernel: metal/matvec_q5_k.metal, mul_mv_q5_K_f32; CPU reference:
// csrc/cpu/types/q5_k/q5_k.cpp). Threadgroups of two 32-lane SIMD-groups, one row each (ggml's
// known-good shape for this kernel family; not yet measured against alternatives here).
#include "metal/context.hpp"

namespace lmt::LMT_METAL_NS {

void encode_matvec_q5_k(Context &c, MTL::ComputeCommandEncoder *enc, View w, View x, View y, uint32_t rows,
                        uint32_t cols, uint32_t T, uint32_t row_bytes) {
    // The weights are bound at offset 0 and addressed through weight_offset: GGUF tensor data is
    // only 32-byte aligned inside the one page-aligned buffer that wraps the file mapping.
    const lmt_args_mul_mv_q5_K args{rows, cols, T, row_bytes, (uint64_t)w.offset};
    enc->setComputePipelineState(c.pipeline("mul_mv_q5_K_f32"));
    enc->setBuffer(w.buf, 0, 0);
    enc->setBuffer(x.buf, x.offset, 1);
    enc->setBuffer(y.buf, y.offset, 2);
    enc->setBytes(&args, sizeof args, 3);
    enc->dispatchThreadgroups(size3((rows + 1) / 2), size3(32, 2));
}

SharedFloats matvec_q5_k_shared(const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride, const float *x,
                                int64_t T) {
    if (rows <= 0 || cols <= 0 || cols % LMT_QK_K != 0 || T < 1)
        throw lmt::ArgumentError("matvec_q5_k: need rows > 0, cols a positive multiple of 256, T >= 1");
    if (row_stride < (size_t)(cols / LMT_QK_K) * LMT_Q5K_BLOCK_BYTES)
        throw lmt::ArgumentError("matvec_q5_k: row stride shorter than a row of blocks");
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    const size_t extent = (size_t)(rows - 1) * row_stride + (size_t)(cols / LMT_QK_K) * LMT_Q5K_BLOCK_BYTES;
    const Wrapped wb = wrap_readonly(c, w, extent, "head_weight");
    auto xb = c.upload(x, (size_t)(T * cols) * sizeof(float), "normed");
    auto yb = c.buffer((size_t)(T * rows) * sizeof(float), "logits");
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        encode_matvec_q5_k(c, enc, wb.view(), View{xb.get(), 0}, View{yb.get(), 0}, u32(rows, "rows"),
                           u32(cols, "cols"), u32(T, "T"), u32((int64_t)row_stride, "row stride"));
    });
    SharedFloats out;
    out.data = static_cast<float *>(yb->contents());
    out.keep = std::shared_ptr<void>(new NS::SharedPtr<MTL::Buffer>(std::move(yb)),
                                     [](void *p) { delete static_cast<NS::SharedPtr<MTL::Buffer> *>(p); });
    return out;
}

void matvec_q5_k(const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride, const float *x, int64_t T,
                 float *logits) {
    if (T == 0) return;
    const SharedFloats y = matvec_q5_k_shared(w, rows, cols, row_stride, x, T);
    std::memcpy(logits, y.data, (size_t)(T * rows) * sizeof(float));
}

}  // namespace lmt::LMT_METAL_NS
