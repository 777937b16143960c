// Q6_K (ggml type 14): the type-table row and the matvec dispatch (activation preparation for
// I24, ISA selection, row split over threads). The canonical expressions are in q6k.hpp; the
// quantiser in q6_k_quantize.cpp.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/ggml/kquant_ggml.hpp"
#include "cpu/types/q6_k/q6k.hpp"

namespace lmt::cpu {
namespace {

// Round to nearest even for |v| < 2^51 (the build has -ffp-contract=off and no fast-math;
// volatile keeps both additions).
inline double round_even(double v) {
    const double magic = 6755399441055744.0;
    volatile double t = v + magic;
    return t - magic;
}

inline double clamp16(double v) { return std::min(32767.0, std::max(-32767.0, v)); }

// The I24 activations (q6k.hpp): scalar and in double, so every ISA and thread count sees the
// same integers (T * cols elements per call, negligible against the weights).
void prepare_x_q6k(const float *x, int64_t T, int64_t cols, int16_t *xa, int16_t *xc, float *dx, float *dxc) {
    const int64_t nb = cols / LMT_QK_K;
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t b = 0; b < nb; ++b) {
            const float *xb = x + t * cols + b * LMT_QK_K;
            int16_t *ab = xa + t * cols + b * LMT_QK_K, *cb = xc + t * cols + b * LMT_QK_K;
            float amax = 0.0f;
            bool nonfinite = false;
            for (int i = 0; i < LMT_QK_K; ++i) {
                nonfinite |= is_nonfinite(xb[i]);
                amax = std::max(amax, std::fabs(xb[i]));
            }
            if (nonfinite || amax == 0.0f) {
                const float s = nonfinite ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
                std::fill(ab, ab + LMT_QK_K, (int16_t)0);
                std::fill(cb, cb + LMT_QK_K, (int16_t)0);
                dx[t * nb + b] = dxc[t * nb + b] = s;
                continue;
            }
            const double s = (double)amax / 32767.0, inv = 32767.0 / (double)amax;
            const double inv2 = 65534.0 / s;  // finite: s >= 2^-164
            for (int i = 0; i < LMT_QK_K; ++i) {
                const double av = clamp16(round_even((double)xb[i] * inv));
                ab[i] = (int16_t)av;
                cb[i] = (int16_t)clamp16(round_even(((double)xb[i] - av * s) * inv2));
            }
            dx[t * nb + b] = (float)s;
            dxc[t * nb + b] = (float)(s / 65534.0);
        }
    }
}

struct I24Scratch {  // per calling thread: grown, never shrunk
    std::vector<int16_t> a, c, ap, cp;
    std::vector<float> dx, dxc, dxp, dxcp;
};

// The row-pair layout of Q6kI24Args::xap / dxp (q6k.hpp), from the natural one: a copy, so the
// integers and scales are the same ones every ISA uses.
void q6k_pair_layout(const int16_t *x, const float *dx, int64_t T, int64_t cols, int16_t *xp, float *dxp) {
    const int64_t nb = cols / LMT_QK_K;
    for (int64_t p = 0; p < T / 2; ++p) {
        const int16_t *x0 = x + 2 * p * cols, *x1 = x0 + cols;
        int16_t *o = xp + 2 * p * cols;
        for (int64_t g = 0; g < cols / 32; ++g, o += 64) {
            std::copy(x0 + 32 * g, x0 + 32 * g + 16, o);
            std::copy(x1 + 32 * g + 16, x1 + 32 * g + 32, o + 16);
            std::copy(x0 + 32 * g + 16, x0 + 32 * g + 32, o + 32);
            std::copy(x1 + 32 * g, x1 + 32 * g + 16, o + 48);
        }
        for (int64_t b = 0; b < nb; ++b) {
            std::fill(dxp + (p * nb + b) * 16, dxp + (p * nb + b) * 16 + 8, dx[2 * p * nb + b]);
            std::fill(dxp + (p * nb + b) * 16 + 8, dxp + (p * nb + b) * 16 + 16, dx[(2 * p + 1) * nb + b]);
        }
    }
}

// The pass layout of Q6kI24Args::xg (q6k.hpp), from the natural one: a copy, as above.
void q6k_pass_layout(const int16_t *xa, const int16_t *xc, int64_t T, int64_t cols, int16_t *xg) {
    const int64_t nb = cols / LMT_QK_K;
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
        const int64_t n = std::min<int64_t>(4, T - t0);
        int16_t *o = xg + 2 * t0 * cols;
        for (int64_t b = 0; b < nb; ++b)
            for (int64_t t = 0; t < n; ++t) {
                std::copy_n(xa + (t0 + t) * cols + b * LMT_QK_K, LMT_QK_K, o + (2 * n * b + t) * LMT_QK_K);
                std::copy_n(xc + (t0 + t) * cols + b * LMT_QK_K, LMT_QK_K, o + (2 * n * b + n + t) * LMT_QK_K);
            }
    }
}

