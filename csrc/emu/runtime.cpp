// metal-emu runtime: fibers, the lane scheduler, barriers, SIMD-group rendezvous, threadgroup
// memory. See runtime.hpp for the model.
#include "emu/runtime.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>

#if defined(__SANITIZE_ADDRESS__)
#define LMT_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LMT_EMU_ASAN 1
#endif
#endif
#if LMT_EMU_ASAN
#include <sanitizer/common_interface_defs.h>  // fiber annotations: ASan follows the stack switches
#endif

#if defined(__x86_64__) && !defined(LMTAIL_EMU_UCONTEXT)
#define LMT_EMU_ASM_X86_64 1
#define LMT_EMU_ASM 1
#elif defined(__aarch64__) && !defined(LMTAIL_EMU_UCONTEXT)
#define LMT_EMU_ASM_ARM64 1
#define LMT_EMU_ASM 1
#else
#include <ucontext.h>
#endif

// ---- context switch --------------------------------------------------------------------------
// x86-64 System V: save the callee-saved registers, MXCSR and the x87 control word on the old
// stack, store its sp, load the new sp, restore. ~12 ns a switch here, against ~220 ns for
// swapcontext (which makes a sigprocmask syscall every time).
#if LMT_EMU_ASM
#if defined(__APPLE__)
#define LMT_SYM(x) "_" #x
#else
#define LMT_SYM(x) #x
#endif
extern "C" void lmt_emu_switch(void **save_sp, void *new_sp);
extern "C" void lmt_emu_fiber_entry();
extern "C" [[noreturn]] void lmt_emu_fiber_main(void *lane);
#endif
#if LMT_EMU_ASM_X86_64
asm(".text\n"
    ".globl " LMT_SYM(lmt_emu_switch) "\n"
#if !defined(__APPLE__)
    ".type lmt_emu_switch,@function\n"
#endif
    LMT_SYM(lmt_emu_switch) ":\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".globl " LMT_SYM(lmt_emu_fiber_entry) "\n"
    LMT_SYM(lmt_emu_fiber_entry) ":\n"
    "  movq %r12, %rdi\n"
    "  call " LMT_SYM(lmt_emu_fiber_main) "\n"
    "  ud2\n");
#endif
// arm64 (AAPCS64 and Apple's variant): x19-x30, d8-d15 and FPCR on the old stack; x18 (Apple's
// platform register) is never touched. A new fiber "returns" into lmt_emu_fiber_entry with the
// lane pointer in x19.
#if LMT_EMU_ASM_ARM64
asm(".text\n"
    ".globl " LMT_SYM(lmt_emu_switch) "\n"
    ".p2align 2\n"
    LMT_SYM(lmt_emu_switch) ":\n"
    "  sub sp, sp, #176\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mrs x9, fpcr\n  str x9, [sp, #160]\n"
    "  mov x9, sp\n  str x9, [x0]\n"
    "  mov sp, x1\n"
    "  ldr x9, [sp, #160]\n  msr fpcr, x9\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #176\n"
    "  ret\n"
    ".globl " LMT_SYM(lmt_emu_fiber_entry) "\n"
    ".p2align 2\n"
    LMT_SYM(lmt_emu_fiber_entry) ":\n"
    "  mov x0, x19\n"
    "  bl " LMT_SYM(lmt_emu_fiber_main) "\n"
    "  brk #0\n");
#endif

