// Q5_K, precision="ggml": ggml's AVX2 build (paths in cpu/ggml/kquant_ggml.hpp, block integers
// and float order in ggml_x86::k45_block / k45_rows).
// (ggml's x86 AVX-512 build gives the same bytes on every path: cpu/ggml/ggml_isa.hpp.)
#include "cpu/ggml/kquant_ggml_x86.hpp"

namespace lmt::cpu {

void q5_k_ggml_rows_avx2(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1) {
    ggml_x86::k45_rows<true>(c, xq, r0, r1);
}

}  // namespace lmt::cpu
