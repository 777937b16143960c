// Q5_K Precision::F32, 512-bit (kf32_avx512.hpp: table decode, 4 weight rows x 4 activation rows).
// Precision::I16 / I24: matvec_q5_k_int_avx512.cpp (built at -O2, see CMakeLists.txt).
#include "cpu/types/q5_k/kf32_avx512.hpp"

namespace lmt::cpu {

void matvec_q5_k_avx512(const MatvecArgs &a, int64_t r0, int64_t r1) { kf32_matvec<true>(a, r0, r1); }

}  // namespace lmt::cpu
