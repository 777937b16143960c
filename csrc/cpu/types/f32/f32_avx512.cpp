// AVX-512 matvec of F32 weights (the shared kernels: cpu/types/float_avx512.hpp).
#include "cpu/types/float_avx512.hpp"

namespace lmt::cpu {
void matvec_f32_avx512(const MatvecCall &c, int64_t r0, int64_t r1) { float_matvec_avx512<F32Load16>(c, r0, r1); }
}  // namespace lmt::cpu