namespace lmt::emu {

Config &config() {
    static Config c;
    return c;
}

const char *order_name(Order o) {
    switch (o) {
        case Order::Forward: return "forward";
        case Order::Reverse: return "reverse";
        case Order::Random: return "random";
    }
    return "?";
}

// ---- registry --------------------------------------------------------------------------------
namespace {
std::map<std::string, const KernelInfo *> &registry() {
    static std::map<std::string, const KernelInfo *> r;
    return r;
}
}  // namespace

void register_kernel(const KernelInfo *k) { registry()[k->name] = k; }
const KernelInfo *find_kernel(const std::string &name) {
    auto it = registry().find(name);
    return it == registry().end() ? nullptr : it->second;
}
std::vector<const KernelInfo *> all_kernels() {
    std::vector<const KernelInfo *> v;
    for (auto &kv : registry()) v.push_back(kv.second);
    return v;
}

// ---- lanes and groups ------------------------------------------------------------------------
namespace {

enum class LaneState : uint8_t { Runnable, AtBarrier, AtSimd, Done };

struct Group;
struct Lane {
    void *sp = nullptr;  // saved stack pointer while suspended
#if !LMT_EMU_ASM
    ucontext_t uc;
#endif
    LaneState state = LaneState::Done;
    Site site{nullptr, 0, 0};
    uint32_t simd_gen = 0;
    LaneBuiltins b{};
    std::exception_ptr err;
    Group *g = nullptr;
    unsigned char *stack_lo = nullptr;
    size_t stack_bytes = 0;
    void *asan_fake = nullptr;
};

struct SimdGroupState {
    alignas(16) unsigned char slots[2][kSimdWidth][16];
    uint32_t mask[2];
};

struct TgDecl {
    const char *key;
    size_t offset, bytes;
};

struct Group {
    const KernelInfo *k = nullptr;
    const Bindings *bind = nullptr;
    uint32_t n_lanes = 0;
    std::vector<Lane> *lanes = nullptr;
    std::vector<SimdGroupState> simd;
    alignas(64) unsigned char tg_mem[kMaxThreadgroupMemory];
    size_t tg_used = 0;
    std::vector<TgDecl> tg_decls;
    void *sched_sp = nullptr;
#if !LMT_EMU_ASM
    ucontext_t sched_uc;
#endif
    uint64_t switches = 0;
    const void *sched_stack = nullptr;  // ASan: the scheduler's stack, learnt on first entry
    size_t sched_stack_bytes = 0;
};

thread_local Lane *t_lane = nullptr;
thread_local Group *t_group = nullptr;

constexpr size_t kStackBytes = 64 * 1024;

// One stack per lane slot, each with a PROT_NONE guard page below it; kept for the thread's
// lifetime and reused by every group.
struct StackPool {
    std::vector<unsigned char *> stacks;
    size_t page = 0;
    ~StackPool() {
        for (auto *p : stacks) munmap(p - page, kStackBytes + page);
    }
    unsigned char *get(size_t i) {
        if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
        while (stacks.size() <= i) {
            void *m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) throw KernelError("metal-emu: cannot map a lane stack");
            mprotect(m, page, PROT_NONE);
            stacks.push_back((unsigned char *)m + page);
        }
        return stacks[i];
    }
};
thread_local StackPool t_stacks;

inline void switch_to_lane(Group &g, Lane &l) {
    ++g.switches;
    t_lane = &l;
#if LMT_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, l.stack_lo, l.stack_bytes);
    struct Finish {
        void *&f;
        ~Finish() { __sanitizer_finish_switch_fiber(f, nullptr, nullptr); }
    } finish{fake};
#endif
#if LMT_EMU_ASM
    lmt_emu_switch(&g.sched_sp, l.sp);
#else
    swapcontext(&g.sched_uc, &l.uc);
#endif
    t_lane = nullptr;
}

inline void switch_to_scheduler(Lane &l, bool last = false) {
#if LMT_EMU_ASAN
    __sanitizer_start_switch_fiber(last ? nullptr : &l.asan_fake, l.g->sched_stack, l.g->sched_stack_bytes);
#else
    (void)last;
#endif
#if LMT_EMU_ASM
    lmt_emu_switch(&l.sp, l.g->sched_sp);
#else
    swapcontext(&l.uc, &l.g->sched_uc);
#endif
#if LMT_EMU_ASAN
    __sanitizer_finish_switch_fiber(l.asan_fake, nullptr, nullptr);
#endif
}

[[noreturn]] void lane_main(Lane *l) {
#if LMT_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &l->g->sched_stack, &l->g->sched_stack_bytes);
#endif
    try {
        l->g->k->fn(l->b, *l->g->bind);
    } catch (...) {
        l->err = std::current_exception();
    }
    l->state = LaneState::Done;
    switch_to_scheduler(*l, true);
    __builtin_trap();  // a finished lane is never resumed
}

#if !LMT_EMU_ASM
void uc_entry(unsigned lo, unsigned hi) {
    lane_main((Lane *)(((uintptr_t)hi << 32) | (uintptr_t)lo));
}
#endif

void init_lane_stack(Lane &l) {
#if LMT_EMU_ASM_X86_64
    uintptr_t top = ((uintptr_t)(l.stack_lo + l.stack_bytes)) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 80);  // 16-aligned: after `ret` rsp = top - 16
    const uint32_t mxcsr = 0x1F80, fpucw = 0x037F;
    sp[0] = (uint64_t)mxcsr | ((uint64_t)fpucw << 32);
    sp[1] = 0;               // r15
    sp[2] = 0;               // r14
    sp[3] = 0;               // r13
    sp[4] = (uint64_t)&l;    // r12 -> first argument of lmt_emu_fiber_main
    sp[5] = 0;               // rbx
    sp[6] = 0;               // rbp
    sp[7] = (uint64_t)&lmt_emu_fiber_entry;
    l.sp = sp;
#elif LMT_EMU_ASM_ARM64
    uintptr_t top = ((uintptr_t)(l.stack_lo + l.stack_bytes)) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 176);  // after `add sp, sp, #176`: sp = top (16-aligned)
    std::memset(sp, 0, 176);                  // x20-x29 = 0 (frame chain ends), d8-d15 = 0, FPCR = 0
    sp[0] = (uint64_t)&l;                     // x19 -> first argument of lmt_emu_fiber_main
    sp[11] = (uint64_t)&lmt_emu_fiber_entry;  // x30: where `ret` goes
    l.sp = sp;
