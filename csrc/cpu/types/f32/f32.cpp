// F32 (ggml type 0): the type-table row. quantize is ggml's copy, dequantize the same bytes back;
// the matvec is the shared float path (cpu/types/float_common.hpp).
#include "cpu/ggml/q0f_ggml.hpp"
#include "cpu/types/float_common.hpp"

namespace lmt::cpu {
namespace {

void f32_quantize(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads) {
    for_row_tasks(n_threads, rows, 256, [&](int64_t r0, int64_t r1) {
        std::memcpy(dst + (size_t)(r0 * cols) * 4, src + r0 * cols, (size_t)((r1 - r0) * cols) * 4);
    });
}

void f32_matvec(const MatvecCall &c) {
    if (ggml_q0f_dispatch(c, LMT_Q0F_GGML(f32_matvec_ggml_avx2), "F32", kGgmlBuildsF32)) return;
#if defined(LMTAIL_HAVE_X86)
    float_matvec_run(c, float_matvec_scalar<F32Weights>, matvec_f32_avx2, matvec_f32_avx512);
#elif defined(LMTAIL_HAVE_NEON)
    float_matvec_run(c, float_matvec_scalar<F32Weights>, matvec_f32_neon);
#else
    float_matvec_run(c, float_matvec_scalar<F32Weights>, nullptr);
#endif
}

}  // namespace

const CpuTypeImpl kCpuF32{WeightType::F32, precision_bit(Precision::F32) | LMT_Q0F_GGML_BIT, Precision::F32, f32_matvec, f32_quantize,
                          float_dequantize<F32Weights>,
                          kGgmlBuildsF32, kGgmlQ0NotReproduced};

}  // namespace lmt::cpu
