// metal-emu host API: buffers, pipelines, command recording, hazard check and execution.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>

#include "Metal/Metal.hpp"
#include "emu/runtime.hpp"

namespace NS {

namespace {
thread_local AutoreleasePool *t_pool = nullptr;
}

void Object::autorelease_() {
    if (t_pool) {
        t_pool->addObject_(this);
    } else {
        // No pool: metal-cpp would leak here (and warn); the emulator leaks the same way.
    }
}

AutoreleasePool *AutoreleasePool::init() {
    prev_ = t_pool;
    t_pool = this;
    return this;
}

AutoreleasePool::~AutoreleasePool() {
    t_pool = prev_;
    for (auto *o : objs_) o->release();
}

}  // namespace NS

namespace lmt::emu {
namespace {
std::mutex g_log_mu;
std::vector<std::string> g_hazard_log;
EmuCounters g_counters;
}  // namespace
std::vector<std::string> take_hazard_log() {
    std::lock_guard<std::mutex> lk(g_log_mu);
    return std::move(g_hazard_log);
}
EmuCounters &counters() { return g_counters; }
void append_hazards(const std::vector<std::string> &hz) {
    std::lock_guard<std::mutex> lk(g_log_mu);
    g_hazard_log.insert(g_hazard_log.end(), hz.begin(), hz.end());
}
}  // namespace lmt::emu

namespace MTL {

using lmt::emu::Access;
using lmt::emu::KernelInfo;

// ---- buffers ----
namespace {
uint64_t g_next_buffer_id = 1;
size_t page_size() {
    static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}
}  // namespace

Buffer::Buffer(NS::UInteger len, const void *init, bool no_copy) : len_(len), id_(g_next_buffer_id++) {
    if (no_copy) {
        data_ = (unsigned char *)const_cast<void *>(init);
        return;
    }
    // Data ends flush (to 16 bytes) against a PROT_NONE page: running off the end faults.
    const size_t pg = page_size();
    const size_t body = (len + 15) & ~(size_t)15;
    const size_t span = (body + pg - 1) / pg * pg;
    map_len_ = span + pg;
    map_ = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) throw lmt::Error("metal-emu: cannot allocate a buffer of " + std::to_string(len) + " bytes");
    mprotect((unsigned char *)map_ + span, pg, PROT_NONE);
    data_ = (unsigned char *)map_ + (span - body);
    if (init) std::memcpy(data_, init, len);
    else std::memset(data_, 0xFF, body);  // undefined on Metal: poison so stale reads show
}

Buffer::~Buffer() {
    if (map_) munmap(map_, map_len_);
}

Buffer *Device::newBuffer(NS::UInteger length, ResourceOptions) { return new Buffer(length, nullptr, false); }
Buffer *Device::newBuffer(const void *p, NS::UInteger length, ResourceOptions) { return new Buffer(length, p, false); }
Buffer *Device::newBuffer(const void *p, NS::UInteger length, ResourceOptions, std::nullptr_t) {
    // Metal requires a page-aligned pointer and length for no-copy buffers: enforce it here too.
    if ((uintptr_t)p % page_size() != 0 || length % page_size() != 0) return nullptr;
    return new Buffer(length, p, true);
}

// ---- library / pipelines ----
NS::String *Function::name() const { return NS::String::string(info_->name, NS::UTF8StringEncoding); }

Function *Library::newFunction(const NS::String *name) {
    const std::string n = name->utf8String();
    if (from_source_ && std::find(declared_.begin(), declared_.end(), n) == declared_.end()) return nullptr;
    const KernelInfo *k = nullptr;
    if (kernels_) {
        for (int i = 0; i < n_kernels_ && !k; ++i)
            if (n == kernels_[i]->name) k = kernels_[i];
    } else {
        k = lmt::emu::find_kernel(n);
    }
    if (!k) return nullptr;
    auto *f = new Function();
    f->info_ = k;
    return f;
}

