// Q4_K Precision::F32, 512-bit (kf32_avx512.hpp: table decode, 4 weight rows x 4 activation rows).
#include "cpu/types/q4_k/q4_k_internal.hpp"
#include "cpu/types/q5_k/kf32_avx512.hpp"

namespace lmt::cpu {

void matvec_q4_k_avx512(const MatvecArgs &a, int64_t r0, int64_t r1) { kf32_matvec<false>(a, r0, r1); }

}  // namespace lmt::cpu
