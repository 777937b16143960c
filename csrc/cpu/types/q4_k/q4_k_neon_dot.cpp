// Q4_K I24 on NEON with the ARMv8.2 dot product (Isa::NeonDot): the shared K kernel
// (q5_k/k_neon_dot.hpp) on the codes q - 8. Built with -march=armv8.2-a+dotprod (CMakeLists.txt).
#include "cpu/types/q4_k/q4_k_internal.hpp"
#include "cpu/types/q5_k/k_neon_dot.hpp"

namespace lmt::cpu {
namespace {

struct Q4kDot {
    using Block = lmt_block_q4_K;
    static constexpr float kCentre = 8.0f;
    static void scale_min(const Block *b, uint64_t *sc, uint64_t *mm) { q4k_scale_min_bytes(b, sc, mm); }
    // Half h: weights 64g + 16h + l (low nibble of qs[32g + 16h + l]) and 64g + 32 + 16h + l (high).
    struct Half {
        const uint8_t *qs;
        Half(const Block *b, int h) : qs(b->qs + 16 * h) {}
        void pair(int g, int8x16_t &lo, int8x16_t &hi) const {
            const uint8x16_t ql = vld1q_u8(qs + 32 * g), k8 = vdupq_n_u8(8);
            lo = vreinterpretq_s8_u8(vsubq_u8(vandq_u8(ql, vdupq_n_u8(0x0F)), k8));  // q - 8 in [-8, 7]
            hi = vreinterpretq_s8_u8(vsubq_u8(vshrq_n_u8(ql, 4), k8));
        }
    };
};

}  // namespace

void matvec_q4_k_i24_neon_dot(const MatvecI16Args &a, int64_t r0, int64_t r1) { kdot::matvec<Q4kDot>(a, r0, r1); }

}  // namespace lmt::cpu
