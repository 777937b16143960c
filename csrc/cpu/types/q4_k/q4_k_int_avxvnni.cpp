// Q4_K Precision::I24 on the AVX-VNNI tier: the shared x86 integer kernel (q4k_x86.hpp) built with
// -mavxvnni, so the exact sums' vpmaddwd + vpaddd pairs are vpdpwssd (k_group_row, q5k_x86.hpp).
#include "cpu/types/q4_k/q4k_x86.hpp"

namespace lmt::cpu {

void matvec_q4_k_i24_avxvnni(const MatvecI16Args &a, int64_t r0, int64_t r1) { matvec_q4_k_i24_x86(a, r0, r1); }

}  // namespace lmt::cpu
