// Same-run anchor: llama.cpp's CUDA backend (ggml from the llama-cpp-python 0.3.36 sdist) against
// lmtail's CUDA kernels on the same H200, the same weight bytes and the same inputs.
//
// Both engines are timed two ways, median of `reps`:
//  * host wall: submit + synchronise, as a caller sees one step (ggml: ggml_backend_graph_compute;
//    lmtail: its kernels launched directly, or its CUDA graph launched, then cudaStreamSynchronize);
//  * device: CUDA events around the same submission on the engine's own stream, with the stream
//    held by a gate kernel until the whole submission is queued, so host-side launch cost is not
//    counted. ggml's stream is the one its backend creates on first use: the link wraps
//    cudaStreamCreateWithFlags (-Wl,--wrap) and records the streams created during ggml's first
//    graph compute, so no ggml-internal header is needed. A gate that times out marks "n/a".
// Also measured in the same run: device-to-device copy bandwidth (read + write bytes), and the
// logits' relative L2 error of both engines against an f64 reference on sampled rows.
// Usage: ggml_anchor [reps]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cuda.h"
#include "ggml.h"

#include "cuda/launch.hpp"
#include "anchor_common.hpp"
#include "mul_mv_q5_K_variants.hpp"
#include "lmtail/kernel_abi.h"

// The head matvec: the product kernel (LMTAIL_CUDA_MMV=product, csrc/cuda/mul_mv.cu) or one of the
// earlier Q5_K variants kept for comparison in bench/cuda/mul_mv_q5_K_variants.cu.
static void lmt_mv(const uint8_t *w, size_t rb, int rows, int cols, const float *x, int T, float *y, void *scr,
                   cudaStream_t s) {
    const char *v = std::getenv("LMTAIL_CUDA_MMV");
    if (v && std::strcmp(v, "product") == 0) lmt::cuda::launch_mul_mv(13, w, rb, rows, cols, x, T, y, s);
    else lmt::cuda::bench::launch_mul_mv_q5_K(w, rb, rows, cols, x, T, y, scr, s);
}


static bool g_record_streams = false;
static std::vector<cudaStream_t> g_streams;
extern "C" cudaError_t __real_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags);
extern "C" cudaError_t __wrap_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    const cudaError_t e = __real_cudaStreamCreateWithFlags(s, flags);
    if (e == cudaSuccess && g_record_streams) g_streams.push_back(*s);
    return e;
}

namespace {

constexpr int kRows = 202048, kCols = 6656, kTmax = 8, kK = 40;
constexpr float kEps = 1e-5f, kScale = 0.196116f, kCap = 20.0f;

uint64_t g_rng = 0x9E3779B97F4A7C15ull;
uint64_t next_u64() {  // splitmix64
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
double uni() { return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
double gauss() { return std::sqrt(-2.0 * std::log(uni() + 1e-300)) * std::cos(6.283185307179586 * uni()); }

uint16_t f32_to_f16_bits(float f) {  // finite, normal range only (weights' d and dmin)
    __half h = __float2half_rn(f);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}
float f16_bits_to_f32(uint16_t b) {
    __half h;
    std::memcpy(&h, &b, 2);
    return __half2float(h);
}

// ---- gate: hold a stream until the host has queued everything to be timed -------------------
__global__ void gate_kernel(volatile int *flag, int *timed_out) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (*flag == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > 200000000ull) {  // 200 ms: the submission must have synchronised inside
            *timed_out = 1;
            break;
        }
    }
}

int *g_flag_h = nullptr, *g_flag_d = nullptr, *g_to_d = nullptr;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
    double dev_ms = -1, host_ms = -1;
};