Function *Library::newFunction(const NS::String *name, const FunctionConstantValues *values, NS::Error **error) {
    if (error) *error = nullptr;
    Function *f = newFunction(name);
    if (!f) {
        if (error) *error = (new NS::Error(("no function '" + std::string(name->utf8String()) + "' in the library").c_str()))->autorelease();
        return nullptr;
    }
    if (values && values->values_) {
        for (const auto &v : *values->values_) {
            bool declared = !kernels_;  // built-in kernels declare none: checked when read
            for (int i = 0; i < n_fcs_ && !declared; ++i) declared = fcs_[i].index == v.index;
            if (!declared) {
                f->release();
                if (error)
                    *error = (new NS::Error(("function constant " + std::to_string(v.index) +
                                             " is not declared by the library")
                                                .c_str()))
                                 ->autorelease();
                return nullptr;
            }
        }
        f->fc_ = new std::vector<lmt::emu::FcValue>(*values->values_);
    }
    return f;
}
Function::~Function() { delete fc_; }

void FunctionConstantValues::setConstantValue(const void *value, DataType type, NS::UInteger index) {
    uint32_t size = 0;
    switch (type) {
        case DataTypeBool: case DataTypeChar: case DataTypeUChar: size = 1; break;
        case DataTypeHalf: case DataTypeShort: case DataTypeUShort: size = 2; break;
        case DataTypeFloat: case DataTypeInt: case DataTypeUInt: size = 4; break;
    }
    if (!size) throw lmt::emu::KernelError("metal-emu: unsupported function constant data type " + std::to_string(type));
    if (!values_) values_ = new std::vector<lmt::emu::FcValue>();
    lmt::emu::FcValue v{(int)index, size, {}};
    std::memcpy(v.bytes, value, size);
    for (auto &o : *values_)
        if (o.index == v.index) {
            o = v;
            return;
        }
    values_->push_back(v);
}
FunctionConstantValues::~FunctionConstantValues() { delete values_; }

Library *Device::newLibrary(const NS::String *filepath, NS::Error **error) {
    if (error) *error = nullptr;
    auto *l = new Library();
    l->path_ = filepath ? filepath->utf8String() : "";
    const std::string &p = l->path_;
    if (p.size() > 3 && p.compare(p.size() - 3, 3, ".so") == 0) {
        // A library translated at run time. Never dlclose'd: pipelines point into it.
        auto fail = [&](const std::string &msg) -> Library * {
            l->release();
            if (error) *error = (new NS::Error(msg.c_str()))->autorelease();
            return nullptr;
        };
        void *h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) return fail(std::string("metal-emu: cannot load ") + p + ": " + dlerror());
        auto entry = (lmt::emu::LibraryEntry)dlsym(h, "lmt_emu_library");
        if (!entry) return fail("metal-emu: " + p + " has no entry point lmt_emu_library");
        lmt::emu::LibraryTable t{};
        if (entry(&lmt::emu::host_hooks(), &t) != lmt::emu::kHooksVersion)
            return fail("metal-emu: " + p + " was built for another version of the emulator");
        l->kernels_ = t.kernels;
        l->n_kernels_ = t.n_kernels;
        l->fcs_ = t.fcs;
        l->n_fcs_ = t.n_fcs;
    }
    return l;
}
Library *Device::newLibrary(const NS::String *source, const CompileOptions *options, NS::Error **error) {
    if (error) *error = nullptr;
    auto fail = [&](const std::string &msg) -> Library * {
        if (error) *error = (new NS::Error(msg.c_str()))->autorelease();
        return nullptr;
    };
    const std::string text = source ? source->utf8String() : "";
    if (!options || options->fastMathEnabled())
        return fail("metal-emu: compile the kernels with fast math off (MTL::CompileOptions::setFastMathEnabled(false))");
    // Only <...> system headers resolve in a library built from a string: Metal has no include
    // path for newLibraryWithSource, so the host code must inline lmtail's own headers.
    for (size_t at = text.find("#include"); at != std::string::npos; at = text.find("#include", at + 8)) {
        const size_t q = text.find_first_not_of(" \t", at + 8);
        if (q != std::string::npos && text[q] == '"') {
            const size_t e = text.find('"', q + 1);
            return fail("metal-emu: file not found: " + text.substr(q + 1, e == std::string::npos ? 40 : e - q - 1));
        }
    }
    auto *l = new Library();
    l->from_source_ = true;
    for (size_t at = text.find("kernel void "); at != std::string::npos; at = text.find("kernel void ", at + 12)) {
        size_t b = at + 12;
        while (b < text.size() && text[b] == ' ') ++b;
        size_t e = b;
        while (e < text.size() && (std::isalnum((unsigned char)text[e]) || text[e] == '_')) ++e;
        if (e > b) l->declared_.push_back(text.substr(b, e - b));
    }
    if (l->declared_.empty()) {
        l->release();
        return fail("metal-emu: the source declares no kernel");
    }
    return l;
}
Library *Device::newDefaultLibrary() { return new Library(); }

