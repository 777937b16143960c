"""Q4_0 (ggml type 2) on the CPU through lmtail._core: quantize bytes and dequantize bits equal
ggml's, the matvec's precisions (bytes equal across ISAs, thread counts, batch sizes; accuracy
against float64 from the dequantized weights), non-finite propagation, odd shapes, strided rows.

Tests needing the oracle (llama-cpp-python's libggml) are marked ``oracle`` and skip when it is
absent."""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from lmtail import _core, errors
from oracle import _lib

Q4_0 = 2
QK = 32
BB = 18


@pytest.fixture(scope="module")
def Q():
    _lib.require()
    from oracle import quant

    try:
        quant._api()
    except _lib.OracleUnavailable as e:  # pragma: no cover - environment
        pytest.skip(str(e))
    return quant


def quantize(x: np.ndarray, threads: int = 0) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty((x.shape[0], x.shape[1] // QK * BB), np.uint8)
    _core.quantize(Q4_0, x, out, threads)
    return out


def dequantize(q: np.ndarray, cols: int, threads: int = 0) -> np.ndarray:
    out = np.empty((q.shape[0], cols), np.float32)
    _core.dequantize(Q4_0, np.ascontiguousarray(q), out, threads)
    return out


def matvec(q, cols, x, *, threads=1, isa="auto", precision="default"):
    x2 = np.ascontiguousarray(np.atleast_2d(x), np.float32)
    out = np.empty((x2.shape[0], q.shape[0]), np.float32)
    _core.matvec(q, Q4_0, cols, x2, out, threads, isa, precision)
    return out


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def awkward(rng, rows, cols):
    """Gaussian blocks mixed with spikes, zeros, constants, huge and tiny (subnormal d) scales."""
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    nb = cols // QK
    blk = w.reshape(rows, nb, QK)
    kinds = rng.integers(0, 8, size=(rows, nb))
    blk[kinds == 1] = 0.0
    big = blk[kinds == 2]
    blk[kinds == 2] = big / np.abs(big).max(axis=1, keepdims=True) * np.float32(5.2e5)  # d near 65504
    blk[kinds == 3] *= np.float32(1e-6)  # d ~ 1e-7: fp16 subnormal
    blk[kinds == 4] *= np.float32(1e-38)  # 1/d overflows: ggml writes codes 0
    blk[kinds == 5] = np.float32(0.75)  # constant block
    spikes = kinds == 6
    blk[spikes, 3] = np.float32(50.0)
    blk[kinds == 7] = -np.abs(blk[kinds == 7])  # one-signed
    return w


PRECISIONS = [p for t in _core.cpu_types() if t["id"] == Q4_0 for p in t["precisions"] if p != "ggml"]  # "ggml": test_ggml_exact*
SIMD = ["avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"]


def test_table_row():
    row = [t for t in _core.cpu_types() if t["id"] == Q4_0]
    assert row, "Q4_0 missing from the CPU type table"
    (r,) = row
    assert (r["name"], r["block_elems"], r["block_bytes"]) == ("Q4_0", 32, 18)
    assert "f32" in r["precisions"] and r["default_precision"] in r["precisions"]


@pytest.mark.oracle
@pytest.mark.parametrize("cols", [32, 96, 640, 896, 2880])
def test_quantize_bytes_equal_ggml(Q, cols):
    rng = np.random.default_rng(cols)
    for x in (rng.standard_normal((7, cols)).astype(np.float32), awkward(rng, 9, cols)):
        want = Q.quantize(Q4_0, x)
        for threads in (1, 3):
            got = quantize(x, threads)
            bad = np.flatnonzero((got.reshape(-1, BB) != want.reshape(-1, BB)).any(axis=1))
            assert bad.size == 0, f"cols={cols} threads={threads}: blocks {bad[:5]} differ from ggml"


@pytest.mark.oracle
def test_quantize_edge_values_equal_ggml(Q):
    # Ties of x/d + 8.5 at integer boundaries, the largest finite d, fp16 subnormal d, -0.
    x = np.zeros((6, 32), np.float32)
    x[0] = np.arange(32) - 16
    x[1] = (np.arange(32) - 16) * np.float32(0.5)
    x[2, 0] = np.float32(65504.0 * 8)
    x[2, 1:] = np.linspace(-5e5, 5e5, 31, dtype=np.float32)
    x[3] = np.float32(-0.0)
    x[4] = np.linspace(-1e-6, 1e-6, 32, dtype=np.float32)
    x[5] = np.linspace(-1e-39, 2e-39, 32, dtype=np.float32)  # subnormal f32 weights
    assert np.array_equal(quantize(x), Q.quantize(Q4_0, x))


@pytest.mark.oracle
def test_dequantize_bits_equal_ggml(Q):
    rng = np.random.default_rng(1)
    q = rng.integers(0, 256, size=(11, 7 * BB), dtype=np.uint8)
    # Every d: finite (normal, subnormal), inf, NaN.
    d = rng.integers(0, 1 << 16, size=(11, 7), dtype=np.uint16)
    q.reshape(11, 7, BB)[:, :, :2] = d.view(np.uint8).reshape(11, 7, 2)
    got = dequantize(q, 7 * QK, threads=2)
    want = Q.dequantize(Q4_0, q, 7 * QK)
    same = (bits(got) == bits(want)) | (np.isnan(got) & np.isnan(want))
    assert same.all()
    fin = np.isfinite(want)
    assert np.array_equal(bits(got)[fin], bits(want)[fin])


def test_quantize_refuses_nonfinite_and_overflow():
    x = np.ones((2, 64), np.float32)
    x[1, 40] = np.nan
    with pytest.raises(errors.LmtailError, match=r"non-finite weight at \(1, 40\)"):
        quantize(x)
    x[1, 40] = 1.0
    x[0, 33] = np.float32(6e5)  # d = 7.5e4 > 65504: fp16 inf
    with pytest.raises(errors.LmtailError, match=r"row 0, block 1 overflows"):
        quantize(x)
    x[0, 33] = np.float32(5.2e5)  # d = 65000: finite
    quantize(x)


def test_shape_errors():
    with pytest.raises(errors.LmtailError, match="multiple of 32"):
        quantize(np.ones((1, 48), np.float32))
    q = quantize(np.ones((2, 64), np.float32))
    with pytest.raises(errors.LmtailError, match="multiple of 32"):
        matvec(q, 48, np.ones(48, np.float32))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("isa", SIMD)
def test_simd_equals_scalar_bytes(isa, precision):
    if not _core.isa_available(isa):
        pytest.skip(f"{isa} is not available on this CPU/build (not run here)")
    rng = np.random.default_rng(2)
    for rows, cols in ((1, 32), (7, 96), (65, 640), (129, 896)):
        q = quantize(awkward(rng, rows, cols))
        for T in (1, 2, 3, 5, 7, 8, 11, 16):  # 7, 16: the AVX-512 F32 kernel's 7- and 8-row blocks
            x = rng.standard_normal((T, cols)).astype(np.float32)
            a = matvec(q, cols, x, isa="scalar", precision=precision)
            b = matvec(q, cols, x, isa=isa, precision=precision)
            assert np.array_equal(bits(a), bits(b)), (isa, rows, cols, T)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_threads_and_batch_invariance(precision):
    rng = np.random.default_rng(3)
    rows, cols = 257, 2880
    q = quantize(rng.standard_normal((rows, cols)).astype(np.float32))
    x = rng.standard_normal((11, cols)).astype(np.float32)
    ref = matvec(q, cols, x, threads=1, precision=precision)
    for threads in (2, 3):
        assert np.array_equal(bits(ref), bits(matvec(q, cols, x, threads=threads, precision=precision)))
    for T in range(1, 12):
        got = matvec(q, cols, x[:T], precision=precision)
        assert np.array_equal(bits(got), bits(ref[:T])), T
    for t in (0, 4, 10):
        assert np.array_equal(bits(matvec(q, cols, x[t], precision=precision)), bits(ref[t : t + 1]))


def normwise(y, w64, x64):
    want = x64 @ w64.T
    return float(np.linalg.norm(y - want) / np.linalg.norm(want))


# The bound of each precision on these data (normwise relative error against float64).
BOUND = {"f32": 1e-6}


@pytest.mark.parametrize("precision", ["default"] + PRECISIONS)
def test_accuracy_vs_float64(precision):
    rng = np.random.default_rng(4)
    rows, cols = 96, 6656
    for w in (rng.standard_normal((rows, cols)).astype(np.float32), awkward(rng, rows, cols)):
        q = quantize(w)
        w64 = dequantize(q, cols).astype(np.float64)
        x = rng.standard_normal((3, cols)).astype(np.float32)
        x[2] *= np.where(rng.random(cols) < 0.01, 100.0, 1.0).astype(np.float32)  # outliers
        err = normwise(matvec(q, cols, x, precision=precision), w64, x.astype(np.float64))
        assert err <= BOUND.get(precision, 1e-6), (precision, err)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_nonfinite_x_poisons_its_row_only(precision):
    rng = np.random.default_rng(5)
    rows, cols = 9, 640
    q = quantize(rng.standard_normal((rows, cols)).astype(np.float32))
    x = rng.standard_normal((4, cols)).astype(np.float32)
    clean = matvec(q, cols, x, precision=precision)
    for bad in (np.nan, np.inf, -np.inf):
        xb = x.copy()
        xb[1, 300] = bad
        xb[3, 0] = bad
        for isa in ["scalar"] + [i for i in SIMD if _core.isa_available(i)]:
            y = matvec(q, cols, xb, isa=isa, precision=precision)
            assert not np.isfinite(y[[1, 3]]).any(), (bad, isa)
            assert np.array_equal(bits(y[[0, 2]]), bits(clean[[0, 2]])), (bad, isa)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_strided_rows(precision):
    rng = np.random.default_rng(6)
    rows, cols = 65, 896
    q = quantize(rng.standard_normal((rows, cols)).astype(np.float32))
    wide = np.zeros((rows, q.shape[1] + 37), np.uint8)
    wide[:, 5 : 5 + q.shape[1]] = q
    view = wide[:, 5 : 5 + q.shape[1]]
    assert view.strides[0] > q.shape[1]
    x = rng.standard_normal((3, cols)).astype(np.float32)
    for isa in ["scalar"] + [i for i in SIMD if _core.isa_available(i)]:
        assert np.array_equal(
            bits(matvec(view, cols, x, isa=isa, precision=precision)), bits(matvec(q, cols, x, precision=precision))
        )


def test_f32_precision_is_exact_weight_fma_order():
    # The canonical F32 expression reproduced in numpy (lane l = i % 16, fma emulated in float64
    # is exact for one product + add only when rounded once: use a tiny row where it is exact).
    rng = np.random.default_rng(7)
    cols = 64
    q = quantize(rng.standard_normal((3, cols)).astype(np.float32))
    w = dequantize(q, cols)
    x = rng.integers(-4, 5, size=(1, cols)).astype(np.float32)  # small integers: no rounding
    want = (w.astype(np.float64) @ x[0].astype(np.float64)).astype(np.float32)
    # w = d * integer, x integer: every partial sum is d * (small integer) times a power of 2, exact.
    assert np.array_equal(matvec(q, cols, x, precision="f32")[0], want)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_raw_bytes_any_scale_same_bits_every_isa(precision):
    # GGUF bytes need not come from our quantizer: every fp16 d (subnormal, inf, NaN) must give
    # the same logits' bits on every path (NaN included) and never crash.
    rng = np.random.default_rng(8)
    rows, cols = 13, 96
    q = rng.integers(0, 256, size=(rows, cols // QK * BB), dtype=np.uint8)
    d = q.reshape(rows, -1, BB)[:, :, :2].copy().view(np.uint16)
    d[0] = 0x7C00  # inf
    d[1] = 0x7E01  # NaN
    d[2] = 0x0001  # smallest subnormal
    q.reshape(rows, -1, BB)[:, :, :2] = d.view(np.uint8)
    x = rng.standard_normal((3, cols)).astype(np.float32)
    ref = matvec(q, cols, x, isa="scalar", precision=precision)
    assert not np.isfinite(ref[:, :2]).any()
    for isa in [i for i in SIMD if _core.isa_available(i)]:
        assert np.array_equal(bits(ref), bits(matvec(q, cols, x, isa=isa, precision=precision))), isa


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("scale", [1e-33, 1e-20, 1e20, 1e30])
def test_accuracy_tiny_and_huge_x(precision, scale):
    # I24's f32 block step s/256 would underflow for rows of tiny x: they are rescaled by 2^k.
    rng = np.random.default_rng(9)
    rows, cols = 33, 896
    q = quantize(rng.standard_normal((rows, cols)).astype(np.float32))
    w64 = dequantize(q, cols).astype(np.float64)
    x = (rng.standard_normal((2, cols)) * scale).astype(np.float32)
    y = matvec(q, cols, x, precision=precision)
    assert normwise(y, w64, x.astype(np.float64)) <= 1e-6
    for isa in [i for i in SIMD if _core.isa_available(i)]:
        assert np.array_equal(bits(y), bits(matvec(q, cols, x, isa=isa, precision=precision)))
    assert np.array_equal(bits(y[1:]), bits(matvec(q, cols, x[1], precision=precision)))


# ---- i24 with activation outliers (taken out and added back, or the f32 kernel) -------------
@pytest.mark.parametrize("per_block", [1, 4])
@pytest.mark.parametrize("spiky_w", [False, True])
@pytest.mark.parametrize("ratio", [1, 10, 30, 100, 300, 1000, 10000])
def test_i24_activation_spikes_normwise(ratio, spiky_w, per_block):
    rng = np.random.default_rng(21)
    rows, cols = 96, 1024
    w = rng.standard_normal((rows, cols)) * 0.02
    if spiky_w:
        w[:, ::97] *= 300.0
    x = rng.standard_normal((3, cols))
    x[:, 5 :: (32 if per_block == 1 else 8)] *= ratio  # never on a spiky weight column
    q = quantize(w.astype(np.float32))
    x = x.astype(np.float32)
    want = x.astype(np.float64) @ dequantize(q, cols).astype(np.float64).T
    for precision in ("i24", "default"):
        got = matvec(q, cols, x, precision=precision).astype(np.float64)
        err = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
        assert err.max() <= 1e-6, (precision, err)


def test_i24_spiky_rows_route_and_batch_stays_invariant():
    rng = np.random.default_rng(5)
    cols = 640
    q = quantize((rng.standard_normal((130, cols)) * 0.02).astype(np.float32))
    x = rng.standard_normal((6, cols))
    x[1, ::7] *= 1e3
    x[4, 300] *= 1e4  # one outlier: taken out and added back (test_i24_outliers.py)
    x = x.astype(np.float32)
    f32 = matvec(q, cols, x, precision="f32")
    for threads in (1, 2):
        got = matvec(q, cols, x, threads=threads, precision="i24")
        for t in range(x.shape[0]):
            one = matvec(q, cols, x[t : t + 1], threads=threads, precision="i24")[0]
            assert np.array_equal(bits(got[t]), bits(one)), (threads, t)
        assert np.array_equal(bits(got[1]), bits(f32[1]))  # too many outliers in a block: f32
        assert not np.array_equal(bits(got[4]), bits(f32[4]))  # one outlier: taken out, i24
        assert not np.array_equal(bits(got[0]), bits(f32[0]))  # ordinary rows keep i24
        if lmtail._core.isa_available("avx2"):
            scalar = matvec(q, cols, x, threads=threads, isa="scalar", precision="i24")
            assert np.array_equal(bits(got), bits(scalar))


@pytest.mark.parametrize("spiky", [(2,), (0, 3, 6), (1, 2, 5, 6, 7)])
def test_i24_mixed_batch_one_pass_equals_scalar(spiky):
    # A batch with both kinds of rows runs both kernels per row task (run_mixed): odd and even
    # counts of integer rows (the AVX-512 kernel's last odd row) and of F32 rows, several tasks.
    rng = np.random.default_rng(9)
    cols = 320
    q = quantize((rng.standard_normal((131, cols)) * 0.02).astype(np.float32))
    x = rng.standard_normal((8, cols))
    for t in spiky:
        x[t, 37] *= 1e4
    x = x.astype(np.float32)
    scalar = matvec(q, cols, x, isa="scalar", precision="i24")
    for threads in (1, 2):
        got = matvec(q, cols, x, threads=threads, precision="i24")
        assert np.array_equal(bits(got), bits(scalar)), threads
        for t in (0, 2, 7):
            assert np.array_equal(bits(got[t]), bits(matvec(q, cols, x[t : t + 1], threads=threads, precision="i24")[0]))


@pytest.mark.parametrize("precision", PRECISIONS)
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
    for isa in ["scalar"] + [i for i in SIMD if _core.isa_available(i)]:
        y = matvec(q, cols, x, isa=isa, precision=precision)
        nan = np.isnan(y)
        assert nan[:, :2].all() and nan[1:].all() and not nan[0, 2:].any(), isa
        assert (y.view(np.uint32)[nan] == 0x7FC00000).all(), (isa, hex(int(y.view(np.uint32)[nan][0])))

# The NEON parity driver, cross-built with q4_0.cpp (the scalar references and the dispatch, built
# with LMTAIL_HAVE_NEON) and q4_0_neon.cpp; a serial parallel_for stands in for the thread pool.
# Checks, for T = 1..11 and several shapes (rows split in the dispatch's tasks of 64, a row stride
# wider than the row): the whole type row (prepare_i24 included) isa=scalar vs isa=neon for F32 and
# I24, on arbitrary blocks (d of every exponent, NaN / inf d) and awkward x (NaN, inf, huge, tiny,
# zero rows); and the I24 kernels alone on random int16 a at +-32767, uint8 r at 0..255 and NaN sr.
_NEON_PARITY_CC = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "cpu/types/q4_0/q4_0_kernels.hpp"

namespace lmt::core {
void parallel_for(int, int64_t n_tasks, const std::function<void(int64_t)> &fn) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
}
}  // namespace lmt::core

using namespace lmt::cpu;

static int failures = 0, checks = 0;

// The dispatch writes every NaN logit as the default quiet NaN (payloads depend on the compiler's
// operand order); the direct kernel calls below get the same treatment before the comparison.
static void canonical_nans(std::vector<float> &v) {
    for (auto &f : v)
        if (std::isnan(f)) f = NAN;
}

static void expect_equal(const std::vector<float> &a, const std::vector<float> &b, const char *what, int64_t rows,
                         int64_t cols, int64_t T) {
    ++checks;
    if (std::memcmp(a.data(), b.data(), a.size() * 4)) {
        std::printf("%s mismatch rows=%lld cols=%lld T=%lld\n", what, (long long)rows, (long long)cols, (long long)T);
        ++failures;
    }
}

int main() {
    std::mt19937_64 rng(1);
    const int64_t shapes[][2] = {{1, 32}, {7, 96}, {33, 640}, {65, 896}, {3, 2880}};
    for (const auto &sh : shapes) {
        const int64_t rows = sh[0], cols = sh[1], nb = cols / 32;
        const size_t rb = (size_t)nb * 18, stride = rb + 6;
        std::vector<uint8_t> w(rows * stride);
        for (auto &v : w) v = (uint8_t)rng();
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t b = 0; b < nb; ++b) {  // finite d of any exponent, either sign; a few non-finite
                uint16_t d = (uint16_t)(rng() % 0x7C00) | (uint16_t)((rng() & 1) << 15);
                if (rng() % 97 == 0) d = (uint16_t)(0x7C00 | (rng() & 0x3FF));
                std::memcpy(&w[r * stride + b * 18], &d, 2);
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
            if (T > 6) for (int64_t i = 0; i < cols; ++i) x[6 * cols + i] *= 1e-25f;  // prepare_i24's row scaling
            std::vector<float> ref(T * rows), got(T * rows);
            for (Precision p : {Precision::F32, Precision::I24}) {
                MatvecCall c{w.data(), rows, cols, stride, x.data(), T, ref.data(), 1, Isa::Scalar, p};
                kCpuQ4_0.matvec(c);
                c.logits = got.data();
                c.isa = Isa::Neon;
                kCpuQ4_0.matvec(c);
                expect_equal(ref, got, p == Precision::F32 ? "f32" : "i24", rows, cols, T);
                c.dotprod = true;  // Isa::NeonDot as the checked entry passes it
                std::fill(got.begin(), got.end(), -1.0f);
                kCpuQ4_0.matvec(c);
                expect_equal(ref, got, p == Precision::F32 ? "f32 dotprod" : "i24 dotprod", rows, cols, T);
            }
            // The I24 kernels on activations at their bounds.
            std::vector<int16_t> xa(T * cols);
            std::vector<uint8_t> xr(T * cols);
            std::vector<float> sr(T * nb);
            for (auto &v : xa) v = (rng() % 4 == 0) ? ((rng() & 1) ? 32767 : -32767) : (int16_t)((int)(rng() % 65535) - 32767);
            for (auto &v : xr) v = (rng() % 4 == 0) ? 255 : (uint8_t)rng();
            for (int64_t i = 0; i < T * nb; ++i) sr[i] = (i == 1) ? NAN : std::ldexp(1.0f, -(int)(rng() % 60)) * 1.37f;
            const q4_0::I24Args a{w.data(), rows, cols, stride, xa.data(), xr.data(), sr.data(), T, ref.data()};
            q4_0::I24Args b = a;
            b.logits = got.data();
            q4_0::matvec_i24_scalar(a, 0, rows);
            for (int64_t r0 = 0; r0 < rows; r0 += 64) q4_0::matvec_i24_neon(b, r0, r0 + 64 < rows ? r0 + 64 : rows);
            canonical_nans(ref);
            canonical_nans(got);
            expect_equal(ref, got, "i24 kernel", rows, cols, T);
            // The dotprod kernel on the same bounds (its records split a at +-32767 into bytes).
            std::vector<int32_t> c1(nb * 8);
            std::vector<uint8_t> xd(T * nb * q4_0::kI24DotRecord);
            q4_0::dot_layout(a, c1.data(), xd.data());
            b.xd = xd.data();
            std::fill(got.begin(), got.end(), -1.0f);
            for (int64_t r0 = 0; r0 < rows; r0 += 64) q4_0::matvec_i24_neon_dot(b, r0, r0 + 64 < rows ? r0 + 64 : rows);
            canonical_nans(got);
            expect_equal(ref, got, "i24 dotprod kernel", rows, cols, T);
        }
    }
    std::printf("q4_0 neon parity: %d/%d checks equal\n", checks - failures, checks);
    return failures ? 1 : 0;
}
"""


def test_neon_paths_equal_scalar_bytes_under_qemu(tmp_path):
    """The NEON F32 and I24 kernels (and their dispatch) against the scalar references,
    cross-built for aarch64 and run under qemu (this x86 machine cannot run NEON natively)."""
    import os
    import shutil
    import subprocess

    cxx, qemu = shutil.which("aarch64-linux-gnu-g++"), shutil.which("qemu-aarch64")
    if not cxx or not qemu:
        pytest.skip("aarch64-linux-gnu-g++ / qemu-aarch64 not installed (NEON parity not run)")
    root = os.path.join(os.path.dirname(__file__), "..")
    d = os.path.join(root, "csrc", "cpu", "types", "q4_0")
    src, exe = tmp_path / "q4_0_neon_parity.cc", str(tmp_path / "q4_0_neon_parity")
    src.write_text(_NEON_PARITY_CC)
    flags = ["-O2", "-std=c++17", "-ffp-contract=off", "-DLMTAIL_HAVE_NEON=1",
             "-I", os.path.join(root, "csrc"), "-I", os.path.join(root, "csrc", "include")]
    dot = str(tmp_path / "q4_0_neon_dot.o")  # the dotprod file alone gets +dotprod, as in CMakeLists.txt
    subprocess.run([cxx, *flags, "-march=armv8.2-a+dotprod", "-c", os.path.join(d, "q4_0_neon_dot.cpp"), "-o", dot],
                   check=True)
    subprocess.run([cxx, *flags, str(src), os.path.join(d, "q4_0.cpp"), os.path.join(d, "q4_0_neon.cpp"), dot,
                    "-o", exe], check=True)
    # -cpu max: a CPU with the dot product (the driver calls the dotprod kernel directly).
    r = subprocess.run([qemu, "-cpu", "max", "-L", "/usr/aarch64-linux-gnu", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checks equal" in r.stdout, r.stdout