// submit(): enqueue the work on `st` (may also synchronise for host timing via sync()).
Timing measure(cudaStream_t st, const std::function<void()> &submit, const std::function<void()> &sync, int reps) {
    Timing r;
    for (int i = 0; i < 5; ++i) {
        submit();
        sync();
    }
    std::vector<double> host, dev;
    for (int i = 0; i < reps; ++i) {
        const double t0 = now_ms();
        submit();
        sync();
        host.push_back(now_ms() - t0);
    }
    r.host_ms = median(host);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    bool ok = true;
    for (int i = 0; i < reps && ok; ++i) {
        *(volatile int *)g_flag_h = 0;
        CK(cudaMemset(g_to_d, 0, 4));
        gate_kernel<<<1, 1, 0, st>>>(g_flag_d, g_to_d);
        CK(cudaEventRecord(e0, st));
        submit();
        CK(cudaEventRecord(e1, st));
        __sync_synchronize();
        *(volatile int *)g_flag_h = 1;
        CK(cudaEventSynchronize(e1));
        sync();
        int to = 0;
        CK(cudaMemcpy(&to, g_to_d, 4, cudaMemcpyDeviceToHost));
        if (to) ok = false;
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        dev.push_back(ms);
    }
    if (ok) r.dev_ms = median(dev);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return r;
}

struct Row {
    std::string name;
    Timing lm, gg;
    double bytes;  // weight bytes read (0: not a weight-streaming row)
    std::string note;
};

}  // namespace

