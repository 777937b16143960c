// Q6_K NEON vs scalar byte parity, both precisions, for tools/check under qemu (not part of the
// library: CMake compiles only *.cpp here). tests/test_type_q6_k.py builds it with the aarch64
// cross compiler and runs it with qemu-aarch64 when LMTAIL_QEMU_NEON=1.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/types/q6_k/q6k.hpp"

using namespace lmt::cpu;

int main() {
    std::mt19937_64 rng(1);
    int failures = 0, checks = 0;
    for (int64_t cols : {256, 768, 1536}) {
        for (int64_t rows : {1, 7, 33}) {
            const size_t rb = (size_t)(cols / 256) * 210, stride = rb + 6;
            std::vector<uint8_t> w(rows * stride);
            for (auto &v : w) v = (uint8_t)rng();
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t b = 0; b < cols / 256; ++b) {  // finite d of any exponent, either sign
                    uint16_t d = (uint16_t)(rng() % 0x7800) | (uint16_t)((rng() & 1) << 15);
                    std::memcpy(&w[r * stride + b * 210 + 208], &d, 2);
                }
            for (int64_t T : {1, 2, 5, 8, 11}) {
                std::vector<float> x(T * cols);
                std::normal_distribution<float> g;
                for (auto &v : x) v = g(rng);
                if (T > 1) x[cols + 3] = (T & 1) ? NAN : INFINITY;
                std::vector<int16_t> xa(T * cols), xc(T * cols);
                for (auto &v : xa) v = (int16_t)((int)(rng() % 65535) - 32767);
                for (auto &v : xc) v = (int16_t)((int)(rng() % 65535) - 32767);
                const int64_t nbt = T * (cols / 256);
                std::vector<float> dx(nbt), dxc(nbt);
                for (int64_t i = 0; i < nbt; ++i) {
                    dx[i] = (i == 1) ? NAN : std::ldexp(1.0f, -(int)(rng() % 40)) * 1.37f;
                    dxc[i] = dx[i] / 65534.0f;
                }
                std::vector<float> ref(T * rows), got(T * rows);
                const MatvecCall c{w.data(), rows, cols, stride, x.data(), T, nullptr, 1, lmt::cpu::Isa::Scalar,
                                   Precision::F32};
                MatvecCall c1 = c, c2 = c;
                c1.logits = ref.data();
                c2.logits = got.data();
                matvec_q6_k_scalar(c1, 0, rows);
                matvec_q6_k_neon(c2, 0, rows);
                ++checks;
                if (std::memcmp(ref.data(), got.data(), ref.size() * 4)) {
                    std::printf("f32 mismatch rows=%lld cols=%lld T=%lld\n", (long long)rows, (long long)cols, (long long)T);
                    ++failures;
                }
                matvec_q6_k_i24_scalar(Q6kI24Args{&c1, xa.data(), xc.data(), dx.data(), dxc.data()}, 0, rows);
                matvec_q6_k_i24_neon(Q6kI24Args{&c2, xa.data(), xc.data(), dx.data(), dxc.data()}, 0, rows);
                ++checks;
                if (std::memcmp(ref.data(), got.data(), ref.size() * 4)) {
                    std::printf("i24 mismatch rows=%lld cols=%lld T=%lld\n", (long long)rows, (long long)cols, (long long)T);
                    ++failures;
                }
            }
        }
    }
    std::printf("q6_k neon parity: %d/%d checks equal\n", checks - failures, checks);
    return failures ? 1 : 0;
}
