// Q4_0 Precision::I24 with AVX2 flags: the shared x86 integer kernel (q4_0_int_x86.hpp).
#include "cpu/types/q4_0/q4_0_int_x86.hpp"

namespace lmt::cpu::q4_0 {

void matvec_i24_avx2(const I24Args &a, int64_t r0, int64_t r1) { matvec_i24_x86(a, r0, r1); }

}  // namespace lmt::cpu::q4_0
