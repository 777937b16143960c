// Q6_K quantisation and dequantisation on the host.
//
// quantize_q6_k reproduces ggml's reference quantiser (quantize_row_q6_K_ref: what
// ggml_quantize_chunk does for GGML_TYPE_Q6_K without an importance matrix) byte for byte. As in
// the Q5_K quantiser the arithmetic is deliberately literal: the same operands, order and
// roundings as the reference (no FMA: -ffp-contract=off and the pragmas below; int -> float
// conversions where the reference converts, e.g. w*x*l is (w*x)*float(l); nearest-int by the
// 1.5*2^23 trick, reproduced outside its nominal range too). Fail closed: a non-finite weight or a
// block whose f16 scale d overflows (|w| above about 2.68e8) throws ArgumentError after the call.
//
// dequantize_q6_k is ggml's dequantize_row_q6_K: y = (d * sc) * (q - 32), see q6k.hpp.
// Rows are independent and split over threads, so the bytes do not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "cpu/types/q6_k/q6k.hpp"


#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

namespace lmt::cpu {
namespace {

constexpr int kSub = 16;        // weights per sub-block
constexpr int kNSub = 16;       // sub-blocks per super-block
constexpr float kEps = 1e-15f;  // ggml's GROUP_MAX_EPS

inline uint32_t fbits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}


// ggml's nearest_int: pure float addition and a bit read, defined for every input.
inline int32_t nearest(float x) {
    const float s = x + 12582912.0f;
    return (int32_t)(fbits(s) & 0x007FFFFFu) - 0x00400000;
}

inline int32_t clamp_l(int32_t l) { return std::max(-32, std::min(31, l)); }

// ggml's make_qx_quants(16, 32, x, L, rmse_type = 1, no weights): the sub-block scale fitted by
// weighted least squares (weights x^2) over 19 grids; L gets codes in [0, 63].
float fit_sub_block(const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < kSub; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kEps) {
        std::memset(L, 0, kSub);
        return 0.0f;
    }
    float iscale = -32.0f / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < kSub; ++i) {
        const int32_t l = clamp_l(nearest(iscale * x[i]));
        L[i] = (int8_t)(l + 32);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(32.0f + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < kSub; ++i) {
            const int32_t l = clamp_l(nearest(iscale * x[i]));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < kSub; ++i) L[i] = (int8_t)(32 + clamp_l(nearest(iscale * x[i])));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// One super-block, always ggml's bytes; false when unusable (non-finite input or f16 d
// overflowed: the block would decode to inf/NaN).
bool quantize_block(const float *x, lmt_block_q6_K *y) {
    int8_t L[LMT_QK_K];
    float scales[kNSub];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kNSub; ++ib) {
        const float s = fit_sub_block(x + kSub * ib, L + kSub * ib);
        scales[ib] = s;
        const float as = std::fabs(s);
        if (as > max_abs_scale) {
            max_abs_scale = as;
            max_scale = s;
        }
    }
    bool finite = true;
    for (int i = 0; i < LMT_QK_K; ++i) finite &= (fbits(x[i]) & 0x7F800000u) != 0x7F800000u;
    if (max_abs_scale < kEps) {
        std::memset(y, 0, sizeof *y);
        return finite;
    }
    const float iscale = -128.0f / max_scale;
    y->d = f32_to_f16_rne(1.0f / iscale);
    for (int ib = 0; ib < kNSub; ++ib) {
        // MIN(127, nearest_int(..)) stored to int8_t (modular, as the reference's conversion).
        y->scales[ib] = (int8_t)(uint8_t)(uint32_t)std::min(127, nearest(iscale * scales[ib]));
    }
    const float d_all = f16_to_f32(y->d);
    for (int j = 0; j < kNSub; ++j) {
        const float d = d_all * (float)y->scales[j];
        if (d == 0.0f) continue;  // keeps the fit's codes, as the reference
        for (int ii = 0; ii < kSub; ++ii) L[kSub * j + ii] = (int8_t)(clamp_l(nearest(x[kSub * j + ii] / d)) + 32);
    }
    for (int h = 0; h < 2; ++h) {
        uint8_t *ql = y->ql + 64 * h, *qh = y->qh + 32 * h;
        const int8_t *Lh = L + 128 * h;
        for (int l = 0; l < 32; ++l) {
            const uint8_t q1 = (uint8_t)Lh[l], q2 = (uint8_t)Lh[l + 32], q3 = (uint8_t)Lh[l + 64],
                          q4 = (uint8_t)Lh[l + 96];
            ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
            ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
            qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
    }
    return finite && (y->d & 0x7C00u) != 0x7C00u;
}


}  // namespace

void quantize_q6_k(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads) {
    const int64_t nb = cols / LMT_QK_K;
    const size_t rb = (size_t)nb * LMT_Q6K_BLOCK_BYTES;
    std::atomic<int64_t> first_bad{INT64_MAX};
    // Rows in tasks of 16: ~0.1 ms of work each at cols = 4096.
    for_row_tasks(n_threads, rows, 16, [&](int64_t r0, int64_t r1) {
        const DefaultFpMode fp;
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t b = 0; b < nb; ++b) {
                lmt_block_q6_K blk;
                if (!quantize_block(src + r * cols + b * LMT_QK_K, &blk)) {
                    int64_t cur = first_bad.load(), mine = r * nb + b;
                    while (mine < cur && !first_bad.compare_exchange_weak(cur, mine)) {
                    }
                }
                std::memcpy(dst + (size_t)r * rb + (size_t)b * LMT_Q6K_BLOCK_BYTES, &blk, sizeof blk);
            }
        }
    });
    const int64_t bad = first_bad.load();
    if (bad == INT64_MAX) return;
    const int64_t r = bad / nb, b = bad % nb;
    const float *x = src + r * cols + b * LMT_QK_K;
    float amax = 0;
    for (int i = 0; i < LMT_QK_K; ++i) {
        if ((fbits(x[i]) & 0x7F800000u) == 0x7F800000u)
            throw ArgumentError("quantize (Q6_K): weights must be finite; found a non-finite weight at (" +
                                std::to_string(r) + ", " + std::to_string(b * LMT_QK_K + i) + ")");
        amax = std::max(amax, std::fabs(x[i]));
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", (double)amax);
    throw ArgumentError("quantize (Q6_K): row " + std::to_string(r) + ", super-block " + std::to_string(b) +
                        " (max |w| = " + buf + ") overflows Q6_K's f16 scale d (the block would decode to "
                        "inf/NaN); Q6_K represents weights only up to about 2.68e8 (65504 * 4096) in magnitude");
}

void dequantize_q6_k(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads) {
    const int64_t nb = cols / LMT_QK_K;
    const size_t rb = (size_t)nb * LMT_Q6K_BLOCK_BYTES;
    for_row_tasks(n_threads, rows, 64, [&](int64_t r0, int64_t r1) {
        const DefaultFpMode fp;
        float D[16];
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t b = 0; b < nb; ++b) {
                lmt_block_q6_K blk;  // copy: src carries no alignment guarantee
                std::memcpy(&blk, src + (size_t)r * rb + (size_t)b * LMT_Q6K_BLOCK_BYTES, sizeof blk);
                q6k_block_scales(&blk, D);
                float *y = dst + r * cols + b * LMT_QK_K;
                for (int i = 0; i < LMT_QK_K; ++i) y[i] = D[i >> 4] * (float)lmt_q6k_q(blk.ql, blk.qh, i);
            }
        }
    });
}

}  // namespace lmt::cpu
