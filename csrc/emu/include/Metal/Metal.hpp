// metal-emu: the subset of metal-cpp's Metal (MTL::) that lmtail's host code uses, with the same
// names and signatures. Commands are recorded by the encoder and run at commit(): first the
// hazard check over the recorded bindings (concurrent encoders), then every dispatch on the
// lane scheduler (csrc/emu/runtime.hpp).
//
// Deliberate differences from Metal, all on the side of finding bugs:
// * commit() runs the command buffer synchronously and throws (HazardError, KernelError)
//   where Metal would report through status()/error() or the validation layer.
// * newBuffer contents start as 0xFF bytes (NaN), so reading before writing is visible;
//   owned buffers end flush against an inaccessible page.
// * newLibrary(path) returns the kernels compiled into this binary from metal/*.metal; the
//   path is recorded, not read.
// * newLibrary(path) of a shared object (`.so`) loads a library translated at run time (llama.cpp's
//   kernels: python/lmtail/_ggml_metal.py) and offers exactly its kernels; it stays loaded.
// * newLibrary(source, options) (the development fallback of the host code) offers exactly the
//   kernels whose `kernel void NAME(` the source text declares, and fails as Metal would on an
//   include it cannot resolve (anything but <metal_stdlib>-style system headers) and, by
//   lmtail's policy, on fast math left on.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "Foundation/Foundation.hpp"

#define MTL lmt_emu_MTL

namespace lmt::emu {
struct KernelInfo;
struct FcValue;
struct FcDecl;
}

namespace MTL {

struct Size {
    Size() = default;
    Size(NS::UInteger w, NS::UInteger h, NS::UInteger d) : width(w), height(h), depth(d) {}
    NS::UInteger width = 1, height = 1, depth = 1;
};

enum ResourceOptions : NS::UInteger {
    ResourceCPUCacheModeDefaultCache = 0,
    ResourceStorageModeShared = 0,
    ResourceCPUCacheModeWriteCombined = 1,
    ResourceStorageModeManaged = 1 << 4,
    ResourceStorageModePrivate = 2 << 4,
    ResourceHazardTrackingModeUntracked = 1 << 8,
};
enum DispatchType : NS::UInteger { DispatchTypeSerial = 0, DispatchTypeConcurrent = 1 };
enum BarrierScope : NS::UInteger { BarrierScopeBuffers = 1, BarrierScopeTextures = 2, BarrierScopeRenderTargets = 4 };
enum CommandBufferStatus : NS::UInteger {
    CommandBufferStatusNotEnqueued = 0,
    CommandBufferStatusEnqueued = 1,
    CommandBufferStatusCommitted = 2,
    CommandBufferStatusScheduled = 3,
    CommandBufferStatusCompleted = 4,
    CommandBufferStatusError = 5,
};

class Resource : public NS::Referencing<Resource> {
  public:
    void setLabel(const NS::String *l) { label_ = l ? l->utf8String() : ""; }
    NS::String *label() const { return NS::String::string(label_.c_str(), NS::UTF8StringEncoding); }
    const std::string &label_str() const { return label_; }

  protected:
    std::string label_;
};

class Buffer : public Resource {
  public:
    void *contents() { return data_; }
    NS::UInteger length() const { return len_; }
    ~Buffer() override;
    // emulator internals
    Buffer(NS::UInteger len, const void *init, bool no_copy);
    unsigned char *data_ = nullptr;
    NS::UInteger len_ = 0;
    void *map_ = nullptr;
    size_t map_len_ = 0;
    uint64_t id_ = 0;
};

enum DataType : NS::UInteger {
    DataTypeFloat = 3,
    DataTypeHalf = 16,
    DataTypeInt = 29,
    DataTypeUInt = 33,
    DataTypeShort = 37,
    DataTypeUShort = 41,
    DataTypeChar = 45,
    DataTypeUChar = 49,
    DataTypeBool = 53,
};

// Values of function constants by index (`[[function_constant(n)]]`), given to newFunction.
class FunctionConstantValues : public NS::Referencing<FunctionConstantValues> {
  public:
    static FunctionConstantValues *alloc() { return new FunctionConstantValues(); }
    FunctionConstantValues *init() { return this; }
    void setConstantValue(const void *value, DataType type, NS::UInteger index);
    ~FunctionConstantValues() override;
    std::vector<lmt::emu::FcValue> *values_ = nullptr;  // emulator internals
};

class Function : public NS::Referencing<Function> {
  public:
    NS::String *name() const;
    ~Function() override;
    const lmt::emu::KernelInfo *info_ = nullptr;
    std::vector<lmt::emu::FcValue> *fc_ = nullptr;
};

class Library : public NS::Referencing<Library> {
  public:
    Function *newFunction(const NS::String *name);
    // Specialised by function constants. The emulator fails (nil + error) on a constant index the
    // library does not declare, so a library of another llama.cpp version is caught here.
    Function *newFunction(const NS::String *name, const FunctionConstantValues *values, NS::Error **error);
    std::string path_;
    bool from_source_ = false;
    std::vector<std::string> declared_;  // from_source_: the kernels the source declares
    // a run-time library (.so): its own kernels and declared function constants
    const lmt::emu::KernelInfo *const *kernels_ = nullptr;
    int n_kernels_ = 0;
    const lmt::emu::FcDecl *fcs_ = nullptr;
    int n_fcs_ = 0;
};

enum LanguageVersion : NS::UInteger { LanguageVersion3_0 = (3 << 16) + 0, LanguageVersion3_1 = (3 << 16) + 1 };

class CompileOptions : public NS::Referencing<CompileOptions> {
  public:
    static CompileOptions *alloc() { return new CompileOptions(); }
    CompileOptions *init() { return this; }
    void setFastMathEnabled(bool on) { fast_math_ = on; }
    bool fastMathEnabled() const { return fast_math_; }
    void setLanguageVersion(LanguageVersion v) { version_ = v; }
    LanguageVersion languageVersion() const { return version_; }