ComputePipelineState *Device::newComputePipelineState(const Function *fn, NS::Error **error) {
    if (!fn) {
        if (error) *error = (new NS::Error("no function"))->autorelease();
        return nullptr;
    }
    auto *p = new ComputePipelineState();
    p->info_ = fn->info_;
    if (fn->fc_) p->fc_ = new std::vector<lmt::emu::FcValue>(*fn->fc_);
    return p;
}
ComputePipelineState::~ComputePipelineState() { delete fc_; }
NS::UInteger ComputePipelineState::maxTotalThreadsPerThreadgroup() const { return lmt::emu::kMaxThreadsPerThreadgroup; }
NS::UInteger ComputePipelineState::threadExecutionWidth() const { return lmt::emu::kSimdWidth; }

Device *CreateSystemDefaultDevice() { return new Device(); }

CommandBuffer *CommandQueue::commandBuffer() { return (new CommandBuffer())->autorelease(); }

// ---- encoder ----
struct Slot {
    const Buffer *buf = nullptr;
    NS::UInteger offset = 0;
    std::vector<unsigned char> bytes;  // setBytes
    bool is_bytes = false;
};
struct EmuCommand {
    enum Kind { Dispatch, BarrierAll, BarrierResources } kind = Dispatch;
    explicit EmuCommand(Kind k) : kind(k) {}
    const KernelInfo *k = nullptr;
    std::vector<std::pair<int, Slot>> slots;
    lmt::emu::Dim3 groups, tg;
    std::vector<const Buffer *> resources;
    size_t tg_len[lmt::emu::kMaxThreadgroupIndex] = {};
    std::vector<lmt::emu::FcValue> fc;
};
struct ComputeCommandEncoder::State {
    DispatchType type;
    const ComputePipelineState *pso = nullptr;
    Slot slots[lmt::emu::kMaxBufferIndex];
    size_t tg_len[lmt::emu::kMaxThreadgroupIndex] = {};
    std::vector<EmuCommand> cmds;
    bool ended = false;
};

ComputeCommandEncoder::ComputeCommandEncoder(DispatchType t) : st_(new State()) { st_->type = t; }
ComputeCommandEncoder::~ComputeCommandEncoder() = default;

namespace {
void check_index(NS::UInteger index) {
    if (index >= (NS::UInteger)lmt::emu::kMaxBufferIndex)
        throw lmt::emu::KernelError("metal-emu: buffer index " + std::to_string(index) + " out of range [0, 31)");
}
lmt::emu::Dim3 dim(const Size &s) { return {(uint32_t)s.width, (uint32_t)s.height, (uint32_t)s.depth}; }
}  // namespace

