// Q6_K (ggml type 14): the type-table row and the matvec dispatch (ISA selection, row split over
// threads). The canonical expression is in q6k.hpp; the quantiser in q6_k_quantize.cpp.
#include "cpu/types/q6_k/q6k.hpp"

namespace lmt::cpu {
namespace {

void q6_k_matvec(const MatvecCall &c) {
    void (*kernel)(const MatvecCall &, int64_t, int64_t) = matvec_q6_k_scalar;
    switch (c.isa) {
#if defined(LMTAIL_HAVE_X86)
        case Isa::Avx512: kernel = matvec_q6_k_avx512; break;
        case Isa::Avx2: kernel = matvec_q6_k_avx2; break;
#endif
        default: break;  // NEON: the scalar reference (no NEON kernel yet)
    }
    // 64 rows per task (~340 KB of weights at cols = 6656), as Q5_K.
    for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) { kernel(c, r0, r1); });
}

}  // namespace

const CpuTypeImpl kCpuQ6_K{WeightType::Q6_K, precision_bit(Precision::F32), Precision::F32, q6_k_matvec,
                           quantize_q6_k, dequantize_q6_k};

}  // namespace lmt::cpu
