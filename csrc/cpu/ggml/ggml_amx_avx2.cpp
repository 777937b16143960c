// The AMX build's mul_mat (the formula is in ggml_amx.hpp). Integers are formed exactly from
// the codes (any grouping gives the same sums; the K types reuse the AVX2 build's exact block
// integers); the float updates run in ggml's order, one accumulator per (row, t). Compiled with
// AVX2 + FMA + F16C flags like the other emulations (the activation quantisers are AVX2 code), so
// the route can be forced on any such x86 CPU.
#include "cpu/ggml/ggml_amx.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/ggml/float_ggml_x86.hpp"
#include "cpu/ggml/kquant_ggml_x86.hpp"
#include "cpu/ggml/q0f_ggml_x86.hpp"
#include "cpu/ggml/q8_k.hpp"
#include "lmtail/blocks/q4_0.h"
#include "lmtail/blocks/q4_k.h"
#include "lmtail/blocks/q5_k.h"
#include "lmtail/blocks/q6_k.h"
#include "lmtail/blocks/q8_0.h"

namespace lmt::cpu {
namespace {

using ggml_x86::h2f;
using ggml_x86::hsum_i32_4;
using ggml_x86::hsum_i32_8;
using ggml_x86::sum8x8;

constexpr int kRows = 4;  // K types: weight rows per pass (four independent float chains hide FMA latency)

// Q4_0 / Q8_0, 8 weight rows in the 8 lanes (a short last group repeats its last row and stores
// only its own outputs): per block, each row's exact dot as 8 partial lanes, the 8 rows' sums
// gathered into one vector, then acc[t] = fma((float)S, d_w * d_x, acc[t]) for the 8 rows at
// once. Q4_0 multiplies the unsigned nibbles (maddubs: |pair| <= 3840, exact) and subtracts
// 8 * sum(x); Q8_0 sign-extends the even and odd bytes to int16 by shifts (exact for every byte,
// -128 included) against x prepared the same way. The decode avoids shuffles (sum8x8 already
// needs 14 per 8 rows; estimated to be the limit, not profiled).
template <bool kQ4>
void q0_rows(const MatvecCall &c, const ggml_x86::Q8_0Acts &xa, const std::vector<__m256i> &xp,
             const std::vector<int32_t> &xsum, int64_t r0, int64_t r1) {
    const int64_t nb = c.cols / 32;
    constexpr int kBytes = kQ4 ? LMT_Q4_0_BLOCK_BYTES : LMT_Q8_0_BLOCK_BYTES;
    thread_local std::vector<__m256> acc;
    acc.resize((size_t)c.T);
    const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
    const __m256i nib_shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);  // upper half: high nibbles
    for (int64_t r = r0; r < r1; r += 8) {
        const int n = (int)std::min<int64_t>(8, r1 - r);
        const uint8_t *w[8];
        for (int k = 0; k < 8; ++k) w[k] = c.w + (size_t)(r + std::min(k, n - 1)) * c.row_stride;
        for (int64_t t = 0; t < c.T; ++t) acc[(size_t)t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            __m256i q[8], q_odd[8];
            alignas(16) uint16_t dh[8];
            for (int k = 0; k < 8; ++k) {
                const uint8_t *blk = w[k] + b * kBytes;
                std::memcpy(&dh[k], blk, 2);
                if constexpr (kQ4) {
                    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + 2)));
                    q[k] = _mm256_and_si256(_mm256_srlv_epi32(v, nib_shift), m4);
                } else {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 2));
                    q[k] = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);
                    q_odd[k] = _mm256_srai_epi16(v, 8);
                }
            }
            const __m256 dw8 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)dh));
            for (int64_t t = 0; t < c.T; ++t) {
                const size_t xi = (size_t)(t * nb + b);
                __m256i p[8];
                if constexpr (kQ4) {
                    const __m256i xv = _mm256_loadu_si256((const __m256i *)xa.q[xi].qs);
                    for (int k = 0; k < 8; ++k) p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xv), ones);
                } else {
                    const __m256i xe = xp[2 * xi], xo = xp[2 * xi + 1];
                    for (int k = 0; k < 8; ++k)
                        p[k] = _mm256_add_epi32(_mm256_madd_epi16(q[k], xe), _mm256_madd_epi16(q_odd[k], xo));
                }
                __m256i s = sum8x8(p);
                if constexpr (kQ4) s = _mm256_sub_epi32(s, _mm256_set1_epi32(8 * xsum[xi]));
                acc[(size_t)t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw8, _mm256_set1_ps(xa.d[xi])),
                                                 acc[(size_t)t]);
            }
        }
        for (int64_t t = 0; t < c.T; ++t) {
            alignas(32) float out[8];
            _mm256_store_ps(out, acc[(size_t)t]);
            for (int k = 0; k < n; ++k) c.logits[t * c.rows + r + k] = out[k];
        }
    }
}

