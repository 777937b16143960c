// Q8_0: the type-table row, the matvec dispatch (ISA selection, row split over threads) and
// ggml's quantiser / dequantiser.
//
// quantize_q8_0 writes what ggml_quantize_chunk(GGML_TYPE_Q8_0, ..., imatrix = NULL) writes
// (ggml's quantize_row_q8_0_ref), for every block it accepts:
//   amax = max |x|;  d = amax / 127 (f32);  id = d != 0 ? 1 / d : 0 (f32);
//   stored d = fp16(d) (round to nearest even);  q[i] = roundf(x[i] * id) (half away from 0).
// The q are computed from the f32 d, not the stored fp16 one, as ggml does. When 1 / d
// overflows (amax below ~3.7e-37) x * id is +-inf or NaN; ggml's float -> int8 conversion then
// yields 0, and so does this code (the stored d is 0 there anyway). Fail closed: a non-finite
// weight, or a block whose fp16 d overflows (|x| >= ~8.32e6, which would decode to inf/NaN),
// throws ArgumentError after the whole call; every other block is ggml's bytes.
// dequantize_q8_0: y = (float)q * d, exact (ggml's dequantize_row_q8_0).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <string>

#include "cpu/ggml/q0f_ggml.hpp"
#include "cpu/types/q8_0/q8_0.hpp"
#include "cpu/types/types.hpp"


namespace lmt::cpu {

namespace {

constexpr int kQ = LMT_Q8_0_BLOCK_ELEMS;



// One block; false when it must be refused (non-finite weight or fp16 d overflow).
bool quantize_block(const float *x, lmt_block_q8_0 *out) {
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < kQ; ++i) {
        finite &= !is_nonfinite(x[i]);
        amax = std::max(amax, std::fabs(x[i]));
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out->d = finite ? f32_to_f16_rne(d) : 0;
    for (int i = 0; i < kQ; ++i) {
        const float r = std::round(x[i] * id);  // |r| <= 127 whenever id is finite
        out->qs[i] = is_nonfinite(r) ? (int8_t)0 : (int8_t)(int)r;
    }
    return finite && (out->d & 0x7C00u) != 0x7C00u;
}

int64_t rows_per_task(int64_t cols, int64_t elems) { return std::max<int64_t>(1, elems / cols); }

}  // namespace

void quantize_q8_0(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads) {
    const int64_t nb = cols / kQ;
    const size_t rb = (size_t)nb * LMT_Q8_0_BLOCK_BYTES;
    // The lowest-index refused block is reported once every task is done.
    std::atomic<int64_t> first_bad{std::numeric_limits<int64_t>::max()};
    for_row_tasks(n_threads, rows, rows_per_task(cols, 1 << 16), [&](int64_t r0, int64_t r1) {
        const DefaultFpMode fp_mode;
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t b = 0; b < nb; ++b) {
                lmt_block_q8_0 blk;
                if (!quantize_block(src + r * cols + b * kQ, &blk)) {
                    int64_t cur = first_bad.load(), mine = r * nb + b;
                    while (mine < cur && !first_bad.compare_exchange_weak(cur, mine)) {
                    }
                }
                std::memcpy(dst + (size_t)r * rb + (size_t)b * LMT_Q8_0_BLOCK_BYTES, &blk, sizeof blk);
            }
    });
    const int64_t bad = first_bad.load();
    if (bad == std::numeric_limits<int64_t>::max()) return;
    const int64_t r = bad / nb, b = bad % nb;
    const float *x = src + r * cols + b * kQ;
    float amax = 0.0f;
    for (int i = 0; i < kQ; ++i) {
        if (is_nonfinite(x[i]))
            throw ArgumentError("quantize (Q8_0): weights must be finite; found a non-finite weight at (" +
                                std::to_string(r) + ", " + std::to_string(b * kQ + i) + ")");
        amax = std::max(amax, std::fabs(x[i]));
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.9g", (double)amax);
    throw ArgumentError("quantize (Q8_0): row " + std::to_string(r) + ", block " + std::to_string(b) +
                        " (max |weight| " + buf +
                        ") overflows Q8_0's fp16 scale (d = max/127 would be inf: the block would decode to "
                        "inf/NaN); Q8_0 represents weights only up to about 8.32e6 in magnitude");
}

void dequantize_q8_0(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads) {
    const int64_t nb = cols / kQ;
    const size_t rb = (size_t)nb * LMT_Q8_0_BLOCK_BYTES;
    for_row_tasks(n_threads, rows, rows_per_task(cols, 1 << 16), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t b = 0; b < nb; ++b) {
                lmt_block_q8_0 blk;
                std::memcpy(&blk, src + (size_t)r * rb + (size_t)b * LMT_Q8_0_BLOCK_BYTES, sizeof blk);
                const float d = f16_to_f32(blk.d);
                float *y = dst + r * cols + b * kQ;
                for (int i = 0; i < kQ; ++i) y[i] = (float)blk.qs[i] * d;
            }
    });
}

namespace {

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

void q8_0_matvec(const MatvecCall &c) {
    if (ggml_q0f_dispatch(c, LMT_Q0F_GGML(q8_0_matvec_ggml_avx2), "Q8_0", kGgmlBuildsInt)) return;
    const MatvecArgs a{c.w, c.rows, c.cols, c.row_stride, c.x, c.T, c.logits};
    void (*kernel)(const MatvecArgs &, int64_t, int64_t) = matvec_q8_0_scalar;
#if defined(LMTAIL_HAVE_X86)
    if (c.isa == Isa::Avx2) kernel = matvec_q8_0_avx2;
    if (c.isa == Isa::Avx512) kernel = matvec_q8_0_avx512;
#endif
#if defined(LMTAIL_HAVE_NEON)
    if (c.isa == Isa::Neon) kernel = matvec_q8_0_neon;
#endif
    // 64 rows per task: 64 * 34/32 * cols bytes (~450 KB at cols = 6656), enough to amortise
    // scheduling, small enough that the threads finish together.
    for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) {
        kernel(a, r0, r1);
        canonical_nans(c.logits, c.rows, c.T, r0, r1);
    });
}

}  // namespace

const CpuTypeImpl kCpuQ8_0{WeightType::Q8_0, precision_bit(Precision::F32) | LMT_Q0F_GGML_BIT, Precision::F32, q8_0_matvec,
                           quantize_q8_0, dequantize_q8_0,
                           kGgmlBuildsInt, kGgmlQ0NotReproduced};

}  // namespace lmt::cpu
