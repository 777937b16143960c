// Unary encoders and ops: scale, tanh, soft cap (kernels: metal/unary.metal; CPU reference:
// csrc/cpu/unary.cpp). Threadgroups of 256 lanes; the float4 kernels when the count is a
// multiple of 4 and the binding is 16-byte aligned.
#include "metal/context.hpp"

namespace lmt::LMT_METAL_NS {

namespace {
constexpr uint32_t kLanes = 256;

void encode_unary(Context &c, MTL::ComputeCommandEncoder *enc, const char *scalar, const char *vec4, View x, uint32_t n,
                  float s) {
    const bool v4 = n % 4 == 0 && x.offset % 16 == 0;
    const lmt_args_unary args{v4 ? n / 4 : n, s};
    enc->setComputePipelineState(c.pipeline(v4 ? vec4 : scalar));
    enc->setBuffer(x.buf, x.offset, 0);
    enc->setBytes(&args, sizeof args, 1);
    enc->dispatchThreadgroups(size3((args.n + kLanes - 1) / kLanes), size3(kLanes));
}
}  // namespace

void encode_scale(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, float s) {
    encode_unary(c, enc, "scale_f32", "scale_f32_4", x, n, s);
}

void encode_tanh(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n) {
    encode_unary(c, enc, "tanh_f32", "tanh_f32_4", x, n, 0.0f);
}

void encode_softcap(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, float s, float cap,
                    bool four_pass) {
    if (!four_pass) {
        const lmt_args_softcap args{n, s, cap, cap > 0.0f ? 1.0f / cap : 0.0f};
        enc->setComputePipelineState(c.pipeline("scale_softcap_f32"));
        enc->setBuffer(x.buf, x.offset, 0);
        enc->setBytes(&args, sizeof args, 1);
        enc->dispatchThreadgroups(size3((n + kLanes - 1) / kLanes), size3(kLanes));
        return;
    }
    // llama.cpp's graph: four nodes, each reading what the previous one wrote.
    encode_scale(c, enc, x, n, s);
    if (cap <= 0.0f) return;
    barrier(enc, {x.buf}, kBarrierSoftcapInv);
    encode_scale(c, enc, x, n, 1.0f / cap);
    barrier(enc, {x.buf}, kBarrierSoftcapTanh);
    encode_tanh(c, enc, x, n);
    barrier(enc, {x.buf}, kBarrierSoftcapCap);
    encode_scale(c, enc, x, n, cap);
}

namespace {
template <class F>
void in_place(float *x, int64_t n, const char *label, F &&encode) {
    if (n <= 0) return;
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    auto xb = c.upload(x, (size_t)n * sizeof(float), label);
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) { encode(c, enc, View{xb.get(), 0}, u32(n, "n")); });
    std::memcpy(x, xb->contents(), (size_t)n * sizeof(float));
}
}  // namespace

void scale(float *x, int64_t n, float s) {
    in_place(x, n, "x", [&](Context &c, MTL::ComputeCommandEncoder *e, View v, uint32_t m) { encode_scale(c, e, v, m, s); });
}
void tanh(float *x, int64_t n) {
    in_place(x, n, "x", [&](Context &c, MTL::ComputeCommandEncoder *e, View v, uint32_t m) { encode_tanh(c, e, v, m); });
}
void softcap(float *x, int64_t n, float s, float cap, bool four_pass) {
    in_place(x, n, "logits", [&](Context &c, MTL::ComputeCommandEncoder *e, View v, uint32_t m) {
        encode_softcap(c, e, v, m, s, cap, four_pass);
    });
}

}  // namespace lmt::LMT_METAL_NS
