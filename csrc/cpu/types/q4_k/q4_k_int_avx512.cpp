// Q4_K Precision::I24 with AVX-512 BW + VNNI: the 512-bit kernel shared with Q5_K (k_avx512.hpp),
// built at -O2 in Release like the other *_int_* files. It reads xq in the AVX-512 layout
// (k512_activation_layout, applied by the dispatch in q4_k.cpp).
#include "cpu/types/q5_k/k_avx512.hpp"

namespace lmt::cpu {

void matvec_q4_k_i24_avx512(const MatvecI16Args &a, int64_t r0, int64_t r1) { k512_rows_all<K512::Q4_I24>(a, r0, r1); }

}  // namespace lmt::cpu
