// The LM-head tail as one graph in one concurrent compute encoder (Python: lmtail.Head).
//
//   rms_norm -> mul_mv_<type> -> x*scale -> x*(1/cap) -> tanh -> x*cap -> greedy phase 1 -> phase 2
//   [-> get_rows from the result slot]
//
// Every dependent pair is separated by memoryBarrier(resources) on exactly the buffer the
// second dispatch reads. Route A keeps the capped logits in a shared buffer; Route B leaves the
// 4-byte result per row on the device, where get_rows reads it for the next step.
#include <algorithm>
#include <vector>

#include "metal/context.hpp"

namespace lmt::LMT_METAL_NS {

NS::SharedPtr<MTL::Buffer> upload_excluded(Context &c, const uint32_t *ids, int64_t n, uint32_t *n_out);  // argmax.cpp

namespace {
#if defined(LMTAIL_METAL_TESTING)
void encode_plant_nan(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t index) {
    enc->setComputePipelineState(c.pipeline("debug_plant_nan_f32"));
    enc->setBuffer(x.buf, x.offset, 0);
    enc->setBytes(&index, sizeof index, 1);
    enc->dispatchThreadgroups(size3(1), size3(1));
}
#endif

void encode_get_rows(Context &c, MTL::ComputeCommandEncoder *enc, View table, View ids, View out, uint32_t table_rows,
                     uint32_t dim, uint32_t n_ids) {
    const uint32_t shape[2] = {table_rows, dim};
    enc->setComputePipelineState(c.pipeline("get_rows_f32"));
    enc->setBuffer(table.buf, table.offset, 0);
    enc->setBuffer(ids.buf, ids.offset, 1);
    enc->setBuffer(out.buf, out.offset, 2);
    enc->setBytes(shape, sizeof shape, 3);
    enc->dispatchThreadgroups(size3((dim + 255) / 256, n_ids), size3(256));
}
}  // namespace

void head_greedy(const HeadArgs &a, float *logits, uint32_t *result, float *embed_out, bool raw,
                 SharedView *logits_view) {
    if (a.rows <= 0 || a.rows >= (int64_t)0x7FFFFFFF)
        throw lmt::ArgumentError("head: the vocabulary must fit in 31 bits (the non-finite latch uses the high bit)");
    if (a.T < 1) throw lmt::ArgumentError("head: need at least one hidden row");
    const MatvecShape ms = matvec_shape(a.type, a.rows, a.cols, a.row_stride, a.T);
    if (a.embed && (a.embed_rows <= 0 || a.embed_dim <= 0)) throw lmt::ArgumentError("head: empty embedding table");
    const uint32_t rows = (uint32_t)a.rows, cols = (uint32_t)a.cols, T = u32(a.T, "T");
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    MatvecShape wbound;
    const Wrapped w = wrap_weights(c, a.w, a.rows, ms, &wbound);
    auto hidden = c.upload(a.hidden, (size_t)T * cols * sizeof(float), "hidden");
    auto gamma = a.gamma ? c.upload(a.gamma, (size_t)cols * sizeof(float), "norm_gamma") : c.buffer(4, "norm_gamma");
    auto normed = c.buffer((size_t)T * cols * sizeof(float), "normed");
    auto lg = c.buffer((size_t)T * rows * sizeof(float), "logits");  // Route A: retained, shared
    auto slot = c.buffer((size_t)T * sizeof(uint32_t), "greedy_result");  // Route B: stays on device
    uint32_t n_excl = 0;
    auto excl = upload_excluded(c, a.excluded, a.n_excluded, &n_excl);
    const ArgmaxScratch s = argmax_scratch(c, "greedy_argmax_f32_phase1", rows, T);
    NS::SharedPtr<MTL::Buffer> table, gathered;
    if (a.embed) {
        table = c.upload(a.embed, (size_t)(a.embed_rows * a.embed_dim) * sizeof(float), "embedding");
        gathered = c.buffer((size_t)(T * a.embed_dim) * sizeof(float), "next_embedding");
    }
#if defined(LMTAIL_METAL_TESTING)
    const int64_t plant = debug().plant_nan;
#endif

    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        View x{hidden.get(), 0};
        if (a.gamma) {
            encode_rms_norm(c, enc, x, View{gamma.get(), 0}, true, View{normed.get(), 0}, T, cols, a.eps);
            barrier(enc, {normed.get()}, kBarrierNormHead);
            x = View{normed.get(), 0};
        }
        encode_matvec(c, enc, a.type, w.view(), x, View{lg.get(), 0}, rows, cols, T,
                      u32((int64_t)wbound.row_stride, "stride"));
        barrier(enc, {lg.get()}, kBarrierHeadScale);
        encode_softcap(c, enc, View{lg.get(), 0}, T * rows, a.scale, a.cap, true);
        barrier(enc, {lg.get()}, kBarrierCapArgmax);
#if defined(LMTAIL_METAL_TESTING)
        if (plant >= 0) {  // test hook: a NaN between the head and the argmax
            encode_plant_nan(c, enc, View{lg.get(), 0}, (uint32_t)std::min<int64_t>(plant, (int64_t)T * rows - 1));
            barrier(enc, {lg.get()}, kBarrierDebugPlant);
        }
#endif
        encode_greedy_argmax(c, enc, View{lg.get(), 0}, rows, T, View{excl.get(), 0}, n_excl, s, View{slot.get(), 0});
        if (a.embed) {
            barrier(enc, {slot.get()}, kBarrierArgmaxPhases);
            encode_get_rows(c, enc, View{table.get(), 0}, View{slot.get(), 0}, View{gathered.get(), 0},
                            u32(a.embed_rows, "embed rows"), u32(a.embed_dim, "embed dim"), T);
        }
    });

    const uint32_t *r = static_cast<const uint32_t *>(slot->contents());
    if (result) std::memcpy(result, r, (size_t)T * sizeof(uint32_t));
    if (logits) std::memcpy(logits, lg->contents(), (size_t)T * rows * sizeof(float));
    if (embed_out) std::memcpy(embed_out, gathered->contents(), (size_t)(T * a.embed_dim) * sizeof(float));
    auto publish = [&] {
        if (!logits_view) return;
        logits_view->data = lg->contents();
        logits_view->owner = std::make_shared<NS::SharedPtr<MTL::Buffer>>(lg);
    };
    if (raw) return publish();
    for (uint32_t t = 0; t < T; ++t) {
        if (r[t] == LMT_ARGMAX_INVALID)
            throw lmt::NonFiniteError("greedy argmax: row " + std::to_string(t) +
                                      " contains NaN or Inf (the kernel's non-finite latch is set)");
        if (r[t] == LMT_ARGMAX_INVALID - 1u && n_excl)
            throw lmt::ArgumentError("greedy argmax: row " + std::to_string(t) + " has no candidate left after excluding " +
                                     std::to_string(n_excl) + " ids");
        if (r[t] >= rows)
            throw lmt::NonFiniteError("greedy argmax: row " + std::to_string(t) + " returned invalid token " +
                                      std::to_string(r[t]) + " (vocabulary " + std::to_string(rows) + ")");
    }
    publish();
}

#if defined(LMTAIL_METAL_TESTING)
void dispatch_raw(const std::string &kernel, const uint32_t groups[3], const uint32_t threads[3],
                  const std::vector<RawArg> &args) {
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    std::vector<NS::SharedPtr<MTL::Buffer>> bufs(args.size());
    for (size_t i = 0; i < args.size(); ++i)
        if (!args[i].is_bytes)
            bufs[i] = c.upload(args[i].data, args[i].bytes, ("arg" + std::to_string(args[i].index)).c_str());
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        enc->setComputePipelineState(c.pipeline(kernel));
        for (size_t i = 0; i < args.size(); ++i) {
            if (args[i].is_bytes) enc->setBytes(args[i].data, args[i].bytes, (NS::UInteger)args[i].index);
            else enc->setBuffer(bufs[i].get(), 0, (NS::UInteger)args[i].index);
        }
        enc->dispatchThreadgroups(size3(groups[0], groups[1], groups[2]), size3(threads[0], threads[1], threads[2]));
    });
    for (size_t i = 0; i < args.size(); ++i)
        if (!args[i].is_bytes && args[i].write_back) std::memcpy(args[i].data, bufs[i]->contents(), args[i].bytes);
}
#endif

}  // namespace lmt::LMT_METAL_NS
