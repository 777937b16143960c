// Precision::I16 / I24 with AVX-512 BW + VNNI: the 512-bit kernel (k_avx512.hpp). It reads xq in
// the AVX-512 layout (k512_activation_layout, applied by the dispatch in q5_k.cpp).
#include "cpu/types/q5_k/k_avx512.hpp"

namespace lmt::cpu {

void matvec_q5_k_i16_avx512(const MatvecI16Args &a, int64_t r0, int64_t r1) {
    if (a.xr) k512_rows_all<K512::Q5_I24>(a, r0, r1);
    else k512_rows_all<K512::Q5_I16>(a, r0, r1);
}

}  // namespace lmt::cpu
