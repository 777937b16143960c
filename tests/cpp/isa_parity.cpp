// Byte-parity check of every available SIMD path against the scalar reference, in C++ so it can
// run on a foreign architecture under user-mode emulation (tools/check_neon_qemu.sh runs it for
// arm64 NEON with qemu-aarch64, once on a CPU without the dot product and once with it).
//   isa_parity [EXPECTED_AUTO]   EXPECTED_AUTO: the name isa_name(Auto) must give on this CPU
// Exit status 0 = all identical (and Auto as expected, and every unavailable path refused).
#include <lmtail/cpu.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using lmt::WeightType;
using lmt::cpu::Isa;
using lmt::cpu::Precision;

namespace {

const Isa kSimd[] = {Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonDot};

bool same_bytes(const std::vector<float> &a, const std::vector<float> &b) {
    return std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Every type x precision (but ggml's) x SIMD path against the scalar path through the checked
// entry lmt::cpu::matvec, T = 1..9, odd row counts, a row stride wider than the row, and
// activation rows with awkward blocks: all zero, subnormal, huge, a NaN, and outliers (the I24
// add-back / F32 routes).
void all_types(int &failures, int &checked) {
    std::mt19937 rng(77);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (const auto &info : lmt::kWeightTypes) {
        if (!lmt::cpu::type_supported(info.type)) continue;
        const int64_t be = info.block_elems;
        // Odd block counts; the float types (block 1) an odd column count.
        for (int64_t cols : {be == 1 ? (int64_t)1001 : be * (be >= 256 ? 3 : 37)}) {
            const int64_t rows = 37;
            const size_t rb = lmt::cpu::row_bytes(info.type, cols), stride = rb + 16;
            std::vector<float> w(rows * cols);
            for (auto &v : w) v = nd(rng) * 0.05f;
            std::vector<uint8_t> q(rows * stride, 0xA5);
            std::vector<uint8_t> packed(rows * rb);
            lmt::cpu::quantize(info.type, w.data(), packed.data(), rows, cols, 2);
            for (int64_t r = 0; r < rows; ++r) std::memcpy(&q[r * stride], &packed[r * rb], rb);
            for (int64_t T = 1; T <= 9; ++T) {
                std::vector<float> x(T * cols);
                for (auto &v : x) v = nd(rng);
                const int64_t blk = cols >= 256 ? 256 : cols;
                if (T >= 4) {
                    for (int64_t i = 0; i < blk; ++i) {
                        x[0 * cols + i] = 0.0f;
                        x[1 * cols + i] *= 1e-42f;
                        x[2 * cols + i] *= 1e30f;
                    }
                    x[3 * cols + 5] = 900.0f;  // an outlier block: its median far below its max
                }
                if (T == 6) x[5 * cols + cols / 2] = NAN;
                const uint32_t precs = lmt::cpu::type_precisions(info.type);
                for (Precision p : {Precision::F32, Precision::I16, Precision::I24}) {
                    if (!(precs & (1u << (int)p))) continue;
                    std::vector<float> ref(T * rows), got(T * rows);
                    lmt::cpu::matvec(info.type, q.data(), rows, cols, stride, x.data(), T, ref.data(), 1, Isa::Scalar, p);
                    for (Isa isa : kSimd) {
                        if (!lmt::cpu::isa_available(isa)) continue;
                        for (int threads : {1, 3}) {
                            std::fill(got.begin(), got.end(), -1.0f);
                            lmt::cpu::matvec(info.type, q.data(), rows, cols, stride, x.data(), T, got.data(), threads,
                                             isa, p);
                            ++checked;
                            if (!same_bytes(ref, got)) {
                                std::printf("MISMATCH type=%s isa=%s precision=%s cols=%lld T=%lld threads=%d\n",
                                            info.name, lmt::cpu::isa_name(isa), lmt::cpu::precision_name(p),
                                            (long long)cols, (long long)T, threads);
                                ++failures;
                            }
                        }
                    }
                }
            }
        }
    }
}

// Auto resolves to the expected path; an unavailable path is refused with the typed error.
void fallback(const std::string &expected, int &failures, int &checked) {
    const std::string got = lmt::cpu::isa_name(Isa::Auto);
    ++checked;
    if (got != expected) {
        std::printf("AUTO MISMATCH expected=%s got=%s\n", expected.c_str(), got.c_str());
        ++failures;
    }
    const float x[32] = {1.0f};
    std::vector<uint8_t> q(lmt::cpu::row_bytes(WeightType::Q4_0, 32));
    lmt::cpu::quantize(WeightType::Q4_0, x, q.data(), 1, 32, 1);
    float y = 0.0f;
    for (Isa isa : kSimd) {
        if (lmt::cpu::isa_available(isa)) continue;
        ++checked;
        try {
            lmt::cpu::matvec(WeightType::Q4_0, q.data(), 1, 32, q.size(), x, 1, &y, 1, isa);
            std::printf("NOT REFUSED isa=%s\n", lmt::cpu::isa_name(isa));
            ++failures;
        } catch (const lmt::ArgumentError &e) {
            if (!std::strstr(e.what(), "not available")) {
                std::printf("WRONG ERROR isa=%s: %s\n", lmt::cpu::isa_name(isa), e.what());
                ++failures;
            }
        }
    }
}

}  // namespace

int main(int argc, char **argv) {
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    int failures = 0, checked = 0;
    if (argc > 1) fallback(argv[1], failures, checked);
    all_types(failures, checked);
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
                for (Isa isa : kSimd) {
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
