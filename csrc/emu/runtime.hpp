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

#include "emu/lane_abi.hpp"
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

constexpr size_t kMaxThreadgroupMemory = 32768;
constexpr uint32_t kMaxThreadsPerThreadgroup = 1024;

const KernelInfo *find_kernel(const std::string &name);
std::vector<const KernelInfo *> all_kernels();

struct DispatchStats {
    uint64_t groups = 0, lanes = 0, switches = 0;
};
// Runs every threadgroup of the grid. Throws KernelError on a kernel fault.
DispatchStats run_dispatch(const KernelInfo &k, const Bindings &b, Dim3 groups, Dim3 tg_size);
// The hooks handed to a library loaded at run time (mtl.cpp, Device::newLibrary).
const Hooks &host_hooks();


// Hazards found by the last commits in Snapshot mode (Raise mode throws the first one).
std::vector<std::string> take_hazard_log();
void append_hazards(const std::vector<std::string> &hz);
// Counters since the process started (bench/ and tests report emulator speed).
struct EmuCounters {
    uint64_t dispatches = 0, groups = 0, lanes = 0, switches = 0;
};
EmuCounters &counters();

}  // namespace lmt::emu
