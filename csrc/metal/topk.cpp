// Top-k encoder and op (kernel: metal/topk.metal; CPU reference: csrc/cpu/topk.cpp).
// One threadgroup of up to 1024 lanes per row.
#include <algorithm>

#include "metal/context.hpp"

namespace lmt::LMT_METAL_NS {

void encode_topk(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, uint32_t n_rows, uint32_t k,
                 View ids, View vals) {
    const lmt_args_topk args{n, n_rows, k, 0};
    MTL::ComputePipelineState *p = c.pipeline("topk_f32");
    const uint32_t lanes = (uint32_t)std::min<NS::UInteger>(1024, p->maxTotalThreadsPerThreadgroup());
    enc->setComputePipelineState(p);
    enc->setBuffer(x.buf, x.offset, 0);
    enc->setBuffer(ids.buf, ids.offset, 1);
    enc->setBuffer(vals.buf, vals.offset, 2);
    enc->setBytes(&args, sizeof args, 3);
    enc->dispatchThreadgroups(size3(n_rows), size3(std::min<uint32_t>(lanes, std::max<uint32_t>(32, n))));
}

void topk_rows(const float *x, int64_t n_rows, int64_t n, int64_t k, uint32_t *ids, float *values) {
    if (n < 1 || n >= (int64_t)0x7FFFFFFF) throw lmt::ArgumentError("topk: row length must be in [1, 2^31-1)");
    if (k < 1 || k > n) throw lmt::ArgumentError("topk: k must be in [1, n]");
    if (n_rows <= 0) return;
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    auto xb = c.upload(x, (size_t)(n_rows * n) * sizeof(float), "logits");
    auto ib = c.buffer((size_t)(n_rows * k) * sizeof(uint32_t), "topk_ids");
    auto vb = c.buffer((size_t)(n_rows * k) * sizeof(float), "topk_values");
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        encode_topk(c, enc, View{xb.get(), 0}, (uint32_t)n, u32(n_rows, "rows"), (uint32_t)k, View{ib.get(), 0},
                    View{vb.get(), 0});
    });
    std::memcpy(ids, ib->contents(), (size_t)(n_rows * k) * sizeof(uint32_t));
    std::memcpy(values, vb->contents(), (size_t)(n_rows * k) * sizeof(float));
}

}  // namespace lmt::LMT_METAL_NS