int main(int argc, char **argv) {
    const int reps = argc > 1 ? std::atoi(argv[1]) : 51;
    const size_t row_bytes = (size_t)kCols / 256 * 176;
    const size_t wbytes = row_bytes * kRows;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

    // ---- data (random Q5_K blocks with realistic d/dmin; never zeros) ----
    std::vector<uint8_t> wq(wbytes);
    for (size_t i = 0; i + 8 <= wbytes; i += 8) {
        const uint64_t v = next_u64();
        std::memcpy(&wq[i], &v, 8);
    }
    for (size_t b = 0; b < wbytes / 176; ++b) {
        const uint16_t d = f32_to_f16_bits((float)(2e-4 + 2e-4 * uni()));
        const uint16_t dm = f32_to_f16_bits((float)(1e-4 + 2e-4 * uni()));
        std::memcpy(&wq[b * 176], &d, 2);
        std::memcpy(&wq[b * 176 + 2], &dm, 2);
    }
    std::vector<float> hidden((size_t)kTmax * kCols), gamma(kCols);
    for (auto &v : hidden) v = (float)(2.0 * gauss());
    for (auto &v : gamma) v = (float)(0.8 + 0.4 * uni());

    // ---- ggml backend and tensors ----
    g_record_streams = true;  // until ggml's first graph compute has created its stream
    ggml_backend_t be = ggml_backend_cuda_init(0);
    if (!be) {
        std::fprintf(stderr, "ggml_backend_cuda_init failed\n");
        return 3;
    }
    ggml_init_params wp = {ggml_tensor_overhead() * 8, nullptr, true};
    ggml_context *wctx = ggml_init(wp);
    ggml_tensor *W = ggml_new_tensor_2d(wctx, GGML_TYPE_Q5_K, kCols, kRows);
    ggml_tensor *H = ggml_new_tensor_2d(wctx, GGML_TYPE_F32, kCols, kTmax);
    ggml_tensor *G = ggml_new_tensor_1d(wctx, GGML_TYPE_F32, kCols);
    ggml_tensor *L = ggml_new_tensor_1d(wctx, GGML_TYPE_F32, kRows);
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors(wctx, be);
    if (!wbuf) {
        std::fprintf(stderr, "weight allocation failed\n");
        return 3;
    }
    ggml_backend_tensor_set(W, wq.data(), 0, wbytes);
    ggml_backend_tensor_set(H, hidden.data(), 0, hidden.size() * 4);
    ggml_backend_tensor_set(G, gamma.data(), 0, gamma.size() * 4);
    if (W->nb[1] != row_bytes) {
        std::fprintf(stderr, "unexpected Q5_K row stride %zu\n", (size_t)W->nb[1]);
        return 3;
    }

    auto hview = [&](ggml_context *c, int T) { return ggml_view_2d(c, H, kCols, T, H->nb[1], 0); };
    auto cap_nodes = [&](ggml_context *c, ggml_tensor *x) {  // llama.cpp's soft cap: scale, tanh, scale
        x = ggml_scale(c, x, kScale / kCap);
        x = ggml_tanh(c, x);
        return ggml_scale(c, x, kCap);
    };
    auto tail_in = [&](ggml_context *c, int T) {
        ggml_tensor *n = ggml_mul(c, ggml_rms_norm(c, hview(c, T), kEps), G);
        return cap_nodes(c, ggml_mul_mat(c, W, n));
    };
    GGraph g_mm1(be, [&](ggml_context *c) { return ggml_mul_mat(c, W, hview(c, 1)); });
    GGraph g_mm8(be, [&](ggml_context *c) { return ggml_mul_mat(c, W, hview(c, 8)); });
    GGraph g_tail1(be, [&](ggml_context *c) { return ggml_argmax(c, tail_in(c, 1)); });
    GGraph g_tail8(be, [&](ggml_context *c) { return ggml_argmax(c, tail_in(c, 8)); });
    GGraph g_tailk(be, [&](ggml_context *c) { return ggml_top_k(c, tail_in(c, 1), kK); });
    GGraph g_am(be, [&](ggml_context *c) { return ggml_argmax(c, ggml_view_2d(c, L, kRows, 1, L->nb[1], 0)); });
    GGraph g_tk(be, [&](ggml_context *c) { return ggml_top_k(c, ggml_view_2d(c, L, kRows, 1, L->nb[1], 0), kK); });

    // ggml's stream: created lazily by its first graph compute.
    if (ggml_backend_graph_compute(be, g_mm1.gf) != GGML_STATUS_SUCCESS) return 3;
    g_record_streams = false;
    if (g_streams.empty()) {
        std::fprintf(stderr, "ggml created no stream through cudaStreamCreateWithFlags\n");
        return 3;
    }
    std::printf("ggml streams created: %zu (timing on the first)\n", g_streams.size());
    cudaStream_t gst = g_streams[0];

    // ---- lmtail buffers: same weight bytes (W->data), same hidden ----
    const uint8_t *dW = static_cast<const uint8_t *>(W->data);
    const float *dH = static_cast<const float *>(H->data), *dG = static_cast<const float *>(G->data);
    float *dL = static_cast<float *>(L->data);
    float *dN, *dLog;
    void *dScr;
    uint64_t *dKey, *dTop;
    uint32_t *dBad, *dOut, *dIds;
    float *dVals;
    const int n_chunks = (kRows + 1023) / 1024;
    CK(cudaMalloc(&dN, (size_t)kTmax * kCols * 4));
    CK(cudaMalloc(&dLog, (size_t)kTmax * kRows * 4));
    CK(cudaMalloc(&dScr, lmt::cuda::bench::mul_mv_q5_K_scratch_bytes(kCols)));
    CK(cudaMalloc(&dKey, (size_t)kTmax * n_chunks * 8));
    CK(cudaMalloc(&dBad, (size_t)kTmax * n_chunks * 4));
    CK(cudaMalloc(&dOut, kTmax * 4));
    CK(cudaMalloc(&dTop, lmt::cuda::topk_scratch_elems(kTmax, kRows, kK) * 8));
    CK(cudaMalloc(&dIds, (size_t)kTmax * kK * 4));
    CK(cudaMalloc(&dVals, (size_t)kTmax * kK * 4));
    uint32_t *hOut;
    CK(cudaMallocHost(&hOut, 4096));
    CK(cudaHostAlloc(&g_flag_h, 4, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&g_flag_d, g_flag_h, 0));
    CK(cudaMalloc(&g_to_d, 4));
    cudaStream_t lst;
    CK(cudaStreamCreateWithFlags(&lst, cudaStreamNonBlocking));
    auto lsync = [&] { CK(cudaStreamSynchronize(lst)); };
    auto gsync = [&] { ggml_backend_synchronize(be); };
    auto gsubmit = [&](GGraph &g) {
        return [&] {
            if (ggml_backend_graph_compute_async(be, g.gf) != GGML_STATUS_SUCCESS) std::exit(4);
        };
    };
    auto mmv = [&](int T) {
        return [&, T] { lmt_mv(dW, row_bytes, kRows, kCols, dH, T, dLog, dScr, lst); };
    };
    auto set_env = [](const char *k, const char *v) { setenv(k, v, 1); };

    // ---- accuracy: logits of T rows vs an f64 reference on every 97th row ----
    auto ref_err = [&](const std::vector<float> &got, int T, const float *x) {
        double num = 0, den = 0;
        for (int r = 0; r < kRows; r += 97) {
            const uint8_t *row = &wq[(size_t)r * row_bytes];
            for (int t = 0; t < T; ++t) {
                double acc = 0;
                for (int b = 0; b < kCols / 256; ++b) {
                    const uint8_t *blk = row + b * 176;
                    uint16_t db, dmb;
                    std::memcpy(&db, blk, 2);
                    std::memcpy(&dmb, blk + 2, 2);
                    const double d = f16_bits_to_f32(db), dm = f16_bits_to_f32(dmb);
                    for (int i = 0; i < 256; ++i) {
                        const int j = i / 32;
                        const double wv = d * lmt_q5k_scale(blk + 4, j) * lmt_q5k_q(blk + 48, blk + 16, i) -
                                          dm * lmt_q5k_min(blk + 4, j);
                        acc += wv * (double)x[(size_t)t * kCols + b * 256 + i];
                    }
                }
                const double g = got[(size_t)t * kRows + r];
                num += (g - acc) * (g - acc);
                den += acc * acc;
            }
        }
        return std::sqrt(num / den);
    };
    std::vector<float> lg((size_t)kTmax * kRows);
    for (int T : {1, 8}) {
        GGraph &g = T == 1 ? g_mm1 : g_mm8;
        ggml_backend_graph_compute(be, g.gf);
        ggml_backend_tensor_get(g.out, lg.data(), 0, (size_t)T * kRows * 4);
        const double eg = ref_err(lg, T, hidden.data());
        set_env("LMTAIL_CUDA_MMV", "i16p2");  // the default: v4 at T = 1, v2/a at T > 1
        mmv(T)();
        lsync();
        CK(cudaMemcpy(lg.data(), dLog, (size_t)T * kRows * 4, cudaMemcpyDeviceToHost));
        const double e4 = ref_err(lg, T, hidden.data());
        set_env("LMTAIL_CUDA_MMV", "a");
        mmv(T)();
        lsync();
        CK(cudaMemcpy(lg.data(), dLog, (size_t)T * kRows * 4, cudaMemcpyDeviceToHost));
        const double e2 = ref_err(lg, T, hidden.data());
        set_env("LMTAIL_CUDA_MMV", "v1");
        mmv(T)();
        lsync();
        CK(cudaMemcpy(lg.data(), dLog, (size_t)T * kRows * 4, cudaMemcpyDeviceToHost));
        const double e1 = ref_err(lg, T, hidden.data());
        set_env("LMTAIL_CUDA_MMV", "product");
        mmv(T)();
        lsync();
        CK(cudaMemcpy(lg.data(), dLog, (size_t)T * kRows * 4, cudaMemcpyDeviceToHost));
        std::printf("accuracy T=%d: product mul_mv rel L2 vs f64 %.2e\n", T, ref_err(lg, T, hidden.data()));
        std::printf("accuracy T=%d: rel L2 vs f64 on every 97th row: lmtail default (%s) %.2e | lmtail v2/a %.2e | "
                    "lmtail v1 %.2e | ggml %.2e\n", T, T == 1 ? "v4" : "v2/a", e4, e2, e1, eg);
    }
    set_env("LMTAIL_CUDA_MMV", "i16p2");

    // ---- copy bandwidth, same run ----
    double copy_gbs = 0;
    {
        const size_t n = (size_t)2 << 30;
        void *a, *b;
        CK(cudaMalloc(&a, n));
        CK(cudaMalloc(&b, n));
        CK(cudaMemset(a, 1, n));
        Timing t = measure(lst, [&] { CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, lst)); }, lsync, 11);
        copy_gbs = 2.0 * n / (t.dev_ms * 1e-3) / 1e9;
        std::printf("copy bandwidth (device-to-device, read + write, 2 GiB): %.0f GB/s (%.3f ms)\n", copy_gbs, t.dev_ms);
        cudaFree(a);
        cudaFree(b);
    }

    // ---- lmtail graphs of the tails ----
    auto capture = [&](const std::function<void(cudaStream_t)> &f) {
        cudaGraph_t gr;
        cudaGraphExec_t ex;
        CK(cudaStreamBeginCapture(lst, cudaStreamCaptureModeGlobal));
        f(lst);
        CK(cudaStreamEndCapture(lst, &gr));
        CK(cudaGraphInstantiate(&ex, gr, 0));
        return ex;
    };
    auto tail_fused = [&](int T) {
        return capture([&, T](cudaStream_t s) {
            lmt::cuda::launch_rms_norm(dH, dG, dN, T, kCols, kEps, s);
            lmt_mv(dW, row_bytes, kRows, kCols, dN, T, dLog, dScr, s);
            lmt::cuda::launch_greedy_softcap_argmax(dLog, T, kRows, kScale, kCap, nullptr, dKey, dBad, dOut, s);
            CK(cudaMemcpyAsync(hOut, dOut, 4 * T, cudaMemcpyDeviceToHost, s));
        });
    };
    auto tail_4node = [&](int T) {
        return capture([&, T](cudaStream_t s) {
            lmt::cuda::launch_rms_norm(dH, dG, dN, T, kCols, kEps, s);
            lmt_mv(dW, row_bytes, kRows, kCols, dN, T, dLog, dScr, s);
            lmt::cuda::launch_softcap(dLog, (int64_t)T * kRows, kScale, kCap, true, s);
            lmt::cuda::launch_argmax_rows(dLog, T, kRows, true, nullptr, dKey, dBad, dOut, s);
            CK(cudaMemcpyAsync(hOut, dOut, 4 * T, cudaMemcpyDeviceToHost, s));
        });
    };
    auto tail_topk = [&] {
        return capture([&](cudaStream_t s) {
            lmt::cuda::launch_rms_norm(dH, dG, dN, 1, kCols, kEps, s);
            lmt_mv(dW, row_bytes, kRows, kCols, dN, 1, dLog, dScr, s);
            lmt::cuda::launch_softcap(dLog, kRows, kScale, kCap, false, s);
            lmt::cuda::launch_topk_rows(dLog, 1, kRows, kK, dTop, dIds, dVals, s);
            CK(cudaMemcpyAsync(hOut, dIds, 4 * kK, cudaMemcpyDeviceToHost, s));
            CK(cudaMemcpyAsync(hOut + kK, dVals, 4 * kK, cudaMemcpyDeviceToHost, s));
        });
    };
    // Warm every matvec variant and instantiate graphs outside timing (first calls set attributes).
    // i16p2 = the default (v4 integer tensor cores on contiguous streams at T = 1; v2/a at T = 8),
    // s16b1 = v3 (f16 tensor cores, same streams), a = v2 (the previous default), v1 = f32 cores.
    const std::vector<const char *> variants = {"product", "i16p2", "s16b1", "a", "d", "v1"};
    for (const char *v : variants) {
        set_env("LMTAIL_CUDA_MMV", v);
        mmv(1)();
        mmv(8)();
    }
    lsync();
    set_env("LMTAIL_CUDA_MMV", "i16p2");
    auto glaunch = [&](cudaGraphExec_t ex) { return [&, ex] { CK(cudaGraphLaunch(ex, lst)); }; };

    // Head matvec first: every variant, same run; the tails then use the fastest T = 1 variant.
    std::vector<Row> rows;
    auto add = [&](const std::string &name, Timing lm, Timing gg, double bytes, const std::string &note = "") {
        rows.push_back({name, lm, gg, bytes, note});
    };
    const Timing none;
    const Timing gg1 = measure(gst, gsubmit(g_mm1), gsync, reps), gg8 = measure(gst, gsubmit(g_mm8), gsync, reps);
    std::string best = "i16p2";
    double best_ms = 1e30;
    for (const char *v : variants) {
        set_env("LMTAIL_CUDA_MMV", v);
        const std::string tag = std::string(" [") +
                                (std::strcmp(v, "product") == 0 ? std::string("product mul_mv, batch invariant")
                                 : std::strcmp(v, "v1") == 0 ? std::string("v1 f32 cores")
                                 : v[0] == 'i'             ? std::string("v4/") + v + ", T=8: v2/a"
                                 : v[0] == 's'             ? std::string("v3/") + v + ", T=8: v2/a"
                                                           : std::string("v2/") + v) +
                                "]";
        const Timing t1 = measure(lst, mmv(1), lsync, reps);
        add("head T=1" + tag, t1, gg1, (double)wbytes);
        add("head T=8" + tag, measure(lst, mmv(8), lsync, reps), gg8, (double)wbytes);
        if (t1.dev_ms > 0 && t1.dev_ms < best_ms) {
            best_ms = t1.dev_ms;
            best = v;
        }
    }
    set_env("LMTAIL_CUDA_MMV", "product");
    std::printf("tails below use the product matvec (fastest earlier variant at T=1 in this run: %s)\n", best.c_str());
    cudaGraphExec_t x_tail1 = tail_fused(1), x_tail8 = tail_fused(8), x_tail1_4 = tail_4node(1), x_tailk = tail_topk();

    // Greedy token agreement (tail, T = 1 and 8): lmtail fused vs ggml.
    {
        CK(cudaGraphLaunch(x_tail8, lst));
        lsync();
        std::vector<uint32_t> lm(hOut, hOut + 8);
        std::vector<int32_t> gg(8);
        ggml_backend_graph_compute(be, g_tail8.gf);
        ggml_backend_tensor_get(g_tail8.out, gg.data(), 0, 32);
        int agree = 0;
        for (int t = 0; t < 8; ++t) agree += (int64_t)lm[t] == (int64_t)gg[t];
        std::printf("greedy tokens T=8: lmtail and ggml agree on %d of 8\n", agree);
    }
    // The one-row selection input: lmtail's capped logits of token 0 (also fed to ggml).
    {
        lmt::cuda::launch_rms_norm(dH, dG, dN, 1, kCols, kEps, lst);
        lmt_mv(dW, row_bytes, kRows, kCols, dN, 1, dLog, dScr, lst);
        lmt::cuda::launch_softcap(dLog, kRows, kScale, kCap, true, lst);
        CK(cudaMemcpyAsync(dL, dLog, (size_t)kRows * 4, cudaMemcpyDeviceToDevice, lst));
        lsync();
    }

    add("greedy tail T=1 (lmtail graph, fused cap+argmax, 4 B back)", measure(lst, glaunch(x_tail1), lsync, reps),
        measure(gst, gsubmit(g_tail1), gsync, reps), (double)wbytes);
    add("greedy tail T=1 (lmtail graph, 4-node cap + argmax, 4 B back)", measure(lst, glaunch(x_tail1_4), lsync, reps),
        none, (double)wbytes);
    add("greedy tail T=8 (lmtail graph, fused cap+argmax, 32 B back)", measure(lst, glaunch(x_tail8), lsync, reps),
        measure(gst, gsubmit(g_tail8), gsync, reps), (double)wbytes);
    add("tail + top-40 T=1 (lmtail graph, 320 B back)", measure(lst, glaunch(x_tailk), lsync, reps),
        measure(gst, gsubmit(g_tailk), gsync, reps), (double)wbytes);
    const Timing gam = measure(gst, gsubmit(g_am), gsync, reps);
    set_env("LMTAIL_CUDA_ARGMAX", "one");
    add("argmax one 202048 row [one launch]", measure(lst, [&] {
        lmt::cuda::launch_argmax_rows(dL, 1, kRows, false, nullptr, dKey, dBad, dOut, lst); }, lsync, reps), gam, 0);
    set_env("LMTAIL_CUDA_ARGMAX", "two");
    add("argmax one 202048 row [two phases, before]", measure(lst, [&] {
        lmt::cuda::launch_argmax_rows(dL, 1, kRows, false, nullptr, dKey, dBad, dOut, lst); }, lsync, reps), gam, 0);
    set_env("LMTAIL_CUDA_ARGMAX", "one");
    const Timing gtk = measure(gst, gsubmit(g_tk), gsync, reps);
    add("top-40 one 202048 row [radix select, one launch]", measure(lst, [&] {
        lmt::cuda::launch_topk_rows(dL, 1, kRows, kK, dTop, dIds, dVals, lst); }, lsync, reps), gtk, 0);
    set_env("LMTAIL_CUDA_TOPK", "bitonic");
    add("top-40 one 202048 row [bitonic chunks + merges, before]", measure(lst, [&] {
        lmt::cuda::launch_topk_rows(dL, 1, kRows, kK, dTop, dIds, dVals, lst); }, lsync, reps), gtk, 0);
    set_env("LMTAIL_CUDA_TOPK", "radix");

    // Top-40 agreement on the same row: radix vs bitonic (identical ids and value bits), and the
    // id set against ggml's top_k (which does not promise an order).
    {
        std::vector<uint32_t> ia(kK), ib(kK), va(kK), vb(kK);
        lmt::cuda::launch_topk_rows(dL, 1, kRows, kK, dTop, dIds, dVals, lst);
        lsync();
        CK(cudaMemcpy(ia.data(), dIds, 4 * kK, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(va.data(), dVals, 4 * kK, cudaMemcpyDeviceToHost));
        set_env("LMTAIL_CUDA_TOPK", "bitonic");
        lmt::cuda::launch_topk_rows(dL, 1, kRows, kK, dTop, dIds, dVals, lst);
        set_env("LMTAIL_CUDA_TOPK", "radix");
        lsync();
        CK(cudaMemcpy(ib.data(), dIds, 4 * kK, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(vb.data(), dVals, 4 * kK, cudaMemcpyDeviceToHost));
        std::vector<int32_t> gg(kK);
        ggml_backend_graph_compute(be, g_tk.gf);
        ggml_backend_tensor_get(g_tk.out, gg.data(), 0, 4 * kK);
        std::vector<int64_t> sa(ia.begin(), ia.end()), sg(gg.begin(), gg.end());
        std::sort(sa.begin(), sa.end());
        std::sort(sg.begin(), sg.end());
        std::printf("top-40 one row: radix vs bitonic %s; id set vs ggml %s\n",
                    ia == ib && va == vb ? "identical" : "DIFFERENT", sa == sg ? "(same)" : "(DIFFERENT)");
    }

    // Selection agreement on the same row.
    {
        lmt::cuda::launch_argmax_rows(dL, 1, kRows, false, nullptr, dKey, dBad, dOut, lst);
        lsync();
        uint32_t a = 0;
        CK(cudaMemcpy(&a, dOut, 4, cudaMemcpyDeviceToHost));
        int32_t b = 0;
        ggml_backend_graph_compute(be, g_am.gf);
        ggml_backend_tensor_get(g_am.out, &b, 0, 4);
        std::printf("argmax one row: lmtail %u ggml %d %s\n", a, b, (int64_t)a == b ? "(same)" : "(DIFFERENT)");
    }

    auto f = [](double ms) {
        char b[32];
        if (ms < 0) std::snprintf(b, sizeof b, "%9s", "n/a");
        else if (ms < 0.1) std::snprintf(b, sizeof b, "%7.1f us", ms * 1e3);
        else std::snprintf(b, sizeof b, "%7.3f ms", ms);
        return std::string(b);
    };
    auto ratio = [](double a, double b) {
        char s[16];
        if (a < 0 || b < 0) std::snprintf(s, sizeof s, "%6s", "-");
        else std::snprintf(s, sizeof s, "%5.2fx", b / a);
        return std::string(s);
    };
    std::printf("\n%s, copy BW %.0f GB/s measured above; weights %.1f MB; median of %d\n", prop.name, copy_gbs,
                wbytes / 1e6, reps);
    std::printf("| measurement | lmtail device | lmtail host | ggml device | ggml host | ggml/lmtail device | ggml/lmtail host | lmtail %% copy BW | ggml %% copy BW |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (const Row &r : rows) {
        char bw1[16] = "-", bw2[16] = "-";
        if (r.bytes > 0 && r.lm.dev_ms > 0) std::snprintf(bw1, sizeof bw1, "%.0f%%", 100.0 * r.bytes / (r.lm.dev_ms * 1e-3) / 1e9 / copy_gbs);
        if (r.bytes > 0 && r.gg.dev_ms > 0) std::snprintf(bw2, sizeof bw2, "%.0f%%", 100.0 * r.bytes / (r.gg.dev_ms * 1e-3) / 1e9 / copy_gbs);
        std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name.c_str(), f(r.lm.dev_ms).c_str(),
                    f(r.lm.host_ms).c_str(), f(r.gg.dev_ms).c_str(), f(r.gg.host_ms).c_str(),
                    ratio(r.lm.dev_ms, r.gg.dev_ms).c_str(), ratio(r.lm.host_ms, r.gg.host_ms).c_str(), bw1, bw2);
    }
    std::printf("(%% copy BW = weight bytes / device time / measured copy bandwidth; ggml host = one "
                "ggml_backend_graph_compute incl. launch and sync; lmtail host = launches or graph launch + sync)\n");
    return 0;
}
