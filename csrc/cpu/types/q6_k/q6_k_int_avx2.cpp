// Precision::I24 with AVX2: the shared x86 integer kernel (q6k_x86.hpp), in a translation unit
// of its own so Release builds compile it at -O2 like Q5_K's integer kernels (CMakeLists.txt).
#include "cpu/types/q6_k/q6k_x86.hpp"

namespace lmt::cpu {

void matvec_q6_k_i24_avx2(const Q6kI24Args &a, int64_t r0, int64_t r1) { q6k_i24_x86(a, r0, r1); }

}  // namespace lmt::cpu