void ComputeCommandEncoder::setComputePipelineState(const ComputePipelineState *p) { st_->pso = p; }
void ComputeCommandEncoder::setBuffer(const Buffer *b, NS::UInteger offset, NS::UInteger index) {
    check_index(index);
    Slot &s = st_->slots[index];
    s = Slot{};
    s.buf = b;
    s.offset = offset;
}
void ComputeCommandEncoder::setBytes(const void *bytes, NS::UInteger length, NS::UInteger index) {
    check_index(index);
    Slot &s = st_->slots[index];
    s = Slot{};
    s.is_bytes = true;
    s.bytes.assign((const unsigned char *)bytes, (const unsigned char *)bytes + length);
}
void ComputeCommandEncoder::setThreadgroupMemoryLength(NS::UInteger length, NS::UInteger index) {
    if (index >= (NS::UInteger)lmt::emu::kMaxThreadgroupIndex)
        throw lmt::emu::KernelError("metal-emu: threadgroup memory index " + std::to_string(index) + " out of range");
    if (length % 16 != 0)  // Metal's rule for setThreadgroupMemoryLength
        throw lmt::emu::KernelError("metal-emu: threadgroup memory length " + std::to_string(length) +
                                    " is not a multiple of 16");
    st_->tg_len[index] = length;
}
void ComputeCommandEncoder::dispatchThreadgroups(Size groups, Size tpg) {
    if (!st_->pso) throw lmt::emu::KernelError("metal-emu: dispatch without a pipeline state");
    const KernelInfo *k = st_->pso->info_;
    const uint64_t n = (uint64_t)tpg.width * tpg.height * tpg.depth;
    if (n == 0 || n > st_->pso->maxTotalThreadsPerThreadgroup())
        throw lmt::emu::KernelError("metal-emu: kernel '" + std::string(k->name) + "': " + std::to_string(n) +
                                    " threads per threadgroup; the pipeline allows 1.." +
                                    std::to_string(st_->pso->maxTotalThreadsPerThreadgroup()));
    EmuCommand c(EmuCommand::Dispatch);
    c.k = k;
    for (int i = 0; i < k->n_params; ++i) {
        const auto &p = k->params[i];
        const Slot &s = st_->slots[p.index];
        if (!s.buf && !s.is_bytes)
            throw lmt::emu::KernelError("metal-emu: kernel '" + std::string(k->name) + "': buffer(" +
                                        std::to_string(p.index) + ") '" + p.name + "' is not bound");
        if (s.buf && s.offset > s.buf->len_)
            throw lmt::emu::KernelError("metal-emu: kernel '" + std::string(k->name) + "': buffer(" +
                                        std::to_string(p.index) + ") offset past the end");
        c.slots.emplace_back(p.index, s);
    }
    c.groups = dim(groups);
    c.tg = dim(tpg);
    std::copy(std::begin(st_->tg_len), std::end(st_->tg_len), std::begin(c.tg_len));
    if (st_->pso->fc_) c.fc = *st_->pso->fc_;
    st_->cmds.push_back(std::move(c));
}
void ComputeCommandEncoder::memoryBarrier(BarrierScope) { st_->cmds.push_back(EmuCommand(EmuCommand::BarrierAll)); }
void ComputeCommandEncoder::memoryBarrier(const Resource *const resources[], NS::UInteger count) {
    EmuCommand c(EmuCommand::BarrierResources);
    for (NS::UInteger i = 0; i < count; ++i) c.resources.push_back(static_cast<const Buffer *>(resources[i]));
    st_->cmds.push_back(std::move(c));
}
void ComputeCommandEncoder::endEncoding() { st_->ended = true; }

ComputeCommandEncoder *CommandBuffer::computeCommandEncoder() { return computeCommandEncoder(DispatchTypeSerial); }
ComputeCommandEncoder *CommandBuffer::computeCommandEncoder(DispatchType t) {
    auto *e = new ComputeCommandEncoder(t);
    encoders_.push_back(e);
    return e;  // owned by the command buffer (borrowed by the caller, as in metal-cpp)
}
CommandBuffer::~CommandBuffer() {
    for (auto *e : encoders_) e->release();
}

