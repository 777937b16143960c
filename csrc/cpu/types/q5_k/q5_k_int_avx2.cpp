// Precision::I16 / I24 with AVX2: the shared x86 integer kernel (q5k_x86.hpp). A translation unit
// of its own so that Release builds can compile it at -O2 while the f32 kernels keep -O3
// (CMakeLists.txt records the measurement).
#include "cpu/types/q5_k/q5k_x86.hpp"

namespace lmt::cpu {

void matvec_q5_k_i16_avx2(const MatvecI16Args &a, int64_t r0, int64_t r1) { matvec_q5_k_i16_x86(a, r0, r1); }

}  // namespace lmt::cpu
