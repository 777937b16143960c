// llama.cpp's own Metal kernels driven by lmtail's host code (precision="ggml" on the Metal
// backends, issue 15). The library is the user's: a llama.cpp metallib on Apple, or (metal-emu)
// llama.cpp's kernel sources translated at run time by python/lmtail/_ggml_metal.py. lmtail
// never holds llama.cpp's code; what is re-stated here are facts of its host side: the
// kernel-argument structs of ggml/src/ggml-metal/ggml-metal-impl.h, the function constants and the
// launch geometry of ggml-metal-device.cpp / ggml-metal-ops.cpp, all as of the llama.cpp vendored
// by llama-cpp-python 0.3.36 (ggml-org/llama.cpp@0c1e57098). Another version may differ in
// any of them; the pipeline build checks what it can (kernel names, declared constants).
#include <algorithm>
#include <cmath>
#include <map>

#include "metal/context.hpp"

namespace lmt::LMT_METAL_NS {

namespace {

// ggml_metal_kargs_unary
struct GgmlArgsUnary {
    int32_t ne00, ne01, ne02, ne03;
    uint64_t nb00, nb01, nb02, nb03;
    int32_t ne0, ne1, ne2, ne3;
    uint64_t nb0, nb1, nb2, nb3;
    float slope, scale, bias, val, min, max;
};
static_assert(sizeof(GgmlArgsUnary) == 120, "ggml_metal_kargs_unary layout");
// ggml_metal_kargs_mul_mv
struct GgmlArgsMulMv {
    int32_t ne00, ne01, ne02;
    uint64_t nb00, nb01, nb02, nb03;
    int32_t ne10, ne11, ne12;
    uint64_t nb10, nb11, nb12, nb13;
    int32_t ne0, ne1, nr0;
    int16_t r2, r3;
};
static_assert(sizeof(GgmlArgsMulMv) == 112, "ggml_metal_kargs_mul_mv layout");

// ggml_metal_kargs_mul_mv_ext
struct GgmlArgsMulMvExt {
    int32_t ne00, ne01, ne02;
    uint64_t nb00, nb01, nb02, nb03;
    int32_t ne10, ne11, ne12;
    uint64_t nb10, nb11, nb12, nb13;
    int32_t ne0, ne1;
    int16_t r2, r3;
};
static_assert(sizeof(GgmlArgsMulMvExt) == 112, "ggml_metal_kargs_mul_mv_ext layout");

// Function-constant bases and op numbers (ggml-metal-impl.h).
constexpr int kFcUnary = 1200, kFcMulMv = 600;
constexpr int16_t kOpScale = 10, kOpTanh = 100;
// Below this many elements ggml's unary runs one thread per element (is_cnt).
constexpr int64_t kUnaryCntLimit = 32768;

struct Library {
    NS::SharedPtr<MTL::Library> lib;
    std::map<std::string, NS::SharedPtr<MTL::ComputePipelineState>> pipelines;  // by name + constants
};

Library &library(Context &c, const std::string &path) {
    static std::map<std::string, Library> libs;
    auto it = libs.find(path);
    if (it != libs.end()) return it->second;
    NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
    NS::Error *err = nullptr;
    NS::SharedPtr<MTL::Library> lib =
        NS::TransferPtr(c.device()->newLibrary(NS::String::string(path.c_str(), NS::UTF8StringEncoding), &err));
    std::string msg = err ? err->localizedDescription()->utf8String() : "";
    pool->release();
    if (!lib) throw lmt::UnsupportedError("Metal: cannot load llama.cpp's kernel library " + path + ": " + msg);
    return libs[path] = Library{lib, {}};
}

struct Fc {
    int index;
    MTL::DataType type;
    int16_t value;  // short or bool (the low byte)
};

// The pipeline of llama.cpp kernel `name` specialised by `fcs`, as ggml builds it.
MTL::ComputePipelineState *pipeline(Context &c, const std::string &path, const std::string &name,
                                    std::initializer_list<Fc> fcs) {
    Library &l = library(c, path);
    std::string key = name;
    for (const Fc &f : fcs) key += "_" + std::to_string(f.index) + "=" + std::to_string(f.value);
    auto it = l.pipelines.find(key);
    if (it != l.pipelines.end()) return it->second.get();
    NS::AutoreleasePool *pool = NS::AutoreleasePool::alloc()->init();
    NS::SharedPtr<MTL::FunctionConstantValues> cv = NS::TransferPtr(MTL::FunctionConstantValues::alloc()->init());
    for (const Fc &f : fcs) {
        const bool b = f.value != 0;
        cv->setConstantValue(f.type == MTL::DataTypeBool ? (const void *)&b : (const void *)&f.value, f.type,
                             (NS::UInteger)f.index);
    }
    NS::Error *err = nullptr;
    NS::SharedPtr<MTL::Function> fn = NS::TransferPtr(
        l.lib->newFunction(NS::String::string(name.c_str(), NS::UTF8StringEncoding), cv.get(), &err));
    MTL::ComputePipelineState *p = fn ? c.device()->newComputePipelineState(fn.get(), &err) : nullptr;
    std::string msg = err ? err->localizedDescription()->utf8String() : "no such function";
    pool->release();
    if (!p)
        throw lmt::UnsupportedError("Metal: llama.cpp's library " + path + " has no usable kernel '" + name +
                                    "' (" + msg + "); supported is the llama.cpp of llama-cpp-python 0.3.36");
    l.pipelines[key] = NS::TransferPtr(p);
    return p;
}

// ggml_metal_op_unary for a contiguous f32 vector of n from src to dst (the same view: in place).
void encode_unary(Context &c, const std::string &path, MTL::ComputeCommandEncoder *enc, View src, View dst,
                  uint32_t n, int16_t op, float scale) {
    const bool c4 = n % 4 == 0;
    const bool cnt = (int64_t)n < kUnaryCntLimit;
    GgmlArgsUnary a{};
    a.ne00 = a.ne0 = (int32_t)(c4 ? n / 4 : n);
    a.ne01 = a.ne02 = a.ne03 = a.ne1 = a.ne2 = a.ne3 = 1;
    a.nb00 = a.nb0 = 4;
    a.nb01 = a.nb02 = a.nb03 = a.nb1 = a.nb2 = a.nb3 = (uint64_t)n * 4;
    a.scale = scale;  // bias 0: ggml_scale
    enc->setComputePipelineState(pipeline(c, path, c4 ? "kernel_unary_f32_f32_4" : "kernel_unary_f32_f32",
                                          {{kFcUnary + 0, MTL::DataTypeShort, op},
                                           {kFcUnary + 1, MTL::DataTypeBool, (int16_t)cnt}}));
    enc->setBytes(&a, sizeof a, 0);
    enc->setBuffer(src.buf, src.offset, 1);
    enc->setBuffer(dst.buf, dst.offset, 2);
    if (cnt) {
        enc->dispatchThreadgroups(size3((uint64_t)a.ne0), size3(1));
    } else {
        const uint32_t nth = std::min<uint32_t>((uint32_t)a.ne00, 256);
        enc->dispatchThreadgroups(size3(((uint64_t)a.ne00 + nth - 1) / nth), size3(nth));
    }
}

// llama.cpp's graph after the head matvec: scale, then (with a cap) scale(1/cap), tanh,
// scale(cap). `src` holds the pre-cap logits (the scale node writes `dst`; src == dst is in
// place); each later node reads what the previous one wrote, so each pair has its barrier.
void encode_cap_nodes(Context &c, const std::string &path, MTL::ComputeCommandEncoder *enc, View src, View dst,
                      uint32_t n, float s, float cap) {
    encode_unary(c, path, enc, src, dst, n, kOpScale, s);
    if (cap <= 0.0f) return;
    barrier(enc, {dst.buf}, kBarrierSoftcapInv);
    encode_unary(c, path, enc, dst, dst, n, kOpScale, 1.0f / cap);
    barrier(enc, {dst.buf}, kBarrierSoftcapTanh);
    encode_unary(c, path, enc, dst, dst, n, kOpTanh, 0.0f);
    barrier(enc, {dst.buf}, kBarrierSoftcapCap);
    encode_unary(c, path, enc, dst, dst, n, kOpScale, cap);
}

// One head type's row of ggml_metal_library_get_pipeline_mul_mv (vector case, ne11 = T rows of x).
struct MulMvRow {
    const char *name;
    int nsg, nr0;
    size_t smem;
    bool per_sg_rows;  // grid x = rows / nr0 (F32/F16/BF16/Q8_0), else rows / (nr0 * nsg)
};
MulMvRow mul_mv_row(WeightType t, int64_t cols) {
    switch (t) {
        case WeightType::F32:
        case WeightType::F16:
        case WeightType::BF16: {
            const char *n4[] = {"kernel_mul_mv_f32_f32_4", "kernel_mul_mv_f16_f32_4", "kernel_mul_mv_bf16_f32_4"};
            const char *n1[] = {"kernel_mul_mv_f32_f32", "kernel_mul_mv_f16_f32", "kernel_mul_mv_bf16_f32"};
            const char *ns[] = {"kernel_mul_mv_f32_f32_short", "kernel_mul_mv_f16_f32_short", "kernel_mul_mv_bf16_f32_short"};
            const int i = t == WeightType::F32 ? 0 : t == WeightType::F16 ? 1 : 2;
            if (cols < 32) return {ns[i], 1, 32, 0, true};
            return {cols % 4 == 0 ? n4[i] : n1[i], (int)std::min<int64_t>(4, (cols + 127) / 128), 2, 32 * 4 * 2, true};
        }
        case WeightType::Q4_0: return {"kernel_mul_mv_q4_0_f32", 2, 4, 0, false};  // N_SG_Q4_0, N_R0_Q4_0
        case WeightType::Q8_0: return {"kernel_mul_mv_q8_0_f32", 4, 2, 32 * 4 * 2, true};
        case WeightType::Q4_K: return {"kernel_mul_mv_q4_K_f32", 2, 2, 0, false};
        case WeightType::Q5_K: return {"kernel_mul_mv_q5_K_f32", 2, 1, 0, false};
        case WeightType::Q6_K: return {"kernel_mul_mv_q6_K_f32", 2, 2, 0, false};
    }
    throw lmt::UnsupportedError("Metal ggml route: no llama.cpp matvec kernel for this weight type");
}

}  // namespace

std::vector<std::string> ggml_kernel_names() {
    std::vector<std::string> v = {"kernel_unary_f32_f32", "kernel_unary_f32_f32_4"};
    for (const char *t : {"f32", "f16", "bf16"})
        for (const char *s : {"", "_4", "_short"}) v.push_back(std::string("kernel_mul_mv_") + t + "_f32" + s);
    for (const char *t : {"q4_0", "q8_0", "q4_K", "q5_K", "q6_K"}) v.push_back(std::string("kernel_mul_mv_") + t + "_f32");
    for (const char *t : {"f32", "f16", "bf16", "q4_0", "q8_0", "q4_K", "q5_K", "q6_K"})
        for (int r1 = 2; r1 <= 5; ++r1) v.push_back(std::string("kernel_mul_mv_ext_") + t + "_f32_r1_" + std::to_string(r1));
    return v;
}

void ggml_softcap(const std::string &path, float *x, int64_t n, float s, float cap) {
    if (n <= 0) return;
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    auto xb = c.upload(x, (size_t)n * sizeof(float), "logits");
    const uint32_t m = u32(n, "n");
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        const View v{xb.get(), 0};
        encode_cap_nodes(c, path, enc, v, v, m, s, cap);
    });
    std::memcpy(x, xb->contents(), (size_t)n * sizeof(float));
}