  private:
    bool fast_math_ = true;  // Metal's default
    LanguageVersion version_ = LanguageVersion3_0;
};

class ComputePipelineState : public NS::Referencing<ComputePipelineState> {
  public:
    NS::UInteger maxTotalThreadsPerThreadgroup() const;
    NS::UInteger threadExecutionWidth() const;
    NS::UInteger staticThreadgroupMemoryLength() const { return 0; }
    ~ComputePipelineState() override;
    const lmt::emu::KernelInfo *info_ = nullptr;
    std::vector<lmt::emu::FcValue> *fc_ = nullptr;
};

struct EmuCommand;
class ComputeCommandEncoder : public NS::Referencing<ComputeCommandEncoder> {
  public:
    void setComputePipelineState(const ComputePipelineState *p);
    void setBuffer(const Buffer *b, NS::UInteger offset, NS::UInteger index);
    void setBytes(const void *bytes, NS::UInteger length, NS::UInteger index);
    void setThreadgroupMemoryLength(NS::UInteger length, NS::UInteger index);
    void dispatchThreadgroups(Size groups, Size threads_per_group);
    void memoryBarrier(BarrierScope scope);
    void memoryBarrier(const Resource *const resources[], NS::UInteger count);
    void endEncoding();
    void setLabel(const NS::String *) {}
    ~ComputeCommandEncoder() override;
    // emulator internals
    struct State;
    explicit ComputeCommandEncoder(DispatchType t);
    std::unique_ptr<State> st_;
};

class CommandBuffer : public NS::Referencing<CommandBuffer> {
  public:
    ComputeCommandEncoder *computeCommandEncoder();
    ComputeCommandEncoder *computeCommandEncoder(DispatchType t);
    void commit();
    void waitUntilCompleted() {}
    CommandBufferStatus status() const { return status_; }
    NS::Error *error() const { return nullptr; }
    ~CommandBuffer() override;
    // emulator internals
    std::vector<ComputeCommandEncoder *> encoders_;
    CommandBufferStatus status_ = CommandBufferStatusNotEnqueued;
};

class CommandQueue : public NS::Referencing<CommandQueue> {
  public:
    CommandBuffer *commandBuffer();
};

class Device : public NS::Referencing<Device> {
  public:
    NS::String *name() const { return NS::String::string("lmtail metal-emu (CPU fibers)", NS::UTF8StringEncoding); }
    CommandQueue *newCommandQueue() { return new CommandQueue(); }
    Buffer *newBuffer(NS::UInteger length, ResourceOptions options);
    Buffer *newBuffer(const void *pointer, NS::UInteger length, ResourceOptions options);
    // newBufferWithBytesNoCopy: metal-cpp takes a deallocator block; the host code passes nullptr.
    Buffer *newBuffer(const void *pointer, NS::UInteger length, ResourceOptions options, std::nullptr_t deallocator);
    Library *newLibrary(const NS::String *filepath, NS::Error **error);
    Library *newLibrary(const NS::String *source, const CompileOptions *options, NS::Error **error);
    Library *newDefaultLibrary();
    ComputePipelineState *newComputePipelineState(const Function *function, NS::Error **error);
    Size maxThreadsPerThreadgroup() const { return Size(1024, 1024, 1024); }
    bool hasUnifiedMemory() const { return true; }
};

Device *CreateSystemDefaultDevice();

}  // namespace MTL
