// NEON (AArch64) Q6_K matvec, both precisions, byte-identical to the scalar references
// (q6k.hpp): F32 keeps the 16 canonical lanes as four float32x4 (vfmaq_f32 is the fused fma);
// I24 accumulates w16 * a per word position with vmlal_s16 (8 products per half block and
// position) and pair-adds positions (2k, 2k + 1) into the canonical int32 lane k at the end of
// each half, an exact regrouping of the same integer sum.
#include <arm_neon.h>

#include <vector>

#include "cpu/types/q6_k/q6k.hpp"

namespace lmt::cpu {
namespace {

// One half block (128 weights) as q - 32 in weight order: quarter m = weights 32m .. 32m + 31.
static inline void unpack_half(const uint8_t *ql, const uint8_t *qh, int8_t *q) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30), k32 = vdupq_n_u8(32);
    for (int p = 0; p < 2; ++p) {  // bytes 16p .. 16p + 15 of each quarter
        const uint8x16_t l0 = vld1q_u8(ql + 16 * p), l1 = vld1q_u8(ql + 32 + 16 * p), h = vld1q_u8(qh + 16 * p);
        const uint8x16_t q0 = vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(h, 4), m30));
        const uint8x16_t q1 = vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(h, 2), m30));
        const uint8x16_t q2 = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(h, m30));
        const uint8x16_t q3 = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(h, 2), m30));
        vst1q_s8(q + 0 + 16 * p, vreinterpretq_s8_u8(vsubq_u8(q0, k32)));
        vst1q_s8(q + 32 + 16 * p, vreinterpretq_s8_u8(vsubq_u8(q1, k32)));
        vst1q_s8(q + 64 + 16 * p, vreinterpretq_s8_u8(vsubq_u8(q2, k32)));
        vst1q_s8(q + 96 + 16 * p, vreinterpretq_s8_u8(vsubq_u8(q3, k32)));
    }
}

struct RowScratch {
    std::vector<int8_t> q;
    std::vector<float> D;
    void ensure(int64_t cols) {
        if ((int64_t)q.size() < cols) {
            q.resize((size_t)cols);
            D.resize((size_t)cols / 16);
        }
    }
};

static inline float hsum16(float32x4_t a0, float32x4_t a1, float32x4_t a2, float32x4_t a3) {
    const float32x4_t c = vaddq_f32(vaddq_f32(a0, a2), vaddq_f32(a1, a3));  // b[l] = a[l] + a[l+8]; c = b[l] + b[l+4]
    const float d0 = vgetq_lane_f32(c, 0) + vgetq_lane_f32(c, 2), d1 = vgetq_lane_f32(c, 1) + vgetq_lane_f32(c, 3);
    return d0 + d1;
}

static inline float hsum8(float32x4_t lo, float32x4_t hi) {
    const float32x4_t b = vaddq_f32(lo, hi);
    const float c0 = vgetq_lane_f32(b, 0) + vgetq_lane_f32(b, 2), c1 = vgetq_lane_f32(b, 1) + vgetq_lane_f32(b, 3);
    return c0 + c1;
}

static inline float32x4_t s16_to_f32(int16x4_t v) { return vcvtq_f32_s32(vmovl_s16(v)); }

}  // namespace

void matvec_q6_k_neon(const MatvecCall &c, int64_t r0, int64_t r1) {
    thread_local RowScratch s;
    s.ensure(c.cols);
    const int64_t nb = c.cols / LMT_QK_K, nsub = c.cols / 16;
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)r * c.row_stride);
        for (int64_t b = 0; b < nb; ++b) {
            unpack_half(blocks[b].ql, blocks[b].qh, s.q.data() + b * LMT_QK_K);
            unpack_half(blocks[b].ql + 64, blocks[b].qh + 32, s.q.data() + b * LMT_QK_K + 128);
            q6k_block_scales(&blocks[b], s.D.data() + b * 16);
        }
        for (int64_t t = 0; t < c.T; ++t) {
            const float *x = c.x + t * c.cols;
            float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t j = 0; j < nsub; ++j) {
                const int8x16_t q = vld1q_s8(s.q.data() + 16 * j);
                const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
                const float D = s.D[j];
                const float *xj = x + 16 * j;
                a0 = vfmaq_f32(a0, vmulq_n_f32(s16_to_f32(vget_low_s16(lo)), D), vld1q_f32(xj));
                a1 = vfmaq_f32(a1, vmulq_n_f32(s16_to_f32(vget_high_s16(lo)), D), vld1q_f32(xj + 4));
                a2 = vfmaq_f32(a2, vmulq_n_f32(s16_to_f32(vget_low_s16(hi)), D), vld1q_f32(xj + 8));
                a3 = vfmaq_f32(a3, vmulq_n_f32(s16_to_f32(vget_high_s16(hi)), D), vld1q_f32(xj + 12));
            }
            c.logits[t * c.rows + r] = hsum16(a0, a1, a2, a3);
        }
    }
}

