// Q5_K Precision::I16 / I24 on the AVX-VNNI tier: the shared x86 integer kernel (q5k_x86.hpp)
// built with -mavxvnni, so the exact sums' vpmaddwd + vpaddd pairs are vpdpwssd (k_group_row).
#include "cpu/types/q5_k/q5k_x86.hpp"

namespace lmt::cpu {

void matvec_q5_k_i16_avxvnni(const MatvecI16Args &a, int64_t r0, int64_t r1) { matvec_q5_k_i16_x86(a, r0, r1); }

}  // namespace lmt::cpu