#else
    getcontext(&l.uc);
    l.uc.uc_stack.ss_sp = l.stack_lo;
    l.uc.uc_stack.ss_size = l.stack_bytes;
    l.uc.uc_link = nullptr;
    const uintptr_t p = (uintptr_t)&l;
    makecontext(&l.uc, (void (*)())uc_entry, 2, (unsigned)(p & 0xFFFFFFFFu), (unsigned)(p >> 32));
#endif
}

std::string where(const Site &s) {
    return std::string(s.file ? s.file : "?") + ":" + std::to_string(s.line);
}
bool same_site(const Site &a, const Site &b) {
    return a.line == b.line && a.col == b.col && (a.file == b.file || (a.file && b.file && !strcmp(a.file, b.file)));
}

struct SplitMix {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
};

[[noreturn]] void group_fault(const Group &g, const std::string &msg) {
    const auto &b = (*g.lanes)[0].b;
    throw KernelError("metal-emu: kernel '" + std::string(g.k->name) + "' threadgroup (" +
                      std::to_string(b.threadgroup_position_in_grid.x) + "," +
                      std::to_string(b.threadgroup_position_in_grid.y) + "," +
                      std::to_string(b.threadgroup_position_in_grid.z) + "): " + msg);
}

// Resolves pending SIMD rendezvous; returns true if any lane became runnable.
bool resolve_simd(Group &g) {
    auto &lanes = *g.lanes;
    bool progress = false;
    const uint32_t n_sg = (g.n_lanes + kSimdWidth - 1) / kSimdWidth;
    for (uint32_t sg = 0; sg < n_sg; ++sg) {
        const uint32_t l0 = sg * kSimdWidth, l1 = std::min(g.n_lanes, l0 + kSimdWidth);
        int first_simd = -1, first_barrier = -1;
        for (uint32_t i = l0; i < l1; ++i) {
            if (lanes[i].state == LaneState::AtSimd && first_simd < 0) first_simd = (int)i;
            if (lanes[i].state == LaneState::AtBarrier && first_barrier < 0) first_barrier = (int)i;
        }
        if (first_simd < 0) continue;
        const Lane &ref = lanes[(size_t)first_simd];
        if (first_barrier >= 0)
            group_fault(g, "divergent SIMD-group: lane " + std::to_string(first_simd) + " waits at simd op " +
                               where(ref.site) + " while lane " + std::to_string(first_barrier) +
                               " waits at threadgroup_barrier " + where(lanes[(size_t)first_barrier].site));
        uint32_t mask = 0;
        for (uint32_t i = l0; i < l1; ++i) {
            const Lane &l = lanes[i];
            if (l.state == LaneState::Done) continue;
            if (!same_site(l.site, ref.site) || l.simd_gen != ref.simd_gen)
                group_fault(g, "divergent SIMD-group ops: lane " + std::to_string(first_simd) + " at " +
                                   where(ref.site) + ", lane " + std::to_string(i) + " at " + where(l.site));
            mask |= 1u << (i - l0);
        }
        g.simd[sg].mask[ref.simd_gen & 1] = mask;
        for (uint32_t i = l0; i < l1; ++i)
            if (lanes[i].state == LaneState::AtSimd) lanes[i].state = LaneState::Runnable;
        progress = true;
    }
    return progress;
}

