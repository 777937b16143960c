// Q4_0: the type-table row, quantize / dequantize (ggml's bytes and bits) and the scalar
// reference matvec; the dispatch over ISAs.
#include <algorithm>
#include <cstdint>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/ggml/q0f_ggml.hpp"
#include "cpu/i24_outliers.hpp"
#include "cpu/types/q4_0/q4_0_kernels.hpp"

// The quantiser must round exactly as ggml's reference: no contraction into FMAs.
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace lmt::cpu {
namespace q4_0 {

namespace {

constexpr int kQK = LMT_Q4_0_BLOCK_ELEMS;
constexpr size_t kBB = LMT_Q4_0_BLOCK_BYTES;


// ggml's (int8_t)(float): truncation to int32 as x86's cvttss2si (out of range or NaN gives
// INT32_MIN), then the low byte. Only reached out of range when 1/d overflowed to inf (|max| <
// ~2.4e-38), where every code becomes 0, as in ggml built for x86; defined for every input.
int8_t trunc_i8(float v) {
    const int32_t i = (v > -2147483648.0f && v < 2147483648.0f) ? (int32_t)v : INT32_MIN;
    return (int8_t)(uint8_t)((uint32_t)i & 0xFFu);
}

// One block as quantize_row_q4_0_ref writes it; false when d is not finite in f16
// (|max| >= 8 * 65520: the block would decode to inf/NaN).
bool quantize_block(const float *x, lmt_block_q4_0 *y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = f32_to_f16_rne(d);
    for (int j = 0; j < kQK / 2; ++j) {
        const int8_t a = trunc_i8(x[j] * id + 8.5f), b = trunc_i8(x[kQK / 2 + j] * id + 8.5f);
        const uint8_t xi0 = (uint8_t)std::min<int>(15, a), xi1 = (uint8_t)std::min<int>(15, b);
        y->qs[j] = (uint8_t)(xi0 | (xi1 << 4));
    }
    return (y->d & 0x7C00u) != 0x7C00u;
}

void quantize(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads) {
    const int64_t nb = cols / kQK;
    const size_t rb = (size_t)nb * kBB;
    // Fail closed: a non-finite weight or an overflowing block is reported (the lowest index)
    // after every task has finished; the bytes written are still ggml's.
    std::atomic<int64_t> first_bad{INT64_MAX};
    for_row_tasks(n_threads, rows, 256, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t b = 0; b < nb; ++b) {
                const float *x = src + r * cols + b * kQK;
                lmt_block_q4_0 blk;
                bool ok = true;
                for (int j = 0; j < kQK; ++j) ok &= !is_nonfinite(x[j]);
                // Non-finite input is refused before ggml's arithmetic (its NaN handling would be
                // implementation-defined); the block is zeroed, the call throws below.
                if (ok) ok = quantize_block(x, &blk);
                else std::memset(&blk, 0, sizeof blk);
                if (!ok) {
                    int64_t cur = first_bad.load(), mine = r * nb + b;
                    while (mine < cur && !first_bad.compare_exchange_weak(cur, mine)) {
                    }
                }
                std::memcpy(dst + (size_t)r * rb + (size_t)b * kBB, &blk, kBB);
            }
        }
    });
    const int64_t bad = first_bad.load();
    if (bad == INT64_MAX) return;
    const int64_t r = bad / nb, b = bad % nb;
    const float *x = src + r * cols + b * kQK;
    for (int j = 0; j < kQK; ++j)
        if (is_nonfinite(x[j]))
            fail_arg("quantize (Q4_0): weights must be finite; found a non-finite weight at (" + std::to_string(r) +
                     ", " + std::to_string(b * kQK + j) + ")");
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.9g", (double)x[0]);
    fail_arg("quantize (Q4_0): row " + std::to_string(r) + ", block " + std::to_string(b) +
             " overflows Q4_0's fp16 scale (max |weight| / 8 >= 65520, the block would decode to inf/NaN); "
             "Q4_0 represents weights only up to about 5.24e5 in magnitude");
}

