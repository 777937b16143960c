// The AMX build's mul_mat (the formula is in ggml_amx.hpp). Integers are formed exactly from
// the codes (any order gives the same sums); the float updates run in ggml's order, one
// accumulator per (row, t). Compiled with AVX2 + FMA + F16C flags like the other emulations
// (the activation quantisers are AVX2 code), so the route can be forced on any such x86 CPU.
#include "cpu/ggml/ggml_amx.hpp"

#include <immintrin.h>

#include <cmath>
#include <vector>

#include "cpu/ggml/q0f_ggml_x86.hpp"
#include "cpu/ggml/q8_k.hpp"
#include "lmtail/blocks/q4_0.h"
#include "lmtail/blocks/q4_k.h"
#include "lmtail/blocks/q5_k.h"
#include "lmtail/blocks/q6_k.h"
#include "lmtail/blocks/q8_0.h"

namespace lmt::cpu {
namespace {

inline float h2f(lmt_f16_bits h) { return _cvtsh_ss(h); }

// The exact dot of n int8 codes with n int8 activations (n a multiple of 16).
inline int32_t idot(const int8_t *q, const int8_t *a, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; ++i) s += (int32_t)q[i] * (int32_t)a[i];
    return s;
}

// ---- Q8_0 / Q4_0: 32-weight blocks against ggml's x86 q8_0 activations ------------------------
template <bool kQ4>
void q0_rows(const MatvecCall &c, const ggml_x86::Q8_0Acts &xa, int64_t r0, int64_t r1) {
    const int64_t nb = c.cols / 32;
    constexpr int kBytes = kQ4 ? LMT_Q4_0_BLOCK_BYTES : LMT_Q8_0_BLOCK_BYTES;
    thread_local std::vector<float> acc;
    acc.assign((size_t)c.T, 0.0f);
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *w = c.w + (size_t)r * c.row_stride;
        for (int64_t t = 0; t < c.T; ++t) acc[(size_t)t] = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *blk = w + b * kBytes;
            alignas(32) int8_t q[32];
            lmt_f16_bits dh;
            std::memcpy(&dh, blk, 2);
            if constexpr (kQ4) {
                for (int i = 0; i < 32; ++i) q[i] = (int8_t)lmt_q4_0_q(blk + 2, i);
            } else {
                std::memcpy(q, blk + 2, 32);
            }
            const float dw = h2f(dh);
            for (int64_t t = 0; t < c.T; ++t) {
                const size_t xi = (size_t)(t * nb + b);
                const int32_t s = idot(q, xa.q[xi].qs, 32);
                acc[(size_t)t] = std::fmaf((float)s, dw * xa.d[xi], acc[(size_t)t]);
            }
        }
        for (int64_t t = 0; t < c.T; ++t) c.logits[t * c.rows + r] = acc[(size_t)t];
    }
}

// ---- K types: 256-weight blocks against q8_K (quantize_row_q8_K_ref) -------------------------
// One block's codes as int8 (Q6_K: minus 32), its sub-block scales and (Q4_K / Q5_K) mins.
struct KBlock {
    alignas(32) int8_t q[256];
    int32_t sc[16];  // 8 sub-blocks of 32 (Q4_K / Q5_K) or 16 of 16 (Q6_K)
    int32_t mn[8];
    float d, dmin;
};

inline void unpack_q4_k(const uint8_t *p, KBlock &k) {
    const auto *b = reinterpret_cast<const lmt_block_q4_K *>(p);
    for (int i = 0; i < 256; ++i) k.q[i] = (int8_t)lmt_q4k_q(b->qs, i);
    for (int j = 0; j < 8; ++j) {
        k.sc[j] = (int32_t)lmt_q5k_scale(b->scales, j);
        k.mn[j] = (int32_t)lmt_q5k_min(b->scales, j);
    }
    k.d = h2f(b->d);
    k.dmin = h2f(b->dmin);
}

inline void unpack_q5_k(const uint8_t *p, KBlock &k) {
    const auto *b = reinterpret_cast<const lmt_block_q5_K *>(p);
    for (int i = 0; i < 256; ++i) k.q[i] = (int8_t)lmt_q5k_q(b->qs, b->qh, i);
    for (int j = 0; j < 8; ++j) {
        k.sc[j] = (int32_t)lmt_q5k_scale(b->scales, j);
        k.mn[j] = (int32_t)lmt_q5k_min(b->scales, j);
    }
    k.d = h2f(b->d);
    k.dmin = h2f(b->dmin);
}