void run_group(Group &g, SplitMix &rng, Order order) {
    auto &lanes = *g.lanes;
    std::vector<uint32_t> ord(g.n_lanes);
    for (uint32_t i = 0; i < g.n_lanes; ++i) ord[i] = i;
    if (order == Order::Reverse) std::reverse(ord.begin(), ord.end());
    for (;;) {
        if (order == Order::Random)
            for (uint32_t i = g.n_lanes; i > 1; --i) std::swap(ord[i - 1], ord[rng.next() % i]);
        for (uint32_t i : ord) {
            Lane &l = lanes[i];
            if (l.state != LaneState::Runnable) continue;
            switch_to_lane(g, l);
            if (l.err) std::rethrow_exception(l.err);
        }
        if (resolve_simd(g)) continue;
        uint32_t done = 0, waiting = 0;
        int first_done = -1, first_wait = -1;
        for (uint32_t i = 0; i < g.n_lanes; ++i) {
            if (lanes[i].state == LaneState::Done) {
                ++done;
                if (first_done < 0) first_done = (int)i;
            } else {
                ++waiting;
                if (first_wait < 0) first_wait = (int)i;
            }
        }
        if (waiting == 0) return;
        const Site &s = lanes[(size_t)first_wait].site;
        if (done)
            group_fault(g, std::to_string(done) + " lane(s) (first: lane " + std::to_string(first_done) +
                               ") returned while " + std::to_string(waiting) +
                               " lane(s) wait at threadgroup_barrier " + where(s));
        for (uint32_t i = 0; i < g.n_lanes; ++i)
            if (!same_site(lanes[i].site, s))
                group_fault(g, "divergent threadgroup_barrier: lane " + std::to_string(first_wait) + " waits at " +
                                   where(s) + ", lane " + std::to_string(i) + " at " + where(lanes[i].site));
        for (uint32_t i = 0; i < g.n_lanes; ++i) lanes[i].state = LaneState::Runnable;
    }
}

}  // namespace

extern "C" [[noreturn]] void lmt_emu_fiber_main(void *lane) { lane_main((Lane *)lane); }

DispatchStats run_dispatch(const KernelInfo &k, const Bindings &bind, Dim3 groups, Dim3 tg) {
    const uint64_t n_lanes64 = (uint64_t)tg.x * tg.y * tg.z;
    if (n_lanes64 == 0 || n_lanes64 > kMaxThreadsPerThreadgroup)
        throw KernelError("metal-emu: kernel '" + std::string(k.name) + "': threadgroup of " +
                          std::to_string(n_lanes64) + " threads; expected 1.." +
                          std::to_string(kMaxThreadsPerThreadgroup));
    const uint32_t n_lanes = (uint32_t)n_lanes64;
    static thread_local std::vector<Lane> lanes;
    if (lanes.size() < n_lanes) lanes.resize(n_lanes);
    auto g = std::make_unique<Group>();
    g->k = &k;
    g->bind = &bind;
    g->n_lanes = n_lanes;
    g->lanes = &lanes;
    g->simd.resize((n_lanes + kSimdWidth - 1) / kSimdWidth);
    const Config cfg = config();
    DispatchStats st;
    struct Reset {
        ~Reset() {
            t_group = nullptr;
            t_lane = nullptr;
        }
    } reset;
    t_group = g.get();
    const uint32_t n_sg = (n_lanes + kSimdWidth - 1) / kSimdWidth;
    for (uint32_t gz = 0; gz < groups.z; ++gz)
        for (uint32_t gy = 0; gy < groups.y; ++gy)
            for (uint32_t gx = 0; gx < groups.x; ++gx) {
                g->tg_used = 0;
                g->tg_decls.clear();
                for (uint32_t i = 0; i < n_lanes; ++i) {
                    Lane &l = lanes[i];
                    l.g = g.get();
                    l.state = LaneState::Runnable;
                    l.simd_gen = 0;
                    l.err = nullptr;
                    l.stack_lo = t_stacks.get(i);
                    l.stack_bytes = kStackBytes;
                    const uint32_t lx = i % tg.x, ly = (i / tg.x) % tg.y, lz = i / (tg.x * tg.y);
                    LaneBuiltins &b = l.b;
                    b.thread_position_in_threadgroup = {lx, ly, lz};
                    b.threadgroup_position_in_grid = {gx, gy, gz};
                    b.threads_per_threadgroup = tg;
                    b.threadgroups_per_grid = groups;
                    b.threads_per_grid = {groups.x * tg.x, groups.y * tg.y, groups.z * tg.z};
                    b.thread_position_in_grid = {gx * tg.x + lx, gy * tg.y + ly, gz * tg.z + lz};
                    b.thread_index_in_threadgroup = i;
                    b.thread_index_in_simdgroup = i % kSimdWidth;
                    b.simdgroup_index_in_threadgroup = i / kSimdWidth;
                    b.simdgroups_per_threadgroup = n_sg;
                    b.threads_per_simdgroup = kSimdWidth;
                    init_lane_stack(l);
                }
                const uint64_t gid = ((uint64_t)gz * groups.y + gy) * groups.x + gx;
                SplitMix rng{cfg.seed * 0x100000001B3ull ^ gid};
                run_group(*g, rng, cfg.order);
                ++st.groups;
            }
    st.lanes = st.groups * n_lanes;
    st.switches = g->switches;
    return st;
}

