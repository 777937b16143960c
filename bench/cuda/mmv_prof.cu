// Development probe for the Q5_K head matvec (not built by CMake): every named LMTAIL_CUDA_MMV
// variant against an f64 reference and against variant a (all rows, output poisoned first), then
// device time by CUDA events, medians over interleaved rounds so that drift hits every variant
// alike, plus read-only bandwidth probes over the same 924.6 MB buffer (a linear sweep and the
// 16-row x 176-byte tile pattern the kernels use) and prep_x alone.
// Build (repo root): nvcc -O3 -std=c++17 -arch=sm_90 --fmad=false -Icsrc/include -Icsrc -Icsrc/cuda -Ibench/cuda
//   bench/cuda/mmv_prof.cu -o /tmp/mmv_prof
// Run: /tmp/mmv_prof REPS variant...   (e.g. /tmp/mmv_prof 31 a s16b1 i16p2)
#include "mul_mv_q5_K_variants.cu"
using namespace lmt::cuda::bench;

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace lmt::cuda {
namespace {

__global__ void probe_linear(const uint4 *__restrict__ p, size_t n, uint32_t *out) {
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = ldg_na(reinterpret_cast<const uint8_t *>(p + i + u * stride));
#pragma unroll
        for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = ldg_na(reinterpret_cast<const uint8_t *>(p + i));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) out[0] = acc;
}

// Each warp reads 16-row tiles block column by block column (176 contiguous bytes per row), four
// columns in flight: the access pattern of v2/v3 without any arithmetic.
__global__ void probe_tiles(const uint8_t *__restrict__ w, int rows, int nb, size_t rs, uint32_t *out) {
    const int lane = threadIdx.x & 31;
    const int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, GW = (gridDim.x * blockDim.x) >> 5;
    const int n_tiles = rows / 16;
    uint32_t acc = 0;
    for (int t = gw; t < n_tiles; t += GW) {
        const uint8_t *base = w + (size_t)t * 16 * rs;
        for (int kb = 0; kb < nb; kb += 4) {
            uint4 v[4][6];
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int j = 0; j < 6; ++j) {
                    const int c = lane + 32 * j, r = c / 11, q = c - r * 11;
                    v[u][j] = (c < 176 && kb + u < nb) ? ldg_na(base + (size_t)r * rs + (kb + u) * 176 + q * 16)
                                                       : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int j = 0; j < 6; ++j) acc ^= v[u][j].x ^ v[u][j].y ^ v[u][j].z ^ v[u][j].w;
        }
    }
    if (acc == 0x12345678u) out[0] = acc;
}

