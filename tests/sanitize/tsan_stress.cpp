// Thread-sanitizer stress test of the threaded C++ core (tools/sanitize.sh builds it with
// -DLMTAIL_TSAN=ON and runs it; never part of the Python build).
//
// Every kernel that runs on the thread pool (csrc/core/thread_pool.cpp) or starts its own
// threads (quantize/dequantize) is called from several caller threads at once, each asking for
// a different number of pool threads, and every result is compared byte for byte with the same
// call run single-threaded before any concurrency started. TSan reports a data race, the byte
// comparison a wrong result (a race TSan cannot see, e.g. through a stale buffer).
//
// Usage: lmtail_tsan_stress [callers=4] [rounds=6]    exit 0: clean; 1: a mismatch (TSan itself
// exits 66 on a report, set by tools/sanitize.sh through TSAN_OPTIONS=exitcode=66).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu/bandwidth.hpp"
#include "cpu/sampling.hpp"
#include "cpu/speculative.hpp"
#include "lmtail/cpu.hpp"

namespace {

using Bytes = std::vector<uint8_t>;

template <class T>
Bytes bytes_of(const std::vector<T> &v) {
    Bytes b(v.size() * sizeof(T));
    if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
}
template <class T>
void append(Bytes &b, const T &v) {
    const auto *p = reinterpret_cast<const uint8_t *>(&v);
    b.insert(b.end(), p, p + sizeof(T));
}

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto &x : v) x = d(g);
    return v;
}

struct Case {
    std::string name;
    std::function<Bytes(int n_threads)> run;  // allocates its outputs: callers share only inputs
    Bytes want;
};

// Shared, read-only inputs (sizes chosen so every kernel splits into several tasks).
struct Inputs {
    static constexpr int64_t rows = 1000, cols = 512, T = 3;  // matvec: 16 tasks of 64 rows
    static constexpr int64_t row_bytes = cols / 256 * 176;
    std::vector<uint8_t> w;                                    // rows x row_bytes (Q5_K)
    std::vector<float> x = randn(T * cols, 2);                 // activations
    std::vector<float> big = randn(150000, 3, 4.0f);           // one long row: 3 argmax chunks
    std::vector<float> rowsx = randn(8 * 20000, 4, 4.0f);      // 8 rows of 20000
    std::vector<float> scan = randn((1 << 20) + 5000, 5);      // all_finite: 2 tasks of 1 Mi
    std::vector<float> scan_bad;                               // same, a NaN in the last task
    std::vector<float> qsrc = randn(64 * 512, 6, 0.05f);       // quantize: 64 rows x 512, 8 threads
    std::vector<uint8_t> qdst_ref;                             // dequantize input: 2048 x 512, 4 threads
    std::vector<uint8_t> bw = std::vector<uint8_t>(4 << 20);   // read_bytes_checksum: 16 tasks
    std::vector<uint32_t> excluded;
    std::vector<float> probs;                                  // 4 rows x 150000 probabilities

    std::vector<float> wf = randn(rows * cols, 1, 0.05f);         // the weights before quantisation

    Inputs() {
        w.resize((size_t)(rows * row_bytes));
        lmt::cpu::quantize_q5_k(wf.data(), w.data(), rows, cols, 1);
        scan_bad = scan;
        scan_bad[scan_bad.size() - 7] = NAN;
        std::vector<float> dq = randn(2048 * 512, 7, 0.05f);
        qdst_ref.resize(2048 * 2 * 176);
        lmt::cpu::quantize_q5_k(dq.data(), qdst_ref.data(), 2048, 512, 1);
        for (size_t i = 0; i < bw.size(); ++i) bw[i] = (uint8_t)(i * 2654435761u >> 13);
        // Exclude the true maximum of the long row and of row 0, so the exclusion path matters.
        excluded = {lmt::cpu::argmax(big.data(), (int64_t)big.size(), 1), 17, 42};
        probs = randn(4 * 150000, 8);
        for (auto &p : probs) p = std::fabs(p) * 1e-5f;
    }
};