// The 512-bit rows where lmtail's own ISA resolves to avx512 (LMTAIL_ISA=avx2 keeps this file's
// rows: the reference the tests compare them with); its gather of the row scales needs the
// group's byte offsets in int32.
bool use_avx512_rows(const MatvecCall &c) {
    return resolve_isa(Isa::Auto) == Isa::Avx512 && c.row_stride <= (size_t)INT32_MAX / 16;
}

template <bool kQ4>
void q0_matvec(const MatvecCall &c) {
    const ggml_x86::Q8_0Acts xa(c.x, c.T, c.cols);
    const bool wide = use_avx512_rows(c);
    // Per activation block: its sum of codes (Q4_0, and Q8_0 on the 512-bit rows); for the AVX2
    // rows Q8_0's even and odd bytes sign-extended to int16.
    std::vector<__m256i> xp;
    std::vector<int32_t> xsum;
    for (const lmt_block_q8_0 &blk : xa.q) {
        if (kQ4 || wide) {
            int32_t sum = 0;
            for (int i = 0; i < 32; ++i) sum += blk.qs[i];
            xsum.push_back(sum);
        } else {
            const __m256i v = _mm256_loadu_si256((const __m256i *)blk.qs);
            xp.push_back(_mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8));
            xp.push_back(_mm256_srai_epi16(v, 8));
        }
    }
    for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) {
        if (wide)
            ggml_amx_q0_rows_avx512(kQ4, c, xa.q.data(), xa.d.data(), xsum.data(), r0, r1);
        else
            q0_rows<kQ4>(c, xa, xp, xsum, r0, r1);
    });
}

// K types: kRows weight rows at a time (a short last group repeats its last row and stores only
// its own outputs); each block is decoded once and dotted with every activation row.
template <WeightType kType>
void k_matvec(const MatvecCall &c) {
    const int64_t nb = c.cols / 256;
    std::vector<GgmlQ8K> xq((size_t)(c.T * nb));
    for (int64_t t = 0; t < c.T; ++t) ggml_quantize_row_q8_k(c.x + t * c.cols, xq.data() + t * nb, c.cols);
    constexpr bool kQ6 = kType == WeightType::Q6_K;
    if (!kQ6 && use_avx512_rows(c)) {
        // the 512-bit rows' activations: codes by sub-block pairs (0, 2), (1, 3), (4, 6), (5, 7)
        // and the 8 sub-block sums
        std::vector<uint8_t> xperm((size_t)(c.T * nb * 256));
        std::vector<int32_t> bs8((size_t)(c.T * nb * 8));
        std::vector<float> xd(xq.size());
        static constexpr int kOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
        for (size_t i = 0; i < xq.size(); ++i) {
            xd[i] = xq[i].d;
            for (int k = 0; k < 8; ++k) std::memcpy(&xperm[256 * i + 32 * k], xq[i].qs + 32 * kOrder[k], 32);
            for (int j = 0; j < 8; ++j) bs8[8 * i + j] = xq[i].bsums[2 * j] + xq[i].bsums[2 * j + 1];
        }
        for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) {
            ggml_amx_k45_rows_avx512(kType == WeightType::Q5_K, c, xd.data(), xperm.data(), bs8.data(), r0, r1);
        });
        return;
    }
    constexpr int kBytes = kType == WeightType::Q4_K ? LMT_Q4K_BLOCK_BYTES
                         : kType == WeightType::Q5_K ? LMT_Q5K_BLOCK_BYTES
                                                     : LMT_Q6K_BLOCK_BYTES;
    for_row_tasks(c.n_threads, c.rows, 64, [&](int64_t r0, int64_t r1) {
        thread_local std::vector<float> acc;
        acc.resize((size_t)(kRows * c.T));
        for (int64_t r = r0; r < r1; r += kRows) {
            const int n = (int)std::min<int64_t>(kRows, r1 - r);
            const uint8_t *w[kRows];
            for (int k = 0; k < kRows; ++k) w[k] = c.w + (size_t)(r + std::min(k, n - 1)) * c.row_stride;
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t b = 0; b < nb; ++b)
                for (int k = 0; k < kRows; ++k) {
                    const uint8_t *p = w[k] + b * kBytes;
                    float *a = acc.data() + k * c.T;
                    if constexpr (kQ6) {
                        const auto *blk = reinterpret_cast<const lmt_block_q6_K *>(p);
                        ggml_x86::Q6Codes q;
                        ggml_x86::q6k_decode(blk, q);
                        const float dw = h2f(blk->d);
                        for (int64_t t = 0; t < c.T; ++t) {
                            const GgmlQ8K &y = xq[(size_t)(t * nb + b)];
                            a[t] = std::fmaf((float)hsum_i32_8(ggml_x86::q6k_dot_lanes(q, &y)), dw * y.d, a[t]);
                        }
                    } else {
                        ggml_x86::K45Codes q;
                        ggml_x86::k45_decode<kType == WeightType::Q5_K>(p, q);
                        for (int64_t t = 0; t < c.T; ++t) {
                            const GgmlQ8K &y = xq[(size_t)(t * nb + b)];
                            ggml_x86::K45Ints o;
                            ggml_x86::k45_dot<false>(q, y, o);
                            const float s = std::fmaf((float)hsum_i32_8(o.sumi), q.d * y.d, a[t]);
                            a[t] = std::fmaf(-(float)hsum_i32_4(o.prod), q.dmin * y.d, s);
                        }
                    }
                }
            for (int k = 0; k < n; ++k)
                for (int64_t t = 0; t < c.T; ++t) c.logits[t * c.rows + r + k] = acc[(size_t)(k * c.T + t)];
        }
    });
}