// ---- hazard check and execution ----
namespace {

std::string buffer_name(const Buffer *b) {
    return b->label_str().empty() ? "buffer#" + std::to_string(b->id_) : "'" + b->label_str() + "'";
}
// Dispatches are numbered among the encoder's dispatches (barriers not counted).
std::string dispatch_name(const std::vector<EmuCommand> &cmds, size_t i) {
    size_t ordinal = 0;
    for (size_t j = 0; j < i; ++j) ordinal += cmds[j].kind == EmuCommand::Dispatch;
    return "dispatch #" + std::to_string(ordinal) + " '" + cmds[i].k->name + "'";
}

struct Touch {
    size_t cmd;
    int index;
};
struct Track {
    std::vector<Touch> writers, readers;
};

Access access_of(const KernelInfo *k, int index) {
    for (int i = 0; i < k->n_params; ++i)
        if (k->params[i].index == index) return k->params[i].access;
    return Access::Read;
}
const char *param_of(const KernelInfo *k, int index) {
    for (int i = 0; i < k->n_params; ++i)
        if (k->params[i].index == index) return k->params[i].name;
    return "?";
}

// Every pair (earlier dispatch, later dispatch) of a concurrent encoder that shares a buffer,
// at least one writing it, with no barrier covering that buffer in between.
std::vector<std::string> find_hazards(const std::vector<EmuCommand> &cmds) {
    std::vector<std::string> out;
    std::map<const Buffer *, Track> live;
    for (size_t i = 0; i < cmds.size(); ++i) {
        const EmuCommand &c = cmds[i];
        if (c.kind == EmuCommand::BarrierAll) {
            live.clear();
            continue;
        }
        if (c.kind == EmuCommand::BarrierResources) {
            for (const Buffer *b : c.resources) live.erase(b);
            continue;
        }
        for (const auto &[index, s] : c.slots) {
            if (!s.buf) continue;
            const bool writes = access_of(c.k, index) == Access::Write;
            Track &t = live[s.buf];
            auto report = [&](const Touch &w, const char *kind, const char *verb_then, const char *verb_now) {
                const EmuCommand &e = cmds[w.cmd];
                out.push_back(std::string(kind) + " hazard in a concurrent compute encoder: " + dispatch_name(cmds, i) + " " +
                              verb_now + " buffer " + buffer_name(s.buf) + " (buffer(" + std::to_string(index) + ") '" +
                              param_of(c.k, index) + "'), which " + dispatch_name(cmds, w.cmd) + " " + verb_then +
                              " (buffer(" + std::to_string(w.index) + ") '" + param_of(e.k, w.index) +
                              "'), with no memoryBarrier covering it in between");
            };
            for (const Touch &w : t.writers)
                if (w.cmd != i) report(w, writes ? "WAW" : "RAW", "writes", writes ? "writes (read-write binding)" : "reads");
            if (writes)
                for (const Touch &r : t.readers)
                    if (r.cmd != i) report(r, "WAR", "reads", "writes");
        }
        for (const auto &[index, s] : c.slots) {
            if (!s.buf) continue;
            Track &t = live[s.buf];
            (access_of(c.k, index) == Access::Write ? t.writers : t.readers).push_back(Touch{i, index});
        }
    }
    return out;
}

lmt::emu::Bindings bindings_of(const EmuCommand &c, const std::map<const Buffer *, unsigned char *> &redirect) {
    lmt::emu::Bindings b;
    std::copy(std::begin(c.tg_len), std::end(c.tg_len), std::begin(b.tg_len));
    b.fc = c.fc.data();
    b.n_fc = (int)c.fc.size();
    b.hooks = &lmt::emu::host_hooks();
    for (const auto &[index, s] : c.slots) {
        if (s.is_bytes) {
            b.buf[index] = {(void *)s.bytes.data(), s.bytes.size()};
        } else {
            auto it = redirect.find(s.buf);
            unsigned char *base = it != redirect.end() ? it->second : s.buf->data_;
            b.buf[index] = {base + s.offset, s.buf->len_ - s.offset};
        }
    }
    return b;
}

void run(const EmuCommand &c, const lmt::emu::Bindings &b) {
    const auto st = lmt::emu::run_dispatch(*c.k, b, c.groups, c.tg);
    auto &ct = lmt::emu::counters();
    ct.dispatches += 1;
    ct.groups += st.groups;
    ct.lanes += st.lanes;
    ct.switches += st.switches;
}

// Snapshot mode: a dispatch that reads a buffer written since the last barrier covering it
// sees the contents from before that write (a private copy; if it also writes the buffer, its
// copy replaces the buffer afterwards: last writer wins).
void run_snapshot(const std::vector<EmuCommand> &cmds) {
    std::map<const Buffer *, std::vector<unsigned char>> pre;  // dirty buffers: pre-write contents
    for (size_t i = 0; i < cmds.size(); ++i) {
        const EmuCommand &c = cmds[i];
        if (c.kind == EmuCommand::BarrierAll) {
            pre.clear();
            continue;
        }
        if (c.kind == EmuCommand::BarrierResources) {
            for (const Buffer *b : c.resources) pre.erase(b);
            continue;
        }
        std::map<const Buffer *, std::vector<unsigned char>> copies;
        std::map<const Buffer *, unsigned char *> redirect;
        for (const auto &[index, s] : c.slots) {
            if (!s.buf) continue;
            auto it = pre.find(s.buf);
            if (it != pre.end() && !redirect.count(s.buf)) {
                auto &cp = copies[s.buf] = it->second;
                redirect[s.buf] = cp.data();
            }
        }
        for (const auto &[index, s] : c.slots)
            if (s.buf && access_of(c.k, index) == Access::Write && !pre.count(s.buf))
                pre[s.buf].assign(s.buf->data_, s.buf->data_ + s.buf->len_);
        run(c, bindings_of(c, redirect));
        for (auto &[buf, cp] : copies) {
            bool writes = false;
            for (const auto &[index, s] : c.slots) writes |= s.buf == buf && access_of(c.k, index) == Access::Write;
            if (writes) std::memcpy(buf->data_, cp.data(), cp.size());
        }
    }
}

}  // namespace

