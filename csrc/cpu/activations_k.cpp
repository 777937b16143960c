// The 256-block activation layouts of the I16 and I24 precisions (cpu/internal.hpp), shared by
// the K types that use them (Q5_K; Q4_K's I24). Scalar and in double, so every ISA and thread
// count sees the same bytes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/internal.hpp"

namespace lmt::cpu {
namespace {

// Round to nearest, ties to even, for |v| < 2^51: adding and subtracting 1.5 * 2^52 leaves the
// integer part in the low mantissa bits (IEEE double, the default rounding mode; the build uses
// -ffp-contract=off and no fast-math, so the compiler keeps both operations).
static inline double round_even(double v) {
    const double magic = 6755399441055744.0;
    volatile double t = v + magic;  // volatile: no algebraic folding even under aggressive flags
    return t - magic;
}

}  // namespace

// Quantise x (T, cols) into the I16 layout described in cpu/internal.hpp, or with xr/dxr
// non-null into the I24 layout (floor-quantised int16 piece + unsigned 8-bit residual). Scalar
// and in double, so every ISA and thread count sees the same bytes (the cost is T * cols elements
// per call, ~0.05 ms for T = 8, cols = 6656, against ~100 ms for the weights).
void prepare_x_i16(const float *x, int64_t T, int64_t cols, int16_t *xq, float *xsum, float *dx, uint8_t *xr,
                   float *dxr) {
    const int64_t nb = cols / LMT_QK_K;
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t b = 0; b < nb; ++b) {
            const float *xb = x + t * cols + b * LMT_QK_K;
            int16_t *qb = xq + t * cols + b * LMT_QK_K;
            uint8_t *rb = xr ? xr + t * cols + b * LMT_QK_K : nullptr;
            float *sb = xsum + (t * nb + b) * LMT_Q5K_SUBBLOCKS;
            float amax = 0.0f;
            bool nonfinite = false;
            for (int i = 0; i < LMT_QK_K; ++i) {
                nonfinite |= is_nonfinite(xb[i]);
                amax = std::max(amax, std::fabs(xb[i]));
            }
            if (nonfinite || amax == 0.0f) {
                // NaN scale: every logit of this activation row becomes NaN (fma(L, NaN, acc)), so
                // the caller's finite checks see it exactly as with f32 activations.
                const float s = nonfinite ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
                std::fill(qb, qb + LMT_QK_K, (int16_t)0);
                std::fill(sb, sb + LMT_Q5K_SUBBLOCKS, rb && nonfinite ? s : 0.0f);
                dx[t * nb + b] = s;
                if (rb) {
                    std::fill(rb, rb + LMT_QK_K, (uint8_t)0);
                    dxr[t * nb + b] = s;
                }
                continue;
            }
            const double inv = 32767.0 / (double)amax;  // finite: amax >= 2^-149
            const double step = (double)amax / 32767.0;
            const double rinv = 255.0 / step;            // finite: step >= 2^-164, so rinv < 2^173
            const float dxf = (float)step, dxrf = (float)(step / 255.0);
            for (int j = 0; j < LMT_Q5K_SUBBLOCKS; ++j) {
                int32_t s = 0, sr = 0;
                for (int l = 0; l < 32; ++l) {
                    const int i = 32 * j + l;
                    const double v = (double)xb[i] * inv;  // |v| <= 32767 up to one rounding
                    double qv;
                    if (!rb) {
                        qv = std::min(32767.0, std::max(-32767.0, round_even(v)));
                    } else {
                        // I24: a = floor(v), so the residual x - a*step lies in [0, step) and the
                        // second piece is unsigned: b = round(residual * 255 / step) in [0, 255].
                        qv = std::min(32767.0, std::max(-32767.0, std::floor(v)));
                        double rq = round_even(((double)xb[i] - qv * step) * rinv);
                        rq = std::min(255.0, std::max(0.0, rq));
                        rb[i] = (uint8_t)rq;
                        sr += (int32_t)rq;
                    }
                    const int16_t q = (int16_t)qv;
                    qb[xi16_pos(i)] = q;
                    s += q;
                }
                // I16: the exact integer s (|s| <= 32 * 32767 < 2^24). I24: the represented x's
                // sub-block sum dx*s + dxr*sr (with the f32 dx, dxr the kernels use), rounded once.
                sb[j] = rb ? (float)((double)dxf * s + (double)dxrf * sr) : (float)s;
            }
            dx[t * nb + b] = dxf;
            if (rb) dxr[t * nb + b] = dxrf;
        }
    }
}

namespace {
// Records of E elements per (row, block): (T, nb, E) -> pass-major (cpu/internal.hpp).
template <class V>
void pass_major(V *a, int64_t T, int64_t nb, int64_t E, bool swap_chunks) {
    thread_local std::vector<V> tmp;
    tmp.assign(a, a + T * nb * E);
    for (int64_t t0 = 0; t0 < T; t0 += kK512Pass) {
        const int64_t tg = std::min<int64_t>(kK512Pass, T - t0);
        for (int64_t t = 0; t < tg; ++t)
            for (int64_t b = 0; b < nb; ++b) {
                const V *src = tmp.data() + ((t0 + t) * nb + b) * E;
                V *dst = a + (t0 * nb + b * tg + t) * E;
                std::copy(src, src + E, dst);
                if (swap_chunks)
                    for (int64_t o = 0; o < E; o += 64) std::swap_ranges(dst + o + 16, dst + o + 32, dst + o + 32);
            }
    }
}
}  // namespace

void k_dot_layout(const int16_t *xq, const uint8_t *xr, int64_t T, int64_t cols, int8_t *xd) {
    const int64_t nb = cols / LMT_QK_K;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < nb; ++b) {
            const int16_t *a = xq + t * cols + b * LMT_QK_K;
            const uint8_t *r = xr + t * cols + b * LMT_QK_K;
            int8_t *o = xd + (t * nb + b) * kKDotRecord;
            for (int i = 0; i < LMT_QK_K; ++i) {
                const int v = a[xi16_pos(i)];
                o[i] = (int8_t)(v >> 8);  // arithmetic shift: floor(v / 256) in [-128, 127]
                o[256 + i] = (int8_t)((v & 255) - 128);
                o[512 + i] = (int8_t)(r[i] - 128);
            }
        }
}

void k512_activation_layout(int64_t T, int64_t cols, int16_t *xq, float *xsum, float *dx, uint8_t *xr, float *dxr) {
    const int64_t nb = cols / LMT_QK_K;
    pass_major(xq, T, nb, LMT_QK_K, true);
    pass_major(xsum, T, nb, LMT_Q5K_SUBBLOCKS, false);
    pass_major(dx, T, nb, 1, false);
    if (xr) {
        pass_major(xr, T, nb, LMT_QK_K, false);
        pass_major(dxr, T, nb, 1, false);
    }
}

}  // namespace lmt::cpu
