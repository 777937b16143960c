// Same-run anchor for every weight type's LM-head matvec (202048 x 6656, T = 1, 2, 4, 8, 16):
// llama.cpp's CUDA backend (ggml_mul_mat in one graph, ggml_backend_graph_compute) against
// lmtail's cuda::launch_mul_mv on the same GPU, the same weight bytes and the same x, in one process.
//
// Weights as in lmtail_cuda_check bench-types: a 4096-row slab of N(0, 0.02) quantised by lmtail's
// cpu::quantize (byte-identical to ggml's quantize_row_*_ref), tiled to all rows. ggml gets the
// rows contiguous (its own nb[1]); lmtail gets a copy at a 16-byte padded stride, since its fast
// kernels need 16-byte aligned rows (only Q6_K's 5460-byte rows actually move). x is N(0, 1), the
// ggml tensor's device data, also read by lmtail.
// Timing, median of reps after warm-up, the engines interleaved per (type, T): host wall of one
// submission + synchronise for both (the cost a caller sees), and lmtail's device time with CUDA
// events around its launch (the method of lmtail_cuda_check's per-type table), as % of the
// device-to-device copy bandwidth measured in this run.
// Agreement: relative L2 difference of the two engines' logits over all rows at T = 1 and 8 (ggml
// rounds x to q8_1 for the quantised types and may round it to f16 / bf16 for cuBLAS, so expect
// 1e-4 .. a few 1e-3, not lmtail's 1e-6 against f64); exit 1 if any logit is non-finite or a
// difference exceeds 5e-2 (a layout or type mix-up gives ~1).
// Usage: ggml_types [reps]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cuda.h"
#include "ggml.h"

#include "cuda/launch.hpp"
#include "anchor_common.hpp"
#include "lmtail/cpu.hpp"
#include "lmtail/weight_type.hpp"


namespace {

using namespace lmt;

constexpr int kRows = 202048, kCols = 6656, kSlab = 4096, kTmax = 16;
constexpr WeightType kTypes[] = {WeightType::Q6_K, WeightType::Q8_0, WeightType::Q4_0, WeightType::Q4_K,
                                 WeightType::Q5_K, WeightType::F16,  WeightType::BF16, WeightType::F32};

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Device time (ms) of what f enqueues on s, between two events.
template <typename F>
double event_ms(cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, F &&f) {
    CK(cudaEventRecord(e0, s));
    f();
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

// Device-to-device copy bandwidth (read + write bytes, 2 GiB, median of 11), as lmtail_cuda_check.
double copy_bandwidth_gbs(cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1) {
    const size_t n = (size_t)1 << 31;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    CK(cudaMemsetAsync(a, 1, n, s));
    std::vector<double> ms;
    for (int i = 0; i < 11; ++i)
        ms.push_back(event_ms(s, e0, e1, [&] { CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s)); }));
    CK(cudaFree(a));
    CK(cudaFree(b));
    const double gbs = 2.0 * n / (median(ms) * 1e-3) / 1e9;
    std::printf("copy bandwidth (device-to-device, read + write, 2 GiB): %.0f GB/s\n", gbs);
    return gbs;
}

struct Row {
    const char *type;
    int T;
    double gg_host, lm_host, lm_dev, bytes;
};

