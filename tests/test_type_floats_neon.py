"""NEON byte parity of the float weight types F32, F16, BF16 (csrc/cpu/types/float_neon.hpp)
against float_matvec_scalar, cross-built for aarch64 and run under qemu (this x86 machine cannot
run NEON natively). Skips visibly without the cross tools or without the float types' sources."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

# Through each type row with isa=scalar against isa=neon (a serial parallel_for stands in for the
# thread pool): arbitrary weight bits (NaN with payloads, signalling NaN, inf, subnormal, zero),
# awkward x (NaN, inf, huge, tiny, zero rows), T = 1..11, cols with every tail length class
# (1, 5, 16, 17, 31, 640, 895), 65 rows (two of the dispatch's tasks), a row stride wider than
# the row and not a multiple of 4 (unaligned rows).
_NEON_PARITY_CC = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "cpu/types/float_common.hpp"

namespace lmt::core {
void parallel_for(int, int64_t n_tasks, const std::function<void(int64_t)> &fn) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
}
}  // namespace lmt::core

namespace lmt::cpu {  // the kernels themselves (float_common.hpp declares them once dispatched)
void matvec_f32_neon(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_f16_neon(const MatvecCall &c, int64_t r0, int64_t r1);
void matvec_bf16_neon(const MatvecCall &c, int64_t r0, int64_t r1);
}  // namespace lmt::cpu

using namespace lmt::cpu;

// The dispatch writes every NaN logit as the default quiet NaN (payloads depend on the compiler's
// operand order); the direct kernel calls get the same treatment before the comparison.
static void canonical_nans(std::vector<float> &v) {
    for (auto &f : v)
        if (std::isnan(f)) f = NAN;
}

int main() {
    std::mt19937_64 rng(1);
    int failures = 0, checks = 0;
    using Kernel = void (*)(const MatvecCall &, int64_t, int64_t);
    const struct { const CpuTypeImpl *impl; int bytes; const char *name; Kernel scalar, neon; } types[] = {
        {&kCpuF32, 4, "F32", float_matvec_scalar<F32Weights>, matvec_f32_neon},
        {&kCpuF16, 2, "F16", float_matvec_scalar<F16Weights>, matvec_f16_neon},
        {&kCpuBF16, 2, "BF16", float_matvec_scalar<BF16Weights>, matvec_bf16_neon}};
    const int64_t shapes[][2] = {{1, 1}, {7, 5}, {3, 16}, {65, 17}, {7, 31}, {33, 640}, {5, 895}};
    for (const auto &ty : types)
        for (const auto &sh : shapes) {
            const int64_t rows = sh[0], cols = sh[1];
            const size_t rb = (size_t)cols * ty.bytes, stride = rb + 6;
            std::vector<uint8_t> w(rows * stride + 16);
            std::normal_distribution<float> g;
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t i = 0; i < cols; ++i) {
                    const float f = g(rng);
                    uint32_t u;
                    std::memcpy(&u, &f, 4);
                    const int kind = (int)(rng() % 200);
                    uint8_t *p = &w[r * stride + i * ty.bytes];
                    if (ty.bytes == 4) {
                        if (kind == 0) u = 0x7F800000u | (uint32_t)(rng() & 0x7FFFFF) | 1u;  // NaN (q or s)
                        if (kind == 1) u = 0xFF800000u;
                        if (kind == 2) u = (uint32_t)(rng() & 0x7FFFFF);  // subnormal
                        std::memcpy(p, &u, 4);
                    } else {
                        uint16_t h = (uint16_t)rng();  // any half / bf16 bits, weighted to finite ones
                        if (kind > 3 && (h & 0x7C00u) == 0x7C00u && ty.bytes == 2 && ty.impl == &kCpuF16) h ^= 0x4000u;
                        if (kind > 3 && ty.impl == &kCpuBF16 && (h & 0x7F80u) == 0x7F80u) h ^= 0x4000u;
                        if (kind == 0) h = ty.impl == &kCpuF16 ? (uint16_t)(0x7C01u | (rng() & 0x1FF)) : (uint16_t)(0x7F81u | (rng() & 0x3F));
                        std::memcpy(p, &h, 2);
                    }
                }
            for (int64_t T = 1; T <= 11; ++T) {
                std::vector<float> x(T * cols);
                for (auto &v : x) v = g(rng);
                if (T > 1) x[cols / 2 + cols] = (T & 1) ? NAN : INFINITY;
                if (T > 2) for (int64_t i = 0; i < cols; ++i) x[2 * cols + i] *= 1e30f;
                if (T > 3) for (int64_t i = 0; i < cols; ++i) x[3 * cols + i] *= 1e-41f;
                if (T > 4) for (int64_t i = 0; i < cols; ++i) x[4 * cols + i] = 0.0f;
                if (T > 5) x[5 * cols + cols - 1] = -INFINITY;
                std::vector<float> ref(T * rows), got(T * rows);
                MatvecCall c{w.data(), rows, cols, stride, x.data(), T, ref.data(), 1, Isa::Scalar, Precision::F32};
                ty.impl->matvec(c);
                c.logits = got.data();
                c.isa = Isa::Neon;
                ty.impl->matvec(c);
                ++checks;
                if (std::memcmp(ref.data(), got.data(), ref.size() * 4)) {
                    std::printf("%s mismatch rows=%lld cols=%lld T=%lld\n", ty.name, (long long)rows, (long long)cols,
                                (long long)T);
                    ++failures;
                }
                // The kernels alone, rows in two ranges as two tasks would run them.
                const int64_t mid = rows / 2;
                c.logits = ref.data();
                ty.scalar(c, 0, rows);
                c.logits = got.data();
                ty.neon(c, 0, mid);
                ty.neon(c, mid, rows);
                canonical_nans(ref);
                canonical_nans(got);
                ++checks;
                if (std::memcmp(ref.data(), got.data(), ref.size() * 4)) {
                    std::printf("%s kernel mismatch rows=%lld cols=%lld T=%lld\n", ty.name, (long long)rows,
                                (long long)cols, (long long)T);
                    ++failures;
                }
            }
        }
    std::printf("float neon parity: %d/%d checks equal\n", checks - failures, checks);
    return failures ? 1 : 0;
}
"""


def test_neon_paths_equal_scalar_bytes_under_qemu(tmp_path):
    cxx, qemu = shutil.which("aarch64-linux-gnu-g++"), shutil.which("qemu-aarch64")
    if not cxx or not qemu:
        pytest.skip("aarch64-linux-gnu-g++ / qemu-aarch64 not installed (NEON parity not run)")
    root = os.path.join(os.path.dirname(__file__), "..")
    d = os.path.join(root, "csrc", "cpu", "types")
    if not os.path.exists(os.path.join(d, "float_common.hpp")):
        pytest.skip("the float types' sources (csrc/cpu/types/float_common.hpp) are not in this tree")
    src, exe = tmp_path / "float_neon_parity.cc", str(tmp_path / "float_neon_parity")
    src.write_text(_NEON_PARITY_CC)
    files = [os.path.join(d, t, f"{t}{s}.cpp") for t in ("f32", "f16", "bf16") for s in ("", "_neon")]
    subprocess.run([cxx, "-O2", "-std=c++17", "-ffp-contract=off", "-DLMTAIL_HAVE_NEON=1",
                    "-I", os.path.join(root, "csrc"), "-I", os.path.join(root, "csrc", "include"), str(src),
                    *files, "-o", exe], check=True)
    r = subprocess.run([qemu, "-L", "/usr/aarch64-linux-gnu", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checks equal" in r.stdout, r.stdout