namespace {

// Which kernel family ggml_metal_op_mul_mat picks for a T-row f32 activation (one weight matrix):
// the small-batch kernel_mul_mv_ext for 2 <= T <= 8 when cols % 128 == 0 (the K types only from
// T = 4), the simdgroup matmul for T > 8 when cols >= 64 (every Apple GPU with simdgroup matrices,
// M1 and later), else kernel_mul_mv with ne11 = T.
enum class MulKind { MulMv, Ext };
MulKind mul_kind(WeightType type, int64_t cols, int64_t T) {
    const bool k = type == WeightType::Q4_K || type == WeightType::Q5_K || type == WeightType::Q6_K;
    if (cols % 128 == 0 && T >= (k ? 4 : 2) && T <= 8) return MulKind::Ext;
    if (T > 8 && cols >= 64)
        throw lmt::UnsupportedError("Metal ggml route: for T = " + std::to_string(T) + " rows of " +
                                    std::to_string(cols) + " columns llama.cpp runs its simdgroup matmul "
                                    "(kernel_mul_mm_*), which this route does not dispatch (T <= 8 is supported)");
    return MulKind::MulMv;
}

// ggml_metal_op_mul_mat's small-batch branch: kernel_mul_mv_ext_<type>_f32_r1_<r1ptg>.
void encode_mul_mv_ext(Context &c, const std::string &path, MTL::ComputeCommandEncoder *enc, WeightType type,
                       View wb, size_t stride, View x, View y, int64_t rows, int64_t cols, int64_t T) {
    static const std::map<WeightType, const char *> names = {
        {WeightType::F32, "f32"},   {WeightType::F16, "f16"},   {WeightType::BF16, "bf16"}, {WeightType::Q4_0, "q4_0"},
        {WeightType::Q8_0, "q8_0"}, {WeightType::Q4_K, "q4_K"}, {WeightType::Q5_K, "q5_K"}, {WeightType::Q6_K, "q6_K"}};
    const int nsg = 2;
    const int16_t nxpsg = (cols % 256 == 0 && T < 3) ? 16 : 8;  // cols % 128 == 0 here
    const int64_t r0ptg = (32 / nxpsg) * nsg;
    static const int r1_of_T[9] = {0, 0, 2, 3, 4, 5, 3, 4, 4};
    const int r1ptg = r1_of_T[T];
    GgmlArgsMulMvExt a{};
    a.ne00 = a.ne10 = (int32_t)cols;
    a.ne01 = a.ne0 = (int32_t)rows;
    a.ne02 = a.ne12 = 1;
    a.nb00 = (uint64_t)weight_type_info(type)->block_bytes;
    a.nb01 = (uint64_t)stride;
    a.nb02 = a.nb03 = (uint64_t)stride * (uint64_t)rows;
    a.ne11 = a.ne1 = (int32_t)T;
    a.nb10 = 4;
    a.nb11 = (uint64_t)cols * 4;
    a.nb12 = a.nb13 = (uint64_t)(T * cols) * 4;
    a.r2 = a.r3 = 1;
    const std::string name = std::string("kernel_mul_mv_ext_") + names.at(type) + "_f32_r1_" + std::to_string(r1ptg);
    enc->setComputePipelineState(pipeline(c, path, name,
                                          {{kFcMulMv + 0, MTL::DataTypeShort, (int16_t)nsg},
                                           {kFcMulMv + 1, MTL::DataTypeShort, nxpsg},
                                           {kFcMulMv + 2, MTL::DataTypeShort, 1},
                                           {kFcMulMv + 3, MTL::DataTypeShort, 1},
                                           {kFcMulMv + 4, MTL::DataTypeShort, 1}}));
    enc->setBytes(&a, sizeof a, 0);
    enc->setBuffer(wb.buf, wb.offset, 1);
    enc->setBuffer(x.buf, x.offset, 2);
    enc->setBuffer(y.buf, y.offset, 3);
    enc->dispatchThreadgroups(size3((uint64_t)((rows + r0ptg - 1) / r0ptg), (uint64_t)((T + r1ptg - 1) / r1ptg)),
                              size3(32, (uint64_t)nsg));
}

// ggml_metal_op_mul_mat for one weight matrix: y (T x rows) = W x (W bound as `wb`, rows of `stride` bytes).
void encode_mul_mv(Context &c, const std::string &path, MTL::ComputeCommandEncoder *enc, WeightType type, View wb,
                   size_t stride, View x, View y, int64_t rows, int64_t cols, int64_t T) {
    if (mul_kind(type, cols, T) == MulKind::Ext) return encode_mul_mv_ext(c, path, enc, type, wb, stride, x, y, rows, cols, T);
    const MulMvRow r = mul_mv_row(type, cols);
    GgmlArgsMulMv a{};
    a.ne00 = a.ne10 = (int32_t)cols;
    a.ne01 = a.ne0 = (int32_t)rows;
    a.ne02 = a.ne12 = 1;
    const WeightTypeInfo *info = weight_type_info(type);
    a.nb00 = (uint64_t)info->block_bytes;  // ggml_type_size: bytes of one block
    a.nb01 = (uint64_t)stride;
    a.nb02 = a.nb03 = (uint64_t)stride * (uint64_t)rows;
    a.ne11 = a.ne1 = (int32_t)T;
    a.nb10 = 4;
    a.nb11 = (uint64_t)cols * 4;
    a.nb12 = a.nb13 = (uint64_t)(T * cols) * 4;
    a.nr0 = r.nr0;
    a.r2 = a.r3 = 1;
    enc->setComputePipelineState(pipeline(c, path, r.name,
                                          {{kFcMulMv + 0, MTL::DataTypeShort, (int16_t)r.nsg},
                                           {kFcMulMv + 2, MTL::DataTypeShort, 1},
                                           {kFcMulMv + 3, MTL::DataTypeShort, 1},
                                           {kFcMulMv + 4, MTL::DataTypeShort, 1},
                                           {kFcMulMv + 5, MTL::DataTypeBool, 0}}));
    enc->setBytes(&a, sizeof a, 0);
    enc->setBuffer(wb.buf, wb.offset, 1);
    enc->setBuffer(x.buf, x.offset, 2);
    enc->setBuffer(y.buf, y.offset, 3);
    enc->setThreadgroupMemoryLength(r.smem, 0);
    const int64_t per_group = r.per_sg_rows ? r.nr0 : (int64_t)r.nr0 * r.nsg;
    enc->dispatchThreadgroups(size3((uint64_t)((rows + per_group - 1) / per_group), (uint64_t)T),
                              size3(32, (uint64_t)r.nsg));
}

}  // namespace