// ---- hooks -----------------------------------------------------------------------------------
namespace {
Lane &current_lane(const char *what) {
    if (!t_lane) throw KernelError(std::string("metal-emu: ") + what + " called outside a kernel");
    return *t_lane;
}
}  // namespace

void barrier(Site s) {
    Lane &l = current_lane("threadgroup_barrier");
    l.state = LaneState::AtBarrier;
    l.site = s;
    switch_to_scheduler(l);
}

SimdView simd_exchange(const void *v, size_t bytes, Site s) {
    Lane &l = current_lane("simd op");
    Group &g = *l.g;
    const uint32_t sg = l.b.simdgroup_index_in_threadgroup, lane = l.b.thread_index_in_simdgroup;
    const uint32_t gen = l.simd_gen & 1;
    std::memcpy(g.simd[sg].slots[gen][lane], v, bytes);
    l.state = LaneState::AtSimd;
    l.site = s;
    switch_to_scheduler(l);
    ++l.simd_gen;
    return SimdView{g.simd[sg].slots[gen], g.simd[sg].mask[gen], lane};
}

void *tg_alloc(const char *key, size_t bytes, size_t align) {
    Group &g = *current_lane("threadgroup storage").g;
    for (const auto &d : g.tg_decls)
        if (d.key == key) return g.tg_mem + d.offset;
    const size_t off = (g.tg_used + align - 1) & ~(align - 1);
    if (off + bytes > kMaxThreadgroupMemory)
        kernel_fault("threadgroup memory: '" + std::string(key) + "' needs " + std::to_string(bytes) +
                     " bytes at offset " + std::to_string(off) + "; the limit is " +
                     std::to_string(kMaxThreadgroupMemory) + " bytes (32 KiB)");
    std::memset(g.tg_mem + off, 0xFF, bytes);  // poison: NaN / 0xFFFFFFFF until a lane writes
    g.tg_used = off + bytes;
    g.tg_decls.push_back({key, off, bytes});
    return g.tg_mem + off;
}

void kernel_fault(const std::string &msg) {
    const Group *g = t_group;
    throw KernelError("metal-emu: kernel '" + std::string(g && g->k ? g->k->name : "?") + "': " + msg);
}

const void *function_constant(int index, size_t size) {
    const Group &g = *current_lane("function constant").g;
    for (int i = 0; i < g.bind->n_fc; ++i) {
        const FcValue &v = g.bind->fc[i];
        if (v.index != index) continue;
        if (v.size != size)
            kernel_fault("function constant " + std::to_string(index) + " was set with " + std::to_string(v.size) +
                         " bytes; the kernel declares " + std::to_string(size));
        return v.bytes;
    }
    kernel_fault("function constant " + std::to_string(index) + " is used but the pipeline did not set it");
}

const Hooks &host_hooks() {
    static const Hooks h = {kHooksVersion, &barrier, &simd_exchange, &tg_alloc, &kernel_fault, &function_constant};
    return h;
}

}  // namespace lmt::emu