void matvec_q6_k_i24_neon(const Q6kI24Args &a, int64_t r0, int64_t r1) {
    const MatvecCall &c = *a.c;
    const int64_t nb = c.cols / LMT_QK_K;
    alignas(16) int8_t q[LMT_QK_K];
    for (int64_t r = r0; r < r1; ++r) {
        const auto *blocks = reinterpret_cast<const lmt_block_q6_K *>(c.w + (size_t)r * c.row_stride);
        for (int64_t t = 0; t < c.T; ++t) {
            float32x4_t flo = vdupq_n_f32(0), fhi = flo;
            for (int64_t b = 0; b < nb; ++b) {
                const lmt_block_q6_K &blk = blocks[b];
                unpack_half(blk.ql, blk.qh, q);
                unpack_half(blk.ql + 64, blk.qh + 32, q + 128);
                const int64_t tb = t * nb + b;
                const int16_t *xa = a.xa + t * c.cols + b * LMT_QK_K, *xc = a.xc + t * c.cols + b * LMT_QK_K;
                const float d = f16_to_f32(blk.d), e = d * a.dx[tb], ec = d * a.dxc[tb];
                for (int h = 0; h < 2; ++h) {
                    int32x4_t A[4], C[4];  // word positions 4p .. 4p + 3 of the 16-weight sub-blocks
                    for (int p = 0; p < 4; ++p) A[p] = C[p] = vdupq_n_s32(0);
                    for (int j = 8 * h; j < 8 * h + 8; ++j) {
                        const int8x16_t qj = vld1q_s8(q + 16 * j);
                        const int16_t sc = blk.scales[j];
                        const int16x8_t w0 = vmulq_n_s16(vmovl_s8(vget_low_s8(qj)), sc);  // exact: |w16| <= 4096
                        const int16x8_t w1 = vmulq_n_s16(vmovl_s8(vget_high_s8(qj)), sc);
                        const int16x8_t xa0 = vld1q_s16(xa + 16 * j), xa1 = vld1q_s16(xa + 16 * j + 8);
                        const int16x8_t xc0 = vld1q_s16(xc + 16 * j), xc1 = vld1q_s16(xc + 16 * j + 8);
                        A[0] = vmlal_s16(A[0], vget_low_s16(w0), vget_low_s16(xa0));
                        A[1] = vmlal_s16(A[1], vget_high_s16(w0), vget_high_s16(xa0));
                        A[2] = vmlal_s16(A[2], vget_low_s16(w1), vget_low_s16(xa1));
                        A[3] = vmlal_s16(A[3], vget_high_s16(w1), vget_high_s16(xa1));
                        C[0] = vmlal_s16(C[0], vget_low_s16(w0), vget_low_s16(xc0));
                        C[1] = vmlal_s16(C[1], vget_high_s16(w0), vget_high_s16(xc0));
                        C[2] = vmlal_s16(C[2], vget_low_s16(w1), vget_low_s16(xc1));
                        C[3] = vmlal_s16(C[3], vget_high_s16(w1), vget_high_s16(xc1));
                    }
                    // lane k = positions 2k + 2k + 1: k 0..3 from positions 0..7, k 4..7 from 8..15.
                    const int32x4_t Llo = vpaddq_s32(A[0], A[1]), Lhi = vpaddq_s32(A[2], A[3]);
                    const int32x4_t Clo = vpaddq_s32(C[0], C[1]), Chi = vpaddq_s32(C[2], C[3]);
                    flo = vfmaq_n_f32(flo, vcvtq_f32_s32(Llo), e);
                    fhi = vfmaq_n_f32(fhi, vcvtq_f32_s32(Lhi), e);
                    flo = vfmaq_n_f32(flo, vcvtq_f32_s32(Clo), ec);
                    fhi = vfmaq_n_f32(fhi, vcvtq_f32_s32(Chi), ec);
                }
            }
            c.logits[t * c.rows + r] = hsum8(flo, fhi);
        }
    }
}

}  // namespace lmt::cpu
