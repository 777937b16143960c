// Q6_K Precision::I24 with AVX2 flags: the shared x86 integer kernel (q6k_int_x86.hpp).
#include "cpu/types/q6_k/q6k_int_x86.hpp"

namespace lmt::cpu {

void matvec_q6_k_i24_avx2(const Q6kI24Args &a, int64_t r0, int64_t r1) { matvec_q6_k_i24_x86(a, r0, r1); }

}  // namespace lmt::cpu