// F16: the buffer's AVX-512 "tinygemm" (amx/mmq.cpp; F16 has no tile kernel). x stays f32 (no
// f16 rounding, unlike vec_dot), one 16-lane accumulator per (row, t) over cols in steps of 16,
// acc = fma(x, w, acc), then _mm512_reduce_add_ps (GCC's order: reduce16).
void f16_matvec(const MatvecCall &c) {
    if (use_avx512_rows(c))
        return for_row_tasks(c.n_threads, c.rows, 32, [&](int64_t r0, int64_t r1) { ggml_amx_f16_rows_avx512(c, r0, r1); });
    using ggml_x86::F16W;
    using ggml_x86::V16;
    // Up to 2 weight rows x 2 activation rows per pass: 8 independent accumulator halves (one
    // output's chain is the same whatever shares the pass).
    auto pass = [&](const uint8_t *const *w, int nr, const float *const *x, int nt, float *const *out) {
        V16 a[2][2];
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) a[i][j] = ggml_x86::v16_zero();
        for (int64_t k = 0; k < c.cols; k += 16) {
            for (int i = 0; i < nr; ++i) {
                const __m256 wl = F16W::load8(w[i], k), wh = F16W::load8(w[i], k + 8);
                for (int j = 0; j < nt; ++j)
                    a[i][j] = {_mm256_fmadd_ps(_mm256_loadu_ps(x[j] + k), wl, a[i][j].lo),
                               _mm256_fmadd_ps(_mm256_loadu_ps(x[j] + k + 8), wh, a[i][j].hi)};
            }
        }
        for (int i = 0; i < nr; ++i)
            for (int j = 0; j < nt; ++j) out[i][j * c.rows] = ggml_x86::reduce16(a[i][j]);
    };
    for_row_tasks(c.n_threads, c.rows, 32, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r += 2) {
            const int nr = r + 1 < r1 ? 2 : 1;
            const uint8_t *w[2] = {c.w + (size_t)r * c.row_stride, c.w + (size_t)(r + nr - 1) * c.row_stride};
            for (int64_t t = 0; t < c.T; t += 2) {
                const int nt = t + 1 < c.T ? 2 : 1;
                const float *x[2] = {c.x + t * c.cols, c.x + (t + nt - 1) * c.cols};
                float *out[2] = {c.logits + t * c.rows + r, c.logits + t * c.rows + r + 1};
                if (nr == 2 && nt == 2) pass(w, 2, x, 2, out);
                else if (nr == 2) pass(w, 2, x, 1, out);
                else if (nt == 2) pass(w, 1, x, 2, out);
                else pass(w, 1, x, 1, out);
            }
        }
    });
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
        case WeightType::F16:  // amx.cpp: alignment 16, its AVX-512 tinygemm (no tiles)
            return cols % 16 == 0;
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
        case WeightType::F16: return f16_matvec(c);
        default: break;
    }
    throw UnsupportedError("ggml_amx_matvec: this weight type has no AMX kernels in ggml");
}

}  // namespace lmt::cpu
