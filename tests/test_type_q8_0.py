"""Q8_0 (ggml type 8) on the CPU: the type-table row through lmtail._core.

* quantize: ggml's bytes (ggml_quantize_chunk without imatrix = quantize_row_q8_0_ref) for every
  finite block whose fp16 d does not overflow; exactly those others are refused (ParameterError).
* dequantize: ggml's dequantize_row_q8_0 bit for bit, for ANY bytes (q = -128 included).
* matvec (precision f32, the default): w = d*q is exact in f32, so the only error is the f32
  accumulation: normwise <= 1e-6 against float64; scalar == avx2 bytes (avx512 / neon skip
  visibly when not runnable here); thread counts, batch invariance, non-finite x per row, odd
  shapes (cols 32 .. 2880, not multiples of 256), row strides wider than the row.
"""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from lmtail import _core, errors

Q8_0 = 8
QK = 32
BB = 34
BOUND = 3e-5  # elementwise, relative to |W| @ |x| (the Q5_K f32 bound: 16-lane chains)


@pytest.fixture(scope="module")
def Q():
    from oracle import _lib

    _lib.require()
    from oracle import quant

    try:
        quant._api()
    except _lib.OracleUnavailable as e:  # pragma: no cover - environment
        pytest.skip(str(e))
    return quant


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def quantize(x, threads=1):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros((x.shape[0], x.shape[1] // QK * BB), np.uint8)
    _core.quantize(Q8_0, x, out, threads)
    return out


def dequantize(q, cols, threads=1):
    out = np.zeros((q.shape[0], cols), np.float32)
    _core.dequantize(Q8_0, np.ascontiguousarray(q), out, threads)
    return out


def matvec(q, cols, x, threads=1, isa="auto", precision="default"):
    x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
    out = np.zeros((x.shape[0], q.shape[0]), np.float32)
    _core.matvec(q, Q8_0, cols, x, out, threads, isa, precision)
    return out


def random_bytes(rows, cols, seed, d_kind="normal"):
    """Raw Q8_0 rows: q over the full int8 range (-128 included), d from `d_kind`."""
    rng = np.random.default_rng(seed)
    nb = cols // QK
    q = rng.integers(0, 256, (rows, nb, BB), dtype=np.uint8)
    if d_kind == "normal":
        d = rng.uniform(1e-3, 2e-2, (rows, nb)).astype(np.float16)
    elif d_kind == "mixed":  # subnormal, zero, tiny, huge (finite) scales
        choices = np.array([0.0, 6e-8, 3e-6, 6.1e-5, 1e-3, 1.0, 300.0, 65504.0], np.float16)
        d = choices[rng.integers(0, len(choices), (rows, nb))] * rng.choice([-1, 1], (rows, nb)).astype(np.float16)
    q[:, :, :2] = d.astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
    q[:, :, 2] = 0x80  # at least one -128 per block
    return q.reshape(rows, nb * BB)


def gaussian_q(rows, cols, seed):
    w = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32) * 0.05
    return quantize(w)


def awkward_x(T, cols, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, cols)).astype(np.float32)
    for t in range(T):
        k = t % 5
        if k == 1:
            x[t, :: 7] = 0.0
            x[t, 3] = 1e4  # spike
        elif k == 2:
            x[t] *= np.float32(1e-30)  # tiny (products near the subnormal range)
        elif k == 3:
            x[t] *= np.float32(1e20)
        elif k == 4:
            x[t, : cols // 2] = 0.0
    return x


def reference(q, cols, x):
    w = dequantize(q, cols).astype(np.float64)
    x64 = np.atleast_2d(x).astype(np.float64)
    return x64 @ w.T, np.abs(x64) @ np.abs(w).T


# ---- the table row ---------------------------------------------------------------------------


def test_type_row():
    row = [t for t in _core.cpu_types() if t["id"] == Q8_0]
    # precision "ggml" (tests/test_ggml_exact_q0f.py) is offered where ggml's native build is one
    # it reproduces (x86: the AVX2, AVX-512 and AMX builds) and the CPU runs the AVX2 emulation.
    assert row and row[0]["precisions"] in (["f32"], ["f32", "ggml"])
    assert row[0]["ggml_builds"] in ([], ["avx2", "avx512", "amx"])
    assert row == [{"id": 8, "name": "Q8_0", "block_elems": 32, "block_bytes": 34,
                    "precisions": row[0]["precisions"], "default_precision": "f32",
                    "ggml_builds": row[0]["ggml_builds"]}]


def test_unsupported_precision_and_bad_cols():
    q = gaussian_q(2, 64, 0)
    for p in ("i16", "i24"):
        with pytest.raises(errors.UnsupportedError, match="Q8_0"):
            matvec(q, 64, np.ones(64), precision=p)
    with pytest.raises(errors.LmtailError, match="multiple of 32"):
        _core.quantize(Q8_0, np.ones((1, 48), np.float32), np.zeros((1, 51), np.uint8), 1)


# ---- quantize / dequantize against ggml ------------------------------------------------------


def awkward_weights(rows, cols, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    blocks = x.reshape(-1, QK)
    for i, b in enumerate(blocks):
        k = i % 12
        if k == 1:
            b[:] = 0.0
        elif k == 2:
            b[:] = 0.75  # constant
        elif k == 3:
            b[:] = (np.arange(QK) - 16) * np.float32(0.5)  # x * id lands on / near .5 ties
            b[0] = 63.5
        elif k == 4:
            b *= np.float32(1e-30)  # subnormal fp16 d (d rounds to 0)
        elif k == 5:
            b *= np.float32(3e-6)  # subnormal fp16 d, nonzero
        elif k == 6:
            b *= np.float32(1e-38)  # f32-subnormal d: 1/d overflows, ggml writes q = 0
        elif k == 7:
            b *= np.float32(2e-37)  # d just above the 1/d overflow
        elif k == 8:
            b[:] = 0.0
            b[5] = -8.3e6  # near the fp16 d limit, negative
        elif k == 9:
            b[7] = 1e3  # spike
        elif k == 10:
            b[:] = -np.abs(b)  # one-signed
        elif k == 11:
            b *= np.float32(1e5)
    return x


@pytest.mark.oracle
@pytest.mark.parametrize("rows,cols", [(1, 32), (7, 64), (65, 640), (3, 896), (2, 2880), (129, 96)])
def test_quantize_matches_ggml(Q, rows, cols):
    for x in (np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32),
              awkward_weights(rows, cols, cols)):
        got = quantize(x, threads=3)
        want = Q.quantize(Q8_0, x)
        assert got.shape == want.shape
        bad = np.flatnonzero((got.reshape(-1, BB) != want.reshape(-1, BB)).any(axis=1))
        assert bad.size == 0, f"blocks {bad[:5]} differ: x={x.reshape(-1, QK)[bad[0]]}"
        assert np.array_equal(bits(dequantize(got, cols)), bits(Q.dequantize(Q8_0, want, cols)))


@pytest.mark.oracle
def test_refuses_exactly_the_blocks_ggml_overflows(Q):
    # Around amax = 127 * 65520 (fp16 d's overflow to inf), in f32 steps.
    edge = np.float32(127 * 65520)
    vals = [np.nextafter(edge, np.float32(0)), edge, np.nextafter(edge, np.float32(1e30)), np.float32(8.3e6),
            np.float32(8.4e6), np.float32(3e38)]
    for v in vals:
        for sign in (1, -1):
            x = np.zeros((1, QK), np.float32)
            x[0, 9] = sign * v
            want = Q.quantize(Q8_0, x)
            d_inf = (want[0, :2].view(np.uint16)[0] & 0x7C00) == 0x7C00
            if d_inf:
                with pytest.raises(errors.ParameterError, match="overflows Q8_0's fp16 scale"):
                    quantize(x)
            else:
                assert np.array_equal(quantize(x), want), v


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_refuses_non_finite_weights(bad):
    x = np.ones((3, 64), np.float32)
    x[2, 40] = bad
    with pytest.raises(errors.ParameterError, match=r"non-finite weight at \(2, 40\)"):
        quantize(x, threads=2)


def test_refusal_reports_the_first_bad_block_any_threads():
    x = np.ones((40, 64), np.float32)
    x[30, 3] = 1e7
    x[7, 50] = -2e7
    for th in (1, 2, 3):
        with pytest.raises(errors.ParameterError, match="row 7, block 1"):
            quantize(x, threads=th)


@pytest.mark.oracle
@pytest.mark.parametrize("d_kind", ["normal", "mixed"])
def test_dequantize_matches_ggml_any_bytes(Q, d_kind):
    q = random_bytes(33, 896, seed=5, d_kind=d_kind)
    for th in (1, 2):
        assert np.array_equal(bits(dequantize(q, 896, th)), bits(Q.dequantize(Q8_0, q, 896)))


def test_round_trip_error_and_minus_128():
    w = np.random.default_rng(1).standard_normal((4, 640)).astype(np.float32)
    q = quantize(w)
    wq = dequantize(q, 640)
    amax = np.abs(w.reshape(4, -1, QK)).max(axis=2, keepdims=True)
    # Half a step, plus the fp16 rounding of d (q is chosen with the f32 d): 127 * d * 2^-11.
    assert np.all(np.abs((wq - w).reshape(4, -1, QK)) <= amax / 127 * (0.5 + 127 * 2.0**-11) * 1.01)
    # q = -128 (never written by ggml, valid in files) decodes as -128 * d.
    raw = random_bytes(1, 32, seed=2)
    d = np.float32(raw[0, :2].view(np.float16)[0])
    assert dequantize(raw, 32)[0, 0] == np.float32(-128) * d


# ---- matvec ----------------------------------------------------------------------------------


def isa_or_skip(isa):
    if not _core.isa_available(isa):
        pytest.skip(f"{isa} is not available on this CPU/build (Q8_0 {isa} path not run here)")


@pytest.mark.parametrize("isa", ["avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"])
def test_simd_paths_equal_scalar_bytes(isa):
    isa_or_skip(isa)
    for rows, cols, kind in [(1, 32, "mixed"), (7, 64, "normal"), (65, 640, "mixed"), (129, 896, "normal"),
                             (5, 2880, "mixed")]:
        q = random_bytes(rows, cols, seed=rows, d_kind=kind)
        for T in range(1, 12):
            for x in (np.random.default_rng(T).standard_normal((T, cols)).astype(np.float32),
                      awkward_x(T, cols, T)):
                a = matvec(q, cols, x, isa="scalar")
                b = matvec(q, cols, x, isa=isa)
                assert np.array_equal(bits(a), bits(b)), (rows, cols, T)


def test_threads_and_batch_invariance():
    q = random_bytes(333, 640, seed=9)
    x = np.random.default_rng(0).standard_normal((11, 640)).astype(np.float32)
    for isa in ("scalar", "auto"):
        base = matvec(q, 640, x, threads=1, isa=isa)
        for th in (2, 3):
            assert np.array_equal(bits(matvec(q, 640, x, threads=th, isa=isa)), bits(base))
        for T in range(1, 12):
            part = matvec(q, 640, x[:T], threads=2, isa=isa)
            assert np.array_equal(bits(part), bits(base[:T])), T
        for t in (0, 4, 10):
            assert np.array_equal(bits(matvec(q, 640, x[t], isa=isa)), bits(base[t : t + 1]))


@pytest.mark.parametrize("rows,cols", [(1, 32), (7, 640), (65, 896), (129, 2880), (64, 6656)])
@pytest.mark.parametrize("T", [1, 3, 8])
def test_accuracy_against_float64(rows, cols, T):
    q = gaussian_q(rows, cols, seed=rows + cols)
    x = np.random.default_rng(T).standard_normal((T, cols)).astype(np.float32)
    y = matvec(q, cols, x)
    ref, mag = reference(q, cols, x)
    assert np.all(np.abs(y - ref) <= BOUND * mag + 1e-30)
    # Measured normwise (f32, the default): 1.3e-7 .. 2.5e-7; the bound is 1e-6.
    assert np.linalg.norm(y - ref) <= 1e-6 * np.linalg.norm(ref)
    assert np.array_equal(bits(matvec(q, cols, x, precision="f32")), bits(y))


def test_accuracy_awkward_data():
    cols = 896
    for q in (random_bytes(50, cols, 3, "mixed"), quantize(awkward_weights(50, cols, 4))):
        x = awkward_x(10, cols, 1)
        y = matvec(q, cols, x)
        ref, mag = reference(q, cols, x)
        # Subnormal products may lose their low bits: 2^-149 per term absolute on top.
        assert np.all(np.abs(y - ref) <= BOUND * mag + cols * 2.0**-149), np.abs(y - ref).max()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_x_poisons_its_row_only(bad):
    cols = 640
    q = random_bytes(70, cols, seed=11, d_kind="mixed")  # zero scales too: 0 * inf must still be NaN
    x = np.random.default_rng(2).standard_normal((5, cols)).astype(np.float32)
    clean = matvec(q, cols, x)
    x[2, 77] = bad
    for isa in ("scalar", "auto"):
        y = matvec(q, cols, x, isa=isa)
        assert not np.isfinite(y[2]).any()
        keep = [0, 1, 3, 4]
        assert np.array_equal(bits(y[keep]), bits(clean[keep]))


def test_wide_row_stride_view():
    cols = 896
    q = random_bytes(40, cols, seed=4)
    wide = np.zeros((40, q.shape[1] + 40), np.uint8)
    wide[:, 8 : 8 + q.shape[1]] = q
    view = wide[:, 8 : 8 + q.shape[1]]
    assert view.strides[0] > q.shape[1]
    x = np.random.default_rng(5).standard_normal((3, cols)).astype(np.float32)
    for isa in ("scalar", "auto"):
        assert np.array_equal(bits(matvec(view, cols, x, isa=isa)), bits(matvec(q, cols, x, isa=isa)))


def test_exact_on_integer_data():
    # Small integers: every product and partial sum is exact in f32, so the result is exact.
    rng = np.random.default_rng(8)
    cols = 2880
    q = random_bytes(9, cols, seed=8)
    nb = cols // QK
    q.reshape(9, nb, BB)[:, :, :2] = np.full((9, nb), 1.0, np.float16).view(np.uint8).reshape(9, nb, 2)
    x = rng.integers(-3, 4, (2, cols)).astype(np.float32)
    ref, _ = reference(q, cols, x)
    assert np.array_equal(matvec(q, cols, x), ref.astype(np.float32))



@pytest.mark.parametrize("precision", ["default", "f32"])
def test_nan_logits_are_the_default_quiet_nan(precision):
    # Which NaN payload survives where two NaNs meet depends on the compiler's operand order, so
    # the dispatch writes every NaN logit as 0x7FC00000: a NaN d with a payload, a NaN x of another
    # payload, both together; every ISA the same bits, inf logits untouched.
    rng = np.random.default_rng(21)
    rows, cols = 6, 96
    q = rng.integers(0, 256, size=(rows, cols // QK * BB), dtype=np.uint8)
    d = q.reshape(rows, -1, BB)[:, :, :2].copy().view(np.uint16)
    d[:] = 0x3C00  # 1.0
    d[0, 1] = 0x7E01  # NaN with a payload
    d[1, 2] = 0xFD55  # negative NaN, another payload
    q.reshape(rows, -1, BB)[:, :, :2] = d.view(np.uint8)
    x = rng.standard_normal((3, cols)).astype(np.float32)
    x[1, 40] = np.frombuffer(np.uint32(0x7FC12345).tobytes(), np.float32)[0]
    x[2, 7] = np.frombuffer(np.uint32(0xFFC54321).tobytes(), np.float32)[0]
    for isa in ["scalar"] + [i for i in ("avx2", "avx_vnni", "avx512", "neon", "neon_dotprod") if _core.isa_available(i)]:
        y = matvec(q, cols, x, isa=isa, precision=precision)
        nan = np.isnan(y)
        assert nan[:, :2].all() and nan[1:].all() and not nan[0, 2:].any(), isa
        assert (y.view(np.uint32)[nan] == 0x7FC00000).all(), (isa, hex(int(y.view(np.uint32)[nan][0])))

# The NEON parity driver, cross-built with the type's sources (q8_0.cpp's dispatch built with
# LMTAIL_HAVE_NEON; a serial parallel_for stands in for the thread pool): the type row with
# isa=scalar against isa=neon. Arbitrary blocks (q = -128, d of every exponent, NaN / inf d), awkward x (NaN, inf,
# huge, subnormal, zero rows), T = 1..11, several shapes (65 rows: two tasks of the dispatch's 64)
# and a row stride wider than the row.
_NEON_PARITY_CC = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "cpu/types/q8_0/q8_0.hpp"
#include "cpu/types/types.hpp"

namespace lmt::core {
void parallel_for(int, int64_t n_tasks, const std::function<void(int64_t)> &fn) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
}
}  // namespace lmt::core

using namespace lmt::cpu;

int main() {
    std::mt19937_64 rng(1);
    int failures = 0, checks = 0;
    const int64_t shapes[][2] = {{1, 32}, {7, 96}, {33, 640}, {65, 896}, {3, 2880}};
    for (const auto &sh : shapes) {
        const int64_t rows = sh[0], cols = sh[1], nb = cols / 32;
        const size_t rb = (size_t)nb * 34, stride = rb + 6;
        std::vector<uint8_t> w(rows * stride);
        for (auto &v : w) v = (uint8_t)rng();
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t b = 0; b < nb; ++b) {  // finite d of any exponent, either sign; a few non-finite
                uint16_t d = (uint16_t)(rng() % 0x7C00) | (uint16_t)((rng() & 1) << 15);
                if (rng() % 97 == 0) d = (uint16_t)(0x7C00 | (rng() & 0x3FF));  // inf or NaN (signalling too)
                std::memcpy(&w[r * stride + b * 34], &d, 2);
            }
        for (int64_t T = 1; T <= 11; ++T) {
            std::vector<float> x(T * cols);
            std::normal_distribution<float> g;
            for (auto &v : x) v = g(rng);
            if (T > 1) x[cols + 3] = (T & 1) ? NAN : INFINITY;
            if (T > 2) for (int64_t i = 0; i < cols; ++i) x[2 * cols + i] *= 1e30f;
            if (T > 3) for (int64_t i = 0; i < cols; ++i) x[3 * cols + i] *= 1e-41f;
            if (T > 4) for (int64_t i = 0; i < cols; ++i) x[4 * cols + i] = 0.0f;
            if (T > 5) x[5 * cols + cols - 1] = -INFINITY;
            std::vector<float> ref(T * rows), got(T * rows);
            MatvecCall c{w.data(), rows, cols, stride, x.data(), T, ref.data(), 1, Isa::Scalar, Precision::F32};
            kCpuQ8_0.matvec(c);
            c.logits = got.data();
            c.isa = Isa::Neon;
            kCpuQ8_0.matvec(c);
            ++checks;
            if (std::memcmp(ref.data(), got.data(), ref.size() * 4)) {
                std::printf("f32 mismatch rows=%lld cols=%lld T=%lld\n", (long long)rows, (long long)cols, (long long)T);
                ++failures;
            }
        }
    }
    std::printf("q8_0 neon parity: %d/%d checks equal\n", checks - failures, checks);
    return failures ? 1 : 0;
}
"""


def test_neon_path_equals_scalar_bytes_under_qemu(tmp_path):
    """The NEON kernel against the scalar reference, cross-built for aarch64 and run under qemu
    (this x86 machine cannot run NEON natively)."""
    import os
    import shutil
    import subprocess

    cxx, qemu = shutil.which("aarch64-linux-gnu-g++"), shutil.which("qemu-aarch64")
    if not cxx or not qemu:
        pytest.skip("aarch64-linux-gnu-g++ / qemu-aarch64 not installed (NEON parity not run)")
    root = os.path.join(os.path.dirname(__file__), "..")
    d = os.path.join(root, "csrc", "cpu", "types", "q8_0")
    src, exe = tmp_path / "q8_0_neon_parity.cc", str(tmp_path / "q8_0_neon_parity")
    src.write_text(_NEON_PARITY_CC)
    subprocess.run([cxx, "-O2", "-std=c++17", "-ffp-contract=off", "-DLMTAIL_HAVE_NEON=1",
                    "-I", os.path.join(root, "csrc"), "-I", os.path.join(root, "csrc", "include"), str(src),
                    *(os.path.join(d, f) for f in ("q8_0.cpp", "q8_0_scalar.cpp", "q8_0_neon.cpp")), "-o", exe],
                   check=True)
    r = subprocess.run([qemu, "-L", "/usr/aarch64-linux-gnu", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checks equal" in r.stdout, r.stdout