inline void unpack_q6_k(const uint8_t *p, KBlock &k) {
    const auto *b = reinterpret_cast<const lmt_block_q6_K *>(p);
    for (int i = 0; i < 256; ++i) k.q[i] = (int8_t)lmt_q6k_q(b->ql, b->qh, i);
    for (int g = 0; g < 16; ++g) k.sc[g] = (int32_t)b->scales[g];
    k.d = h2f(b->d);
    k.dmin = 0.0f;
}

template <WeightType kType>
void k_rows(const MatvecCall &c, const GgmlQ8K *xq, int64_t r0, int64_t r1) {
    const int64_t nb = c.cols / 256;
    constexpr bool kQ6 = kType == WeightType::Q6_K;
    constexpr int kBytes = kType == WeightType::Q4_K ? LMT_Q4K_BLOCK_BYTES
                         : kType == WeightType::Q5_K ? LMT_Q5K_BLOCK_BYTES
                                                     : LMT_Q6K_BLOCK_BYTES;
    thread_local std::vector<float> acc;
    acc.assign((size_t)c.T, 0.0f);
    KBlock k;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t *w = c.w + (size_t)r * c.row_stride;
        for (int64_t t = 0; t < c.T; ++t) acc[(size_t)t] = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
            if constexpr (kType == WeightType::Q4_K) unpack_q4_k(w + b * kBytes, k);
            else if constexpr (kType == WeightType::Q5_K) unpack_q5_k(w + b * kBytes, k);
            else unpack_q6_k(w + b * kBytes, k);
            for (int64_t t = 0; t < c.T; ++t) {
                const GgmlQ8K &y = xq[t * nb + b];
                int32_t s1 = 0;
                if constexpr (kQ6) {
                    for (int g = 0; g < 16; ++g) s1 += k.sc[g] * idot(k.q + 16 * g, y.qs + 16 * g, 16);
                } else {
                    for (int j = 0; j < 8; ++j) s1 += k.sc[j] * idot(k.q + 32 * j, y.qs + 32 * j, 32);
                }
                float a = std::fmaf((float)s1, k.d * y.d, acc[(size_t)t]);
                if constexpr (!kQ6) {
                    int32_t s2 = 0;
                    for (int j = 0; j < 8; ++j) s2 += k.mn[j] * ((int32_t)y.bsums[2 * j] + (int32_t)y.bsums[2 * j + 1]);
                    a = std::fmaf(-(float)s2, k.dmin * y.d, a);
                }
                acc[(size_t)t] = a;
            }
        }
        for (int64_t t = 0; t < c.T; ++t) c.logits[t * c.rows + r] = acc[(size_t)t];
    }
}

template <WeightType kType>
void k_matvec(const MatvecCall &c) {
    const int64_t nb = c.cols / 256;
    std::vector<GgmlQ8K> xq((size_t)(c.T * nb));
    for (int64_t t = 0; t < c.T; ++t) ggml_quantize_row_q8_k(c.x + t * c.cols, xq.data() + t * nb, c.cols);
    for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) { k_rows<kType>(c, xq.data(), r0, r1); });
}

template <bool kQ4>
void q0_matvec(const MatvecCall &c) {
    const ggml_x86::Q8_0Acts xa(c.x, c.T, c.cols);
    for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) { q0_rows<kQ4>(c, xa, r0, r1); });
}

}  // namespace

bool ggml_amx_takes(WeightType type, int64_t rows, int64_t cols) {
    if (rows % 32 != 0) return false;  // supports_op: op->ne[0] % (TILE_N * 2)
    switch (type) {
        case WeightType::Q4_0:
        case WeightType::Q8_0:
            return cols % 32 == 0;
        case WeightType::Q4_K:
        case WeightType::Q5_K:
        case WeightType::Q6_K:
            return cols % 256 == 0;
        default:
            return false;
    }
}

void ggml_amx_matvec(WeightType type, const MatvecCall &c) {
    switch (type) {
        case WeightType::Q4_0: return q0_matvec<true>(c);
        case WeightType::Q8_0: return q0_matvec<false>(c);
        case WeightType::Q4_K: return k_matvec<WeightType::Q4_K>(c);
        case WeightType::Q5_K: return k_matvec<WeightType::Q5_K>(c);
        case WeightType::Q6_K: return k_matvec<WeightType::Q6_K>(c);
        default: break;
    }
    throw UnsupportedError("ggml_amx_matvec: this weight type has no AMX kernels in ggml");
}

}  // namespace lmt::cpu
