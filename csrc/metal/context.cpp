// Device, library, pipeline cache and encoder helpers of the Metal backend.
#if !defined(LMTAIL_METAL_EMU)
#define NS_PRIVATE_IMPLEMENTATION
#define MTL_PRIVATE_IMPLEMENTATION
#endif
#include "metal/context.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace lmt::LMT_METAL_NS {

namespace {
std::string &library_path() {
    static std::string p = "lmtail.metallib";
    return p;
}
std::pair<std::string, std::string> &source_dirs() {
    static std::pair<std::string, std::string> d;
    return d;
}

bool is_file(const std::string &path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_text(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw lmt::Error("Metal: cannot read kernel source " + path);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// `#include "x"` lines replaced by include_dir/x (each header once per file, as its include
// guard would have it); <...> includes are the Metal standard library and stay.
std::string inline_includes(const std::string &text, const std::string &include_dir, std::set<std::string> &seen,
                            int depth) {
    if (depth > 8) throw lmt::Error("Metal: kernel source includes nest deeper than 8");
    std::istringstream in(text);
    std::string out, line;
    while (std::getline(in, line)) {
        const size_t h = line.find_first_not_of(" \t");
        if (h != std::string::npos && line.compare(h, 8, "#include") == 0) {
            const size_t q = line.find('"', h + 8);
            const size_t e = q == std::string::npos ? q : line.find('"', q + 1);
            if (q != std::string::npos && e != std::string::npos) {
                const std::string name = line.substr(q + 1, e - q - 1);
                if (seen.insert(name).second)
                    out += inline_includes(read_text(include_dir + "/" + name), include_dir, seen, depth + 1);
                continue;
            }
        }
        out += line;
        out += '\n';
    }
    return out;
}

std::vector<std::string> metal_sources(const std::string &dir) {
    std::vector<std::string> files;
    if (DIR *d = ::opendir(dir.c_str())) {
        while (const dirent *e = ::readdir(d)) {
            const std::string n = e->d_name;
            if (n.size() > 6 && n.compare(n.size() - 6, 6, ".metal") == 0) files.push_back(dir + "/" + n);
        }
        ::closedir(d);
    }
    std::sort(files.begin(), files.end());  // a fixed order: pipeline lookup is deterministic
    return files;
}
}  // namespace

#if defined(LMTAIL_METAL_TESTING)
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
#endif

void set_library_path(const std::string &path) { library_path() = path; }
void set_source_dir(const std::string &kernels_dir, const std::string &include_dir) {
    source_dirs() = {kernels_dir, include_dir};
}

Context::Context() {
    device_ = NS::TransferPtr(MTL::CreateSystemDefaultDevice());
    if (!device_) throw lmt::Error("Metal: no device");
    queue_ = NS::TransferPtr(device_->newCommandQueue());
    const auto &[kernels_dir, include_dir] = source_dirs();
    if (!kernels_dir.empty() && !is_file(library_path())) load_sources(kernels_dir, include_dir);
    else load_metallib(library_path());
}

void Context::load_metallib(const std::string &path) {
    NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
    NS::Error *err = nullptr;
    NS::SharedPtr<MTL::Library> lib =
        NS::TransferPtr(device_->newLibrary(NS::String::string(path.c_str(), NS::UTF8StringEncoding), &err));
    std::string msg = err ? err->localizedDescription()->utf8String() : "";
    pool->release();
    if (!lib) throw lmt::Error("Metal: cannot load the kernel library " + path + ": " + msg);
    libraries_.push_back(lib);
    origin_ = "metallib:" + path;
}

void Context::load_sources(const std::string &kernels_dir, const std::string &include_dir) {
    const std::vector<std::string> files = metal_sources(kernels_dir);
    if (files.empty()) throw lmt::Error("Metal: no kernel library at " + library_path() + " and no *.metal in " + kernels_dir);
    NS::SharedPtr<MTL::CompileOptions> opts = NS::TransferPtr(MTL::CompileOptions::alloc()->init());
    opts->setFastMathEnabled(false);  // as the metallib build: IEEE non-finite tests and tie rules
    opts->setLanguageVersion(MTL::LanguageVersion3_0);
    for (const std::string &file : files) {
        std::set<std::string> seen;
        const std::string text = inline_includes(read_text(file), include_dir, seen, 0);
        NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
        NS::Error *err = nullptr;
        NS::SharedPtr<MTL::Library> lib = NS::TransferPtr(
            device_->newLibrary(NS::String::string(text.c_str(), NS::UTF8StringEncoding), opts.get(), &err));
        std::string msg = err ? err->localizedDescription()->utf8String() : "";
        pool->release();
        if (!lib) throw lmt::Error("Metal: cannot compile " + file + ": " + msg);
        libraries_.push_back(lib);
    }
    origin_ = "source:" + std::to_string(files.size()) + " files from " + kernels_dir;
}

std::string library_origin() { return context().origin(); }

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
    NS::SharedPtr<MTL::Function> fn;
    for (const auto &lib : libraries_) {
        fn = NS::TransferPtr(lib->newFunction(NS::String::string(name.c_str(), NS::UTF8StringEncoding)));
        if (fn) break;
    }
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
#if defined(LMTAIL_METAL_TESTING)
    if (debug().skip_barriers & which) return;  // a planted bug, asked for by a test
#else
    (void)which;
#endif
    const MTL::Resource *res[8];
    NS::UInteger n = 0;
    for (const MTL::Buffer *b : bufs) res[n++] = b;
    enc->memoryBarrier(res, n);
}

}  // namespace lmt::LMT_METAL_NS
