// AVX2 + FMA matvec of BF16 weights (the shared kernels: cpu/types/float_x86.hpp).
#include "cpu/types/float_x86.hpp"

namespace lmt::cpu {
void matvec_bf16_avx2(const MatvecCall &c, int64_t r0, int64_t r1) { float_matvec_avx2<BF16Load>(c, r0, r1); }
}  // namespace lmt::cpu