void ggml_matvec(const std::string &path, WeightType type, const uint8_t *w, int64_t rows, int64_t cols,
                 size_t row_stride, const float *x, int64_t T, float *out) {
    if (rows <= 0 || T <= 0) return;
    (void)mul_kind(type, cols, T);  // an unsupported T fails before anything is encoded
    const MatvecShape shape = matvec_shape(type, rows, cols, row_stride, T);
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    MatvecShape s;
    const Wrapped wb = wrap_weights(c, w, rows, shape, &s);
    auto xb = c.upload(x, (size_t)(T * cols) * sizeof(float), "x");
    auto yb = c.buffer((size_t)(T * rows) * sizeof(float), "logits");
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        encode_mul_mv(c, path, enc, type, wb.view(), s.row_stride, View{xb.get(), 0}, View{yb.get(), 0}, rows, cols, T);
    });
    std::memcpy(out, yb->contents(), (size_t)(T * rows) * sizeof(float));
}

int64_t ggml_head(const std::string &path, const HeadArgs &a, float *logits) {
    if (a.rows <= 0 || a.T <= 0) throw lmt::ArgumentError("head: need rows > 0 and at least one hidden row");
    (void)mul_kind(a.type, a.cols, a.T);
    const MatvecShape shape = matvec_shape(a.type, a.rows, a.cols, a.row_stride, a.T);
    const uint32_t cols = u32(a.cols, "cols"), T = u32(a.T, "T"), n = u32(a.T * a.rows, "T * rows");
    Context &c = context();
    std::lock_guard<std::mutex> lk(c.mu);
    MatvecShape s;
    const Wrapped wb = wrap_weights(c, a.w, a.rows, shape, &s);
    auto hidden = c.upload(a.hidden, (size_t)T * cols * sizeof(float), "hidden");
    auto gamma = a.gamma ? c.upload(a.gamma, (size_t)cols * sizeof(float), "norm_gamma") : c.buffer(4, "norm_gamma");
    auto normed = c.buffer((size_t)T * cols * sizeof(float), "normed");
    // The matvec's output stays apart from the capped logits: the host checks the pre-cap values
    // (the cap maps +-Inf to +-cap, so only this buffer shows an overflowed logit).
    auto pre = c.buffer((size_t)n * sizeof(float), "logits_pre_cap");
    auto lg = c.buffer((size_t)n * sizeof(float), "logits");
    run_concurrent(c, [&](MTL::ComputeCommandEncoder *enc) {
        View x{hidden.get(), 0};
        if (a.gamma) {  // lmtail's RMSNorm (the bytes of ggml's CPU rms_norm), then llama.cpp's nodes
            encode_rms_norm(c, enc, x, View{gamma.get(), 0}, true, View{normed.get(), 0}, T, cols, a.eps);
            barrier(enc, {normed.get()}, kBarrierNormHead);
            x = View{normed.get(), 0};
        }
        encode_mul_mv(c, path, enc, a.type, wb.view(), s.row_stride, x, View{pre.get(), 0}, a.rows, a.cols, a.T);
        barrier(enc, {pre.get()}, kBarrierHeadScale);
        encode_cap_nodes(c, path, enc, View{pre.get(), 0}, View{lg.get(), 0}, n, a.scale, a.cap);
    });
    const float *p = static_cast<const float *>(pre->contents());
    if (!lmt::cpu::all_finite(p, n, 0))
        for (uint32_t i = 0; i < n; ++i)
            if (!std::isfinite(p[i])) return (int64_t)i;
    std::memcpy(logits, lg->contents(), (size_t)n * sizeof(float));
    return -1;
}

}  // namespace lmt::LMT_METAL_NS