void CommandBuffer::commit() {
    status_ = CommandBufferStatusCommitted;
    const auto mode = lmt::emu::config().hazards;
    for (auto *e : encoders_) {
        const auto &cmds = e->st_->cmds;
        const bool concurrent = e->st_->type == DispatchTypeConcurrent;
        std::vector<std::string> hz;
        if (concurrent) hz = find_hazards(cmds);
        if (!hz.empty() && mode == lmt::emu::HazardMode::Raise) {
            status_ = CommandBufferStatusError;
            std::string msg = hz[0];
            if (hz.size() > 1) msg += " (and " + std::to_string(hz.size() - 1) + " more)";
            throw lmt::emu::HazardError("metal-emu: " + msg);
        }
        try {
            if (concurrent && mode == lmt::emu::HazardMode::Snapshot && !hz.empty()) {
                lmt::emu::append_hazards(hz);
                run_snapshot(cmds);
            } else {
                std::map<const Buffer *, unsigned char *> none;
                for (const auto &c : cmds)
                    if (c.kind == EmuCommand::Dispatch) run(c, bindings_of(c, none));
            }
        } catch (...) {
            status_ = CommandBufferStatusError;
            throw;
        }
    }
    status_ = CommandBufferStatusCompleted;
}

}  // namespace MTL
