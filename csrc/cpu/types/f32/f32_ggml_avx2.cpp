// F32 precision="ggml": ggml's AVX2 build (cpu/ggml/float_ggml_x86.hpp says which path, when).
#include <cmath>

#include "cpu/ggml/float_ggml_x86.hpp"

namespace lmt::cpu {

void f32_matvec_ggml_avx2(const MatvecCall &c) { ggml_x86::float_matvec_ggml<ggml_x86::F32W, ggml_x86::VecDot::F32>(c); }

}  // namespace lmt::cpu
