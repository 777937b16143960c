// BF16 (ggml type 30): the type-table row. quantize is ggml_compute_fp32_to_bf16 per weight
// (f32_to_bf16_ggml), dequantize and the matvec widen exactly (cpu/types/float_common.hpp).
#include <vector>

#include "cpu/ggml/q0f_ggml.hpp"
#include "cpu/internal.hpp"
#include "cpu/types/float_common.hpp"

namespace lmt::cpu {
namespace {

const uint32_t kBF16Builds = ggml_builds_bf16();  // the ggml builds BF16 reproduces on this CPU

void bf16_matvec(const MatvecCall &c) {
    if (ggml_q0f_dispatch(c, LMT_Q0F_GGML(bf16_matvec_ggml_avx2), "BF16", kBF16Builds)) return;
#if defined(LMTAIL_HAVE_X86)
    if (c.isa == Isa::Avx512 && c.T > 1) {
        // The AVX-512 kernel reads x in the half-step layout (float_common.hpp bf16_x_layout).
        thread_local std::vector<float> xs;
        float *xp = aligned64(xs, (size_t)(c.T * bf16_x_stride(c.cols)));
        bf16_x_layout(c.x, c.T, c.cols, xp);
        MatvecCall cp = c;
        cp.x = xp;
        float_matvec_run(cp, nullptr, nullptr, matvec_bf16_avx512);
        return;
    }
    float_matvec_run(c, float_matvec_scalar<BF16Weights>, matvec_bf16_avx2, matvec_bf16_avx512);
#elif defined(LMTAIL_HAVE_NEON)
    float_matvec_run(c, float_matvec_scalar<BF16Weights>, matvec_bf16_neon);
#else
    float_matvec_run(c, float_matvec_scalar<BF16Weights>, nullptr);
#endif
}

}  // namespace

const CpuTypeImpl kCpuBF16{WeightType::BF16, precision_bit(Precision::F32) | LMT_Q0F_GGML_BIT, Precision::F32, bf16_matvec,
                           float_quantize_16<f32_to_bf16_ggml>, float_dequantize<BF16Weights>,
                           kBF16Builds, kGgmlFloatNotReproduced};

}  // namespace lmt::cpu
