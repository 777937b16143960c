// Development probe for csrc/cuda/topk.cu's radix select (not built by CMake): where the time goes
// inside topk_radix on one row of capped-logit-like values (20 tanh(N(0, 3) / 20)). Built with
// LMT_TOPK_PROFILE, the kernel stamps globaltimer and clock64 at each phase (block 0 and the last
// block) and clock64 around each radix pass; this prints them with the event time of 20 launches.
// Build and run on the device, from the repository root:
//   nvcc -O3 -arch=sm_90 -std=c++17 --fmad=false -DLMT_TOPK_PROFILE -Icsrc/include -Icsrc \
//        csrc/cuda/topk.cu bench/cuda/topk_prof.cu -o /tmp/topk_prof && /tmp/topk_prof 202048 40
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cuda/launch.hpp"

namespace lmt::cuda {
void topk_profile_read(unsigned long long *out);
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 202048;
    const int k = argc > 2 ? std::atoi(argv[2]) : 40;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> x(n);
    for (auto &v : x) v = 20.0f * std::tanh(nd(rng) / 20.0f);
    float *dx;
    uint64_t *ds;
    uint32_t *di;
    float *dv;
    cudaMalloc(&dx, n * 4);
    cudaMalloc(&ds, lmt::cuda::topk_scratch_elems(1, n, k) * 8);
    cudaMalloc(&di, k * 4);
    cudaMalloc(&dv, k * 4);
    cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
    static unsigned long long prof_flat[64 * 2 * 10 + 2 * 6 * 4];
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int rep = 0; rep < 20; ++rep) {
        cudaEventRecord(e0);
        lmt::cuda::launch_topk_rows(dx, 1, n, k, ds, di, dv, 0);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t;
        cudaEventElapsedTime(&t, e0, e1);
        ms.push_back(t * 1000);
    }
    std::sort(ms.begin(), ms.end());
    lmt::cuda::topk_profile_read(prof_flat);
    auto prof = reinterpret_cast<unsigned long long (*)[2][10]>(prof_flat);
    const unsigned long long *pass = prof_flat + 64 * 2 * 10;
    for (int ph = 0; ph < 2; ++ph) {
        std::printf("%s passes (cycles count | reduce | pick):", ph ? "last-block" : "block-0");
        for (int p = 0; p < 6; ++p) {
            const unsigned long long *q = pass + (ph * 6 + p) * 4;
            if (q[3] > q[0] && q[3] - q[0] < 1000000) std::printf("  %llu|%llu|%llu", q[1] - q[0], q[2] - q[1], q[3] - q[2]);
        }
        std::printf("\n");
    }
    const int nblk = (n + 4095) / 4096;
    unsigned long long g0 = ~0ull;
    int last = -1;
    for (int b = 0; b < nblk && b < 64; ++b) g0 = std::min(g0, prof[b][0][0]);
    unsigned long long lastT = 0;  // the last block of the final launch: the latest final stamp
    for (int b = 0; b < nblk && b < 64; ++b)
        if (prof[b][0][7] >= lastT && prof[b][0][7] > prof[b][0][0]) { lastT = prof[b][0][7]; last = b; }
    std::printf("n %d k %d: event median %.1f us min %.1f us\n", n, k, ms[ms.size() / 2], ms[0]);
    unsigned long long mx1 = 0, mx2 = 0, mx8 = 0;
    for (int b = 0; b < nblk && b < 64; ++b) {
        mx1 = std::max(mx1, prof[b][0][1] - g0);
        mx2 = std::max(mx2, prof[b][0][2] - g0);
        mx8 = std::max(mx8, prof[b][0][8] - g0);
    }
    std::printf("globaltimer ns from first block start: latest start %llu", 0ull);
    unsigned long long mx0 = 0;
    for (int b = 0; b < nblk && b < 64; ++b) mx0 = std::max(mx0, prof[b][0][0] - g0);
    std::printf(" %llu, loaded(max) %llu, block-threshold(max) %llu, written(max) %llu\n", mx0, mx1, mx2, mx8);
    for (int b = 0; b < 4; ++b)
        std::printf("  block %d: cycles load %llu thr %llu write %llu\n", b, prof[b][1][1] - prof[b][1][0],
                    prof[b][1][2] - prof[b][1][1], prof[b][1][8] - prof[b][1][2]);
    if (last >= 0) {
        auto &p = prof[last];
        std::printf("last block %d: ns since first start: arrive %llu final-loaded %llu threshold %llu compact %llu emit %llu\n",
                    last, p[0][3] - g0, p[0][4] - g0, p[0][5] - g0, p[0][6] - g0, p[0][7] - g0);
        std::printf("  cycles: load %llu threshold %llu compact %llu emit %llu\n", p[1][4] - p[1][3],
                    p[1][5] - p[1][4], p[1][6] - p[1][5], p[1][7] - p[1][6]);
    }
    return 0;
}