std::vector<Case> make_cases(const Inputs &in) {
    using namespace lmt::cpu;
    std::vector<Case> cs;
    const Precision precs[] = {Precision::F32, Precision::I16, Precision::I24};
    for (Precision p : precs)
        for (int64_t T : {(int64_t)1, Inputs::T}) {
            cs.push_back({std::string("matvec_q5_k ") + precision_name(p) + " T=" + std::to_string(T),
                          [&in, p, T](int nt) {
                              std::vector<float> y((size_t)(T * Inputs::rows));
                              matvec_q5_k(in.w.data(), Inputs::rows, Inputs::cols, Inputs::row_bytes, in.x.data(),
                                          T, y.data(), nt, Isa::Auto, p);
                              return bytes_of(y);
                          },
                          {}});
        }
    // Every other weight type through the one typed entry: matvec at each precision its row
    // lists, quantize and dequantize (weights quantised once, shared read-only by the cases).
    for (const lmt::WeightTypeInfo &info : lmt::kWeightTypes) {
        const lmt::WeightType t = info.type;
        if (!type_supported(t) || t == lmt::WeightType::Q5_K) continue;
        const int64_t rb = (int64_t)row_bytes(t, Inputs::cols);
        auto w = std::make_shared<std::vector<uint8_t>>((size_t)(Inputs::rows * rb));
        quantize(t, in.wf.data(), w->data(), Inputs::rows, Inputs::cols, 1);
        for (int pi = 0; pi < 32; ++pi) {
            if (!(type_precisions(t) & (1u << pi))) continue;
            const Precision p = (Precision)pi;
            for (int64_t T : {(int64_t)1, Inputs::T})
                cs.push_back({std::string("matvec ") + info.name + " " + precision_name(p) + " T=" + std::to_string(T),
                              [&in, w, t, rb, p, T](int nt) {
                                  std::vector<float> y((size_t)(T * Inputs::rows));
                                  matvec(t, w->data(), Inputs::rows, Inputs::cols, (size_t)rb, in.x.data(), T,
                                         y.data(), nt, Isa::Auto, p);
                                  return bytes_of(y);
                              },
                              {}});
        }
        cs.push_back({std::string("quantize ") + info.name, [&in, t, rb](int nt) {
                          std::vector<uint8_t> q((size_t)(Inputs::rows * rb));
                          quantize(t, in.wf.data(), q.data(), Inputs::rows, Inputs::cols, nt);
                          return q;
                      }, {}});
        cs.push_back({std::string("dequantize ") + info.name, [w, t](int nt) {
                          std::vector<float> y((size_t)(Inputs::rows * Inputs::cols));
                          dequantize(t, w->data(), y.data(), Inputs::rows, Inputs::cols, nt);
                          return bytes_of(y);
                      }, {}});
    }
    cs.push_back({"argmax", [&in](int nt) {
                      Bytes b;
                      append(b, argmax(in.big.data(), (int64_t)in.big.size(), nt));
                      return b;
                  }, {}});
    cs.push_back({"greedy_argmax", [&in](int nt) {
                      Bytes b;
                      append(b, greedy_argmax(in.big.data(), (int64_t)in.big.size(), in.excluded.data(),
                                              (int64_t)in.excluded.size(), nt));
                      return b;
                  }, {}});
    cs.push_back({"argmax_rows", [&in](int nt) {
                      std::vector<uint32_t> out(8);
                      argmax_rows(in.rowsx.data(), 8, 20000, out.data(), nt);
                      return bytes_of(out);
                  }, {}});
    cs.push_back({"greedy_argmax_rows", [&in](int nt) {
                      std::vector<uint32_t> out(8);
                      greedy_argmax_rows(in.rowsx.data(), 8, 20000, in.excluded.data() + 1, 2, out.data(), nt);
                      return bytes_of(out);
                  }, {}});
    cs.push_back({"topk_rows", [&in](int nt) {
                      std::vector<uint32_t> ids(8 * 40);
                      std::vector<float> vals(8 * 40);
                      topk_rows(in.rowsx.data(), 8, 20000, 40, ids.data(), vals.data(), nt);
                      Bytes b = bytes_of(ids), v = bytes_of(vals);
                      b.insert(b.end(), v.begin(), v.end());
                      return b;
                  }, {}});
    cs.push_back({"all_finite", [&in](int nt) {
                      Bytes b;
                      append(b, all_finite(in.scan.data(), (int64_t)in.scan.size(), nt));
                      append(b, all_finite(in.scan_bad.data(), (int64_t)in.scan_bad.size(), nt));
                      return b;
                  }, {}});
    for (bool four : {true, false})
        cs.push_back({std::string("softcap four_pass=") + (four ? "1" : "0"), [&in, four](int nt) {
                          std::vector<float> y = in.big;
                          softcap(y.data(), (int64_t)y.size(), 0.5f, 30.0f, four, nt);
                          return bytes_of(y);
                      }, {}});
    cs.push_back({"scale+tanh", [&in](int nt) {
                      std::vector<float> y = in.big;
                      scale(y.data(), (int64_t)y.size(), 0.25f, nt);
                      lmt::cpu::tanh(y.data(), (int64_t)y.size(), nt);
                      return bytes_of(y);
                  }, {}});
    cs.push_back({"quantize_q5_k", [&in](int nt) {
                      std::vector<uint8_t> q(64 * 2 * 176);
                      quantize_q5_k(in.qsrc.data(), q.data(), 64, 512, nt);
                      return q;
                  }, {}});
    cs.push_back({"dequantize_q5_k", [&in](int nt) {
                      std::vector<float> y(2048 * 512);
                      dequantize_q5_k(in.qdst_ref.data(), y.data(), 2048, 512, nt);
                      return bytes_of(y);
                  }, {}});
    cs.push_back({"read_bytes_checksum", [&in](int nt) {
                      Bytes b;
                      append(b, read_bytes_checksum(in.bw.data(), in.bw.size(), nt));
                      return b;
                  }, {}});
    cs.push_back({"spec::rows_stats", [&in](int nt) {
                      std::vector<double> sums(4);
                      std::vector<size_t> bad(4);
                      lmt::spec::rows_stats(in.probs.data(), 4, 150000, 150000, sums.data(), bad.data(), nt);
                      Bytes b = bytes_of(sums), c = bytes_of(bad);
                      b.insert(b.end(), c.begin(), c.end());
                      return b;
                  }, {}});
    cs.push_back({"spec::residual_weights", [&in](int nt) {
                      std::vector<float> w(150000);
                      const size_t n = lmt::spec::residual_weights(in.probs.data(), in.probs.data() + 150000, 150000,
                                                                   nullptr, 0, w.data(), nullptr, nt);
                      Bytes b = bytes_of(w);
                      append(b, n);
                      return b;
                  }, {}});
    // The sampling kernels take their thread count from a process-wide setting (set_threads),
    // which the callers below change while others run: the bytes must not depend on it.
    cs.push_back({"sampling fill+softmax+sort", [&in](int) {
                      std::vector<lmt::sampling::TokenData> d(in.big.size());
                      lmt::sampling::fill(d.data(), in.big.data(), d.size());
                      lmt::sampling::softmax(d.data(), d.size(), false);
                      lmt::sampling::sort_desc_inplace(d.data(), d.size(), 1000);
                      d.resize(1000);
                      return bytes_of(d);
                  }, {}});
    // Batched sampling rows (serving.Batch): a RowsJob's persistent helpers claim rows while the
    // caller adds and waits for them; several callers' jobs share those helpers.
    cs.push_back({"sampling RowsJob", [&in](int nt) {
                      constexpr size_t n_rows = 8, V = 20000;
                      std::vector<std::vector<lmt::sampling::TokenData>> buf(n_rows, std::vector<lmt::sampling::TokenData>(V));
                      lmt::sampling::RowsJob job(n_rows, nt);
                      Bytes b;
                      for (size_t k = 0; k < n_rows; ++k) {
                          lmt::sampling::RowPlan &pl = job.slot(k);
                          pl.x = in.rowsx.data() + k * V;
                          pl.n = V;
                          pl.d = buf[k].data();
                          lmt::sampling::RowOp top, temp, dist;
                          top.kind = lmt::sampling::kOpTopK;
                          top.z0 = 40;
                          temp.kind = lmt::sampling::kOpTemp;
                          temp.f0 = 0.8f;
                          dist.kind = lmt::sampling::kOpDist;
                          dist.u = (double)(k + 1) / (n_rows + 1);
                          pl.ops = {top, temp, dist};
                          job.add(k);
                      }
                      for (size_t k = 0; k < n_rows; ++k) {
                          const lmt::sampling::RowPlan &pl = job.wait(k);
                          append(b, pl.selected);
                          append(b, pl.size);
                          append(b, pl.error);
                      }
                      job.close();
                      return b;
                  }, {}});
    return cs;
}

}  // namespace

