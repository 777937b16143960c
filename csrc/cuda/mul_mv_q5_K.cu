// Q5_K matvec for T >= 1 activation rows with f32 activations (ggml's CUDA path quantises them to
// q8_1; lmtail does not). One warp per weight row; lane l owns 8 weights of every 256-weight
// block (sub-block l/4, offset 8*(l%4)), so one block's 176 bytes are read by the whole warp in
// three small coalesced loads, and each weight is decoded once for all T activation rows.
#include "common.cuh"
#include "launch.hpp"

#include <cstdlib>

namespace lmt::cuda {

// Lane l of a warp owns 8 weights of every 256-weight block: sub-block j = l/4, slice k = l%4.
// A warp computes R consecutive rows so each lane's 8 activations per block are loaded once
// (from L1) for R rows: x traffic, not weight traffic, limits a one-row-per-warp kernel.
template <int T, int R>
__global__ void __launch_bounds__(128) mul_mv_q5_K_f32(const uint8_t *__restrict__ w, size_t row_stride, int rows,
                                                       int cols, const float *__restrict__ x,
                                                       float *__restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5)) * R;
    if (row0 >= rows) return;
    const int j = lane >> 2, k = lane & 3;
    const int g = j >> 1, upper = j & 1;
    const int jj = j & 3, hi_sc = j >> 2;  // scale byte index and whether it is a split 6-bit value
    const int qshift = 2 * g + upper;
    const int i0 = 32 * j + 8 * k;
    const int nb = cols / LMT_QK_K;
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
    // Software pipeline: block b+1's bytes are in flight while block b is decoded and applied.
    const uint8_t *rowp[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rowp[r] = w + (size_t)(row0 + r < rows ? row0 + r : rows - 1) * row_stride;
    uint4 hd[R];
    uint2 qh[R], ql[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        hd[r] = __ldg(reinterpret_cast<const uint4 *>(rowp[r]));
        qh[r] = __ldg(reinterpret_cast<const uint2 *>(rowp[r] + 16 + 8 * k));
        ql[r] = __ldg(reinterpret_cast<const uint2 *>(rowp[r] + 48 + 32 * g + 8 * k));
    }
    for (int b = 0; b < nb; ++b) {
        uint4 hd_n[R];
        uint2 qh_n[R], ql_n[R];
        const int bn = b + 1 < nb ? b + 1 : b;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t *blk = rowp[r] + (size_t)bn * LMT_Q5K_BLOCK_BYTES;
            hd_n[r] = __ldg(reinterpret_cast<const uint4 *>(blk));
            qh_n[r] = __ldg(reinterpret_cast<const uint2 *>(blk + 16 + 8 * k));
            ql_n[r] = __ldg(reinterpret_cast<const uint2 *>(blk + 48 + 32 * g + 8 * k));
        }
        float xv[T][8];
#pragma unroll
        for (int t = 0; t < T; ++t) {
            const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)t * cols + b * LMT_QK_K + i0);
            const float4 xa = __ldg(xp), xb = __ldg(xp + 1);
            xv[t][0] = xa.x; xv[t][1] = xa.y; xv[t][2] = xa.z; xv[t][3] = xa.w;
            xv[t][4] = xb.x; xv[t][5] = xb.y; xv[t][6] = xb.z; xv[t][7] = xb.w;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint4 head = hd[r];
            const uint32_t b0 = (head.y >> (8 * jj)) & 0xFFu;   // scales[jj]
            const uint32_t b1 = (head.z >> (8 * jj)) & 0xFFu;   // scales[jj + 4]
            const uint32_t b2 = (head.w >> (8 * jj)) & 0xFFu;   // scales[jj + 8]
            const uint32_t sc = hi_sc ? ((b2 & 0xFu) | ((b0 >> 6) << 4)) : (b0 & 63u);
            const uint32_t mn = hi_sc ? ((b2 >> 4) | ((b1 >> 6) << 4)) : (b1 & 63u);
            const float d = __half2float(__ushort_as_half((unsigned short)(head.x & 0xFFFFu)));
            const float dmin = __half2float(__ushort_as_half((unsigned short)(head.x >> 16)));
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            const uint32_t qlw[2] = {ql[r].x, ql[r].y}, qhw[2] = {qh[r].x, qh[r].y};
#pragma unroll
            for (int wi = 0; wi < 2; ++wi) {
                // Four 5-bit weights per 32-bit word, then each to float without I2F (a
                // quarter-rate instruction that bounded the first version at 0.95 ms): the
                // byte goes under exponent 2^23 (PRMT) and 2^23 is subtracted, exactly q.
                const uint32_t q4 = ((qlw[wi] >> (4 * upper)) & 0x0F0F0F0Fu) | (((qhw[wi] >> qshift) & 0x01010101u) << 4);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float qf = __uint_as_float(__byte_perm(q4, 0x4B000000u, 0x7540u | (uint32_t)e)) - 8388608.0f;
                    const float wv = fmaf(qf, d1, -m1);
#pragma unroll
                    for (int t = 0; t < T; ++t) acc[r][t] = fmaf(wv, xv[t][4 * wi + e], acc[r][t]);
                }
            }
            hd[r] = hd_n[r];
            qh[r] = qh_n[r];
            ql[r] = ql_n[r];
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) {
            float a = acc[r][t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xFFFFFFFFu, a, o);
            if (lane == 0 && row0 + r < rows) y[(size_t)t * rows + row0 + r] = a;
        }
}

template <int T, int R>
static void launch_t(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, float *y,
                     cudaStream_t stream) {
    const int warps = 4;
    const dim3 grid((rows + warps * R - 1) / (warps * R)), block(32 * warps);
    mul_mv_q5_K_f32<T, R><<<grid, block, 0, stream>>>(w, row_stride, rows, cols, x, y);
}

void launch_mul_mv_q5_K(const uint8_t *w, size_t row_stride, int rows, int cols, const float *x, int T, float *y,
                        cudaStream_t stream) {
    for (int t0 = 0; t0 < T; t0 += 8) {
        const int tg = T - t0 < 8 ? T - t0 : 8;
        const float *xs = x + (size_t)t0 * cols;
        float *ys = y + (size_t)t0 * rows;
        static const int r1 = [] {
            const char *e = std::getenv("LMTAIL_CUDA_R1");  // tuning knob for the T = 1 rows per warp
            return e ? std::atoi(e) : 4;
        }();
        switch (tg) {
            case 1:
                if (r1 == 1) launch_t<1, 1>(w, row_stride, rows, cols, xs, ys, stream);
                else if (r1 == 2) launch_t<1, 2>(w, row_stride, rows, cols, xs, ys, stream);
                else if (r1 == 8) launch_t<1, 8>(w, row_stride, rows, cols, xs, ys, stream);
                else launch_t<1, 4>(w, row_stride, rows, cols, xs, ys, stream);
                break;
            case 2: launch_t<2, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 3: launch_t<3, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 4: launch_t<4, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 5: launch_t<5, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 6: launch_t<6, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            case 7: launch_t<7, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
            default: launch_t<8, 4>(w, row_stride, rows, cols, xs, ys, stream); break;
        }
    }
    LMT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lmt::cuda
