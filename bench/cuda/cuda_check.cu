// CUDA backend check and benchmark on the seed's head (202048 x 6656 Q5_K): every kernel against
// the CPU backend, then device time (CUDA events) and host wall time of each stage and of the
// whole greedy tail captured in a CUDA graph; every weight type's matvec (accuracy, batch
// invariance, awkward shapes). Usage: lmtail_cuda_check [rows] [cols] [reps] [types|bench-types|bench-only]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/launch.hpp"
#include "lmtail/cpu.hpp"
#include "lmtail/weight_type.hpp"

using namespace lmt;

constexpr int kQ5K = 13;  // ggml type id

static double wall_ms(std::chrono::steady_clock::time_point a) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}

// Device time of one call of f between the events e0 and e1, in ms.
template <typename F>
static float event_ms(cudaEvent_t e0, cudaEvent_t e1, F &&f) {
    cudaEventRecord(e0);
    f();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms;
}

template <typename T>
static double median_of(std::vector<T> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <typename F>
static void time_it(const char *name, int reps, double bytes, F &&f) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; ++i) f();
    cudaDeviceSynchronize();
    std::vector<float> dev;
    std::vector<double> host;
    for (int i = 0; i < reps; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        dev.push_back(event_ms(e0, e1, f));
        host.push_back(wall_ms(t0));
    }
    const double d = median_of(dev), h = median_of(host);
    std::printf("%-44s device %9.4f ms  host %9.4f ms", name, d, h);
    if (bytes > 0) std::printf("  %7.1f GB/s", bytes / (d * 1e-3) / 1e9);
    std::printf("\n");
}

