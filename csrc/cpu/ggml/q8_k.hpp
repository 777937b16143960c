// precision="ggml" for the K-quant types: ggml's q8_K activation block and its quantiser.
//
// ggml's CPU from_float for GGML_TYPE_Q8_K on x86 is quantize_row_q8_K (arch/x86/quants.c), which
// calls quantize_row_q8_K_ref (ggml-quants.c, in libggml-base: built without FMA, so nothing is
// contracted). Per 256-block, in float32:
//   amax, max = the first element of largest |x| (strict >; NaN never wins), its signed value;
//   amax == 0 -> d = 0, qs = 0 (bsums left as they were: ggml does not write them; the dot
//   products multiply them by weights of d = 0 only in the tiled path, where we zero them);
//   iscale = -127 / max; q = min(127, nearest_int(iscale * x)) with nearest_int(f) = the low 23
//   bits of (f + 12582912) - 2^22; bsums[j] = sum of q over 16-element group j; d = 1 / iscale.
// Every thread count gives the same blocks (ggml splits from_float at block boundaries).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <climits>

namespace lmt::cpu {

struct GgmlQ8K {  // ggml's block_q8_K, byte for byte (292 bytes)
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
static_assert(sizeof(GgmlQ8K) == 292, "block_q8_K is 292 bytes");

inline int ggml_nearest_int(float f) {
    volatile float v = f + 12582912.0f;  // volatile: the rounding add must happen in float32
    float vv = v;
    int32_t i;
    std::memcpy(&i, &vv, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

// One activation row of cols (a multiple of 256) floats -> cols / 256 blocks.
inline void ggml_quantize_row_q8_k(const float *x, GgmlQ8K *y, int64_t cols) {
    for (int64_t b = 0; b < cols / 256; ++b, x += 256) {
        GgmlQ8K &o = y[b];
        float amax = 0.0f, mx = 0.0f;
        for (int j = 0; j < 256; ++j) {
            const float ax = std::fabs(x[j]);
            if (ax > amax) {
                amax = ax;
                mx = x[j];
            }
        }
        if (amax == 0.0f) {
            o.d = 0.0f;
            std::memset(o.qs, 0, sizeof o.qs);
            std::memset(o.bsums, 0, sizeof o.bsums);
            continue;
        }
        const float iscale = -127.0f / mx;
        for (int j = 0; j < 256; ++j) {
            const float p = iscale * x[j];
            const int v = ggml_nearest_int(p);
            o.qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += o.qs[16 * g + l];
            o.bsums[g] = (int16_t)s;
        }
        o.d = 1.0f / iscale;
    }
}

// The activation quantiser of CPU_REPACK's gemm (ggml_quantize_mat_q8_K_4x8, arch/x86/repack.cpp,
// AVX2 branch) for one row; it quantises 4 rows at a time, each independently. It differs from
// quantize_row_q8_K_ref in the scale's sign and in how non-finite values propagate:
//   per lane l (0..7) a running max M[l] of |x| over the elements 32 sb + 8 v + l, by MAXPS
//   (max(a, b) = a > b ? a : b), and a flag "M[l] is attained by a non-negative x" (ordered ==);
//   amax = the MAXPS tree ((M[k+4], M[k]) -> (0,2), (1,3) -> (0,1)); iscale = -127 / amax when a
//   lane with M[l] == amax has the flag, else 127 / amax (0 when amax == 0): for a block holding
//   both +amax and -amax the sign is the positive one's, where the ref takes the first one's;
//   q = int8 saturation of int16 saturation of cvtps(round_even(x * iscale)); d = 1 / iscale.
inline float ggml_maxps(float a, float b) { return a > b ? a : b; }

inline int8_t ggml_cvt_pack_i8(float v) {
    const float r = std::nearbyint(v);  // _mm256_round_ps(_MM_ROUND_NEAREST): the default RNE mode
    int32_t i = INT32_MIN;              // cvtps_epi32's "integer indefinite" for NaN / out of range
    if (r >= -2147483648.0f && r < 2147483648.0f) i = (int32_t)r;
    if (i < -32768) i = -32768;
    if (i > 32767) i = 32767;
    if (i < -128) i = -128;
    if (i > 127) i = 127;
    return (int8_t)i;
}

inline void ggml_quantize_row_q8_k_4x8(const float *x, GgmlQ8K *y, int64_t cols) {
    for (int64_t b = 0; b < cols / 256; ++b, x += 256) {
        GgmlQ8K &o = y[b];
        float M[8];
        bool flag[8];
        for (int l = 0; l < 8; ++l) {
            const float *e = x + l;
            M[l] = ggml_maxps(ggml_maxps(ggml_maxps(std::fabs(e[0]), std::fabs(e[8])), std::fabs(e[16])), std::fabs(e[24]));
            flag[l] = M[l] == e[0] || M[l] == e[8] || M[l] == e[16] || M[l] == e[24];
            for (int sb = 1; sb < 8; ++sb) {
                const float *v = e + 32 * sb;
                const float prev = M[l];
                for (int k = 0; k < 4; ++k) M[l] = ggml_maxps(M[l], std::fabs(v[8 * k]));
                flag[l] = (flag[l] && prev == M[l]) || M[l] == v[0] || M[l] == v[8] || M[l] == v[16] || M[l] == v[24];
            }
        }
        float m4[4];
        for (int k = 0; k < 4; ++k) m4[k] = ggml_maxps(M[k + 4], M[k]);
        const float m2a = ggml_maxps(m4[0], m4[2]), m2b = ggml_maxps(m4[1], m4[3]);
        const float amax = ggml_maxps(m2a, m2b);
        bool any = false;
        for (int l = 0; l < 8; ++l) any |= flag[l] && amax == M[l];
        float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
        if (any) iscale = amax != 0.0f ? -127.0f / amax : 0.0f;
        o.d = amax != 0.0f ? 1.0f / iscale : 0.0f;
        for (int j = 0; j < 256; ++j) o.qs[j] = ggml_cvt_pack_i8(x[j] * iscale);
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += o.qs[16 * g + l];
            o.bsums[g] = (int16_t)s;
        }
    }
}

}  // namespace lmt::cpu
