// Precision::I16 / I24: the shared x86 integer kernel (q5k_x86.hpp) compiled with AVX-512 enabled:
// the same source, hence the same exact integer sums and the same f32 expression as the AVX2 TU.
// (Not executed on the AVX2-only development machine; the byte-parity tests run it where the CPU
// has AVX-512. A VNNI/512-bit variant would have to keep the canonical lanes (i >> 2) & 7.)
#include "cpu/types/q5_k/q5k_x86.hpp"

namespace lmt::cpu {

void matvec_q5_k_i16_avx512(const MatvecI16Args &a, int64_t r0, int64_t r1) { matvec_q5_k_i16_x86(a, r0, r1); }

}  // namespace lmt::cpu
