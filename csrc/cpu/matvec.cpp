// The CPU weight-type table and the one matvec / quantize / dequantize entry: argument checks
// shared by every type, then the type's row (csrc/cpu/types/<name>/).
#include <string>

#include "cpu/ggml/ggml_amx.hpp"
#include "cpu/ggml/ggml_isa.hpp"
#include "cpu/types/types.hpp"

namespace lmt {

const char *weight_type_name(WeightType type) {
    const WeightTypeInfo *i = weight_type_info(type);
    return i ? i->name : "unknown";
}

namespace cpu {

const char *precision_name(Precision p) {
    switch (p) {
        case Precision::F32: return "f32";
        case Precision::I16: return "i16";
        case Precision::I24: return "i24";
        case Precision::Ggml: return "ggml";
        case Precision::Default: return "default";
    }
    return "unknown";
}

namespace {

#define LMT_CPU_TYPE_ROW(NAME) &kCpu##NAME,
const CpuTypeImpl *const kCpuTypeTable[] = {LMT_CPU_TYPES(LMT_CPU_TYPE_ROW)};
#undef LMT_CPU_TYPE_ROW

std::string type_label(WeightType type) {
    return std::to_string((int)type) + " (" + weight_type_name(type) + ")";
}

std::string supported_list() {
    std::string s;
    for (const CpuTypeImpl *t : kCpuTypeTable) s += (s.empty() ? "" : ", ") + std::string(weight_type_name(t->type));
    return s;
}

const CpuTypeImpl &require_type(WeightType type, const char *what) {
    const CpuTypeImpl *t = cpu_type(type);
    if (!t)
        throw UnsupportedError(std::string(what) + ": weight type " + type_label(type) +
                               " is not run by the cpu backend; it runs " + supported_list());
    return *t;
}

void check_cols(WeightType type, int64_t cols, const char *what) {
    const WeightTypeInfo *i = weight_type_info(type);
    if (cols <= 0 || cols % i->block_elems != 0)
        throw ArgumentError(std::string(what) + ": cols must be a positive multiple of " +
                            std::to_string(i->block_elems) + " (the " + i->name + " block); found " +
                            std::to_string(cols));
}

}  // namespace

const CpuTypeImpl *cpu_type(WeightType type) {
    for (const CpuTypeImpl *t : kCpuTypeTable)
        if (t->type == type) return t;
    return nullptr;
}

bool type_supported(WeightType type) { return cpu_type(type) != nullptr; }

uint32_t type_precisions(WeightType type) {
    const CpuTypeImpl *t = cpu_type(type);
    if (!t) return 0u;
    return ggml_build_offered(t->ggml_builds) ? t->precisions : t->precisions & ~precision_bit(Precision::Ggml);
}

uint32_t type_ggml_builds(WeightType type) {
    const CpuTypeImpl *t = cpu_type(type);
    return t ? t->ggml_builds : 0u;
}

Isa ggml_native_build() { return ggml_isa(Isa::Auto); }

Precision default_precision(WeightType type) { return require_type(type, "default_precision").default_precision; }

size_t row_bytes(WeightType type, int64_t cols) {
    require_type(type, "row_bytes");
    check_cols(type, cols, "row_bytes");
    const WeightTypeInfo *i = weight_type_info(type);
    return (size_t)(cols / i->block_elems) * (size_t)i->block_bytes;
}

void matvec(WeightType type, const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride, const float *x,
            int64_t T, float *logits, int n_threads, Isa isa, Precision precision) {
    const CpuTypeImpl &t = require_type(type, "matvec");
    check_cols(type, cols, "matvec");
    if (rows < 0 || T < 1)
        throw ArgumentError("matvec: need rows >= 0 and T >= 1; found rows=" + std::to_string(rows) +
                            " T=" + std::to_string(T));
    const Precision p = precision == Precision::Default ? t.default_precision : precision;
    const int pi = (int)p;
    if (pi < 0 || pi > 31 || !(t.precisions & (1u << pi)))
        throw UnsupportedError("matvec: precision " + std::string(precision_name(p)) + " is not run for " +
                               type_label(type) + " on the cpu backend");
    const size_t rb = row_bytes(type, cols);
    if (row_stride < rb)
        throw ArgumentError("matvec: row stride " + std::to_string(row_stride) + " < row bytes " + std::to_string(rb));
    if (rows == 0) return;
    // For Ggml the isa names the ggml build to reproduce (bytes depend on it), so Auto must not
    // read LMTAIL_ISA as resolve_isa does for lmtail's own, ISA-independent precisions.
    const Isa ri = p == Precision::Ggml ? ggml_isa(isa) : resolve_isa(isa);
    if (p == Precision::Ggml) ggml_require_build(t.ggml_builds, ri, weight_type_name(type), t.ggml_not_reproduced);
    MatvecCall call{w, rows, cols, row_stride, x, T, logits, n_threads, ri == Isa::NeonDot ? Isa::Neon : ri, p};
    call.dotprod = ri == Isa::NeonDot;
#if defined(LMTAIL_HAVE_X86)
    if (p == Precision::Ggml && ri == Isa::Amx) {
        // The AMX build: the weights its buffer takes run its kernels; the rest as its AVX-512 base.
        if (ggml_amx_takes(type, rows, cols)) return ggml_amx_matvec(type, call);
        call.isa = Isa::Avx512;
    }
#endif
    // The one AvxVnni mapping: a precision without a kernel of its own runs the AVX2 one.
    if (ri == Isa::AvxVnni && !(t.avx_vnni_precisions & precision_bit(p))) call.isa = Isa::Avx2;
    t.matvec(call);
}

void quantize(WeightType type, const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads) {
    const CpuTypeImpl &t = require_type(type, "quantize");
    check_cols(type, cols, "quantize");
    if (rows < 0) throw ArgumentError("quantize: rows must be >= 0");
    if (rows > 0) t.quantize(src, dst, rows, cols, n_threads);
}

void dequantize(WeightType type, const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads) {
    const CpuTypeImpl &t = require_type(type, "dequantize");
    check_cols(type, cols, "dequantize");
    if (rows < 0) throw ArgumentError("dequantize: rows must be >= 0");
    if (rows > 0) t.dequantize(src, dst, rows, cols, n_threads);
}

}  // namespace cpu
}  // namespace lmt
