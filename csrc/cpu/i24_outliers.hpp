// I24 activation outliers: which activation rows take I24, with which elements taken out.
//
// I24 holds every element of a block to ~max|x_b| * 2^-24, so an element far below its block's
// max keeps few significant bits (the measured rule and its limits: cpu/internal.hpp, "I24
// activation outliers"). Real hidden states have a few outlier channels; instead of sending such a
// row to the type's slower F32 kernel, each block that trips the rule gives up its largest
// elements one at a time (at most 2 per 32-block, 4 per 256-block; the lowest index first among equals) until
// the rest passes. The row then runs I24 on x with those elements zeroed, and each taken-out
// element is added back per weight row in f32 with the type's canonical weight:
//     logit = I24(x_ord)                                  (unchanged kernels)
//     logit = fma(w(r, c_k), x[c_k], logit)               outliers in increasing column c_k
// A row that would need more in one block, or more than kI24OutliersPerRow in
// all runs the F32 kernel, as before. Decisions read only that row of x, so logits stay a pure
// function of (W, row): batch and thread invariant, the same on every ISA (the add-back is
// scalar code shared by all of them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/internal.hpp"

namespace lmt::cpu {

constexpr int kI24OutliersPerRow = 32;
constexpr int i24_outliers_per_block(int block) { return block >= 256 ? 4 : 2; }

// The routing of one call's activation rows (per calling thread; grown, never shrunk).
struct I24Split {
    std::vector<int64_t> sel_int, sel_f32;  // activation rows per kernel, increasing
    bool gathered = false;                  // the I24 rows are xo (copies), not x itself
    std::vector<float> xo;                  // (sel_int.size(), cols) with outliers zeroed
    std::vector<int64_t> start;             // I24 row k's outliers: [start[k], start[k + 1])
    std::vector<int32_t> col;
    std::vector<float> val;
    std::vector<int32_t> ucol;              // the distinct outlier columns, increasing
    std::vector<int32_t> uidx;              // per outlier: its index in ucol
    std::vector<float> pick;                // scratch |x| of one block

