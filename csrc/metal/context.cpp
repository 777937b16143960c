// Device, library, pipeline cache and encoder helpers of the Metal backend.
#if !defined(LMTAIL_METAL_EMU)
#define NS_PRIVATE_IMPLEMENTATION
#define MTL_PRIVATE_IMPLEMENTATION
#endif
#include "metal/context.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace lmt::LMT_METAL_NS {

namespace {
std::string &library_path() {
    static std::string p = "lmtail.metallib";
    return p;
}
}  // namespace

const std::vector<std::pair<std::string, uint32_t>> &barrier_names() {
    static const std::vector<std::pair<std::string, uint32_t>> v = {
        {"norm_head", kBarrierNormHead},       {"head_scale", kBarrierHeadScale},
        {"softcap_inv", kBarrierSoftcapInv},   {"softcap_tanh", kBarrierSoftcapTanh},
        {"softcap_cap", kBarrierSoftcapCap},   {"cap_argmax", kBarrierCapArgmax},
        {"argmax_phases", kBarrierArgmaxPhases}, {"debug_plant", kBarrierDebugPlant},
    };
    return v;
}

Debug &debug() {
    static Debug d;
    return d;
}

void set_library_path(const std::string &path) { library_path() = path; }

Context::Context() {
    device_ = NS::TransferPtr(MTL::CreateSystemDefaultDevice());
    if (!device_) throw lmt::Error("Metal: no device");
    queue_ = NS::TransferPtr(device_->newCommandQueue());
    NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
    NS::Error *err = nullptr;
    library_ = NS::TransferPtr(
        device_->newLibrary(NS::String::string(library_path().c_str(), NS::UTF8StringEncoding), &err));
    std::string msg = err ? err->localizedDescription()->utf8String() : "";
    pool->release();
    if (!library_) throw lmt::Error("Metal: cannot load the kernel library " + library_path() + ": " + msg);
}

Context &context() {
    static Context c;
    return c;
}

std::string device_name() {
    NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
    std::string n = context().device()->name()->utf8String();
    pool->release();
    return n;
}

MTL::ComputePipelineState *Context::pipeline(const std::string &name) {
    auto it = pipelines_.find(name);
    if (it != pipelines_.end()) return it->second.get();
    NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
    NS::SharedPtr<MTL::Function> fn =
        NS::TransferPtr(library_->newFunction(NS::String::string(name.c_str(), NS::UTF8StringEncoding)));
    NS::Error *err = nullptr;
    MTL::ComputePipelineState *p = fn ? device_->newComputePipelineState(fn.get(), &err) : nullptr;
    std::string msg = err ? err->localizedDescription()->utf8String() : "no such function in the library";
    pool->release();
    if (!p) throw lmt::Error("Metal: cannot build the pipeline for kernel '" + name + "': " + msg);
    pipelines_[name] = NS::TransferPtr(p);
    return p;
}

NS::SharedPtr<MTL::Buffer> Context::buffer(size_t bytes, const char *label) {
    NS::SharedPtr<MTL::Buffer> b =
        NS::TransferPtr(device_->newBuffer((NS::UInteger)(bytes ? bytes : 4), MTL::ResourceStorageModeShared));
    if (!b) throw lmt::Error("Metal: cannot allocate " + std::to_string(bytes) + " bytes");
    NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
    b->setLabel(NS::String::string(label, NS::UTF8StringEncoding));
    pool->release();
    return b;
}

NS::SharedPtr<MTL::Buffer> Context::upload(const void *data, size_t bytes, const char *label) {
    NS::SharedPtr<MTL::Buffer> b = buffer(bytes, label);
    if (bytes) std::memcpy(b->contents(), data, bytes);
    return b;
}

Wrapped wrap_readonly(Context &c, const void *p, size_t bytes, const char *label) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t base = (uintptr_t)p & ~(page - 1);
    const uintptr_t end = ((uintptr_t)p + bytes + page - 1) & ~(page - 1);
    Wrapped w;
    MTL::Buffer *b = c.device()->newBuffer((const void *)base, (NS::UInteger)(end - base), MTL::ResourceStorageModeShared,
                                           nullptr);
    if (b) {
        w.buf = NS::TransferPtr(b);
        w.offset = (size_t)((uintptr_t)p - base);
        NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
        b->setLabel(NS::String::string(label, NS::UTF8StringEncoding));
        pool->release();
    } else {
        w.buf = c.upload(p, bytes, label);
    }
    return w;
}

void barrier(MTL::ComputeCommandEncoder *enc, std::initializer_list<const MTL::Buffer *> bufs, Barrier which) {
    const char *e = std::getenv("LMTAIL_METAL_SKIP_BARRIERS");  // read per call: tests flip it
    if ((e && std::strcmp(e, "1") == 0) || (debug().skip_barriers & which)) return;
    const MTL::Resource *res[8];
    NS::UInteger n = 0;
    for (const MTL::Buffer *b : bufs) res[n++] = b;
    enc->memoryBarrier(res, n);
}

}  // namespace lmt::LMT_METAL_NS
