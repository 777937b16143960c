// Q4_K: the type-table row and the matvec dispatch (activation preparation for I24, ISA
// selection, row split over threads). The canonical expressions are in q4_k_internal.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/ggml/kquant_ggml.hpp"
#include "cpu/i24_outliers.hpp"
#include "cpu/types/q4_k/q4_k_internal.hpp"
#include "cpu/types/types.hpp"

namespace lmt::cpu {

namespace {

// Per calling thread: the prepared activations, grown, never shrunk.
struct XI24Scratch {
    std::vector<int16_t> q;
    std::vector<uint8_t> r;
    std::vector<float> sum, dx, dxr;
    std::vector<int8_t> xd;   // Isa::NeonDot: k_dot_layout's records
    I24Split split;           // the activation rows per kernel, outliers taken out
    std::vector<float> xg, lg;  // gathered F32 rows / the logits of a subset
};

// The canonical F32 weight at column c of a row (q4_k_internal.hpp), for the outlier add-back.
float q4_k_weight_at(const uint8_t *row, int64_t c) {
    const uint8_t *b = row + (size_t)(c / LMT_QK_K) * LMT_Q4K_BLOCK_BYTES;
    const int i = (int)(c % LMT_QK_K);
    return k_weight_at(b, i, lmt_q4k_q(b + 16, i));
}

// 64 rows per task (240 KB of weights at cols = 6656): large enough to amortise scheduling,
// small enough that two threads finish close together.
constexpr int64_t kRowsPerTask = 64;

// F32 over activation rows x (T, cols) -> logits (T, rows).
void run_f32(const MatvecCall &c, const float *x, int64_t T, float *logits) {
    const MatvecArgs a{c.w, c.rows, c.cols, c.row_stride, x, T, logits};
    void (*kernel)(const MatvecArgs &, int64_t, int64_t) = matvec_q4_k_scalar;
    switch (kernel_family(c.isa)) {  // the F32 rows of an I24 batch on AvxVnni run AVX2's kernel
#if defined(LMTAIL_HAVE_X86)
        case Isa::Avx512: kernel = matvec_q4_k_avx512; break;
        case Isa::Avx2: kernel = matvec_q4_k_avx2; break;
#endif
#if defined(LMTAIL_HAVE_NEON)
        case Isa::Neon: kernel = matvec_q4_k_neon; break;
#endif
        default: break;
    }
    for_row_tasks(c.n_threads, c.rows, kRowsPerTask, [&](int64_t r0, int64_t r1) { kernel(a, r0, r1); });
}

// I24 over activation rows x (T, cols) -> logits (T, rows), xs.split's outliers added back.
void run_i24(const MatvecCall &c, XI24Scratch &xs, const float *x, int64_t T, float *logits) {
    Weights16 w16 = nullptr;
#if defined(LMTAIL_HAVE_X86)
    if (c.isa == Isa::Avx512) w16 = q4_k_weights16_avx512;
#endif
    const int64_t nb = c.cols / LMT_QK_K, n = T * c.cols;
    if ((int64_t)xs.q.size() < n) xs.q.resize((size_t)n);
    if ((int64_t)xs.r.size() < n) xs.r.resize((size_t)n);
    if ((int64_t)xs.sum.size() < T * nb * 8) xs.sum.resize((size_t)(T * nb * 8));
    if ((int64_t)xs.dx.size() < T * nb) xs.dx.resize((size_t)(T * nb));
    if ((int64_t)xs.dxr.size() < T * nb) xs.dxr.resize((size_t)(T * nb));
    prepare_x_i16(x, T, c.cols, xs.q.data(), xs.sum.data(), xs.dx.data(), xs.r.data(), xs.dxr.data());
    if (c.isa == Isa::Avx512)
        k512_activation_layout(T, c.cols, xs.q.data(), xs.sum.data(), xs.dx.data(), xs.r.data(), xs.dxr.data());
    MatvecI16Args a{c.w, c.rows, c.cols, c.row_stride, xs.q.data(), xs.sum.data(), xs.dx.data(), T, logits};
    a.xr = xs.r.data();
    a.dxr = xs.dxr.data();
    void (*kernel)(const MatvecI16Args &, int64_t, int64_t) = matvec_q4_k_i24_scalar;
    switch (c.isa) {
#if defined(LMTAIL_HAVE_X86)
        case Isa::Avx512: kernel = matvec_q4_k_i24_avx512; break;
        case Isa::Avx2: kernel = matvec_q4_k_i24_avx2; break;
        case Isa::AvxVnni: kernel = matvec_q4_k_i24_avxvnni; break;
#endif
#if defined(LMTAIL_HAVE_NEON)
        case Isa::Neon: kernel = matvec_q4_k_i24_neon; break;
#endif
        default: break;
    }
#if defined(LMTAIL_HAVE_NEON)
    if (c.dotprod) {
        if ((int64_t)xs.xd.size() < nb * T * kKDotRecord) xs.xd.resize((size_t)(nb * T * kKDotRecord));
        k_dot_layout(xs.q.data(), xs.r.data(), T, c.cols, xs.xd.data());
        a.xd = xs.xd.data();
        kernel = matvec_q4_k_i24_neon_dot;
    }
#endif
    for_row_tasks(c.n_threads, c.rows, kRowsPerTask, [&](int64_t r0, int64_t r1) {
        kernel(a, r0, r1);
        i24_add_outliers(xs.split, q4_k_weight_at, c.w, c.row_stride, c.rows, r0, r1, logits, w16);
    });
}

void q4_k_matvec(const MatvecCall &c) {
    if (c.precision == Precision::Ggml) {
#if defined(LMTAIL_HAVE_X86)
        // llama.cpp repacks a Q4_K weight with rows % 8 == 0 (CPU_REPACK, its default on AVX2).
        if (c.rows % 8 == 0)
            ggml_kquant_matvec(c, "Q4_K", q4_k_ggml_repack_rows_avx2, true);
        else
            ggml_kquant_matvec(c, "Q4_K", q4_k_ggml_rows_avx2);
#else
        ggml_kquant_matvec(c, "Q4_K", nullptr);
#endif
        return;
    }
    if (c.precision != Precision::I24) {
        run_f32(c, c.x, c.T, c.logits);
        return;
    }
    thread_local XI24Scratch xs;
    // Rows with activation outliers: taken out and added back, or the F32 kernel (i24_outliers.hpp).
    i24_split(c.x, c.T, c.cols, LMT_QK_K, xs.split);
    const I24Split &sp = xs.split;
    const int64_t ni = (int64_t)sp.sel_int.size();
    if (ni < c.T) {
        if ((int64_t)xs.xg.size() < c.T * c.cols) xs.xg.resize((size_t)(c.T * c.cols));
        if ((int64_t)xs.lg.size() < c.T * c.rows) xs.lg.resize((size_t)(c.T * c.rows));
    }
    if (ni > 0) {
        float *out = ni == c.T ? c.logits : xs.lg.data();
        run_i24(c, xs, sp.int_rows(c.x), ni, out);
        if (out != c.logits) i24_scatter(sp, out, c.logits, c.rows);
    }
    for_row_subset(sp.sel_f32.data(), (int64_t)sp.sel_f32.size(), c.x, c.T, c.cols, c.logits, c.rows, xs.xg.data(),
                   xs.lg.data(), [&](const float *x, int64_t T, float *out) { run_f32(c, x, T, out); });
}

}  // namespace

const CpuTypeImpl kCpuQ4_K{WeightType::Q4_K,
                           precision_bit(Precision::F32) | precision_bit(Precision::I24) | kGgmlKPrecisionBit,
                           Precision::I24, q4_k_matvec, quantize_q4_k, dequantize_q4_k,
                           kGgmlBuildsInt, kGgmlKNotReproduced, precision_bit(Precision::I24)};

}  // namespace lmt::cpu
