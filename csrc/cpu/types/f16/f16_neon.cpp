// NEON F16 matvec: the shared float NEON kernel (cpu/types/float_neon.hpp) on F16Weights.
#include "cpu/types/float_neon.hpp"

namespace lmt::cpu {

void matvec_f16_neon(const MatvecCall &c, int64_t r0, int64_t r1) { float_neon::matvec<F16Weights>(c, r0, r1); }

}  // namespace lmt::cpu