int run(int reps) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs; %d x %d, median of %d\n", prop.name, prop.multiProcessorCount, kRows, kCols, reps);
    cudaStream_t lst;
    CK(cudaStreamCreateWithFlags(&lst, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const double copy_gbs = copy_bandwidth_gbs(lst, e0, e1);

    ggml_backend_t be = ggml_backend_cuda_init(0);
    if (!be) {
        std::fprintf(stderr, "ggml_backend_cuda_init failed\n");
        return 3;
    }
    // x (kTmax tokens), one ggml tensor for the whole run; lmtail reads the same device bytes.
    std::mt19937 rng(9);
    std::normal_distribution<float> wd(0.0f, 0.02f), xd(0.0f, 1.0f);
    std::vector<float> x((size_t)kTmax * kCols);
    for (auto &v : x) v = xd(rng);
    ggml_init_params xp = {ggml_tensor_overhead() * 2, nullptr, true};
    ggml_context *xctx = ggml_init(xp);
    ggml_tensor *X = ggml_new_tensor_2d(xctx, GGML_TYPE_F32, kCols, kTmax);
    ggml_backend_buffer_t xbuf = ggml_backend_alloc_ctx_tensors(xctx, be);
    if (!xbuf) return 3;
    ggml_backend_tensor_set(X, x.data(), 0, x.size() * 4);
    const float *dX = static_cast<const float *>(X->data);
    float *dY;
    CK(cudaMalloc(&dY, (size_t)kTmax * kRows * 4));
    std::vector<float> yg((size_t)kTmax * kRows), yl((size_t)kTmax * kRows);

    std::vector<Row> rows;
    bool failed = false;
    for (WeightType type : kTypes) {
        const WeightTypeInfo &ti = *weight_type_info(type);
        const int id = (int)type;  // lmtail's ids are ggml's type ids
        const size_t rb = cpu::row_bytes(type, kCols), stride = (rb + 15) / 16 * 16;
        std::vector<float> wf((size_t)kSlab * kCols);
        for (auto &v : wf) v = wd(rng);
        std::vector<uint8_t> q((size_t)kSlab * rb);
        cpu::quantize(type, wf.data(), q.data(), kSlab, kCols);

        ggml_init_params wp = {ggml_tensor_overhead() * 2, nullptr, true};
        ggml_context *wctx = ggml_init(wp);
        ggml_tensor *W = ggml_new_tensor_2d(wctx, (ggml_type)id, kCols, kRows);
        ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors(wctx, be);
        if (!wbuf) {
            std::fprintf(stderr, "ggml weight allocation failed (%s)\n", ti.name);
            return 3;
        }
        if ((size_t)W->nb[1] != rb || ggml_row_size((ggml_type)id, kCols) != rb ||
            cuda::mul_mv_row_bytes(id, kCols) != rb) {
            std::fprintf(stderr, "%s: row bytes differ: ggml nb[1] %zu, lmtail %zu\n", ti.name, (size_t)W->nb[1], rb);
            return 3;
        }
        uint8_t *dW;
        CK(cudaMalloc(&dW, (size_t)kRows * stride));
        for (int r0 = 0; r0 < kRows; r0 += kSlab) {
            const int n = std::min(kSlab, kRows - r0);
            ggml_backend_tensor_set(W, q.data(), (size_t)r0 * rb, (size_t)n * rb);
            CK(cudaMemcpy2D(dW + (size_t)r0 * stride, stride, q.data(), rb, rb, n, cudaMemcpyHostToDevice));
        }
        const double bytes = (double)kRows * rb;

        auto lm = [&](int T) { cuda::launch_mul_mv(id, dW, stride, kRows, kCols, dX, T, dY, lst); };
        std::vector<double> agree;
        for (int T : {1, 2, 4, 8, 16}) {
            GGraph g(be, [&](ggml_context *c) { return ggml_mul_mat(c, W, ggml_view_2d(c, X, kCols, T, X->nb[1], 0)); });
            auto gg = [&] {
                if (ggml_backend_graph_compute(be, g.gf) != GGML_STATUS_SUCCESS) {
                    std::fprintf(stderr, "ggml_backend_graph_compute failed (%s, T=%d)\n", ti.name, T);
                    std::exit(4);
                }
            };
            auto lm_sync = [&] {
                lm(T);
                CK(cudaStreamSynchronize(lst));
            };
            if (T == 1 || T == 8) {  // agreement on all rows
                const size_t n = (size_t)T * kRows;
                gg();
                ggml_backend_tensor_get(g.out, yg.data(), 0, n * 4);
                lm_sync();
                CK(cudaMemcpy(yl.data(), dY, n * 4, cudaMemcpyDeviceToHost));
                double num = 0, den = 0;
                bool finite = true;
                for (size_t i = 0; i < n; ++i) {
                    finite &= std::isfinite(yg[i]) && std::isfinite(yl[i]);
                    num += ((double)yg[i] - yl[i]) * ((double)yg[i] - yl[i]);
                    den += (double)yl[i] * yl[i];
                }
                const double rel = den > 0 ? std::sqrt(num / den) : INFINITY;
                if (!finite || !(rel <= 5e-2)) {
                    std::fprintf(stderr, "FAIL %s T=%d: %s, rel L2 ggml vs lmtail %.3e\n", ti.name, T,
                                 finite ? "finite" : "NON-FINITE logits", rel);
                    failed = true;
                }
                agree.push_back(finite ? rel : NAN);
            }
            for (int i = 0; i < 5; ++i) {
                gg();
                lm_sync();
            }
            std::vector<double> gh, lh, ld;
            for (int i = 0; i < reps; ++i) {  // A B A B: drift and clocks hit both engines alike
                double t0 = now_ms();
                gg();
                gh.push_back(now_ms() - t0);
                t0 = now_ms();
                lm_sync();
                lh.push_back(now_ms() - t0);
                ld.push_back(event_ms(lst, e0, e1, [&] { lm(T); }));
            }
            rows.push_back({ti.name, T, median(gh), median(lh), median(ld), bytes});
        }
        std::printf("agreement %-4s: rel L2 ggml vs lmtail logits, all rows: T=1 %.2e, T=8 %.2e\n", ti.name, agree[0],
                    agree[1]);
        std::fflush(stdout);
        CK(cudaFree(dW));
        ggml_backend_buffer_free(wbuf);
        ggml_free(wctx);
    }

    std::printf("\n%s, copy BW %.0f GB/s (same run); %d x %d; median of %d, engines interleaved\n", prop.name, copy_gbs,
                kRows, kCols, reps);
    std::printf("| type | T | ggml host ms | lmtail host ms | lmtail device ms (%% copy) | lmtail/ggml |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (const Row &r : rows)
        std::printf("| %s | %d | %.3f | %.3f | %.3f (%.0f%%) | %.2f |\n", r.type, r.T, r.gg_host, r.lm_host, r.lm_dev,
                    100.0 * r.bytes / (r.lm_dev * 1e-3) / 1e9 / copy_gbs, r.lm_host / r.gg_host);
    std::printf("(host = one submission + synchronise: ggml_backend_graph_compute of a one-node ggml_mul_mat graph, "
                "or cuda::launch_mul_mv + cudaStreamSynchronize; lmtail device = CUDA events around the launch; "
                "%% copy = weight bytes / device time / copy BW; lmtail/ggml = host / host, < 1: lmtail faster)\n");

    CK(cudaFree(dY));
    ggml_backend_buffer_free(xbuf);
    ggml_free(xctx);
    ggml_backend_free(be);
    std::printf("%s\n", failed ? "FAILED: engines disagree or non-finite logits" : "engines agree");
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv) {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 51;
    try {
        return run(reps);
    } catch (const std::exception &e) {  // lmtail's launchers throw on a refused type or shape
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
}
