// metal-emu lane ABI: what generated kernel code and the runtime share.
//
// Kernel translation units (tools/msl_trampolines.py + msl/msl_compat.hpp) see only this header:
// the built-in ones are linked into _core, a library translated at run time (llama.cpp's kernels,
// docs/DESIGN.md "llama.cpp's own kernels") is a shared object that reaches the hooks below
// through the Hooks table it is handed when loaded, so it needs none of lmtail's other headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lmt::emu {

struct Dim3 {
    uint32_t x = 1, y = 1, z = 1;
};

constexpr uint32_t kSimdWidth = 32;

struct LaneBuiltins {
    Dim3 thread_position_in_grid, thread_position_in_threadgroup, threadgroup_position_in_grid;
    Dim3 threads_per_threadgroup, threadgroups_per_grid, threads_per_grid;
    uint32_t thread_index_in_threadgroup, thread_index_in_simdgroup, simdgroup_index_in_threadgroup;
    uint32_t simdgroups_per_threadgroup, threads_per_simdgroup;
};

constexpr int kMaxBufferIndex = 31;
struct Binding {
    void *ptr = nullptr;
    size_t size = 0;  // bytes from ptr to the end of the bound buffer
};
// A function constant's value as the host set it (MTL::FunctionConstantValues).
struct FcValue {
    int index;
    uint32_t size;
    unsigned char bytes[8];
};
constexpr int kMaxThreadgroupIndex = 8;
struct Hooks;
struct Bindings {
    Binding buf[kMaxBufferIndex];
    size_t tg_len[kMaxThreadgroupIndex] = {};  // setThreadgroupMemoryLength: [[threadgroup(n)]] parameters
    const FcValue *fc = nullptr;               // the pipeline's function constants
    int n_fc = 0;
    const Hooks *hooks = nullptr;  // the runtime running this dispatch (a run-time library's hooks)
};

// Generator metadata (tools/msl_trampolines.py): one record per [[buffer(n)]] parameter.
enum class Access : uint8_t { Read = 0, Write = 1 };  // Write: a non-const device pointer
struct ParamInfo {
    const char *name;
    const char *type;
    int index;
    Access access;
};
using Trampoline = void (*)(const LaneBuiltins &, const Bindings &);
struct KernelInfo {
    const char *name;
    const char *file;
    Trampoline fn;
    const ParamInfo *params;
    int n_params;
};

void register_kernel(const KernelInfo *k);

// ---- hooks called by kernel code (msl_compat.hpp) ----
struct Site {
    const char *file;
    int line, col;
};
void barrier(Site s);
// SIMD-group exchange: the lane publishes `bytes` (<= 16) and waits for its SIMD-group; returns
// the 32 slots (16 bytes each) and the mask of lanes that took part.
struct SimdView {
    const unsigned char (*slots)[16];
    uint32_t mask;
    uint32_t lane;
};
SimdView simd_exchange(const void *v, size_t bytes, Site s);
// Threadgroup storage of one declaration (key: unique per declaration site), shared by every
// lane of the current group, poisoned with 0xFF bytes (NaN) when first reached.
void *tg_alloc(const char *key, size_t bytes, size_t align);
[[noreturn]] void kernel_fault(const std::string &msg);
// The value of function constant `index` of the running pipeline (`size` bytes); a kernel
// fault when the host did not set it.
const void *function_constant(int index, size_t size);

// The hooks as a table, for a library loaded at run time (its copies of the functions above
// forward here). `version` guards against a library built by another lmtail.
struct Hooks {
    int version;
    void (*barrier)(Site);
    SimdView (*simd_exchange)(const void *, size_t, Site);
    void *(*tg_alloc)(const char *, size_t, size_t);
    void (*kernel_fault)(const std::string &);
    const void *(*function_constant)(int, size_t);
};
constexpr int kHooksVersion = 1;
// A function constant a library declares: `constant T name [[function_constant(index)]]`.
struct FcDecl {
    const char *name;
    const char *type;
    int index;
};
// What the entry point `lmt_emu_library` of a run-time library returns.
struct LibraryTable {
    const KernelInfo *const *kernels;
    int n_kernels;
    const FcDecl *fcs;
    int n_fcs;
};
using LibraryEntry = int (*)(const Hooks *, LibraryTable *);

}  // namespace lmt::emu
