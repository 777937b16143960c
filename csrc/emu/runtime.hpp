// metal-emu runtime: the kernel registry, the lane scheduler and the hooks MSL-as-C++ calls.
//
// A dispatch runs its threadgroups one after another on the calling thread. Inside a group
// every lane is a fiber; a lane runs until it reaches threadgroup_barrier, a simd_* op or its
// end, then the scheduler picks the next lane (forward, reverse or seeded-random order). A
// barrier is released only when every lane of the group waits at the same call site; a simd_*
// op only when every live lane of the SIMD-group waits at the same site. Anything else
// (divergent barriers, lanes returning while others wait) raises KernelError, never hangs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lmtail/cpu.hpp"

namespace lmt::emu {

// A kernel broke an MSL rule the emulator checks (divergent barrier, threadgroup memory over
// 32 KiB, unbound buffer, ...). Maps to lmtail.LmtailError.
class KernelError : public lmt::Error {
  public:
    using Error::Error;
};
// Two dispatches of a concurrent encoder touch one buffer, one of them writing, with no
// covering memoryBarrier in between. Maps to lmtail.HazardError.
class HazardError : public lmt::Error {
  public:
    using Error::Error;
};

struct Dim3 {
    uint32_t x = 1, y = 1, z = 1;
};

enum class Order : int { Forward = 0, Reverse = 1, Random = 2 };
enum class HazardMode : int {
    Raise = 0,     // a hazard raises HazardError at commit, before anything runs
    Snapshot = 1,  // run anyway; an unordered reader sees the buffer as it was before the write
};

struct Config {
    Order order = Order::Forward;
    uint64_t seed = 1;
    HazardMode hazards = HazardMode::Raise;
};
// Process-wide settings (callers serialise; the Python layer holds one lock).
Config &config();
const char *order_name(Order o);

constexpr uint32_t kSimdWidth = 32;
constexpr size_t kMaxThreadgroupMemory = 32768;
constexpr uint32_t kMaxThreadsPerThreadgroup = 1024;

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
struct Bindings {
    Binding buf[kMaxBufferIndex];
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
const KernelInfo *find_kernel(const std::string &name);
std::vector<const KernelInfo *> all_kernels();

struct DispatchStats {
    uint64_t groups = 0, lanes = 0, switches = 0;
};
// Runs every threadgroup of the grid. Throws KernelError on a kernel fault.
DispatchStats run_dispatch(const KernelInfo &k, const Bindings &b, Dim3 groups, Dim3 tg_size);

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

// Hazards found by the last commits in Snapshot mode (Raise mode throws the first one).
std::vector<std::string> take_hazard_log();
void append_hazards(const std::vector<std::string> &hz);
// Counters since the process started (bench/ and tests report emulator speed).
struct EmuCounters {
    uint64_t dispatches = 0, groups = 0, lanes = 0, switches = 0;
};
EmuCounters &counters();

}  // namespace lmt::emu