void dequantize(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads) {
    const int64_t nb = cols / kQK;
    const size_t rb = (size_t)nb * kBB;
    for_row_tasks(n_threads, rows, 256, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t b = 0; b < nb; ++b) {
                lmt_block_q4_0 blk;  // copy: src has no alignment guarantee
                std::memcpy(&blk, src + (size_t)r * rb + (size_t)b * kBB, kBB);
                const float d = f16_to_f32(blk.d);
                float *y = dst + r * cols + b * kQK;
                // ggml: (int)(q - 8) * d, one rounding (exact here).
                for (int i = 0; i < kQK; ++i) y[i] = (float)lmt_q4_0_q(blk.qs, i) * d;
            }
        }
    });
}

}  // namespace

void matvec_scalar(const Args &a, int64_t r0, int64_t r1) {
    const int64_t nb = a.cols / kQK;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *row = a.w + (size_t)r * a.row_stride;
        for (int64_t t = 0; t < a.T; ++t) {
            const float *x = a.x + t * a.cols;
            float acc[16] = {};
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t *blk = row + (size_t)b * kBB;
                uint16_t dh;
                std::memcpy(&dh, blk, 2);
                const float d = f16_to_f32(dh);
                const uint8_t *qs = blk + 2;
                const float *xb = x + b * kQK;
                for (int i = 0; i < kQK; ++i)
                    acc[i & 15] = std::fma((float)lmt_q4_0_q(qs, i) * d, xb[i], acc[i & 15]);
            }
            a.logits[t * a.rows + r] = hsum16(acc);
        }
    }
}

void matvec_i24_scalar(const I24Args &a, int64_t r0, int64_t r1) {
    const int64_t nb = a.cols / kQK;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *row = a.w + (size_t)r * a.row_stride;
        for (int64_t t = 0; t < a.T; ++t) {
            float acc[8] = {};
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t *blk = row + (size_t)b * kBB;
                uint16_t dh;
                std::memcpy(&dh, blk, 2);
                const int16_t *xa = a.a + t * a.cols + b * kQK;
                const uint8_t *xr = a.r + t * a.cols + b * kQK;
                int32_t S[8] = {};
                for (int i = 0; i < kQK; ++i) {
                    const int32_t q = lmt_q4_0_q(blk + 2, i);
                    S[i24_a_lane(i)] += 256 * q * xa[i24_a_pos(i)];
                    S[i >> 2] += q * xr[i];
                }
                const float e = f16_to_f32(dh) * a.sr[t * nb + b];
                for (int k = 0; k < 8; ++k) acc[k] = std::fma((float)S[k], e, acc[k]);
            }
            a.logits[t * a.rows + r] = hsum8(acc);
        }
    }
}

