// Q4_K NEON and NEON dotprod vs scalar byte parity (F32 and I24, T = 1..11, a NaN activation row),
// for qemu: tests/test_type_q4_k.py builds it with the Q4_K sources (not the x86 ones; the dotprod
//   file with +dotprod), csrc/core/thread_pool.cpp and cpu_features.cpp, aarch64-linux-gnu-g++
//   -DLMTAIL_HAVE_NEON=1, and runs it under qemu-aarch64 -cpu max.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "cpu/types/types.hpp"
#include "cpu/types/q4_k/q4_k_internal.hpp"
using namespace lmt::cpu;
int main() {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    int bad = 0, checks = 0;
    for (int64_t cols : {256, 768}) {
        const int64_t rows = 37;
        std::vector<float> w(rows * cols);
        for (auto &v : w) v = nd(rng) * 0.05f;
        const size_t rb = cols / 256 * 144;
        std::vector<uint8_t> q(rows * rb);
        quantize_q4_k(w.data(), q.data(), rows, cols, 1);
        for (int64_t T = 1; T <= 11; ++T) {
            std::vector<float> x(T * cols);
            for (auto &v : x) v = nd(rng);
            if (T == 5) x[2 * cols + 100] = NAN;
            for (Precision p : {Precision::F32, Precision::I24}) {
                std::vector<float> a(T * rows), b(T * rows);
                kCpuQ4_K.matvec(MatvecCall{q.data(), rows, cols, rb, x.data(), T, a.data(), 1, Isa::Scalar, p});
                for (bool dot : {false, true}) {  // Isa::NeonDot arrives as Neon + dotprod (matvec.cpp)
                    MatvecCall c{q.data(), rows, cols, rb, x.data(), T, b.data(), 2, Isa::Neon, p};
                    c.dotprod = dot;
                    std::fill(b.begin(), b.end(), -1.0f);
                    kCpuQ4_K.matvec(c);
                    ++checks;
                    if (std::memcmp(a.data(), b.data(), a.size() * 4)) {
                        ++bad;
                        std::printf("MISMATCH cols=%lld T=%lld prec=%d dotprod=%d\n", (long long)cols, (long long)T, (int)p,
                                    (int)dot);
                    }
                }
            }
        }
    }
    std::printf("q4_k neon parity: %d/%d mismatches\n", bad, checks);
    return bad != 0;
}
