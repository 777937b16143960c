// Q4_K Precision::I24 with AVX512 flags: the shared x86 integer kernel (q4k_x86.hpp), built at
// -O2 in Release like Q5_K's (CMakeLists.txt: *_int_* files).
#include "cpu/types/q4_k/q4k_x86.hpp"

namespace lmt::cpu {

void matvec_q4_k_i24_avx512(const MatvecI16Args &a, int64_t r0, int64_t r1) { matvec_q4_k_i24_x86(a, r0, r1); }

}  // namespace lmt::cpu