// 64 rows per task (~340 KB of weights at cols = 6656), as Q5_K.
constexpr int64_t kRowsPerTask = 64;

void q6_k_matvec(const MatvecCall &c) {
    if (c.precision == Precision::Ggml) {
#if defined(LMTAIL_HAVE_X86)
        ggml_kquant_matvec(c, "Q6_K", q6_k_ggml_rows_avx2);
#else
        ggml_kquant_matvec(c, "Q6_K", nullptr);
#endif
        return;
    }
    if (c.precision == Precision::I24) {
        thread_local I24Scratch s;
        const size_t n = (size_t)(c.T * c.cols), nbt = (size_t)(c.T * (c.cols / LMT_QK_K));
        int16_t *xa = aligned64(s.a, n), *xc = aligned64(s.c, n);
        if (s.dx.size() < nbt) {
            s.dx.resize(nbt);
            s.dxc.resize(nbt);
        }
        prepare_x_q6k(c.x, c.T, c.cols, xa, xc, s.dx.data(), s.dxc.data());
        Q6kI24Args a{&c, xa, xc, s.dx.data(), s.dxc.data()};
#if defined(LMTAIL_HAVE_X86)
        if (c.isa == Isa::Avx512 && c.T >= 2) {
            int16_t *ap = aligned64(s.ap, n), *cp = aligned64(s.cp, n);
            float *dxp = aligned64(s.dxp, nbt * 8), *dxcp = aligned64(s.dxcp, nbt * 8);
            q6k_pair_layout(xa, s.dx.data(), c.T, c.cols, ap, dxp);
            q6k_pair_layout(xc, s.dxc.data(), c.T, c.cols, cp, dxcp);
            a.xap = ap;
            a.xcp = cp;
            a.dxp = dxp;
            a.dxcp = dxcp;
        }
        if (kernel_family(c.isa) == Isa::Avx2 && c.T >= 2) {
            int16_t *xg = aligned64(s.ap, 2 * n);
            q6k_pass_layout(xa, xc, c.T, c.cols, xg);
            a.xg = xg;
        }
#endif
        void (*kernel)(const Q6kI24Args &, int64_t, int64_t) = matvec_q6_k_i24_scalar;
        switch (c.isa) {
#if defined(LMTAIL_HAVE_X86)
            case Isa::Avx512: kernel = matvec_q6_k_i24_avx512; break;
            case Isa::Avx2: kernel = matvec_q6_k_i24_avx2; break;
            case Isa::AvxVnni: kernel = matvec_q6_k_i24_avxvnni; break;
#endif
#if defined(LMTAIL_HAVE_NEON)
            case Isa::Neon: kernel = matvec_q6_k_i24_neon; break;
#endif
            default: break;
        }
        for_row_tasks(c.n_threads, c.rows, kRowsPerTask, [&](int64_t r0, int64_t r1) { kernel(a, r0, r1); });
        return;
    }
    void (*kernel)(const MatvecCall &, int64_t, int64_t) = matvec_q6_k_scalar;
    switch (c.isa) {
#if defined(LMTAIL_HAVE_X86)
        case Isa::Avx512: kernel = matvec_q6_k_avx512; break;
        case Isa::Avx2: kernel = matvec_q6_k_avx2; break;
#endif
#if defined(LMTAIL_HAVE_NEON)
        case Isa::Neon: kernel = matvec_q6_k_neon; break;
#endif
        default: break;
    }
    for_row_tasks(c.n_threads, c.rows, kRowsPerTask, [&](int64_t r0, int64_t r1) { kernel(c, r0, r1); });
}

}  // namespace

// Default: I24 (faster than F32, and at least as accurate: see tests/test_type_q6_k.py).
const CpuTypeImpl kCpuQ6_K{WeightType::Q6_K,
                           precision_bit(Precision::F32) | precision_bit(Precision::I24) | kGgmlKPrecisionBit,
                           Precision::I24, q6_k_matvec, quantize_q6_k, dequantize_q6_k,
                           kGgmlBuildsInt, kGgmlKNotReproduced, precision_bit(Precision::I24)};

}  // namespace lmt::cpu
