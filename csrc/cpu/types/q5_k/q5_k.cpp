// Q5_K: the type-table row and the matvec dispatch: argument checks, activation preparation (I16), ISA selection, row split
// over threads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/ggml/kquant_ggml.hpp"
#include "cpu/i24_outliers.hpp"
#include "cpu/types/types.hpp"

namespace lmt::cpu {

namespace {

// Per-thread (per calling thread) scratch for the prepared activations: grown, never shrunk.
struct XI16Scratch {
    std::vector<int16_t> q;
    std::vector<float> sum;
    std::vector<float> dx;
    std::vector<uint8_t> r;    // I24
    std::vector<float> dxr;    // I24
    std::vector<int8_t> xd;    // I24 on Isa::NeonDot: k_dot_layout's records
    I24Split split;             // I24: the activation rows per kernel, outliers taken out
    std::vector<float> xg, lg;  // gathered F32 rows / the logits of a subset
};

#if defined(LMTAIL_HAVE_X86)
constexpr Weights16 kWeights16Avx512 = q5_k_weights16_avx512;
#else
constexpr Weights16 kWeights16Avx512 = nullptr;
#endif

// The canonical F32 weight at column c of a row (internal.hpp), for the I24 outlier add-back.
float q5_k_weight_at(const uint8_t *row, int64_t c) {
    const uint8_t *b = row + (size_t)(c / LMT_QK_K) * LMT_Q5K_BLOCK_BYTES;
    const int i = (int)(c % LMT_QK_K);
    return k_weight_at(b, i, lmt_q5k_q(b + 48, b + 16, i));
}

}  // namespace

void matvec_q5_k(const uint8_t *w, int64_t rows, int64_t cols, size_t row_stride, const float *x, int64_t T,
                 float *logits, int n_threads, Isa isa, Precision precision) {
    if (cols <= 0 || cols % LMT_QK_K != 0)
        fail_arg("matvec_q5_k: cols must be a positive multiple of 256; found " + std::to_string(cols));
    if (rows < 0 || T < 1)
        fail_arg("matvec_q5_k: need rows >= 0 and T >= 1; found rows=" + std::to_string(rows) +
                 " T=" + std::to_string(T));
    if (precision == Precision::Default) precision = Precision::I24;
    if (precision != Precision::F32 && precision != Precision::I16 && precision != Precision::I24)
        fail_arg("matvec_q5_k: unknown precision " + std::to_string((int)precision));
    const size_t row_bytes = (size_t)(cols / LMT_QK_K) * LMT_Q5K_BLOCK_BYTES;
    if (row_stride < row_bytes)
        fail_arg("matvec_q5_k: row stride " + std::to_string(row_stride) + " < row bytes " + std::to_string(row_bytes));
    if (rows == 0) return;
    const Isa ri = resolve_isa(isa);
    const Isa resolved = ri == Isa::NeonDot ? Isa::Neon : ri;  // the integer kernels (AvxVnni has its own)
    const Isa family = kernel_family(ri);                      // the F32 kernels
    [[maybe_unused]] const bool dotprod = ri == Isa::NeonDot;
    // 64 rows per task: ~290 KB of weights, large enough to amortise scheduling, small enough
    // that two threads finish within a few microseconds of each other.
    constexpr int64_t kRowsPerTask = 64;
    const int64_t n_tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;

    // F32 over activation rows x (Tn, cols) -> logits (Tn, rows).
    auto run_f32 = [&](const float *xs_, int64_t Tn, float *out) {
        const MatvecArgs a{w, rows, cols, row_stride, xs_, Tn, out};
        void (*kernel)(const MatvecArgs &, int64_t, int64_t) = nullptr;
        switch (family) {
#if defined(LMTAIL_HAVE_X86)
            case Isa::Avx512: kernel = matvec_q5_k_avx512; break;
            case Isa::Avx2: kernel = matvec_q5_k_avx2; break;
#endif
#if defined(LMTAIL_HAVE_NEON)
            case Isa::Neon: kernel = matvec_q5_k_neon; break;
#endif
            default: kernel = matvec_q5_k_scalar; break;
        }
        core::parallel_for(n_threads, n_tasks, [&](int64_t task) {
            const int64_t r0 = task * kRowsPerTask;
            kernel(a, r0, std::min(rows, r0 + kRowsPerTask));
        });
    };
    if (precision == Precision::F32) {
        run_f32(x, T, logits);
        return;
    }

    thread_local XI16Scratch xs;
    const bool res = precision == Precision::I24;
    // I24: rows with activation outliers: taken out and added back, or the F32 kernel
    // (i24_outliers.hpp). I16 runs every row as it is.
    I24Split &sp = xs.split;
    if (res) {
        i24_split(x, T, cols, LMT_QK_K, sp);
    } else {
        sp.sel_int.clear();
        sp.sel_f32.clear();
        sp.col.clear();
        sp.gathered = false;
        for (int64_t t = 0; t < T; ++t) sp.sel_int.push_back(t);
    }
    const int64_t ni = (int64_t)sp.sel_int.size();
    if (ni < T) {
        if ((int64_t)xs.xg.size() < T * cols) xs.xg.resize((size_t)(T * cols));
        if ((int64_t)xs.lg.size() < T * rows) xs.lg.resize((size_t)(T * rows));
    }
    // The integer path over activation rows x (Tn, cols) -> logits (Tn, rows).
    auto run_int = [&](const float *xs_, int64_t Tn, float *out) {
        const int64_t nb = cols / LMT_QK_K;
        if ((int64_t)xs.q.size() < Tn * cols) xs.q.resize((size_t)(Tn * cols));
        if ((int64_t)xs.sum.size() < Tn * nb * 8) xs.sum.resize((size_t)(Tn * nb * 8));
        if ((int64_t)xs.dx.size() < Tn * nb) xs.dx.resize((size_t)(Tn * nb));
        if (res && (int64_t)xs.r.size() < Tn * cols) xs.r.resize((size_t)(Tn * cols));
        if (res && (int64_t)xs.dxr.size() < Tn * nb) xs.dxr.resize((size_t)(Tn * nb));
        prepare_x_i16(xs_, Tn, cols, xs.q.data(), xs.sum.data(), xs.dx.data(), res ? xs.r.data() : nullptr,
                      res ? xs.dxr.data() : nullptr);
        if (resolved == Isa::Avx512)
            k512_activation_layout(Tn, cols, xs.q.data(), xs.sum.data(), xs.dx.data(), res ? xs.r.data() : nullptr,
                                   res ? xs.dxr.data() : nullptr);
        MatvecI16Args a{w, rows, cols, row_stride, xs.q.data(), xs.sum.data(), xs.dx.data(), Tn, out};
        if (res) {
            a.xr = xs.r.data();
            a.dxr = xs.dxr.data();
        }
        void (*kernel)(const MatvecI16Args &, int64_t, int64_t) = nullptr;
        switch (resolved) {
#if defined(LMTAIL_HAVE_X86)
            case Isa::Avx512: kernel = matvec_q5_k_i16_avx512; break;
            case Isa::Avx2: kernel = matvec_q5_k_i16_avx2; break;
            case Isa::AvxVnni: kernel = matvec_q5_k_i16_avxvnni; break;
#endif
#if defined(LMTAIL_HAVE_NEON)
            case Isa::Neon: kernel = matvec_q5_k_i16_neon; break;
#endif
            default: kernel = matvec_q5_k_i16_scalar; break;
        }
#if defined(LMTAIL_HAVE_NEON)
        if (dotprod && res) {
            if ((int64_t)xs.xd.size() < Tn * nb * kKDotRecord) xs.xd.resize((size_t)(Tn * nb * kKDotRecord));
            k_dot_layout(xs.q.data(), xs.r.data(), Tn, cols, xs.xd.data());
            a.xd = xs.xd.data();
            kernel = matvec_q5_k_i24_neon_dot;
        }
#endif
        core::parallel_for(n_threads, n_tasks, [&](int64_t task) {
            const int64_t r0 = task * kRowsPerTask, r1 = std::min(rows, r0 + kRowsPerTask);
            kernel(a, r0, r1);
            i24_add_outliers(sp, q5_k_weight_at, w, row_stride, rows, r0, r1, out,
                             resolved == Isa::Avx512 ? kWeights16Avx512 : nullptr);
        });
    };
    if (ni > 0) {
        float *out = ni == T ? logits : xs.lg.data();
        run_int(sp.int_rows(x), ni, out);
        if (out != logits) i24_scatter(sp, out, logits, rows);
    }
    for_row_subset(sp.sel_f32.data(), (int64_t)sp.sel_f32.size(), x, T, cols, logits, rows, xs.xg.data(),
                   xs.lg.data(), run_f32);
}

namespace {
void q5_k_matvec(const MatvecCall &c) {
    if (c.precision == Precision::Ggml) {
#if defined(LMTAIL_HAVE_X86)
        ggml_kquant_matvec(c, "Q5_K", q5_k_ggml_rows_avx2);
#else
        ggml_kquant_matvec(c, "Q5_K", nullptr);
#endif
        return;
    }
    matvec_q5_k(c.w, c.rows, c.cols, c.row_stride, c.x, c.T, c.logits, c.n_threads, c.dotprod ? Isa::NeonDot : c.isa,
                c.precision);
}
}  // namespace

const CpuTypeImpl kCpuQ5_K{WeightType::Q5_K,
                           precision_bit(Precision::F32) | precision_bit(Precision::I16) | precision_bit(Precision::I24) |
                               kGgmlKPrecisionBit,
                           Precision::I24, q5_k_matvec, quantize_q5_k, dequantize_q5_k,
                           kGgmlBuildsInt, kGgmlKNotReproduced,
                           precision_bit(Precision::I16) | precision_bit(Precision::I24)};

}  // namespace lmt::cpu