    const float *int_rows(const float *x) const { return gathered ? xo.data() : x; }
    bool any_outlier() const { return !col.empty(); }
};

// Appends row xr's outliers (increasing column) to s.col / s.val; false when the row needs F32.
inline bool i24_row_outliers(const float *xr, int64_t cols, int block, I24Split &s) {
    const size_t mark = s.col.size();
    const int per_block = i24_outliers_per_block(block);
    if ((int)s.pick.size() < block) s.pick.resize((size_t)block);
    float *v = s.pick.data();
    float rest_max = 0.0f;
    for (int64_t b0 = 0; b0 < cols; b0 += block) {
        bool nonfinite = false;
        for (int i = 0; i < block; ++i) {
            nonfinite |= is_nonfinite(xr[b0 + i]);
            v[i] = std::fabs(xr[b0 + i]);
        }
        if (nonfinite) continue;  // the I24 path already makes the row NaN
        const size_t first = s.col.size();
        for (int taken = 0;; ++taken) {
            float amax = 0.0f;
            int at = 0;
            for (int i = 0; i < block; ++i)
                if (v[i] > amax) amax = v[i], at = i;
            if (amax == 0.0f) break;
            int nz = 0, small = 0;
            for (int i = 0; i < block; ++i) {
                nz += v[i] != 0.0f;
                small += v[i] != 0.0f && v[i] * 8.0f < amax;  // v * 8 is exact or +inf (then not small)
            }
            if (2 * small <= nz) {
                rest_max = std::max(rest_max, amax);
                break;
            }
            if (taken == per_block || (int)(s.col.size() - mark) == kI24OutliersPerRow) {
                s.col.resize(mark);
                s.val.resize(mark);
                return false;
            }
            s.col.push_back((int32_t)(b0 + at));
            s.val.push_back(xr[b0 + at]);
            v[at] = 0.0f;
        }
        // Taken largest first; the add-back goes in increasing column (insertion sort, <= 4).
        for (size_t k = first + 1; k < s.col.size(); ++k)
            for (size_t m = k; m > first && s.col[m - 1] > s.col[m]; --m) {
                std::swap(s.col[m - 1], s.col[m]);
                std::swap(s.val[m - 1], s.val[m]);
            }
    }
    // Q4_0 scales a row whose largest |x| is below 2^-60 by a power of two; keep that to rows
    // without outliers (an outlier would not survive the scaling).
    if (s.col.size() > mark && rest_max < 0x1p-60f) {
        s.col.resize(mark);
        s.val.resize(mark);
        return false;
    }
    return true;
}

// Routes the T activation rows of x (T, cols): I24 (with outliers taken out) or F32. `block` is
// the activation block of the type's I24 format (256; Q4_0: 32); cols % block == 0.
inline void i24_split(const float *x, int64_t T, int64_t cols, int block, I24Split &s) {
    s.sel_int.clear();
    s.sel_f32.clear();
    s.start.assign(1, 0);
    s.col.clear();
    s.val.clear();
    for (int64_t t = 0; t < T; ++t) {
        if (i24_row_outliers(x + t * cols, cols, block, s)) {
            s.sel_int.push_back(t);
            s.start.push_back((int64_t)s.col.size());
        } else {
            s.sel_f32.push_back(t);
        }
    }
    // Rows of a batch usually share their outlier channels: each weight is decoded once per row.
    s.ucol.assign(s.col.begin(), s.col.end());
    std::sort(s.ucol.begin(), s.ucol.end());
    s.ucol.erase(std::unique(s.ucol.begin(), s.ucol.end()), s.ucol.end());
    s.uidx.resize(s.col.size());
    for (size_t j = 0; j < s.col.size(); ++j)
        s.uidx[j] = (int32_t)(std::lower_bound(s.ucol.begin(), s.ucol.end(), s.col[j]) - s.ucol.begin());
    const int64_t ni = (int64_t)s.sel_int.size();
    s.gathered = ni > 0 && (ni < T || s.any_outlier());
    if (!s.gathered) return;
    if ((int64_t)s.xo.size() < ni * cols) s.xo.resize((size_t)(ni * cols));
    for (int64_t k = 0; k < ni; ++k) {
        float *o = s.xo.data() + k * cols;
        std::memcpy(o, x + s.sel_int[k] * cols, sizeof(float) * (size_t)cols);
        for (int64_t j = s.start[k]; j < s.start[k + 1]; ++j) o[s.col[j]] = 0.0f;
    }
}

// The canonical f32 weight (r's row bytes, column c) of a type: what its F32 kernel multiplies.
using WeightAt = float (*)(const uint8_t *row, int64_t c);
// The same for 16 consecutive rows (an ISA's gathers; q*_outliers_avx512.cpp): w16[l] for row
// row0 + l * row_stride, or false (nothing written) where the rows need the scalar path.
using Weights16 = bool (*)(const uint8_t *row0, size_t row_stride, int64_t c, float *w16);

// Adds the outliers back into the I24 rows' logits out (n_int, rows) for weight rows [r0, r1)
// (inside the row task, while its weights are in cache). A row with outliers is never one that
// Q4_0 scales by a power of two (i24_row_outliers).
inline void i24_add_outliers(const I24Split &s, WeightAt weight_at, const uint8_t *w, size_t row_stride, int64_t rows,
                             int64_t r0, int64_t r1, float *out, Weights16 weights16 = nullptr) {
    if (!s.any_outlier()) return;
    const int64_t ni = (int64_t)s.sel_int.size(), nu = (int64_t)s.ucol.size();
    thread_local std::vector<float> wv;
    if ((int64_t)wv.size() < 16 * nu) wv.resize((size_t)(16 * nu));
    auto add = [&](int64_t r, int lanes) {  // rows r .. r + lanes with wv[16 u + l]
        for (int64_t k = 0; k < ni; ++k)
            for (int64_t j = s.start[k]; j < s.start[k + 1]; ++j) {
                const float v = s.val[j], *wu = &wv[16 * (size_t)s.uidx[j]];
                float *o = out + k * rows + r;
                for (int l = 0; l < lanes; ++l) o[l] = std::fma(wu[l], v, o[l]);
            }
    };
    int64_t r = r0;
    if (weights16 && row_stride < ((size_t)1 << 31) / 16) {
        for (; r + 16 <= r1; r += 16) {
            bool ok = true;
            for (int64_t u = 0; u < nu && ok; ++u) ok = weights16(w + (size_t)r * row_stride, row_stride, s.ucol[u], &wv[16 * u]);
            if (ok) {
                add(r, 16);
                continue;
            }
            for (int64_t q = r; q < r + 16; ++q) {
                for (int64_t u = 0; u < nu; ++u) wv[16 * u] = weight_at(w + (size_t)q * row_stride, s.ucol[u]);
                add(q, 1);
            }
        }
    }
    for (; r < r1; ++r) {
        for (int64_t u = 0; u < nu; ++u) wv[16 * u] = weight_at(w + (size_t)r * row_stride, s.ucol[u]);
        add(r, 1);
    }
}

// Writes the I24 rows' logits (n_int, rows) to their places in logits (T, rows) (when gathered).
inline void i24_scatter(const I24Split &s, const float *li, float *logits, int64_t rows) {
    for (size_t k = 0; k < s.sel_int.size(); ++k)
        std::memcpy(logits + s.sel_int[k] * rows, li + (int64_t)k * rows, sizeof(float) * (size_t)rows);
}

}  // namespace lmt::cpu
