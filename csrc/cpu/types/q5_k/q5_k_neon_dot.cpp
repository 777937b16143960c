// Q5_K I24 on NEON with the ARMv8.2 dot product (Isa::NeonDot): the shared K kernel
// (k_neon_dot.hpp) on the codes q - 16. Built with -march=armv8.2-a+dotprod (CMakeLists.txt).
// I16 has no dotprod variant (its uncentred codes times a 3-bit scale split would not fit a
// signed byte) and runs the NEON kernel.
#include "cpu/types/q5_k/k_neon_dot.hpp"

namespace lmt::cpu {
namespace {

struct Q5kDot {
    using Block = lmt_block_q5_K;
    static constexpr float kCentre = 16.0f;
    static void scale_min(const Block *b, uint64_t *sc, uint64_t *mm) { q5k_scale_min_bytes(b, sc, mm); }
    // Half h: weights 64g + 16h + l (low nibble of qs[32g + 16h + l], fifth bit 2g of qh[16h + l])
    // and 64g + 32 + 16h + l (high nibble, bit 2g + 1).
    struct Half {
        const uint8_t *qs;
        uint8x16_t qh;
        Half(const Block *b, int h) : qs(b->qs + 16 * h), qh(vld1q_u8(b->qh + 16 * h)) {}
        void pair(int g, int8x16_t &lo, int8x16_t &hi) const {
            const uint8x16_t ql = vld1q_u8(qs + 32 * g), m4 = vdupq_n_u8(0x0F), bit4 = vdupq_n_u8(0x10);
            const uint8x16_t k16 = vdupq_n_u8(16);
            const uint8x16_t l = vorrq_u8(vandq_u8(ql, m4), vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(1 << (2 * g)))), bit4));
            const uint8x16_t u = vorrq_u8(vshrq_n_u8(ql, 4), vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(2 << (2 * g)))), bit4));
            lo = vreinterpretq_s8_u8(vsubq_u8(l, k16));  // q - 16 in [-16, 15]
            hi = vreinterpretq_s8_u8(vsubq_u8(u, k16));
        }
    };
};

}  // namespace

void matvec_q5_k_i24_neon_dot(const MatvecI16Args &a, int64_t r0, int64_t r1) { kdot::matvec<Q5kDot>(a, r0, r1); }

}  // namespace lmt::cpu
