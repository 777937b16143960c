// The matvec encoder and op of every weight type (kernels: metal/matvec.metal, one template
// instantiated per type; CPU reference: the "f32" precision of csrc/cpu/types). A type is one
// row of kMatvecKernels: its pipeline and threadgroup geometry.
#include <string>

#include "metal/context.hpp"

namespace lmt::LMT_METAL_NS {

namespace {
struct MatvecKernel {
    WeightType type;
    const char *pipeline;  // host name in metal/matvec.metal
    uint32_t simdgroups;   // per threadgroup, one row each
    uint32_t align;        // the block's scalar alignment: row starts must honour it
};
// Two SIMD-groups (64 threads) per threadgroup for every type: each SIMD-group streams one
// contiguous row, so the threadgroup size only sets how many rows a core schedules together;
// 64 is ggml's known-good N_SG for the K-quants and Q4_0 (it uses 4 for Q8_0, where its
// SIMD-groups split one row; here they never do).
constexpr MatvecKernel kMatvecKernels[] = {
    {WeightType::F32, "mul_mv_f32_f32", 2, 4},   {WeightType::F16, "mul_mv_f16_f32", 2, 2},
    {WeightType::Q4_0, "mul_mv_q4_0_f32", 2, 2}, {WeightType::Q8_0, "mul_mv_q8_0_f32", 2, 2},
    {WeightType::Q4_K, "mul_mv_q4_K_f32", 2, 2}, {WeightType::Q5_K, "mul_mv_q5_K_f32", 2, 2},
    {WeightType::Q6_K, "mul_mv_q6_K_f32", 2, 2}, {WeightType::BF16, "mul_mv_bf16_f32", 2, 2},
};

const MatvecKernel &kernel_of(WeightType type) {
    for (const MatvecKernel &k : kMatvecKernels)
        if (k.type == type) return k;
    throw lmt::UnsupportedError(std::string("metal matvec: weight type ") + weight_type_name(type) +
                                " (ggml id " + std::to_string((int)type) + ") has no Metal kernel");
}
}  // namespace

std::vector<WeightType> matvec_types() {
    std::vector<WeightType> v;
    for (const MatvecKernel &k : kMatvecKernels) v.push_back(k.type);
    return v;
}

size_t matvec_row_bytes(WeightType type, int64_t cols) {
    kernel_of(type);
    const WeightTypeInfo *info = weight_type_info(type);
    if (cols <= 0 || cols % info->block_elems != 0)
        throw lmt::ArgumentError(std::string("matvec: cols must be a positive multiple of ") +
                                 std::to_string(info->block_elems) + " (the " + info->name + " block); found " +
                                 std::to_string(cols));
    return (size_t)(cols / info->block_elems) * (size_t)info->block_bytes;
}

MatvecShape matvec_shape(WeightType type, int64_t rows, int64_t cols, size_t row_stride, int64_t T) {
    const MatvecKernel &k = kernel_of(type);
    const WeightTypeInfo *info = weight_type_info(type);
    MatvecShape s;
    s.row_bytes = matvec_row_bytes(type, cols);
    if (rows <= 0 || T < 1) throw lmt::ArgumentError(std::string("matvec ") + info->name + ": need rows > 0 and T >= 1");
    if (rows > 1 && row_stride < s.row_bytes)
        throw lmt::ArgumentError(std::string("matvec ") + info->name + ": row stride shorter than a row of blocks");
    s.row_stride = rows > 1 ? row_stride : s.row_bytes;
    s.extent = (size_t)(rows - 1) * s.row_stride + s.row_bytes;
    s.align = k.align;
    return s;
}

Wrapped wrap_weights(Context &c, const uint8_t *w, int64_t rows, const MatvecShape &s, MatvecShape *bound) {
    *bound = s;
    if ((uintptr_t)w % s.align == 0 && s.row_stride % s.align == 0) return wrap_readonly(c, w, s.extent, "head_weight");
    // Rows the kernel could not read aligned (a byte view at an odd offset): packed into an
    // aligned buffer, the only copy of the weights this path makes.
    Wrapped p;
    p.buf = c.buffer((size_t)rows * s.row_bytes, "head_weight_packed");
    auto *dst = static_cast<uint8_t *>(p.buf->contents());
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + (size_t)r * s.row_bytes, w + (size_t)r * s.row_stride, s.row_bytes);
    bound->row_stride = s.row_bytes;
    return p;
}

void encode_matvec(Context &c, MTL::ComputeCommandEncoder *enc, WeightType type, View w, View x, View y,
                   uint32_t rows, uint32_t cols, uint32_t T, uint32_t row_stride) {
    const MatvecKernel &k = kernel_of(type);
    // The weights are bound at offset 0 and addressed through weight_offset: GGUF tensor data is
    // only 32-byte aligned inside the one page-aligned buffer that wraps the file mapping.
    const lmt_args_mul_mv args{rows, cols, T, row_stride, (uint64_t)w.offset};
    enc->setComputePipelineState(c.pipeline(k.pipeline));
    enc->setBuffer(w.buf, 0, 0);
    enc->setBuffer(x.buf, x.offset, 1);
    enc->setBuffer(y.buf, y.offset, 2);
    enc->setBytes(&args, sizeof args, 3);
    enc->dispatchThreadgroups(size3((rows + k.simdgroups - 1) / k.simdgroups), size3(32, k.simdgroups));
}

SharedFloats matvec_shared(WeightType type, const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride,
                           const float *x, int64_t T) {
    const MatvecShape s = matvec_shape(type, rows, cols, row_stride, T);
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    MatvecShape b;
    const Wrapped wb = wrap_weights(c, w, rows, s, &b);
    auto xb = c.upload(x, (size_t)(T * cols) * sizeof(float), "normed");
    auto yb = c.buffer((size_t)(T * rows) * sizeof(float), "logits");
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        encode_matvec(c, enc, type, wb.view(), View{xb.get(), 0}, View{yb.get(), 0}, u32(rows, "rows"),
                      u32(cols, "cols"), u32(T, "T"), u32((int64_t)b.row_stride, "row stride"));
    });
    SharedFloats out;
    out.data = static_cast<float *>(yb->contents());
    out.keep = std::shared_ptr<void>(new NS::SharedPtr<MTL::Buffer>(std::move(yb)),
                                     [](void *p) { delete static_cast<NS::SharedPtr<MTL::Buffer> *>(p); });
    return out;
}

void matvec(WeightType type, const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride, const float *x,
            int64_t T, float *logits) {
    if (T == 0) return;
    const SharedFloats y = matvec_shared(type, w, rows, cols, row_stride, x, T);
    std::memcpy(logits, y.data, (size_t)(T * rows) * sizeof(float));
}

}  // namespace lmt::LMT_METAL_NS
