// BF16 precision="ggml": ggml's AVX2 build (cpu/ggml/float_ggml_x86.hpp says which path, when).
#include <cmath>

#include "cpu/ggml/float_ggml_x86.hpp"

namespace lmt::cpu {

void bf16_matvec_ggml_avx2(const MatvecCall &c) { ggml_x86::float_matvec_ggml<ggml_x86::BF16W, ggml_x86::VecDot::BF16>(c); }

}  // namespace lmt::cpu