// Top-k sweep against the CPU backend: awkward n, k across the supported range, several rows,
// ties, signed zeros, infinities and NaN, misaligned rows; both the radix-select path (default)
// and the bitonic fallback (topk_force_bitonic_for_testing) must give the CPU's ids and value bits.
static int check_topk_sweep(int n_max, bool small) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    const float nan = std::nanf(""), inf = INFINITY;
    auto fill = [&](std::vector<float> &x, int pattern) {
        for (size_t i = 0; i < x.size(); ++i) {
            switch (pattern) {
            case 0: x[i] = nd(rng); break;                                    // distinct values
            case 1: x[i] = (float)((int)(rng() % 60) - 30); break;            // ties everywhere
            case 2: x[i] = (rng() & 1) ? 0.0f : -0.0f; break;                  // one value, two zeros
            case 3: {                                                          // specials among ties
                const uint32_t r = rng() % 16;
                x[i] = r == 0 ? nan : r == 1 ? inf : r == 2 ? -inf : r == 3 ? -0.0f : (float)((int)(rng() % 8) - 4);
                break;
            }
            case 4: x[i] = (float)(rng() % 3); break;                          // three values
            case 5: x[i] = (float)(i % 5000); break;                           // rising, top at the end
            case 6: x[i] = nan; break;                                         // NaN only
            case 7: x[i] = (rng() % 50 == 0) ? nd(rng) + 100.0f : nd(rng); break;  // a few outliers
            default: x[i] = (rng() % 100 == 0) ? nd(rng) : (rng() & 1) ? -inf : nan; break;  // k-th is -inf/NaN
            }
        }
    };
    std::vector<int> ns = {1, 3, 4, 5, 31, 100, 4095, 4096, 4097, 8191, 8193, 65537, 202047, 202048};
    std::vector<int> ks = small ? std::vector<int>{1, 2, 40, 41, 300, 2048} :
                                  std::vector<int>{1, 2, 7, 40, 41, 64, 100, 255, 256, 300, 377, 512, 1000, 2048};
    struct Case { int rows, n, k, pattern; bool misalign; };
    std::vector<Case> cases;
    int c = 0;
    for (int n : ns) {
        if (n > n_max) continue;
        for (int k : ks)
            if (k <= n) {
                cases.push_back({2, n, k, c % 8, c % 5 == 3});
                ++c;
            }
    }
    for (int p = 0; p < 9; ++p) cases.push_back({1, std::min(n_max, 202048), 40, p, false});
    for (Case e : {Case{2, 5, 5, 6, false}, Case{2, 33, 33, 6, false}, Case{2, 100, 100, 8, false},
                   Case{2, 4097, 40, 8, true}, Case{2, 4097, 300, 8, false}})
        cases.push_back(e);
    if (!small) {
        cases.push_back({1030, 300, 5, 1, false});   // more rows than one launch's arrival counters
        cases.push_back({8, 202048, 40, 0, false});
        cases.push_back({3, 202048, 300, 1, true});
    }
    int fails = 0, runs = 0;
    for (const Case &cs : cases) {
        std::vector<float> x((size_t)cs.rows * cs.n);
        fill(x, cs.pattern);
        std::vector<uint32_t> cids((size_t)cs.rows * cs.k), gids(cids.size());
        std::vector<float> cvals(cids.size()), gvals(cids.size());
        cpu::topk_rows(x.data(), cs.rows, cs.n, cs.k, cids.data(), cvals.data(), 1);
        float *dx;
        uint64_t *dscr;
        uint32_t *di;
        float *dv;
        LMT_CUDA_CHECK(cudaMalloc(&dx, (x.size() + 4) * 4));
        LMT_CUDA_CHECK(cudaMalloc(&dscr, cuda::topk_scratch_elems(cs.rows, cs.n, cs.k) * 8));
        LMT_CUDA_CHECK(cudaMalloc(&di, cids.size() * 4));
        LMT_CUDA_CHECK(cudaMalloc(&dv, cids.size() * 4));
        float *xin = dx + (cs.misalign ? 1 : 0);
        LMT_CUDA_CHECK(cudaMemcpy(xin, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        for (const char *path : {"radix", "bitonic"}) {
            cuda::topk_force_bitonic_for_testing(std::strcmp(path, "bitonic") == 0);
            for (int rep = 0; rep < 2; ++rep) {  // twice: the arrival counters must be reset
                LMT_CUDA_CHECK(cudaMemset(di, 0xFF, cids.size() * 4));
                cuda::launch_topk_rows(xin, cs.rows, cs.n, cs.k, dscr, di, dv, 0);
                LMT_CUDA_CHECK(cudaMemcpy(gids.data(), di, gids.size() * 4, cudaMemcpyDeviceToHost));
                LMT_CUDA_CHECK(cudaMemcpy(gvals.data(), dv, gvals.size() * 4, cudaMemcpyDeviceToHost));
                ++runs;
                if (gids != cids || std::memcmp(gvals.data(), cvals.data(), gvals.size() * 4) != 0) {
                    size_t at = 0;
                    while (at < gids.size() && gids[at] == cids[at]) ++at;
                    std::printf("top-k MISMATCH (%s) rows %d n %d k %d pattern %d misalign %d: first diff at %zu\n",
                                path, cs.rows, cs.n, cs.k, cs.pattern, (int)cs.misalign, at);
                    ++fails;
                }
            }
        }
        cuda::topk_force_bitonic_for_testing(false);
        cudaFree(dx);
        cudaFree(dscr);
        cudaFree(di);
        cudaFree(dv);
    }
    std::printf("top-k sweep: %zu cases, %d runs, %s\n", cases.size(), runs, fails ? "MISMATCH" : "all identical to CPU");
    return fails;
}

// ---- every weight type: accuracy, batch invariance, awkward shapes, non-finite propagation ----

struct Dev {
    void *p = nullptr;
    explicit Dev(size_t n) { LMT_CUDA_CHECK(cudaMalloc(&p, n ? n : 16)); }
    ~Dev() { cudaFree(p); }
    template <typename T> T *as() const { return static_cast<T *>(p); }
};

static const WeightTypeInfo &type_info(int id) {
    for (const auto &t : kWeightTypes)
        if ((int)t.type == id) return t;
    std::abort();
}

// One (type, rows, cols) case: T = 16 logits against a float64 reference of the dequantised weights
// (normwise <= 1e-6 from 1000 rows; per logit <= 4e-6 * sum |w x|), T = 1 .. 15 rows identical
// bytes to the T = 16 batch's rows, non-finite activations give non-finite logits.
static int check_type_case(int type, int rows, int cols, std::mt19937 &rng) {
    const WeightTypeInfo &ti = type_info(type);
    const size_t rb = (size_t)cols / ti.block_elems * ti.block_bytes, stride = (rb + 15) / 16 * 16;
    std::normal_distribution<float> nd(0.0f, 0.02f), xd(0.0f, 2.0f);
    std::vector<float> wf((size_t)rows * cols);
    for (auto &v : wf) v = nd(rng);
    std::vector<uint8_t> q((size_t)rows * rb);
    cpu::quantize(ti.type, wf.data(), q.data(), rows, cols);
    std::vector<float> wd((size_t)rows * cols);
    cpu::dequantize(ti.type, q.data(), wd.data(), rows, cols);
    const int T = 16;
    std::vector<float> x((size_t)T * cols);
    for (auto &v : x) v = xd(rng);
    for (int t = 0; t < T; ++t) x[(size_t)t * cols + (7 * t) % cols] *= 40.0f;  // a few large activations
    Dev dw((size_t)rows * stride), dx(x.size() * 4), dy((size_t)T * rows * 4), d1((size_t)T * rows * 4);
    LMT_CUDA_CHECK(cudaMemcpy2D(dw.p, stride, q.data(), rb, rb, rows, cudaMemcpyHostToDevice));
    LMT_CUDA_CHECK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    cuda::launch_mul_mv(type, dw.as<uint8_t>(), stride, rows, cols, dx.as<float>(), T, dy.as<float>(), 0);
    std::vector<float> y((size_t)T * rows), yb((size_t)T * rows);
    LMT_CUDA_CHECK(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0, worst = 0;
    for (int t = 0; t < T; ++t)
        for (int r = 0; r < rows; ++r) {
            double acc = 0, mag = 0;
            for (int c = 0; c < cols; ++c) {
                const double p = (double)wd[(size_t)r * cols + c] * (double)x[(size_t)t * cols + c];
                acc += p;
                mag += std::fabs(p);
            }
            const double e = (double)y[(size_t)t * rows + r] - acc;
            num += e * e;
            den += acc * acc;
            if (mag > 0) worst = std::max(worst, std::fabs(e) / mag);
        }
    const double rel = std::sqrt(num / den);
    const bool acc_ok = (rows < 1000 || rel <= 1e-6) && worst <= 4e-6;
    // Batch invariance: the first n tokens alone give the T = 16 batch's first n rows, byte for byte.
    bool inv = true;
    for (int n = 1; n < T; ++n) {
        cuda::launch_mul_mv(type, dw.as<uint8_t>(), stride, rows, cols, dx.as<float>(), n, d1.as<float>(), 0);
        LMT_CUDA_CHECK(cudaMemcpy(yb.data(), d1.p, (size_t)n * rows * 4, cudaMemcpyDeviceToHost));
        inv &= std::memcmp(yb.data(), y.data(), (size_t)n * rows * 4) == 0;
    }
    // Token t alone (not only the first ones): T = 1 on x row 11.
    cuda::launch_mul_mv(type, dw.as<uint8_t>(), stride, rows, cols, dx.as<float>() + 11 * (size_t)cols, 1,
                        d1.as<float>(), 0);
    LMT_CUDA_CHECK(cudaMemcpy(yb.data(), d1.p, (size_t)rows * 4, cudaMemcpyDeviceToHost));
    inv &= std::memcmp(yb.data(), y.data() + 11 * (size_t)rows, (size_t)rows * 4) == 0;
    // Non-finite activation: every logit of that row non-finite (the greedy latch then fires).
    bool nf = true;
    for (float bad : {INFINITY, -INFINITY, std::nanf("")}) {
        std::vector<float> xb(x.begin(), x.begin() + cols);
        xb[(size_t)(rng() % cols)] = bad;
        LMT_CUDA_CHECK(cudaMemcpy(dx.p, xb.data(), (size_t)cols * 4, cudaMemcpyHostToDevice));
        cuda::launch_mul_mv(type, dw.as<uint8_t>(), stride, rows, cols, dx.as<float>(), 1, d1.as<float>(), 0);
        LMT_CUDA_CHECK(cudaMemcpy(yb.data(), d1.p, (size_t)rows * 4, cudaMemcpyDeviceToHost));
        for (int r = 0; r < rows; ++r) nf &= !std::isfinite(yb[r]);
    }
    const bool ok = acc_ok && inv && nf;
    std::printf("type %-4s %6d x %-5d rel L2 vs f64 %.2e, worst |err|/sum|wx| %.2e, T=1..15 identical to T=16 rows: %s, "
                "non-finite x -> non-finite: %s %s\n",
                ti.name, rows, cols, rel, worst, inv ? "yes" : "NO", nf ? "yes" : "NO", ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// only: null for every type, else the type names to check (e.g. "Q4_K,Q8_0": a sanitizer's run).
static int check_types(const char *only) {
    std::mt19937 rng(5);
    int fails = 0;
    for (int type : cuda::mul_mv_types()) {
        if (only != nullptr && ("," + std::string(only) + ",").find("," + std::string(type_info(type).name) + ",") == std::string::npos)
            continue;
        const bool k = type_info(type).block_elems == 256;
        const std::vector<int> colss = k ? std::vector<int>{256, 768, 1280} : std::vector<int>{640, 896, 256};
        for (int cols : colss)
            for (int rows : {1, 9, 13, 1003}) fails += check_type_case(type, rows, cols, rng);
        fails += check_type_case(type, 1003, k ? 6656 : 6656 + 32, rng);
    }
    // Bad shapes are refused (not computed wrong).
    bool refused = false;
    try {
        cuda::launch_mul_mv(kQ5K, nullptr, 176, 1, 320, nullptr, 1, nullptr, 0);
    } catch (const std::invalid_argument &) {
        refused = true;
    }
    std::printf("Q5_K cols 320 refused: %s\n", refused ? "yes" : "NO");
    fails += !refused;
    std::printf("every type: %s\n", fails ? "FAIL" : "all ok");
    return fails;
}

// The device-to-device copy bandwidth (read + write bytes, 2 GiB, median of 11), printed.
static double copy_bandwidth_gbs() {
    const size_t n = (size_t)1 << 31;
    Dev a(n), b(n);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    for (int i = 0; i < 11; ++i) ms.push_back(event_ms(e0, e1, [&] { cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice); }));
    const double gbs = 2.0 * n / (median_of(ms) * 1e-3) / 1e9;
    std::printf("copy bandwidth (device-to-device, read + write, 2 GiB): %.0f GB/s\n", gbs);
    return gbs;
}

// Per-type speed at rows x cols (a 4096-row slab tiled), T = 1, 2, 4, 8, 16, against the
// device-to-device copy bandwidth measured here (read + write bytes).
static void bench_types(int rows, int cols, int reps) {
    const double copy_gbs = copy_bandwidth_gbs();
    std::printf("| type | weights MB | floor ms | T=1 ms (%% copy) | T=2 | T=4 | T=8 | T=16 |\n|---|---|---|---|---|---|---|---|\n");
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 0.02f), xd(0.0f, 1.0f);
    std::vector<float> x((size_t)16 * cols);
    for (auto &v : x) v = xd(rng);
    Dev dx(x.size() * 4), dy((size_t)16 * rows * 4);
    LMT_CUDA_CHECK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    for (int type : cuda::mul_mv_types()) {
        const WeightTypeInfo &ti = type_info(type);
        const int slab = std::min(rows, 4096);
        const size_t rb = (size_t)cols / ti.block_elems * ti.block_bytes, stride = (rb + 15) / 16 * 16;
        std::vector<float> wf((size_t)slab * cols);
        for (auto &v : wf) v = nd(rng);
        std::vector<uint8_t> q((size_t)slab * rb);
        cpu::quantize(ti.type, wf.data(), q.data(), slab, cols);
        Dev dw((size_t)rows * stride);
        for (int r0 = 0; r0 < rows; r0 += slab)
            LMT_CUDA_CHECK(cudaMemcpy2D(dw.as<uint8_t>() + (size_t)r0 * stride, stride, q.data(), rb, rb,
                                        std::min(slab, rows - r0), cudaMemcpyHostToDevice));
        const double bytes = (double)rows * rb;
        std::printf("| %s | %.1f | %.3f |", ti.name, bytes / 1e6, bytes / (copy_gbs * 1e9) * 1e3);
        for (int T : {1, 2, 4, 8, 16}) {
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            auto go = [&] { cuda::launch_mul_mv(type, dw.as<uint8_t>(), stride, rows, cols, dx.as<float>(), T, dy.as<float>(), 0); };
            for (int i = 0; i < 3; ++i) go();
            std::vector<float> ms;
            for (int i = 0; i < reps; ++i) ms.push_back(event_ms(e0, e1, go));
            const double m = median_of(ms);
            std::printf(" %.3f (%.0f%%) |", m, 100.0 * bytes / (m * 1e-3) / 1e9 / copy_gbs);
        }
        std::printf("\n");
        std::fflush(stdout);
    }
    std::printf("(median of %d, CUDA events; %% copy = weight bytes / time / copy bandwidth; T=16 is two launches of 8)\n", reps);
}

// A/B of the quantised types: A = the f32 CUDA-core kernel (forced), B = the product (integer
// tensor cores), interleaved A B A B per (type, T), medians of reps each.
static void bench_ab(int rows, int cols, int reps, bool all_t) {
    const double copy_gbs = copy_bandwidth_gbs();
    std::printf("| type | floor ms | T | f32 kernel ms (%% copy) | imma ms (%% copy) | B/A |\n|---|---|---|---|---|---|\n");
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 0.02f), xd(0.0f, 1.0f);
    std::vector<float> x((size_t)16 * cols);
    for (auto &v : x) v = xd(rng);
    Dev dx(x.size() * 4), dy((size_t)16 * rows * 4);
    LMT_CUDA_CHECK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int type : cuda::mul_mv_types()) {
        const WeightTypeInfo &ti = type_info(type);
        if (ti.block_elems == 1) continue;
        const int slab = std::min(rows, 4096);
        const size_t rb = (size_t)cols / ti.block_elems * ti.block_bytes, stride = (rb + 15) / 16 * 16;
        std::vector<float> wf((size_t)slab * cols);
        for (auto &v : wf) v = nd(rng);
        std::vector<uint8_t> q((size_t)slab * rb);
        cpu::quantize(ti.type, wf.data(), q.data(), slab, cols);
        Dev dw((size_t)rows * stride);
        for (int r0 = 0; r0 < rows; r0 += slab)
            LMT_CUDA_CHECK(cudaMemcpy2D(dw.as<uint8_t>() + (size_t)r0 * stride, stride, q.data(), rb, rb,
                                        std::min(slab, rows - r0), cudaMemcpyHostToDevice));
        const double bytes = (double)rows * rb;
        for (int T : {1, 2, 4, 8, 16}) {
            if (!all_t && T != 1 && T != 8) continue;
            auto go = [&](bool f32) {
                cuda::mul_mv_force_f32_for_testing(f32);
                cuda::launch_mul_mv(type, dw.as<uint8_t>(), stride, rows, cols, dx.as<float>(), T, dy.as<float>(), 0);
            };
            for (int i = 0; i < 3; ++i) { go(true); go(false); }
            std::vector<float> ma, mb;
            for (int i = 0; i < reps; ++i)
                for (int v = 0; v < 2; ++v) (v == 0 ? ma : mb).push_back(event_ms(e0, e1, [&] { go(v == 0); }));
            cuda::mul_mv_force_f32_for_testing(false);
            const double a = median_of(ma), b = median_of(mb);
            std::printf("| %s | %.3f | %d | %.3f (%.0f%%) | %.3f (%.0f%%) | %.2f |\n", ti.name, bytes / (copy_gbs * 1e9) * 1e3, T,
                        a, 100.0 * bytes / (a * 1e-3) / 1e9 / copy_gbs, b, 100.0 * bytes / (b * 1e-3) / 1e9 / copy_gbs, b / a);
            std::fflush(stdout);
        }
    }
    std::printf("(median of %d each, interleaved, CUDA events around one launch_mul_mv; T=16 is two launches of 8)\n", reps);
}

