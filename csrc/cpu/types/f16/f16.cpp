// F16 (ggml type 1): the type-table row. quantize is ggml_fp32_to_fp16 per weight
// (f32_to_f16_rne), dequantize and the matvec widen exactly (cpu/types/float_common.hpp).
#include "cpu/ggml/q0f_ggml.hpp"
#include "cpu/types/float_common.hpp"

namespace lmt::cpu {
namespace {

const uint32_t kF16Builds = kGgmlBuildsF32;  // the ggml builds F16 reproduces (F32's)

void f16_matvec(const MatvecCall &c) {
    if (ggml_q0f_dispatch(c, LMT_Q0F_GGML(f16_matvec_ggml_avx2), "F16", kF16Builds)) return;
#if defined(LMTAIL_HAVE_X86)
    float_matvec_run(c, float_matvec_scalar<F16Weights>, matvec_f16_avx2, matvec_f16_avx512);
#elif defined(LMTAIL_HAVE_NEON)
    float_matvec_run(c, float_matvec_scalar<F16Weights>, matvec_f16_neon);
#else
    float_matvec_run(c, float_matvec_scalar<F16Weights>, nullptr);
#endif
}

}  // namespace

const CpuTypeImpl kCpuF16{WeightType::F16, precision_bit(Precision::F32) | LMT_Q0F_GGML_BIT, Precision::F32, f16_matvec,
                          float_quantize_16<f32_to_f16_rne>, float_dequantize<F16Weights>,
                          kF16Builds, kGgmlFloatNotReproduced};

}  // namespace lmt::cpu
