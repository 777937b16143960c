// The (scale, min) K-quant quantiser shared by Q4_K and Q5_K: ggml's quantize_row_q4_K_ref /
// quantize_row_q5_K_ref (make_qkx2_quants per 32-weight sub-block, 6-bit scales and mins, fp16
// d and dmin), which differ only in the code range, the search grid and the packing of the codes.
// A type supplies a traits struct T: Block, kQMax, kSteps, kStretch0, kName ("Q5_K"), kLower
// ("q5_k"), kRange (the largest weight its fp16 d represents, for the error), pack(codes, out)
// and code(blk, sub_block, l).
//
// The bytes must equal the reference's, so this code is deliberately "literal":
//   * no FMA: the project builds with -ffp-contract=off, and every a*b+c below is two roundings;
//   * int -> float conversions happen exactly where the reference converts (e.g. w*l*l is
//     (w * float(l)) * float(l), never w * float(l*l));
//   * round-to-nearest uses the same "add 1.5*2^23 and read the mantissa bits" trick as the
//     reference, including what that trick yields outside its nominal range (|x| >= 2^22,
//     +/-inf, NaN). The trick is pure float addition plus a bit copy, so it is defined for
//     every input (no float->int conversion, hence no UB even for NaN);
//   * fail closed: a non-finite weight, or a block whose fp16 d or dmin overflows to inf (ggml
//     then writes a block that decodes to inf/NaN), throws ArgumentError after the whole call;
//     every other block is ggml's bytes;
//   * fp32 -> fp16 is IEEE round-to-nearest-even with overflow to inf and gradual underflow,
//     which is what ggml's portable converter computes (checked exhaustively over all 2^32
//     inputs during development).
// Dequantisation evaluates y = (d*sc)*q - (dmin*m), each product rounded to float (ggml's
// dequantize_row_*, gguf-py's numpy dequantiser). Rows are split over threads; the output does
// not depend on the count.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cpu/internal.hpp"
#include "lmtail/cpu.hpp"
#include "lmtail/kernel_abi.h"


// Contraction of a*b+c into an FMA would change the bytes. The build passes -ffp-contract=off
// for GCC/Clang; these pragmas keep this file exact even if compiled on its own.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

