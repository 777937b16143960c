// Byte-parity check of every available SIMD path against the scalar reference, in C++ so it can
// run on a foreign architecture under user-mode emulation (tools/check_neon_qemu.sh runs it for
// arm64 NEON with qemu-aarch64). Exit status 0 = all identical.
#include <lmtail/cpu.hpp>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

using lmt::cpu::Isa;
using lmt::cpu::Precision;

int main() {
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    int failures = 0, checked = 0;
    const Isa isas[] = {Isa::Avx2, Isa::Avx512, Isa::Neon};
    for (int64_t cols : {256, 1536, 6656}) {
        const int64_t rows = 37;
        std::vector<float> w(rows * cols);
        for (auto &v : w) v = nd(rng);
        std::vector<uint8_t> q(rows * (cols / 256) * LMT_Q5K_BLOCK_BYTES);
        lmt::cpu::quantize_q5_k(w.data(), q.data(), rows, cols, 2);
        std::vector<float> back(rows * cols);
        lmt::cpu::dequantize_q5_k(q.data(), back.data(), rows, cols, 1);
        for (int64_t T : {1, 2, 3, 5, 8, 9}) {
            std::vector<float> x(T * cols);
            for (auto &v : x) v = nd(rng) * 50.0f;
            // Awkward blocks for the i16 quantiser in some rows: all zero, subnormal, huge.
            if (T >= 3) {
                for (int i = 0; i < 256; ++i) {
                    x[0 * cols + i] = 0.0f;
                    x[1 * cols + i] *= 1e-42f;
                    x[2 * cols + i] *= 1e30f;
                }
            }
            std::vector<float> ref(T * rows), got(T * rows);
            for (Precision prec : {Precision::F32, Precision::I16, Precision::I24}) {
                lmt::cpu::matvec_q5_k(q.data(), rows, cols, q.size() / rows, x.data(), T, ref.data(), 1, Isa::Scalar, prec);
                for (Isa isa : isas) {
                    if (!lmt::cpu::isa_available(isa)) continue;
                    for (int threads : {1, 3}) {
                        std::fill(got.begin(), got.end(), -1.0f);
                        lmt::cpu::matvec_q5_k(q.data(), rows, cols, q.size() / rows, x.data(), T, got.data(), threads, isa,
                                              prec);
                        ++checked;
                        if (std::memcmp(ref.data(), got.data(), ref.size() * 4) != 0) {
                            std::printf("MISMATCH isa=%s precision=%s cols=%lld T=%lld threads=%d\n", lmt::cpu::isa_name(isa),
                                        lmt::cpu::precision_name(prec), (long long)cols, (long long)T, threads);
                            ++failures;
                        }
                    }
                }
                // Batch invariance: each activation row alone gives the same bytes as in the batch.
                for (int64_t t = 0; t < T; ++t) {
                    std::vector<float> one(rows);
                    lmt::cpu::matvec_q5_k(q.data(), rows, cols, q.size() / rows, x.data() + t * cols, 1, one.data(), 2,
                                          Isa::Auto, prec);
                    ++checked;
                    if (std::memcmp(one.data(), ref.data() + t * rows, rows * 4) != 0) {
                        std::printf("BATCH MISMATCH precision=%s cols=%lld T=%lld t=%lld\n", lmt::cpu::precision_name(prec),
                                    (long long)cols, (long long)T, (long long)t);
                        ++failures;
                    }
                }
            }
        }
    }
    std::printf("isa=%s checked=%d failures=%d\n", lmt::cpu::isa_name(Isa::Auto), checked, failures);
    return failures == 0 && checked > 0 ? 0 : 1;
}