namespace {

// Round to nearest even for |v| < 2^51 (IEEE double, default rounding; no fast-math).
double round_even(double v) {
    const double magic = 6755399441055744.0;
    volatile double t = v + magic;
    return t - magic;
}

// The I24 activations of q4_0_kernels.hpp, in double: the same bytes for every ISA and thread
// count (T * cols elements, negligible against the weights).
// A row whose largest |x| is below 2^-60 is prepared as x * 2^k (exact, in double) with
// 2^k * max|x| in [1, 2), and its logits are multiplied by 2^-k afterwards (exact unless they
// underflow): otherwise sr = s / 256 would underflow f32 for such rows and their logits would be
// silently lost. Rows of ordinary magnitude have k = 0 (no scaling); a block far below its row's
// maximum can still underflow, costing less than 2^-100 of the row's scale.
void prepare_i24(const float *x, int64_t T, int64_t cols, int16_t *xa, uint8_t *xr, float *sr, int *row_exp) {
    const int64_t nb = cols / kQK;
    for (int64_t t = 0; t < T; ++t) {
        float rmax = 0.0f;
        for (int64_t i = 0; i < cols; ++i)
            if (!is_nonfinite(x[t * cols + i])) rmax = std::max(rmax, std::fabs(x[t * cols + i]));
        const int k = (rmax > 0.0f && rmax < 0x1p-60f) ? -std::ilogb(rmax) : 0;
        row_exp[t] = k;
        for (int64_t b = 0; b < nb; ++b) {
            const float *xb = x + t * cols + b * kQK;
            int16_t *ab = xa + t * cols + b * kQK;
            uint8_t *rb = xr + t * cols + b * kQK;
            float amax = 0.0f;
            bool nonfinite = false;
            for (int i = 0; i < kQK; ++i) {
                nonfinite |= is_nonfinite(xb[i]);
                amax = std::max(amax, std::fabs(xb[i]));
            }
            if (nonfinite || amax == 0.0f) {
                std::memset(ab, 0, kQK * sizeof(int16_t));
                std::memset(rb, 0, kQK);
                sr[t * nb + b] = nonfinite ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
                continue;
            }
            const double sc = std::ldexp(1.0, k), m = (double)amax * sc;
            const double step = m / 32767.0, inv = 32767.0 / m, rinv = 256.0 / step;
            for (int i = 0; i < kQK; ++i) {
                const double xv = (double)xb[i] * sc;
                const double av = std::min(32767.0, std::max(-32767.0, std::floor(xv * inv)));
                const double rv = std::min(255.0, std::max(0.0, round_even((xv - av * step) * rinv)));
                ab[i24_a_pos(i)] = (int16_t)av;
                rb[i] = (uint8_t)rv;
            }
            sr[t * nb + b] = (float)(step / 256.0);
        }
    }
}

// NaN payloads are not part of the canonical expression: where two NaNs meet in one logit (a NaN
// d and a NaN x, say), which payload survives depends on the operand order the compiler picked for
// a commutative multiply or add, in the scalar reference as in the SIMD kernels (GCC for aarch64
// swaps some). Every NaN logit is therefore written as the default quiet NaN, so the bytes agree
// on every ISA and compiler; non-finite stays non-finite. Rows [r0, r1) of every activation row.
static void canonical_nans(float *logits, int64_t rows, int64_t T, int64_t r0, int64_t r1) {
    const uint32_t qnan = 0x7FC00000u;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t r = r0; r < r1; ++r) {
            float *p = logits + t * rows + r;
            const uint32_t u = f32_bits(*p);
            if ((u & 0x7FFFFFFFu) > 0x7F800000u) std::memcpy(p, &qnan, 4);
        }
}

struct I24Scratch {
    std::vector<int16_t> a, ap;
    std::vector<uint8_t> r, rp, xp, xd;
    std::vector<float> sr, srp;
    std::vector<int> row_exp;
    std::vector<int32_t> c1;
    I24Split split;             // activation rows per path, outliers taken out (i24_outliers.hpp)
    std::vector<float> xg, lg;  // gathered F32 rows / the logits of a subset
};

// The canonical F32 weight at column c of a row, d * (q - 8) (exact), for the outlier add-back.
float weight_at(const uint8_t *row, int64_t c) {
    const uint8_t *blk = row + (size_t)(c / kQK) * kBB;
    uint16_t dh;
    std::memcpy(&dh, blk, 2);
    return (float)lmt_q4_0_q(blk + 2, (int)(c % kQK)) * f16_to_f32(dh);
}
Weights16 weights16(const MatvecCall &c) {
#if defined(LMTAIL_HAVE_X86)
    if (c.isa == Isa::Avx512) return weights16_avx512;
#endif
    (void)c;
    return nullptr;
}

// I24Args::c1 of activation row t: per block b, each lane's -8 * (256 * sum a + sum r) over A_k
// and B_k.
const int32_t *centring_lanes(const I24Args &a, int64_t t, int32_t *out) {
    const int64_t nb = a.cols / kQK;
    for (int64_t b = 0; b < nb; ++b) {
        const int16_t *xa = a.a + t * a.cols + b * kQK;
        const uint8_t *xr = a.r + t * a.cols + b * kQK;
        int32_t s[8] = {};
        for (int i = 0; i < kQK; ++i) s[i24_a_lane(i)] += 256 * xa[i24_a_pos(i)];
        for (int i = 0; i < kQK; ++i) s[i >> 2] += xr[i];
        for (int k = 0; k < 8; ++k) out[b * 8 + k] = -8 * s[k];
    }
    return out;
}

}  // namespace

