// Precision::I24 on AVX-512 machines: the AVX2 integer kernel (q6k_x86.hpp) compiled with the
// AVX-512 flags (the compiler may use the wider encodings; the integers and the f32 expression
// are the same, so the bytes are).
#include "cpu/types/q6_k/q6k_x86.hpp"

namespace lmt::cpu {

void matvec_q6_k_i24_avx512(const Q6kI24Args &a, int64_t r0, int64_t r1) { q6k_i24_x86(a, r0, r1); }

}  // namespace lmt::cpu
