// AVX-512 matvec of BF16 weights (the shared kernels: cpu/types/float_avx512.hpp). T > 1: x
// arrives in the half-step layout (float_common.hpp bf16_x_layout, bf16.cpp).
#include "cpu/types/float_avx512.hpp"

namespace lmt::cpu {
void matvec_bf16_avx512(const MatvecCall &c, int64_t r0, int64_t r1) {
    if (c.T == 1) float_matvec_avx512<BF16Load16>(c, r0, r1);
    else bf16_matvec_halfstep_512(c, r0, r1);
}
}  // namespace lmt::cpu