// The access pattern of mmv_t1s without arithmetic: per warp step, 4 streams (2 rows each) x 704
// contiguous bytes, two steps in flight.
__global__ void probe_streams(const uint8_t *__restrict__ w, int rows, int nb, size_t rs, uint32_t *out) {
    const int lane = threadIdx.x & 31;
    const int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, GW = (gridDim.x * blockDim.x) >> 5;
    const int n_wt = rows / 8, n_steps = (2 * nb + 3) / 4;
    uint32_t acc = 0;
    for (int t = gw; t < n_wt; t += GW) {
        const uint8_t *base = w + (size_t)t * 8 * rs;
        for (int st = 0; st < n_steps; st += 2) {
            uint4 v[2][6];
#pragma unroll
            for (int u = 0; u < 2; ++u)
#pragma unroll
                for (int k = 0; k < 6; ++k) {
                    const int c = lane + 32 * k, sg = c / 44, q = c - sg * 44;
                    const int blk = 4 * (st + u) + q / 11;
                    v[u][k] = (c < 176 && blk < 2 * nb) ? ldg_na(base + (size_t)sg * 2 * rs + (size_t)(st + u) * 704 + q * 16)
                                                        : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
            for (int u = 0; u < 2; ++u)
#pragma unroll
                for (int k = 0; k < 6; ++k) acc ^= v[u][k].x ^ v[u][k].y ^ v[u][k].z ^ v[u][k].w;
        }
    }
    if (acc == 0x12345678u) out[0] = acc;
}

float f16_to_f32(uint16_t h) {
    const uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = std::ldexp((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = std::ldexp((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
uint16_t f32_to_f16(float f) {  // positive normal values only (d, dmin), round to nearest
    int e;
    const float m = std::frexp(f, &e);  // f = m 2^e, m in [0.5, 1)
    uint32_t mant = (uint32_t)std::lround(m * 2048.0f);  // 11 bits
    if (mant == 2048) { mant = 1024; ++e; }
    return (uint16_t)(((e + 14) << 10) | (mant & 1023));
}

}  // namespace
}  // namespace lmt::cuda

using namespace lmt::cuda;

int main(int argc, char **argv) {
    const int rows = 202048, cols = 6656, nb = cols / 256;
    const size_t rs = (size_t)nb * 176, wbytes = rs * rows;
    const int reps = argc > 1 ? std::atoi(argv[1]) : 21;
    std::vector<std::string> vars;
    for (int i = 2; i < argc; ++i) vars.push_back(argv[i]);
    if (vars.empty()) vars = {"a"};

    std::vector<uint8_t> q(wbytes);
    {
        const int nt = 16;
        std::vector<std::thread> th;
        for (int t = 0; t < nt; ++t)
            th.emplace_back([&, t] {
                uint64_t s = 0x9E3779B97F4A7C15ull * (t + 1);
                for (int r = t; r < rows; r += nt) {
                    uint8_t *row = &q[(size_t)r * rs];
                    for (size_t i = 0; i < rs; i += 8) {
                        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                        std::memcpy(row + i, &s, 8);
                    }
                    for (int b = 0; b < nb; ++b) {
                        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                        const uint16_t d = f32_to_f16(1e-4f + 3e-4f * (float)(s & 0xFFFF) / 65535.0f);
                        const uint16_t dm = f32_to_f16(1e-4f + 3e-4f * (float)((s >> 16) & 0xFFFF) / 65535.0f);
                        std::memcpy(row + b * 176, &d, 2);
                        std::memcpy(row + b * 176 + 2, &dm, 2);
                    }
                }
            });
        for (auto &x : th) x.join();
    }
    std::vector<float> x(cols);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto &v : x) v = nd(rng);
    std::vector<double> ref;
    for (int r = 0; r < rows; r += 97) {
        double acc = 0;
        for (int b = 0; b < nb; ++b) {
            const uint8_t *blk = &q[(size_t)r * rs + b * 176];
            uint16_t db, dmb;
            std::memcpy(&db, blk, 2);
            std::memcpy(&dmb, blk + 2, 2);
            const double d = f16_to_f32(db), dm = f16_to_f32(dmb);
            for (int i = 0; i < 256; ++i) {
                const int j = i / 32;
                acc += (d * lmt_q5k_scale(blk + 4, j) * lmt_q5k_q(blk + 48, blk + 16, i) - dm * lmt_q5k_min(blk + 4, j)) *
                       (double)x[b * 256 + i];
            }
        }
        ref.push_back(acc);
    }

    uint8_t *dW;
    float *dX, *dY;
    void *dS;
    uint32_t *dO;
    LMT_CUDA_CHECK(cudaMalloc(&dW, wbytes));
    LMT_CUDA_CHECK(cudaMalloc(&dX, cols * 4));
    LMT_CUDA_CHECK(cudaMalloc(&dY, rows * 4));
    LMT_CUDA_CHECK(cudaMalloc(&dO, 64));
    LMT_CUDA_CHECK(cudaMalloc(&dS, mul_mv_q5_K_scratch_bytes(cols)));
    LMT_CUDA_CHECK(cudaMemcpy(dW, q.data(), wbytes, cudaMemcpyHostToDevice));
    LMT_CUDA_CHECK(cudaMemcpy(dX, x.data(), cols * 4, cudaMemcpyHostToDevice));

    // ---- correctness: every variant vs f64 (sampled rows) and vs variant a (all rows) ----
    std::vector<float> base(rows), got(rows);
    setenv("LMTAIL_CUDA_MMV", "a", 1);
    launch_mul_mv_q5_K(dW, rs, rows, cols, dX, 1, dY, dS, 0);
    LMT_CUDA_CHECK(cudaMemcpy(base.data(), dY, rows * 4, cudaMemcpyDeviceToHost));
    int bad_total = 0;
    for (const auto &v : vars) {
        setenv("LMTAIL_CUDA_MMV", v.c_str(), 1);
        LMT_CUDA_CHECK(cudaMemset(dY, 0xFF, rows * 4));
        launch_mul_mv_q5_K(dW, rs, rows, cols, dX, 1, dY, dS, 0);
        LMT_CUDA_CHECK(cudaDeviceSynchronize());
        LMT_CUDA_CHECK(cudaMemcpy(got.data(), dY, rows * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0, n2 = 0, d2 = 0;
        int nonfinite = 0;
        for (int r = 0, k = 0; r < rows; r += 97, ++k) {
            num += (got[r] - ref[k]) * (got[r] - ref[k]);
            den += ref[k] * ref[k];
        }
        for (int r = 0; r < rows; ++r) {
            if (!std::isfinite(got[r])) ++nonfinite;
            n2 += ((double)got[r] - base[r]) * ((double)got[r] - base[r]);
            d2 += (double)base[r] * base[r];
        }
        // determinism: a second run must give the same bytes
        launch_mul_mv_q5_K(dW, rs, rows, cols, dX, 1, dY, dS, 0);
        std::vector<float> again(rows);
        LMT_CUDA_CHECK(cudaMemcpy(again.data(), dY, rows * 4, cudaMemcpyDeviceToHost));
        const bool same = std::memcmp(again.data(), got.data(), rows * 4) == 0;
        const double e = std::sqrt(num / den), e2 = std::sqrt(n2 / d2);
        const bool ok = nonfinite == 0 && e < 1e-6 && same;
        bad_total += !ok;
        std::printf("check %-8s relL2 vs f64 %.2e  vs a %.2e  nonfinite %d  deterministic %d  %s\n", v.c_str(), e, e2,
                    nonfinite, (int)same, ok ? "ok" : "FAIL");
    }

    // ---- timing: interleaved rounds ----
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int nsm = 0;
    cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0);
    std::vector<std::string> names = vars;
    names.push_back("probe_linear");
    names.push_back("probe_tiles");
    names.push_back("probe_streams");
    names.push_back("prep_x T=1");
    names.push_back("prep_x_i8");
    std::vector<std::vector<float>> t(names.size());
    auto run = [&](size_t k) {
        if (k < vars.size()) {
            setenv("LMTAIL_CUDA_MMV", vars[k].c_str(), 1);
            launch_mul_mv_q5_K(dW, rs, rows, cols, dX, 1, dY, dS, 0);
        } else if (names[k] == "probe_linear") {
            probe_linear<<<nsm * 4, 512>>>(reinterpret_cast<const uint4 *>(dW), wbytes / 16, dO);
        } else if (names[k] == "probe_streams") {
            probe_streams<<<nsm * 2, 512>>>(dW, rows, nb, rs, dO);
        } else if (names[k] == "probe_tiles") {
            probe_tiles<<<nsm * 2, 512>>>(dW, rows, nb, rs, dO);
        } else if (names[k] == "prep_x_i8") {
            prep_x_i8<<<nb, 256>>>(dX, static_cast<uint8_t *>(dS));
        } else {
            prep_x<<<dim3(1, prep_ctas(cols)), 256>>>(dX, 1, cols, 1, 2, reinterpret_cast<__half *>(dS),
                               reinterpret_cast<float *>(static_cast<uint8_t *>(dS) + (size_t)nb * kMaxNT * kFragBytes));
        }
    };
    for (size_t k = 0; k < names.size(); ++k) run(k);  // warm-up
    LMT_CUDA_CHECK(cudaDeviceSynchronize());
    for (int r = 0; r < reps; ++r)
        for (size_t k = 0; k < names.size(); ++k) {
            cudaEventRecord(e0);
            run(k);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            t[k].push_back(ms);
        }
    LMT_CUDA_CHECK(cudaGetLastError());
    double lin = 0;
    for (size_t k = 0; k < names.size(); ++k) {
        auto v = t[k];
        std::sort(v.begin(), v.end());
        if (names[k] == "probe_linear") lin = v[v.size() / 2];
    }
    std::printf("\n%-14s %9s %9s %9s %9s %7s\n", "variant", "median", "min", "p90", "GB/s", "%lin");
    for (size_t k = 0; k < names.size(); ++k) {
        auto v = t[k];
        std::sort(v.begin(), v.end());
        const double med = v[v.size() / 2];
        std::printf("%-14s %9.4f %9.4f %9.4f %9.0f %6.0f%%\n", names[k].c_str(), med, v[0], v[v.size() * 9 / 10],
                    wbytes / (med * 1e-3) / 1e9, 100.0 * lin / med);
    }
    std::printf("%s\n", bad_total ? "SOME VARIANTS FAILED" : "all variants ok");
    return bad_total ? 1 : 0;
}
