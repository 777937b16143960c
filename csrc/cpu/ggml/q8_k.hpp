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

}  // namespace lmt::cpu
