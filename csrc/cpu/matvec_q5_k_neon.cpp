// NEON Q5_K matvec (arm64): the canonical 16-lane tree (matvec_q5_k_scalar.cpp) held as four
// 4-lane registers per activation row; activation rows processed in groups of 4 so 16
// accumulators + the weight vectors fit the 32 NEON registers.
#include <arm_neon.h>

#include <vector>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {

struct RowScratchNeon {
    std::vector<uint8_t> q;
    std::vector<float> d1, m1;
    void ensure(int64_t cols) {
        if ((int64_t)q.size() < cols) {
            q.resize((size_t)cols);
            d1.resize((size_t)cols / 32);
            m1.resize((size_t)cols / 32);
        }
    }
};

static inline void unpack_block(const lmt_block_q5_K *b, uint8_t *q) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), bit4 = vdupq_n_u8(0x10);
    for (int half = 0; half < 2; ++half) {
        const uint8x16_t qh = vld1q_u8(b->qh + 16 * half);
        for (int g = 0; g < 4; ++g) {
            const uint8x16_t ql = vld1q_u8(b->qs + 32 * g + 16 * half);
            const uint8x16_t sel_lo = vdupq_n_u8((uint8_t)(1 << (2 * g)));
            const uint8x16_t sel_hi = vdupq_n_u8((uint8_t)(2 << (2 * g)));
            const uint8x16_t lo = vorrq_u8(vandq_u8(ql, m4), vandq_u8(vtstq_u8(qh, sel_lo), bit4));
            const uint8x16_t hi = vorrq_u8(vshrq_n_u8(ql, 4), vandq_u8(vtstq_u8(qh, sel_hi), bit4));
            vst1q_u8(q + 64 * g + 16 * half, lo);
            vst1q_u8(q + 64 * g + 32 + 16 * half, hi);
        }
    }
}

static inline float32x4_t q4_to_f32(uint8x16_t v, int part) {
    const uint16x8_t h = part < 2 ? vmovl_u8(vget_low_u8(v)) : vmovl_u8(vget_high_u8(v));
    const uint32x4_t w = (part & 1) ? vmovl_u16(vget_high_u16(h)) : vmovl_u16(vget_low_u16(h));
    return vcvtq_f32_u32(w);
}

static inline float hsum16_neon(const float32x4_t a[4]) {
    // b[l] = a[l] + a[l+8] (l in 0..7) -> registers (a0+a2, a1+a3); c[l] = b[l] + b[l+4]
    const float32x4_t c = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));
    const float32x2_t d = vadd_f32(vget_low_f32(c), vget_high_f32(c));
    return vget_lane_f32(d, 0) + vget_lane_f32(d, 1);
}

template <int TG>
static inline void dot_group(const uint8_t *q, const float *d1, const float *m1, const float *const *x,
                             int64_t cols, float *out, int64_t out_stride) {
    float32x4_t acc[TG][4];
    for (int t = 0; t < TG; ++t)
        for (int p = 0; p < 4; ++p) acc[t][p] = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j < cols / 32; ++j) {
        const float32x4_t D = vdupq_n_f32(d1[j]);
        const float32x4_t negM = vdupq_n_f32(-m1[j]);
        for (int h = 0; h < 2; ++h) {
            const int64_t i = 32 * j + 16 * h;
            const uint8x16_t qv = vld1q_u8(q + i);
            for (int p = 0; p < 4; ++p) {
                const float32x4_t w = vfmaq_f32(negM, q4_to_f32(qv, p), D);  // fma(q, d1, -m1)
                for (int t = 0; t < TG; ++t) acc[t][p] = vfmaq_f32(acc[t][p], w, vld1q_f32(x[t] + i + 4 * p));
            }
        }
    }
    for (int t = 0; t < TG; ++t) out[t * out_stride] = hsum16_neon(acc[t]);
}

}  // namespace

void matvec_q5_k_neon(const MatvecArgs &a, int64_t r0, int64_t r1) {
    thread_local RowScratchNeon s;
    s.ensure(a.cols);
    const int64_t nb = a.cols / LMT_QK_K;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q5_K *>(a.w + (size_t)r * a.row_stride);
        for (int64_t b = 0; b < nb; ++b) {
            unpack_block(&blocks[b], s.q.data() + b * LMT_QK_K);
            q5k_block_scales(&blocks[b], s.d1.data() + b * 8, s.m1.data() + b * 8);
        }
        for (int64_t t0 = 0; t0 < a.T; t0 += 4) {
            const float *xs[4];
            const int tg = (int)std::min<int64_t>(4, a.T - t0);
            for (int t = 0; t < tg; ++t) xs[t] = a.x + (t0 + t) * a.cols;
            float *out = a.logits + t0 * a.rows + r;
            switch (tg) {
                case 1: dot_group<1>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 2: dot_group<2>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                case 3: dot_group<3>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
                default: dot_group<4>(s.q.data(), s.d1.data(), s.m1.data(), xs, a.cols, out, a.rows); break;
            }
        }
    }
}

}  // namespace lmt::cpu