namespace lmt {
namespace cpu {
namespace qkx {

constexpr int kSubBlocks = LMT_Q5K_SUBBLOCKS;        // 8 sub-blocks per super-block
constexpr int kSubLen = LMT_QK_K / LMT_Q5K_SUBBLOCKS;  // 32 weights per sub-block
constexpr int kScaleMax = 63;                        // 6-bit sub-block scales and mins

// ---- bit helpers ---------------------------------------------------------------------------

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// IEEE binary16 -> binary32 (exact). NaN payloads are kept and made quiet, as a float multiply
// would do (ggml's converter ends with one), so even NaN scale fields decode like ggml's.
inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    if (exp == 0x1Fu) {  // inf / NaN
        const uint32_t quiet = man ? 0x00400000u : 0u;
        return bits_float(sign | 0x7F800000u | (man << 13) | quiet);
    }
    if (exp != 0) return bits_float(sign | ((exp + (127 - 15)) << 23) | (man << 13));
    if (man == 0) return bits_float(sign);  // +/-0
    // Subnormal half (man * 2^-24): move the leading one to the implicit-bit position.
    int32_t e = 1 + (127 - 15);
    while ((man & 0x400u) == 0) {
        man <<= 1;
        --e;
    }
    return bits_float(sign | (static_cast<uint32_t>(e) << 23) | ((man & 0x3FFu) << 13));
}


// Nearest integer as ggml computes it: x + 1.5*2^23 places round-half-even(x) in the low 22
// mantissa bits for |x| < 2^22. Outside that range (and for inf/NaN) the same bit extraction
// is still what the reference returns, so it is reproduced rather than "fixed".
inline int32_t round_magic(float x) {
    const float shifted = x + 12582912.0f;
    const uint32_t bits = float_bits(shifted);
    return static_cast<int32_t>(bits & 0x007FFFFFu) - 0x00400000;
}

inline uint8_t clamp_code(int32_t v, int32_t hi) {
    return static_cast<uint8_t>(v < 0 ? 0 : (v > hi ? hi : v));
}

// ---- one sub-block: (scale, min) fit -------------------------------------------------------

struct SubBlockFit {
    float scale;  // step of the codes
    float neg_min;  // the offset subtracted on decode (>= 0 unless the arithmetic degenerates)
};

// Weighted least-squares search for 32 values x with weights w, codes in [0, QMax]: start from
// the min/max grid, then try Steps + 1 grids of (QMax + Stretch0 + 0.1 s) steps over [lo, hi]
// (Q5_K: 31 - 0.5 + 0.1 s, s = 0..15; Q4_K: 15 - 1 + 0.1 s, s = 0..20),
// refit step and offset of each candidate code assignment by weighted least squares and keep
// the one with the smallest weighted squared error. lo is updated to the winning offset as the
// search goes, so later grids start from it (this is what the reference does; it matters for
// the bytes).
template <class T>
SubBlockFit fit_sub_block(const float *x, const float *w, uint8_t *codes) {
    constexpr int kQMax = T::kQMax;
    float lo = x[0];
    float hi = x[0];
    float w_total = w[0];
    float wx_total = w_total * x[0];
    for (int i = 1; i < kSubLen; ++i) {
        const float v = x[i];
        if (v < lo) lo = v;
        if (v > hi) hi = v;
        w_total += w[i];
        wx_total += w[i] * v;
    }
    if (lo > 0) lo = 0;  // the offset only ever subtracts
    if (hi == lo) {
        std::memset(codes, 0, kSubLen);
        return {0.0f, -lo};
    }

    float inv_step = static_cast<float>(kQMax) / (hi - lo);
    float step = 1 / inv_step;
    float best_err = 0;
    for (int i = 0; i < kSubLen; ++i) {
        codes[i] = clamp_code(round_magic(inv_step * (x[i] - lo)), kQMax);
        const float r = step * static_cast<float>(codes[i]) + lo - x[i];
        best_err += w[i] * (r * r);
    }

    uint8_t trial[kSubLen];
    constexpr int kSteps = T::kSteps;
    constexpr float kStretch0 = T::kStretch0;
    constexpr float kStretchStep = 0.1f;
    for (int s = 0; s <= kSteps; ++s) {
        // lo is the best offset so far (not the data minimum once a trial has won).
        inv_step = (kStretch0 + kStretchStep * static_cast<float>(s) + static_cast<float>(kQMax)) / (hi - lo);
        float s_l = 0, s_ll = 0, s_xl = 0;
        for (int i = 0; i < kSubLen; ++i) {
            const uint8_t c = clamp_code(round_magic(inv_step * (x[i] - lo)), kQMax);
            trial[i] = c;
            const float wl = w[i] * static_cast<float>(c);
            s_l += wl;
            s_ll += wl * static_cast<float>(c);
            s_xl += wl * x[i];
        }
        const float det = w_total * s_ll - s_l * s_l;
        if (!(det > 0)) continue;
        float t_step = (w_total * s_xl - wx_total * s_l) / det;
        float t_lo = (s_ll * wx_total - s_l * s_xl) / det;
        if (t_lo > 0) {
            t_lo = 0;
            t_step = s_xl / s_ll;
        }
        float err = 0;
        for (int i = 0; i < kSubLen; ++i) {
            const float r = t_step * static_cast<float>(trial[i]) + t_lo - x[i];
            err += w[i] * (r * r);
        }
        if (err < best_err) {
            std::memcpy(codes, trial, kSubLen);
            best_err = err;
            step = t_step;
            lo = t_lo;
        }
    }
    return {step, -lo};
}

// ---- one super-block -----------------------------------------------------------------------

// fp16 exponent field all ones: +/-inf or NaN.
inline bool half_is_nonfinite(uint16_t h) { return (h & 0x7C00u) == 0x7C00u; }

// Quantises one super-block (always writing ggml's bytes) and returns whether they are usable:
// false when an input is not finite or when the fp16 super-block scale d or min scale dmin
// overflowed (max sub-block step / 63 or max offset / 63 >= 65520, i.e. weights of roughly
// 4.1e6 below zero or T::kRange above): such a block decodes to inf/NaN, so the caller refuses it.
template <class T>
bool quantize_block(const float *x, typename T::Block *out) {
    constexpr int kQMax = T::kQMax;
    uint8_t codes[LMT_QK_K];
    float step[kSubBlocks];
    float offset[kSubBlocks];
    float w[kSubLen];

    float top_step = 0;    // largest sub-block step (steps are normally >= 0)
    float top_offset = 0;  // largest sub-block offset
    for (int j = 0; j < kSubBlocks; ++j) {
        const float *xs = x + kSubLen * j;
        float sq = 0;
        for (int i = 0; i < kSubLen; ++i) sq += xs[i] * xs[i];
        const float rms = std::sqrt(sq / static_cast<float>(kSubLen));
        for (int i = 0; i < kSubLen; ++i) w[i] = rms + std::fabs(xs[i]);
        const SubBlockFit fit = fit_sub_block<T>(xs, w, codes + kSubLen * j);
        step[j] = fit.scale;
        offset[j] = fit.neg_min;
        if (step[j] > top_step) top_step = step[j];
        if (offset[j] > top_offset) top_offset = offset[j];
    }

    // 6-bit sub-block scale/min codes relative to the largest ones. The rounded value goes
    // through uint8_t (wrapping) before the clamp to 63, exactly as in the reference.
    const float to_scale_code = top_step > 0 ? static_cast<float>(kScaleMax) / top_step : 0.0f;
    const float to_min_code = top_offset > 0 ? static_cast<float>(kScaleMax) / top_offset : 0.0f;
    uint8_t packed[12];
    std::memset(packed, 0, sizeof packed);
    for (int j = 0; j < kSubBlocks; ++j) {
        uint8_t sc = static_cast<uint8_t>(static_cast<uint32_t>(round_magic(to_scale_code * step[j])) & 0xFFu);
        uint8_t mn = static_cast<uint8_t>(static_cast<uint32_t>(round_magic(to_min_code * offset[j])) & 0xFFu);
        if (sc > kScaleMax) sc = kScaleMax;
        if (mn > kScaleMax) mn = kScaleMax;
        if (j < 4) {
            packed[j] |= sc;
            packed[j + 4] |= mn;
        } else {
            // Low nibbles in bytes 8..11, the top two bits in bits 6..7 of bytes 0..7.
            packed[j + 4] = static_cast<uint8_t>((sc & 0x0F) | ((mn & 0x0F) << 4));
            packed[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
            packed[j] |= static_cast<uint8_t>((mn >> 4) << 6);
        }
    }
    std::memcpy(out->scales, packed, sizeof packed);
    out->d = f32_to_f16_rne(top_step / static_cast<float>(kScaleMax));
    out->dmin = f32_to_f16_rne(top_offset / static_cast<float>(kScaleMax));

    // Re-derive the codes against the scales actually stored (fp16 d, 6-bit sc/m). A
    // sub-block whose effective step is zero keeps the codes from its fit.
    const float d_all = half_to_float(out->d);
    const float dmin_all = half_to_float(out->dmin);
    for (int j = 0; j < kSubBlocks; ++j) {
        const float dj = d_all * static_cast<float>(lmt_q5k_scale(out->scales, j));
        if (dj == 0) continue;
        const float mj = dmin_all * static_cast<float>(lmt_q5k_min(out->scales, j));
        const float *xs = x + kSubLen * j;
        uint8_t *cs = codes + kSubLen * j;
        for (int i = 0; i < kSubLen; ++i) cs[i] = clamp_code(round_magic((xs[i] + mj) / dj), kQMax);
    }

    T::pack(codes, out);
    bool finite = true;
    for (int i = 0; i < LMT_QK_K; ++i) finite &= (float_bits(x[i]) & 0x7F800000u) != 0x7F800000u;
    return finite && !half_is_nonfinite(out->d) && !half_is_nonfinite(out->dmin);
}

template <class T>
void dequantize_block(const typename T::Block *blk, float *y) {
    const float d_all = half_to_float(blk->d);
    const float dmin_all = half_to_float(blk->dmin);
    for (int j = 0; j < kSubBlocks; ++j) {
        const float dj = d_all * static_cast<float>(lmt_q5k_scale(blk->scales, j));
        const float mj = dmin_all * static_cast<float>(lmt_q5k_min(blk->scales, j));
        float *yj = y + kSubLen * j;
        for (int l = 0; l < 32; ++l) yj[l] = dj * static_cast<float>(T::code(blk, j, l)) - mj;
    }
}

// ---- floating-point environment -----------------------------------------------------------


// ---- argument checks and row threading -----------------------------------------------------

inline void check_shape(const char *fn, const char *type, const void *src, const void *dst, int64_t rows, int64_t cols) {
    if (rows < 0) {
        throw ArgumentError(std::string(fn) + ": expected rows >= 0, found rows=" + std::to_string(rows));
    }
    if (cols <= 0 || cols % LMT_QK_K != 0) {
        throw ArgumentError(std::string(fn) + ": expected cols to be a positive multiple of " +
                            std::to_string(LMT_QK_K) + " (" + type + " super-block), found cols=" +
                            std::to_string(cols));
    }
    if (rows > INT64_MAX / cols) {
        throw ArgumentError(std::string(fn) + ": expected rows*cols to fit in 64 bits, found rows=" +
                            std::to_string(rows) + " cols=" + std::to_string(cols));
    }
    if (rows > 0 && (src == nullptr || dst == nullptr)) {
        throw ArgumentError(std::string(fn) + ": expected non-null src and dst, found " +
                            (src == nullptr ? "src=null" : "dst=null"));
    }
}

// Runs body(row_begin, row_end) over [0, rows) split into contiguous row ranges. The thread
// count only changes which thread does a row, never what is computed for it.
template <typename Body>
void for_rows(int64_t rows, int64_t blocks_per_row, int64_t min_blocks_per_thread, int n_threads,
              const Body &body) {
    if (rows <= 0) return;
    int64_t want = n_threads > 0 ? n_threads : default_threads();
    if (want < 1) want = 1;
    const int64_t total_blocks = rows * blocks_per_row;
    const int64_t by_work = std::max<int64_t>(1, total_blocks / min_blocks_per_thread);
    const int64_t nt = std::min(want, std::min(rows, by_work));
    if (nt <= 1) {
        body(int64_t{0}, rows);
        return;
    }
    const int64_t base = rows / nt;
    const int64_t extra = rows % nt;
    auto range_begin = [&](int64_t t) { return t * base + std::min(t, extra); };

    std::vector<std::thread> workers;
    workers.reserve(static_cast<size_t>(nt - 1));
    int64_t t = 1;
    try {
        for (; t < nt; ++t) {
            const int64_t b = range_begin(t), e = range_begin(t + 1);
            workers.emplace_back([&body, b, e] { body(b, e); });
        }
    } catch (const std::system_error &) {
        // Could not start another thread: do the ranges not handed out on this thread.
        for (int64_t u = t; u < nt; ++u) body(range_begin(u), range_begin(u + 1));
    }
    body(range_begin(0), range_begin(1));
    for (auto &w : workers) w.join();
}


// ggml's reference quantiser of T's blocks over whole rows, failing closed as described above.
template <class T>
void quantize_rows(const float *src, uint8_t *dst, int64_t rows, int64_t cols, int n_threads) {
    const std::string fn = std::string("quantize_") + T::kLower;
    check_shape(fn.c_str(), T::kName, src, dst, rows, cols);
    const int64_t nb = cols / LMT_QK_K;
    const size_t row_bytes = static_cast<size_t>(nb) * sizeof(typename T::Block);
    // Fail closed: the first (lowest-index) block that would decode to inf/NaN is reported once
    // every worker has joined (an exception must not leave a worker thread).
    std::atomic<int64_t> first_bad{INT64_MAX};
    for_rows(rows, nb, 16, n_threads, [&](int64_t r0, int64_t r1) {
        const DefaultFpMode fp_mode;
        for (int64_t r = r0; r < r1; ++r) {
            const float *x = src + r * cols;
            uint8_t *row = dst + static_cast<size_t>(r) * row_bytes;
            for (int64_t b = 0; b < nb; ++b) {
                typename T::Block blk;
                if (!quantize_block<T>(x + b * LMT_QK_K, &blk)) {
                    int64_t cur = first_bad.load(), mine = r * nb + b;
                    while (mine < cur && !first_bad.compare_exchange_weak(cur, mine)) {
                    }
                }
                std::memcpy(row + static_cast<size_t>(b) * sizeof(typename T::Block), &blk, sizeof blk);
            }
        }
    });
    const int64_t bad = first_bad.load();
    if (bad == INT64_MAX) return;
    const int64_t r = bad / nb, b = bad % nb;
    const float *x = src + r * cols + b * LMT_QK_K;
    float lo = 0, hi = 0;
    for (int i = 0; i < LMT_QK_K; ++i) {
        if ((float_bits(x[i]) & 0x7F800000u) == 0x7F800000u) {
            throw ArgumentError(fn + ": weights must be finite; found a non-finite weight at (" +
                                std::to_string(r) + ", " + std::to_string(b * LMT_QK_K + i) + ")");
        }
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    char range[96];
    std::snprintf(range, sizeof range, "[%.9g, %.9g]", static_cast<double>(lo), static_cast<double>(hi));
    throw ArgumentError(fn + ": row " + std::to_string(r) + ", super-block " + std::to_string(b) + " (weights " +
                        range + ") overflows " + T::kName + "'s fp16 scales (d or dmin would be inf: the block "
                        "would decode to inf/NaN); " + T::kName + " represents weights only down to about "
                        "-4.13e6 and up to about " + T::kRange);
}

// ggml's dequantize_row_* of T over whole rows.
template <class T>
void dequantize_rows(const uint8_t *src, float *dst, int64_t rows, int64_t cols, int n_threads) {
    const std::string fn = std::string("dequantize_") + T::kLower;
    check_shape(fn.c_str(), T::kName, src, dst, rows, cols);
    const int64_t nb = cols / LMT_QK_K;
    const size_t row_bytes = static_cast<size_t>(nb) * sizeof(typename T::Block);
    for_rows(rows, nb, 1024, n_threads, [&](int64_t r0, int64_t r1) {
        const DefaultFpMode fp_mode;
        for (int64_t r = r0; r < r1; ++r) {
            const uint8_t *row = src + static_cast<size_t>(r) * row_bytes;
            float *y = dst + r * cols;
            for (int64_t b = 0; b < nb; ++b) {
                typename T::Block blk;  // copy: src carries no alignment guarantee
                std::memcpy(&blk, row + static_cast<size_t>(b) * sizeof(typename T::Block), sizeof blk);
                dequantize_block<T>(&blk, y + b * LMT_QK_K);
            }
        }
    });
}

}  // namespace qkx
}  // namespace cpu
}  // namespace lmt