#if defined(LMTAIL_HAVE_NEON)
// The dotprod records of I24Args::xd (q4_0_kernels.hpp): a copy of the prepared integers, the
// int16 a split into its signed high and unsigned low byte, plus each block's c1 lanes (c1:
// scratch of cols / 32 * 8).
void dot_layout(const I24Args &a, int32_t *c1, uint8_t *xd) {
    static const int kPerm[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
    const int64_t nb = a.cols / kQK;
    for (int64_t t = 0; t < a.T; ++t) {
        centring_lanes(a, t, c1);
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t *o = xd + (t * nb + b) * kI24DotRecord;
            const int16_t *xa = a.a + t * a.cols + b * kQK;
            for (int j = 0; j < kQK; ++j) {
                const int i = (j & 16) + kPerm[j & 15];  // weight at byte j of the A-lane order
                const int v = xa[i24_a_pos(i)];
                o[j] = (uint8_t)(int8_t)(v >> 8);  // arithmetic shift: floor(v / 256) in [-128, 127]
                o[32 + j] = (uint8_t)(v & 255);
            }
            std::memcpy(o + 64, a.r + t * a.cols + b * kQK, kQK);
            std::memcpy(o + 96, c1 + b * 8, 32);
        }
    }
}
#endif

namespace {

// The row-pair layout of I24Args::ap / rp / srp (q4_0_kernels.hpp): a copy of the prepared
// integers and scales, so every ISA sees the same ones.
void pair_layout(const I24Args &a, int16_t *ap, uint8_t *rp, float *srp) {
    const int64_t nb = a.cols / kQK;
    for (int64_t p = 0; p < a.T / 2; ++p) {
        const int64_t t = 2 * p, u = t + 1;
        for (int64_t b = 0; b < nb; ++b) {
            const int16_t *at = a.a + t * a.cols + b * kQK, *au = a.a + u * a.cols + b * kQK;
            const uint8_t *rt = a.r + t * a.cols + b * kQK, *ru = a.r + u * a.cols + b * kQK;
            int16_t *oa = ap + (p * nb + b) * 64;
            uint8_t *orr = rp + (p * nb + b) * 64;
            std::copy(at, at + 16, oa);
            std::copy(au, au + 16, oa + 16);
            std::copy(at + 16, at + 32, oa + 32);
            std::copy(au + 16, au + 32, oa + 48);
            std::copy(rt, rt + 32, orr);
            std::copy(ru, ru + 32, orr + 32);
        }
    }
    const int64_t pairs = a.T / 2;
    for (int64_t q = 0; q < (pairs + 3) / 4; ++q)
        for (int64_t b = 0; b < nb; ++b)
            for (int64_t j = 0; j < 8; ++j) {
                const int64_t t = 8 * q + j;
                srp[(q * nb + b) * 8 + j] = t < 2 * pairs ? a.sr[t * nb + b] : 0.0f;
            }
}

// The pass layout of I24Args::xp (q4_0_kernels.hpp): a copy of the prepared integers and scales.
void pass_layout(const I24Args &a, int64_t pass_rows, uint8_t *xp) {
    const int64_t nb = a.cols / kQK;
    for (int64_t t0 = 0; t0 < a.T; t0 += pass_rows) {
        const int64_t n = std::min(pass_rows, a.T - t0);
        for (int64_t b = 0; b < nb; ++b)
            for (int64_t t = 0; t < n; ++t) {
                uint8_t *o = xp + ((t0 * nb) + b * n + t) * kI24PassRecord;
                std::memcpy(o, a.a + (t0 + t) * a.cols + b * kQK, 64);
                std::memcpy(o + 64, a.r + (t0 + t) * a.cols + b * kQK, 32);
                const float s = a.sr[(t0 + t) * nb + b];
                for (int l = 0; l < 8; ++l) std::memcpy(o + 96 + 4 * l, &s, 4);
            }
    }
}

// A batch's kernel and arguments, set up once (activations prepared) and run per row task.
struct I24Run {
    I24Args a;
    void (*kernel)(const I24Args &, int64_t, int64_t);
};
struct F32Run {
    Args a;
    void (*kernel)(const Args &, int64_t, int64_t);
};

I24Run setup_i24(const MatvecCall &c, I24Scratch &xs, const float *x, int64_t T, float *logits) {
    const size_t n = (size_t)(T * c.cols);
    int16_t *xa = aligned64(xs.a, n);
    uint8_t *xr = aligned64(xs.r, n);
    float *sr = aligned64(xs.sr, n / kQK);
    if (xs.row_exp.size() < (size_t)T) xs.row_exp.resize((size_t)T);
    prepare_i24(x, T, c.cols, xa, xr, sr, xs.row_exp.data());
    I24Args a{c.w, c.rows, c.cols, c.row_stride, xa, xr, sr, T, logits};
    void (*kernel)(const I24Args &, int64_t, int64_t) = matvec_i24_scalar;
#if defined(LMTAIL_HAVE_X86)
    if (kernel_family(c.isa) == Isa::Avx2) {
        kernel = c.isa == Isa::AvxVnni ? matvec_i24_avxvnni : matvec_i24_avx2;
        if (T >= 2) {
            // Passes of near-equal size <= 8 (T = 9: 5 + 4, not 8 + 1).
            const int64_t passes = (T + 7) / 8;
            a.pass_rows = (T + passes - 1) / passes;
            uint8_t *xp = aligned64(xs.xp, (size_t)(T * (c.cols / kQK)) * kI24PassRecord);
            pass_layout(a, a.pass_rows, xp);
            a.xp = xp;
        }
    }
    if (c.isa == Isa::Avx512) {
        kernel = matvec_i24_avx512;
        if (T % 2) a.c1 = centring_lanes(a, T - 1, aligned64(xs.c1, (size_t)(c.cols / kQK) * 8));
        if (T >= 2) {
            int16_t *ap = aligned64(xs.ap, n);
            uint8_t *rp = aligned64(xs.rp, n);
            float *srp = aligned64(xs.srp, (size_t)((T / 2 + 3) / 4 * (c.cols / kQK) * 8));
            pair_layout(a, ap, rp, srp);
            a.ap = ap;
            a.rp = rp;
            a.srp = srp;
        }
    }
#endif
#if defined(LMTAIL_HAVE_NEON)
    if (c.isa == Isa::Neon) kernel = matvec_i24_neon;
    if (c.isa == Isa::Neon && c.dotprod) {
        uint8_t *xd = aligned64(xs.xd, (size_t)(T * (c.cols / kQK)) * kI24DotRecord);
        dot_layout(a, aligned64(xs.c1, (size_t)(c.cols / kQK) * 8), xd);
        a.xd = xd;
        kernel = matvec_i24_neon_dot;
    }
#endif
    return {a, kernel};
}

void undo_row_exp(const MatvecCall &c, const I24Scratch &xs, int64_t T, float *logits) {
    for (int64_t t = 0; t < T; ++t) {
        if (xs.row_exp[t] == 0) continue;
        const float undo = std::ldexp(1.0f, -xs.row_exp[t]);  // a power of two: exact scaling
        for (int64_t r = 0; r < c.rows; ++r) logits[t * c.rows + r] *= undo;
    }
}

// Rows per pool task (~240 KB at cols = 6656): amortises scheduling, balances two threads, and
// stays in L2 between the two kernels of a mixed batch.
constexpr int64_t kRowsPerTask = 64;

void run_i24(const MatvecCall &c, I24Scratch &xs, const float *x, int64_t T, float *logits) {
    const I24Run s = setup_i24(c, xs, x, T, logits);
    for_row_tasks(c.n_threads, c.rows, kRowsPerTask, [&](int64_t r0, int64_t r1) {
        s.kernel(s.a, r0, r1);
        i24_add_outliers(xs.split, weight_at, c.w, c.row_stride, c.rows, r0, r1, logits, weights16(c));
        canonical_nans(logits, c.rows, T, r0, r1);
    });
    undo_row_exp(c, xs, T, logits);
}

F32Run setup_f32(const MatvecCall &c, const float *x, int64_t T, float *logits) {
    const Args a{c.w, c.rows, c.cols, c.row_stride, x, T, logits};
    void (*kernel)(const Args &, int64_t, int64_t) = matvec_scalar;
#if defined(LMTAIL_HAVE_X86)
    if (kernel_family(c.isa) == Isa::Avx2) kernel = matvec_avx2;  // the F32 rows of an I24 batch
    if (c.isa == Isa::Avx512) kernel = matvec_avx512;
#endif
#if defined(LMTAIL_HAVE_NEON)
    if (c.isa == Isa::Neon) kernel = matvec_neon;
#endif
    return {a, kernel};
}

void run_f32(const MatvecCall &c, const float *x, int64_t T, float *logits) {
    const F32Run f = setup_f32(c, x, T, logits);
    for_row_tasks(c.n_threads, c.rows, kRowsPerTask, [&](int64_t r0, int64_t r1) {
        f.kernel(f.a, r0, r1);
        canonical_nans(logits, c.rows, T, r0, r1);
    });
}

// A batch with both kinds of rows in one pass over the weights: per row task the I24 kernel on
// the integer rows, then the F32 kernel on the outlier rows while the task's weights are in L2
// (two passes read the head from DRAM twice). Each logit is the same function of its own row.
void run_mixed(const MatvecCall &c, I24Scratch &xs) {
    const I24Split &sp = xs.split;
    const int64_t ni = (int64_t)sp.sel_int.size(), nf = (int64_t)sp.sel_f32.size();
    float *xg = xs.xg.data(), *lg = xs.lg.data();
    for (int64_t k = 0; k < nf; ++k)
        std::memcpy(xg + k * c.cols, c.x + sp.sel_f32[k] * c.cols, sizeof(float) * (size_t)c.cols);
    float *li = lg, *lf = lg + ni * c.rows;
    const I24Run s = setup_i24(c, xs, sp.int_rows(c.x), ni, li);
    const F32Run f = setup_f32(c, xg, nf, lf);
    for_row_tasks(c.n_threads, c.rows, kRowsPerTask, [&](int64_t r0, int64_t r1) {
        s.kernel(s.a, r0, r1);
        i24_add_outliers(sp, weight_at, c.w, c.row_stride, c.rows, r0, r1, li, weights16(c));
        canonical_nans(li, c.rows, ni, r0, r1);
        f.kernel(f.a, r0, r1);
        canonical_nans(lf, c.rows, nf, r0, r1);
    });
    undo_row_exp(c, xs, ni, li);
    i24_scatter(sp, li, c.logits, c.rows);
    for (int64_t k = 0; k < nf; ++k)
        std::memcpy(c.logits + sp.sel_f32[k] * c.rows, lf + k * c.rows, sizeof(float) * (size_t)c.rows);
}

void matvec(const MatvecCall &c) {
    if (ggml_q0f_dispatch(c, LMT_Q0F_GGML(q4_0_matvec_ggml_avx2), "Q4_0", kGgmlBuildsInt)) return;
    if (c.precision != Precision::I24) {
        run_f32(c, c.x, c.T, c.logits);
        return;
    }
    thread_local I24Scratch xs;
    // Rows with activation outliers, judged per 32-block (the block of Q4_0's I24 activations):
    // taken out and added back, or the F32 kernel (i24_outliers.hpp).
    i24_split(c.x, c.T, c.cols, (int)kQK, xs.split);
    const I24Split &sp = xs.split;
    const int64_t ni = (int64_t)sp.sel_int.size(), nf = (int64_t)sp.sel_f32.size();
    if (ni < c.T) {
        if ((int64_t)xs.xg.size() < c.T * c.cols) xs.xg.resize((size_t)(c.T * c.cols));
        if ((int64_t)xs.lg.size() < c.T * c.rows) xs.lg.resize((size_t)(c.T * c.rows));
    }
    if (ni > 0 && nf > 0) {
        run_mixed(c, xs);
        return;
    }
    if (ni > 0) {
        run_i24(c, xs, sp.int_rows(c.x), ni, c.logits);
        return;
    }
    run_f32(c, c.x, c.T, c.logits);
}

}  // namespace
}  // namespace q4_0

const CpuTypeImpl kCpuQ4_0{WeightType::Q4_0, precision_bit(Precision::F32) | precision_bit(Precision::I24) | LMT_Q0F_GGML_BIT,
                           Precision::I24, q4_0::matvec,
                           q4_0::quantize, q4_0::dequantize,
                           kGgmlBuildsInt, kGgmlQ0NotReproduced, precision_bit(Precision::I24)};

}  // namespace lmt::cpu
