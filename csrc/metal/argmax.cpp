// Argmax encoders and ops (kernels: metal/argmax.metal; CPU reference: csrc/cpu/argmax.cpp).
//
// Phase 1: grid (chunks, rows) x (chunk lanes); chunk = 1024 lanes, or the pipeline's
// maxTotalThreadsPerThreadgroup when a device gives fewer. Phase 2: grid (rows) x (chunk
// lanes). A memoryBarrier over both partial buffers sits between them: phase 2 reads what
// phase 1 wrote (RAW), and nothing in a concurrent encoder orders that for us.
#include <algorithm>
#include <vector>

#include "metal/context.hpp"

namespace lmt::LMT_METAL_NS {

namespace {
void check_row_length(const char *what, int64_t n) {
    if (n < 1) throw lmt::ArgumentError(std::string(what) + ": row length must be >= 1; found " + std::to_string(n));
    if (n >= (int64_t)0x7FFFFFFF)
        throw lmt::ArgumentError(std::string(what) +
                                 ": row length must fit in 31 bits (the non-finite latch uses the high bit); found " +
                                 std::to_string(n));
}
}  // namespace

ArgmaxScratch argmax_scratch(Context &c, const char *phase1, uint32_t n, uint32_t n_rows) {
    ArgmaxScratch s;
    s.chunk = (uint32_t)std::min<NS::UInteger>(LMT_ARGMAX_CHUNK, c.pipeline(phase1)->maxTotalThreadsPerThreadgroup());
    s.n_chunks = (n + s.chunk - 1) / s.chunk;
    const size_t bytes = (size_t)s.n_chunks * n_rows * sizeof(uint32_t);
    s.keys = c.buffer(bytes, "argmax_partial_keys");
    s.idx = c.buffer(bytes, "argmax_partial_idx");
    return s;
}

namespace {
void encode_two_phase(Context &c, MTL::ComputeCommandEncoder *enc, const char *p1, const char *p2, View x, uint32_t n,
                      uint32_t n_rows, const View *excluded, uint32_t n_excluded, const ArgmaxScratch &s, View out) {
    const lmt_args_argmax args{n, n_rows, s.n_chunks, n_excluded};
    enc->setComputePipelineState(c.pipeline(p1));
    enc->setBuffer(x.buf, x.offset, 0);
    enc->setBuffer(s.keys.get(), 0, 1);
    enc->setBuffer(s.idx.get(), 0, 2);
    enc->setBytes(&args, sizeof args, 3);
    if (excluded) enc->setBuffer(excluded->buf, excluded->offset, 4);
    enc->dispatchThreadgroups(size3(s.n_chunks, n_rows), size3(s.chunk));
    barrier(enc, {s.keys.get(), s.idx.get()}, kBarrierArgmaxPhases);
    MTL::ComputePipelineState *pso2 = c.pipeline(p2);
    const uint32_t lanes2 = (uint32_t)std::min<NS::UInteger>(LMT_ARGMAX_CHUNK, pso2->maxTotalThreadsPerThreadgroup());
    enc->setComputePipelineState(pso2);
    enc->setBuffer(s.keys.get(), 0, 0);
    enc->setBuffer(s.idx.get(), 0, 1);
    enc->setBuffer(out.buf, out.offset, 2);
    enc->setBytes(&args, sizeof args, 3);
    enc->dispatchThreadgroups(size3(n_rows), size3(lanes2));
}
}  // namespace

void encode_argmax(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, uint32_t n_rows,
                   const ArgmaxScratch &s, View out) {
    encode_two_phase(c, enc, "argmax_f32_phase1", "argmax_f32_phase2", x, n, n_rows, nullptr, 0, s, out);
}

void encode_greedy_argmax(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, uint32_t n_rows,
                          View excluded, uint32_t n_excluded, const ArgmaxScratch &s, View out) {
    encode_two_phase(c, enc, "greedy_argmax_f32_phase1", "greedy_argmax_f32_phase2", x, n, n_rows, &excluded,
                     n_excluded, s, out);
}

// Sorted, unique excluded ids (the kernel binary-searches them); at least one element so the
// buffer can be bound.
NS::SharedPtr<MTL::Buffer> upload_excluded(Context &c, const uint32_t *ids, int64_t n, uint32_t *n_out) {
    std::vector<uint32_t> v(ids, ids + n);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    *n_out = (uint32_t)v.size();
    if (v.empty()) v.push_back(0xFFFFFFFFu);
    return c.upload(v.data(), v.size() * sizeof(uint32_t), "excluded_ids");
}

void argmax_rows(const float *x, int64_t n_rows, int64_t n, uint32_t *out) {
    check_row_length("argmax", n);
    if (n_rows <= 0) return;
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    auto xb = c.upload(x, (size_t)(n_rows * n) * sizeof(float), "logits");
    auto ob = c.buffer((size_t)n_rows * sizeof(uint32_t), "argmax_result");
    const ArgmaxScratch s = argmax_scratch(c, "argmax_f32_phase1", (uint32_t)n, u32(n_rows, "rows"));
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        encode_argmax(c, enc, View{xb.get(), 0}, (uint32_t)n, (uint32_t)n_rows, s, View{ob.get(), 0});
    });
    std::memcpy(out, ob->contents(), (size_t)n_rows * sizeof(uint32_t));
}

void greedy_argmax_rows(const float *x, int64_t n_rows, int64_t n, const uint32_t *excluded, int64_t n_excluded,
                        uint32_t *out) {
    check_row_length("greedy_argmax", n);
    if (n_rows <= 0) return;
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    auto xb = c.upload(x, (size_t)(n_rows * n) * sizeof(float), "logits");
    auto ob = c.buffer((size_t)n_rows * sizeof(uint32_t), "greedy_result");
    uint32_t n_excl = 0;
    auto eb = upload_excluded(c, excluded, n_excluded, &n_excl);
    const ArgmaxScratch s = argmax_scratch(c, "greedy_argmax_f32_phase1", (uint32_t)n, u32(n_rows, "rows"));
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        encode_greedy_argmax(c, enc, View{xb.get(), 0}, (uint32_t)n, (uint32_t)n_rows, View{eb.get(), 0}, n_excl, s,
                             View{ob.get(), 0});
    });
    std::memcpy(out, ob->contents(), (size_t)n_rows * sizeof(uint32_t));
}

}  // namespace lmt::LMT_METAL_NS
