// Host-side state of the Metal backend: device, queue, library, pipelines cached by name, and
// the helpers every encoder function uses. Includes metal-cpp (or the emulator's copy of it).
#pragma once

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include <cstring>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lmtail/cpu.hpp"
#include "lmtail/kernel_abi.h"
#include "metal/backend.hpp"

namespace lmt::LMT_METAL_NS {

class Context {
  public:
    Context();
    // The pipeline of kernel `name` (its descriptive host name), compiled once and cached.
    MTL::ComputePipelineState *pipeline(const std::string &name);
    // A shared-storage buffer of `bytes`, labelled (labels name buffers in hazard reports).
    NS::SharedPtr<MTL::Buffer> buffer(size_t bytes, const char *label);
    NS::SharedPtr<MTL::Buffer> upload(const void *data, size_t bytes, const char *label);
    MTL::Device *device() { return device_.get(); }
    MTL::CommandQueue *queue() { return queue_.get(); }
    const std::string &origin() const { return origin_; }
    std::mutex mu;  // one command buffer in flight per process (the Python layer is serial)

  private:
    NS::SharedPtr<MTL::Device> device_;
    NS::SharedPtr<MTL::CommandQueue> queue_;
    // One library (the metallib), or one per metal/*.metal file in the source fallback.
    std::vector<NS::SharedPtr<MTL::Library>> libraries_;
    std::map<std::string, NS::SharedPtr<MTL::ComputePipelineState>> pipelines_;
    std::string origin_;  // library_origin()
    void load_metallib(const std::string &path);
    void load_sources(const std::string &kernels_dir, const std::string &include_dir);
};
Context &context();

// A buffer binding: buffer + byte offset.
struct View {
    MTL::Buffer *buf = nullptr;
    size_t offset = 0;
};

// A host array viewed by the device without a copy when it can be (page-rounded no-copy buffer,
// bound at the array's offset inside it, as ggml does for GGUF tensors); else uploaded.
struct Wrapped {
    NS::SharedPtr<MTL::Buffer> buf;
    size_t offset = 0;
    View view() const { return View{buf.get(), offset}; }
};
Wrapped wrap_readonly(Context &c, const void *p, size_t bytes, const char *label);

// memoryBarrier(resources) over `bufs` (`which` names it: only the test build can remove it).
void barrier(MTL::ComputeCommandEncoder *enc, std::initializer_list<const MTL::Buffer *> bufs, Barrier which);

// One command buffer with one concurrent compute encoder: encode, commit, wait.
template <class F>
void run_concurrent(Context &c, F &&encode) {
    NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
    struct Drain {
        NS::AutoreleasePool *p;
        ~Drain() { p->release(); }
    } drain{pool};
    MTL::CommandBuffer *cb = c.queue()->commandBuffer();
    MTL::ComputeCommandEncoder *enc = cb->computeCommandEncoder(MTL::DispatchTypeConcurrent);
    try {
        encode(enc);
    } catch (...) {
        enc->endEncoding();
        throw;
    }
    enc->endEncoding();
    cb->commit();
    cb->waitUntilCompleted();
    if (cb->status() == MTL::CommandBufferStatusError) {
        NS::Error *e = cb->error();
        throw lmt::Error(std::string("Metal command buffer failed: ") +
                         (e ? e->localizedDescription()->utf8String() : "unknown error"));
    }
}

inline MTL::Size size3(uint64_t x, uint64_t y = 1, uint64_t z = 1) { return MTL::Size(x, y, z); }
inline uint32_t u32(int64_t v, const char *what) {
    if (v < 0 || v > 0xFFFFFFFFll) throw lmt::ArgumentError(std::string(what) + ": out of the 32-bit range");
    return (uint32_t)v;
}

// ---- encoder functions, one per op (argmax.cpp, unary.cpp, rms_norm.cpp, ...) ----
void encode_rms_norm(Context &c, MTL::ComputeCommandEncoder *enc, View x, View gamma, bool has_gamma, View y,
                     uint32_t n_rows, uint32_t cols, float eps);
// matvec.cpp: the checked geometry of a weight operand, its binding (wrapped in place when its
// rows are aligned for the type, else packed), and the encoder of the type's table row.
struct MatvecShape {
    size_t row_bytes = 0, row_stride = 0, extent = 0;
    uint32_t align = 1;
};
MatvecShape matvec_shape(WeightType type, int64_t rows, int64_t cols, size_t row_stride, int64_t T);
Wrapped wrap_weights(Context &c, const uint8_t *w, int64_t rows, const MatvecShape &s, MatvecShape *bound);
void encode_matvec(Context &c, MTL::ComputeCommandEncoder *enc, WeightType type, View w, View x, View y,
                   uint32_t rows, uint32_t cols, uint32_t T, uint32_t row_stride);
void encode_scale(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, float s);
void encode_tanh(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n);
// cap <= 0: scale only. four_pass: the four llama.cpp nodes with barriers in between.
void encode_softcap(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, float s, float cap,
                    bool four_pass);
struct ArgmaxScratch {
    NS::SharedPtr<MTL::Buffer> keys, idx;
    uint32_t n_chunks = 0, chunk = 0;
};
ArgmaxScratch argmax_scratch(Context &c, const char *phase1, uint32_t n, uint32_t n_rows);
void encode_argmax(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, uint32_t n_rows,
                   const ArgmaxScratch &s, View out);
void encode_greedy_argmax(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, uint32_t n_rows,
                          View excluded, uint32_t n_excluded, const ArgmaxScratch &s, View out);
void encode_topk(Context &c, MTL::ComputeCommandEncoder *enc, View x, uint32_t n, uint32_t n_rows, uint32_t k,
                 View ids, View vals);

}  // namespace lmt::LMT_METAL_NS