int main(int argc, char **argv) {
    const int rows = argc > 1 ? std::atoi(argv[1]) : 202048;
    const int cols = argc > 2 ? std::atoi(argv[2]) : 6656;
    const int reps = argc > 3 ? std::atoi(argv[3]) : 51;
    // Modes: "types" (every weight type's checks only; a fifth argument keeps the types it names),
    // "bench-types" (+ the per-type speed table).
    const char *mode = argc > 4 ? argv[4] : "";
    if (std::strcmp(mode, "ab") == 0 || std::strcmp(mode, "ab18") == 0) {
        bench_ab(rows, cols, reps, std::strcmp(mode, "ab") == 0);
        return 0;
    }
    if (std::strcmp(mode, "bench-only") == 0) {  // the per-type table alone (bench/cuda/mv_sweep.sh)
        bench_types(rows, cols, reps);
        return 0;
    }
    if (std::strcmp(mode, "types") == 0 || std::strcmp(mode, "bench-types") == 0) {
        int f = check_types(argc > 5 ? argv[5] : nullptr);
        if (std::strcmp(mode, "bench-types") == 0) bench_types(rows, cols, reps);
        std::printf("%s (%d failures)\n", f ? "FAILED" : "ALL CHECKS PASSED", f);
        return f ? 1 : 0;
    }
    if (rows < 200 || cols % 256 != 0) {
        std::fprintf(stderr, "need rows >= 200 and cols a multiple of 256\n");
        return 2;
    }
    const int slab = std::min(rows, 4096);
    const size_t row_bytes = (size_t)cols / 256 * 176;
    std::mt19937 rng(42);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> wf((size_t)slab * cols);
    for (auto &v : wf) v = nd(rng);
    std::vector<uint8_t> q((size_t)rows * row_bytes);
    cpu::quantize_q5_k(wf.data(), q.data(), slab, cols);
    for (int r = slab; r < rows; ++r) std::memcpy(&q[(size_t)r * row_bytes], &q[(size_t)(r % slab) * row_bytes], row_bytes);
    const int Tmax = 8;
    std::vector<float> hidden((size_t)Tmax * cols), gamma(cols);
    std::normal_distribution<float> hn(0.0f, 2.0f);
    for (auto &v : hidden) v = hn(rng);
    for (auto &v : gamma) v = 0.8f + 0.4f * (float)(rng() % 1000) / 1000.0f;
    const float s = 0.196116f, cap = 20.0f;

    // CPU reference (lmtail's CPU backend).
    std::vector<float> normed((size_t)Tmax * cols), ref((size_t)Tmax * rows);
    cpu::rms_norm(hidden.data(), gamma.data(), normed.data(), Tmax, cols, 1e-5f);
    // The f32 reference CUDA reproduces (the CPU default is i24).
    cpu::matvec_q5_k(q.data(), rows, cols, row_bytes, normed.data(), Tmax, ref.data(), 0, cpu::Isa::Auto,
                     cpu::Precision::F32);
    std::vector<float> ref_capped = ref;
    cpu::softcap(ref_capped.data(), (int64_t)Tmax * rows, s, cap, true);
    std::vector<uint32_t> ref_arg(Tmax);
    cpu::argmax_rows(ref_capped.data(), Tmax, rows, ref_arg.data());

    // Device buffers.
    uint8_t *dW;
    float *dH, *dG, *dN, *dL;
    uint64_t *dKey, *dTopScratch;
    uint32_t *dBad, *dOut, *dIds;
    float *dVals;
    const int n_chunks = (rows + 1023) / 1024;
    const int K = 40;
    LMT_CUDA_CHECK(cudaMalloc(&dW, q.size()));
    LMT_CUDA_CHECK(cudaMalloc(&dH, hidden.size() * 4));
    LMT_CUDA_CHECK(cudaMalloc(&dG, gamma.size() * 4));
    LMT_CUDA_CHECK(cudaMalloc(&dN, normed.size() * 4));
    LMT_CUDA_CHECK(cudaMalloc(&dL, ref.size() * 4));
    LMT_CUDA_CHECK(cudaMalloc(&dKey, (size_t)Tmax * n_chunks * 8));
    LMT_CUDA_CHECK(cudaMalloc(&dBad, (size_t)Tmax * n_chunks * 4));
    LMT_CUDA_CHECK(cudaMalloc(&dOut, Tmax * 4));
    LMT_CUDA_CHECK(cudaMalloc(&dTopScratch, cuda::topk_scratch_elems(Tmax, rows, K) * 8));
    LMT_CUDA_CHECK(cudaMalloc(&dIds, (size_t)Tmax * K * 4));
    LMT_CUDA_CHECK(cudaMalloc(&dVals, (size_t)Tmax * K * 4));
    LMT_CUDA_CHECK(cudaMemcpy(dW, q.data(), q.size(), cudaMemcpyHostToDevice));
    LMT_CUDA_CHECK(cudaMemcpy(dH, hidden.data(), hidden.size() * 4, cudaMemcpyHostToDevice));
    LMT_CUDA_CHECK(cudaMemcpy(dG, gamma.data(), gamma.size() * 4, cudaMemcpyHostToDevice));
    cudaStream_t st = 0;

    // ---- correctness ----
    int fails = 0;
    cuda::launch_rms_norm(dH, dG, dN, Tmax, cols, 1e-5f, st);
    std::vector<float> gN(normed.size());
    cudaMemcpy(gN.data(), dN, gN.size() * 4, cudaMemcpyDeviceToHost);
    size_t norm_eq = 0;
    for (size_t i = 0; i < gN.size(); ++i) norm_eq += std::memcmp(&gN[i], &normed[i], 4) == 0;
    std::printf("rms_norm: %zu / %zu values bit-identical to CPU\n", norm_eq, gN.size());
    for (int T : {1, 3, 8}) {
        cudaMemcpy(dN, normed.data(), (size_t)T * cols * 4, cudaMemcpyHostToDevice);  // same input as the CPU ref
        cuda::launch_mul_mv(kQ5K, dW, row_bytes, rows, cols, dN, T, dL, st);
        std::vector<float> g((size_t)T * rows);
        cudaMemcpy(g.data(), dL, g.size() * 4, cudaMemcpyDeviceToHost);
        double num = 0, den = 0;
        for (int t = 0; t < T; ++t)
            for (int r = 0; r < rows; ++r) {
                const double a = g[(size_t)t * rows + r], b = ref[(size_t)t * rows + r];
                num += (a - b) * (a - b);
                den += b * b;
            }
        const double rel = std::sqrt(num / den);
        std::printf("matvec T=%d: rel L2 vs CPU %.3e %s\n", T, rel, rel < 1e-6 ? "ok" : "FAIL");
        fails += rel >= 1e-6;
    }
    cudaMemcpy(dN, normed.data(), normed.size() * 4, cudaMemcpyHostToDevice);
    cuda::launch_mul_mv(kQ5K, dW, row_bytes, rows, cols, dN, Tmax, dL, st);
    cuda::launch_softcap(dL, (int64_t)Tmax * rows, s, cap, true, st);
    cuda::launch_argmax_rows(dL, Tmax, rows, true, nullptr, dKey, dBad, dOut, st);
    std::vector<uint32_t> garg(Tmax);
    cudaMemcpy(garg.data(), dOut, Tmax * 4, cudaMemcpyDeviceToHost);
    for (int t = 0; t < Tmax; ++t) {
        if (garg[t] != ref_arg[t]) {
            std::printf("greedy row %d: gpu %u cpu %u FAIL\n", t, garg[t], ref_arg[t]);
            ++fails;
        }
    }
    // Fused soft cap + greedy argmax (the graph tail's last kernel) on the same pre-cap logits.
    cuda::launch_mul_mv(kQ5K, dW, row_bytes, rows, cols, dN, Tmax, dL, st);
    cuda::launch_greedy_softcap_argmax(dL, Tmax, rows, s, cap, nullptr, dKey, dBad, dOut, st);
    cudaMemcpy(garg.data(), dOut, Tmax * 4, cudaMemcpyDeviceToHost);
    for (int t = 0; t < Tmax; ++t) {
        if (garg[t] != ref_arg[t]) {
            std::printf("fused cap+greedy row %d: gpu %u cpu %u FAIL\n", t, garg[t], ref_arg[t]);
            ++fails;
        }
    }
    // argmax/top-k on identical inputs (the CPU's capped logits) must agree exactly.
    cudaMemcpy(dL, ref_capped.data(), ref_capped.size() * 4, cudaMemcpyHostToDevice);
    cuda::launch_topk_rows(dL, Tmax, rows, K, dTopScratch, dIds, dVals, st);
    std::vector<uint32_t> gids((size_t)Tmax * K), cids((size_t)Tmax * K);
    std::vector<float> cvals((size_t)Tmax * K);
    cudaMemcpy(gids.data(), dIds, gids.size() * 4, cudaMemcpyDeviceToHost);
    cpu::topk_rows(ref_capped.data(), Tmax, rows, K, cids.data(), cvals.data());
    std::printf("top-%d: %s\n", K, gids == cids ? "identical to CPU" : "MISMATCH");
    fails += gids != cids;
    fails += check_topk_sweep(rows, rows < 100000);
    fails += check_types(nullptr);
    // ties + NaN latch + exclusion on a crafted row
    {
        std::vector<float> row(rows, 0.0f);
        const int ia = rows / 3, ib = rows / 100, ic = rows - 5, inan = rows / 2;  // ib < ia < ic
        row[ia] = 5.0f;
        row[ib] = 5.0f;
        row[ic] = 5.0f;
        std::vector<uint32_t> mask((rows + 31) / 32, 0);
        uint32_t *dMask;
        cudaMalloc(&dMask, mask.size() * 4);
        cudaMemcpy(dL, row.data(), rows * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dMask, mask.data(), mask.size() * 4, cudaMemcpyHostToDevice);
        uint32_t r1, r2, r3;
        cuda::launch_argmax_rows(dL, 1, rows, true, dMask, dKey, dBad, dOut, st);
        cudaMemcpy(&r1, dOut, 4, cudaMemcpyDeviceToHost);
        mask[ib / 32] |= 1u << (ib % 32);
        cudaMemcpy(dMask, mask.data(), mask.size() * 4, cudaMemcpyHostToDevice);
        cuda::launch_argmax_rows(dL, 1, rows, true, dMask, dKey, dBad, dOut, st);
        cudaMemcpy(&r2, dOut, 4, cudaMemcpyDeviceToHost);
        const float nan = std::nanf("");
        cudaMemcpy(dL + inan, &nan, 4, cudaMemcpyHostToDevice);
        cuda::launch_argmax_rows(dL, 1, rows, true, dMask, dKey, dBad, dOut, st);
        cudaMemcpy(&r3, dOut, 4, cudaMemcpyDeviceToHost);
        const bool ok = r1 == (uint32_t)ib && r2 == (uint32_t)ia && r3 == 0xFFFFFFFFu;
        std::printf("ties/exclusion/latch: %u %u 0x%08x %s\n", r1, r2, r3, ok ? "ok" : "FAIL");
        fails += !ok;
        cudaFree(dMask);
    }
    LMT_CUDA_CHECK(cudaDeviceSynchronize());

    // ---- speed ----
    const double wbytes = (double)q.size();
    cudaMemcpy(dN, normed.data(), normed.size() * 4, cudaMemcpyHostToDevice);
    for (int T : {1, 4, 8}) {
        char name[64];
        std::snprintf(name, sizeof name, "head matvec T=%d", T);
        time_it(name, reps, wbytes, [&] { cuda::launch_mul_mv(kQ5K, dW, row_bytes, rows, cols, dN, T, dL, st); });
    }
    time_it("argmax one row (2 phases)", reps, 0, [&] { cuda::launch_argmax_rows(dL, 1, rows, false, nullptr, dKey, dBad, dOut, st); });
    time_it("top-40 one row", reps, 0, [&] { cuda::launch_topk_rows(dL, 1, rows, K, dTopScratch, dIds, dVals, st); });
    cuda::topk_force_bitonic_for_testing(true);
    time_it("top-40 one row [bitonic, before]", reps, 0, [&] { cuda::launch_topk_rows(dL, 1, rows, K, dTopScratch, dIds, dVals, st); });
    cuda::topk_force_bitonic_for_testing(false);
    time_it("top-40 8 rows", reps, 0, [&] { cuda::launch_topk_rows(dL, 8, rows, K, dTopScratch, dIds, dVals, st); });
    {
        uint64_t *dS;
        uint32_t *dI;
        float *dV;
        LMT_CUDA_CHECK(cudaMalloc(&dS, cuda::topk_scratch_elems(1, rows, 2048) * 8));
        LMT_CUDA_CHECK(cudaMalloc(&dI, 2048 * 4));
        LMT_CUDA_CHECK(cudaMalloc(&dV, 2048 * 4));
        for (int kk : {1, 8, 100, 256, 370, 512, 2048}) {
            if (kk > rows) continue;
            char name[64];
            std::snprintf(name, sizeof name, "top-%d one row", kk);
            time_it(name, reps, 0, [&] { cuda::launch_topk_rows(dL, 1, rows, kk, dS, dI, dV, st); });
        }
        cudaFree(dS);
        cudaFree(dI);
        cudaFree(dV);
    }
    time_it("soft cap four nodes one row", reps, 0, [&] { cuda::launch_softcap(dL, rows, s, cap, true, st); });
    // Whole greedy tail as a CUDA graph: norm, head, cap (4 nodes), argmax (2), 4-byte read-back.
    uint32_t *hOut;
    cudaMallocHost(&hOut, 64);
    for (int T : {1, 8}) {
        cudaStream_t cs;
        cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal);
        cuda::launch_rms_norm(dH, dG, dN, T, cols, 1e-5f, cs);
        cuda::launch_mul_mv(kQ5K, dW, row_bytes, rows, cols, dN, T, dL, cs);
        cuda::launch_softcap(dL, (int64_t)T * rows, s, cap, true, cs);
        cuda::launch_argmax_rows(dL, T, rows, true, nullptr, dKey, dBad, dOut, cs);
        cudaMemcpyAsync(hOut, dOut, 4 * T, cudaMemcpyDeviceToHost, cs);
        cudaStreamEndCapture(cs, &graph);
        LMT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        char name[64];
        std::snprintf(name, sizeof name, "greedy tail graph T=%d (4 B/row back)", T);
        time_it(name, reps, wbytes, [&] { cudaGraphLaunch(exec, 0); cudaStreamSynchronize(0); });
        // Host wall time of launch + sync alone, as a user sees it:
        std::vector<double> hw;
        for (int i = 0; i < reps; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            cudaGraphLaunch(exec, cs);
            cudaStreamSynchronize(cs);
            hw.push_back(wall_ms(t0));
        }
        std::sort(hw.begin(), hw.end());
        std::printf("%-44s host  %9.4f ms (launch + sync, median)\n", "", hw[hw.size() / 2]);
        if (T == 1) std::printf("greedy token via graph: %u (cpu %u)\n", hOut[0], ref_arg[0]);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(cs);
    }
    std::printf("%s (%d failures)\n", fails ? "FAILED" : "ALL CHECKS PASSED", fails);
    return fails ? 1 : 0;
}