// A planted race (two threads increment a plain int): tools/sanitize.sh runs this first and
// requires TSan to report it, so a build where TSan does not see races cannot pass as clean.
int planted_race() {
    static int counter = 0;
    std::thread a([] {
        for (int i = 0; i < 100000; ++i) counter = counter + 1;
    });
    std::thread b([] {
        for (int i = 0; i < 100000; ++i) counter = counter + 1;
    });
    a.join();
    b.join();
    std::printf("planted race ran (counter %d); TSan should have reported it\n", counter);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && std::strcmp(argv[1], "--planted-race") == 0) return planted_race();
    const int callers = argc > 1 ? std::atoi(argv[1]) : 4;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 6;
    Inputs in;
    std::vector<Case> cases = make_cases(in);
    lmt::sampling::set_threads(1);
    for (Case &c : cases) {  // the single-threaded references
        const auto t0 = std::chrono::steady_clock::now();
        c.want = c.run(1);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  %-28s %8.1f ms single-threaded (%zu bytes)\n", c.name.c_str(), ms, c.want.size());
    }

    std::atomic<int> failures{0};
    std::atomic<long> calls{0};
    std::vector<std::thread> ts;
    for (int k = 0; k < callers; ++k) {
        ts.emplace_back([&, k] {
            std::mt19937 g((uint32_t)(100 + k));
            for (int r = 0; r < rounds; ++r) {
                std::vector<size_t> order(cases.size());
                for (size_t i = 0; i < order.size(); ++i) order[i] = i;
                std::shuffle(order.begin(), order.end(), g);  // callers overlap on different kernels
                for (size_t i : order) {
                    const int nt = 2 + (int)(g() % 5);  // 2..6 threads: the pool grows while in use
                    if (k == 0) lmt::sampling::set_threads(nt);
                    const Bytes got = cases[i].run(nt);
                    calls.fetch_add(1, std::memory_order_relaxed);
                    if (got != cases[i].want) {
                        std::fprintf(stderr, "MISMATCH: %s with %d threads (caller %d, round %d)\n",
                                     cases[i].name.c_str(), nt, k, r);
                        failures.fetch_add(1);
                    }
                }
            }
        });
    }
    for (auto &t : ts) t.join();
    std::printf("tsan_stress: %zu kernels x %d callers x %d rounds = %ld calls, %d mismatches\n", cases.size(),
                callers, rounds, calls.load(), failures.load());
    return failures.load() ? 1 : 0;
}
