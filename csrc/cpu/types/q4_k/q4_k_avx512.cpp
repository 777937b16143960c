// Q4_K Precision::F32 with AVX512 flags: the shared x86 kernel (q4k_x86.hpp).
#include "cpu/types/q4_k/q4k_x86.hpp"

namespace lmt::cpu {

void matvec_q4_k_avx512(const MatvecArgs &a, int64_t r0, int64_t r1) { matvec_q4_k_f32_x86(a, r0, r1); }

}  // namespace lmt::cpu
