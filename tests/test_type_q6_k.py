"""Q6_K (ggml type 14) on the CPU: quantize/dequantize bytes against ggml's, and the matvec
contracts (SIMD == scalar bytes, thread and batch invariance, accuracy vs float64, non-finite x)
through lmtail._core directly. Oracle tests carry the ``oracle`` marker and skip without it."""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from lmtail import _core, errors
from oracle import _lib

TYPE = 14
QK = 256
BLOCK = 210


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def row_bytes(cols):
    return cols // QK * BLOCK


def precisions():
    (row,) = [t for t in _core.cpu_types() if t["id"] == TYPE]
    return [p for p in row["precisions"] if p != "ggml"]  # "ggml": tests/test_ggml_exact.py


PRECISIONS = precisions()


def quantize(x, threads=1):
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty((x.shape[0], row_bytes(x.shape[1])), np.uint8)
    _core.quantize(TYPE, x, out, threads)
    return out


def dequantize(q, cols, threads=1):
    out = np.empty((q.shape[0], cols), np.float32)
    _core.dequantize(TYPE, np.ascontiguousarray(q), out, threads)
    return out


def matvec(q, x, cols=None, threads=1, isa="auto", precision="default"):
    x = np.ascontiguousarray(np.atleast_2d(x), np.float32)
    cols = x.shape[1] if cols is None else cols
    out = np.empty((x.shape[0], q.shape[0]), np.float32)
    _core.matvec(q, TYPE, cols, x, out, threads, isa, precision)
    return out


def gaussian_q(rows, cols, seed=0):
    return quantize(np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32))


def random_blocks(rows, cols, seed=0):
    """Arbitrary block bytes (every q, every int8 scale incl. -128) with a finite f16 d of random
    exponent (subnormal to ~2^10): the full range the kernels must decode."""
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 256, (rows, row_bytes(cols)), dtype=np.uint8)
    blocks = q.reshape(rows, cols // QK, BLOCK)
    d = rng.integers(0, 0x6400, blocks.shape[:2], dtype=np.uint16) | (rng.integers(0, 2, blocks.shape[:2], dtype=np.uint16) << 15)
    blocks[:, :, 208:210] = d.astype("<u2").view(np.uint8).reshape(*blocks.shape[:2], 2)
    return q


def awkward_weights(rows, cols, seed=0):
    """Blocks that stress the quantiser's branches: zeros, a zero sub-block, spikes, tiny (f16 d
    subnormal or zero), huge, ties, constants, a negative maximum, values at GROUP_MAX_EPS."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    nb = cols // QK
    kinds = 14
    for r in range(rows):
        for b in range(nb):
            blk = x[r, QK * b : QK * (b + 1)]
            k = (r * nb + b) % kinds
            if k == 0:
                blk[:] = 0
            elif k == 1:
                blk[16:32] = 0
            elif k == 2:
                blk[:] = 0
                blk[rng.integers(256)] = -3.5
            elif k == 3:
                blk *= np.float32(1e-9)
            elif k == 4:
                blk *= np.float32(1e-30)
            elif k == 5:
                blk *= np.float32(2.5e7)
            elif k == 6:
                blk[:] = (np.arange(256) % 7 - 3) * np.float32(0.5)
            elif k == 7:
                blk[:] = np.float32(0.75)
            elif k == 8:
                blk[5] = -np.abs(blk).max() * 3
            elif k == 9:
                blk[:] = np.float32(1e-15) * (np.arange(256) % 3)
            elif k == 10:
                blk *= np.repeat(np.float32(10.0) ** rng.integers(-6, 6, 16), 16).astype(np.float32)
            elif k == 11:
                blk[:] = np.abs(blk)
            elif k == 12:
                blk[::2] = 0
    return x


# ---- quantize / dequantize against ggml -------------------------------------------------------


@pytest.fixture(scope="module")
def Q():
    _lib.require()
    from oracle import quant

    try:
        quant._api()
    except _lib.OracleUnavailable as e:  # pragma: no cover - environment
        pytest.skip(str(e))
    return quant


@pytest.mark.oracle
@pytest.mark.parametrize("maker", [lambda: np.random.default_rng(1).standard_normal((9, 1024)).astype(np.float32),
                                   lambda: awkward_weights(13, 1792, seed=2),
                                   lambda: awkward_weights(5, 256, seed=3)])
def test_quantize_bytes_equal_ggml(Q, maker):
    x = maker()
    want = Q.quantize(TYPE, x)
    for threads in (1, 3):
        got = quantize(x, threads)
        assert got.shape == want.shape
        bad = np.flatnonzero((got != want).any(axis=1))
        assert bad.size == 0, f"rows {bad[:5]} differ from ggml's bytes"


@pytest.mark.oracle
def test_dequantize_bits_equal_ggml(Q):
    for q, cols in ((gaussian_q(7, 768), 768), (random_blocks(11, 1024, seed=4), 1024)):
        want = Q.dequantize(TYPE, q, cols)
        for threads in (1, 2):
            assert np.array_equal(bits(dequantize(q, cols, threads)), bits(want))


def test_quantize_fails_closed():
    x = np.zeros((2, 512), np.float32)
    x[1, 300] = np.inf
    with pytest.raises(errors.ParameterError, match="finite"):
        quantize(x)
    x[1, 300] = 3e9  # f16 d = max|w| / 4096 overflows
    with pytest.raises(errors.ParameterError, match="overflows"):
        quantize(x)
    x[1, 300] = 1e8  # still representable
    w = dequantize(quantize(x), 512)
    assert np.all(np.isfinite(w)) and abs(w[1, 300] - 1e8) < 1e8 / 60
    with pytest.raises(errors.ParameterError, match="256"):
        quantize(np.zeros((1, 200), np.float32))


def test_round_trip_error():
    x = np.random.default_rng(5).standard_normal((20, 512)).astype(np.float32)
    w = dequantize(quantize(x), 512)
    # 6-bit codes on 16-weight sub-blocks: rms error ~ max/64/sqrt(12) per sub-block.
    assert np.linalg.norm(w - x) <= 0.02 * np.linalg.norm(x)


# ---- matvec ---------------------------------------------------------------------------------


def reference(q, x, cols):
    w = dequantize(q, cols).astype(np.float64)
    return x.astype(np.float64) @ w.T


def awkward_activations(T, cols, seed):
    x = np.random.default_rng(seed).standard_normal((T, cols)).astype(np.float32)
    nb = cols // QK
    for t in range(T):
        blk = x[t, QK * ((t * 7) % nb) : QK * ((t * 7) % nb + 1)]
        kind = t % 5
        if kind == 0:
            blk[:] = 0
        elif kind == 1:
            blk[:] = 0
            blk[17] = -3.5
        elif kind == 2:
            blk *= np.float32(1e-41)
        elif kind == 3:
            blk *= np.float32(1e30)
        else:
            blk[3] = -np.abs(blk).max() * 2
    return x


def test_type_row():
    (row,) = [t for t in _core.cpu_types() if t["id"] == TYPE]
    assert row["name"] == "Q6_K" and row["block_elems"] == 256 and row["block_bytes"] == 210
    assert "f32" in row["precisions"] and row["default_precision"] in row["precisions"]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("isa", ["avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"])
def test_simd_paths_equal_scalar_bytes(isa, precision):
    if not _core.isa_available(isa):
        pytest.skip(f"{isa} is not available on this CPU/build (path compiled but not run here)")
    cols = 1536
    for q in (gaussian_q(133, cols, seed=7), random_blocks(37, cols, seed=8)):
        for T in (1, 2, 3, 5, 8, 11):
            x = np.random.default_rng(T).standard_normal((T, cols)).astype(np.float32)
            for xx in (x, awkward_activations(T, cols, T)):
                a = matvec(q, xx, isa="scalar", precision=precision)
                b = matvec(q, xx, isa=isa, precision=precision)
                assert np.array_equal(bits(a), bits(b)), (isa, T)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_thread_count_and_batch_invariance(precision):
    cols = 1024
    q = gaussian_q(301, cols, seed=3)
    x = awkward_activations(11, cols, 9)
    base = matvec(q, x, threads=1, precision=precision)
    for threads in (2, 3):
        assert np.array_equal(bits(matvec(q, x, threads=threads, precision=precision)), bits(base))
    for T in range(1, 12):
        got = matvec(q, x[:T], precision=precision)
        assert np.array_equal(bits(got), bits(base[:T])), T
    for t in (0, 4, 10):
        assert np.array_equal(bits(matvec(q, x[t], precision=precision)[0]), bits(base[t]))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_accuracy_vs_float64(precision):
    cols = 6656
    q = gaussian_q(64, cols, seed=11)
    x = np.random.default_rng(12).standard_normal((3, cols)).astype(np.float32)
    cases = [(q, x), (random_blocks(32, 2048, seed=13), awkward_activations(5, 2048, 14))]
    for qq, xx in cases:
        xx = np.where(np.abs(xx) > 1e20, np.float32(1e3), xx)  # keep the float64 product finite
        y = matvec(qq, xx, precision=precision)
        ref = reference(qq, xx, xx.shape[1])
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        assert err <= 1e-6, (precision, err)


def test_default_precision_meets_1e6():
    cols = 4096
    q = quantize(awkward_weights(40, cols, seed=15))
    x = np.random.default_rng(16).standard_normal((4, cols)).astype(np.float32)
    y = matvec(q, x)
    ref = reference(q, x, cols)
    assert np.linalg.norm(y - ref) <= 1e-6 * np.linalg.norm(ref)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_x_poisons_only_its_row(precision, bad):
    cols = 768
    q = gaussian_q(70, cols, seed=17)
    q[3] = 0  # an all-zero weight row (d = 0): 0 * inf must still be non-finite
    x = np.random.default_rng(18).standard_normal((4, cols)).astype(np.float32)
    clean = matvec(q, x, precision=precision)
    x[2, 500] = bad
    for isa in ("scalar", "auto"):
        y = matvec(q, x, isa=isa, precision=precision)
        assert not np.isfinite(y[2]).any()
        assert np.array_equal(bits(np.delete(y, 2, 0)), bits(np.delete(clean, 2, 0)))


@pytest.mark.parametrize("rows", [1, 7, 65, 129])
@pytest.mark.parametrize("cols", [256, 768])
def test_odd_shapes_and_row_stride(rows, cols):
    rb = row_bytes(cols)
    wide = np.zeros((rows, rb + 42), np.uint8)
    wide[:, :rb] = random_blocks(rows, cols, seed=rows + cols)
    wide[:, rb:] = 0xFF  # bytes past the row must never be read as weights
    view = wide[:, :rb]
    assert view.strides[0] == rb + 42
    x = np.random.default_rng(rows).standard_normal((3, cols)).astype(np.float32)
    dense = np.ascontiguousarray(view)
    for precision in PRECISIONS:
        for isa in ("scalar", "auto"):
            got = matvec(view, x, isa=isa, precision=precision)
            assert np.array_equal(bits(got), bits(matvec(dense, x, isa=isa, precision=precision)))
        ref = reference(dense, x, cols)
        assert np.linalg.norm(got - ref) <= 1e-6 * np.linalg.norm(ref)


def test_bad_arguments():
    q = gaussian_q(2, 512)
    with pytest.raises(errors.ParameterError, match="256"):
        matvec(q, np.ones((1, 500), np.float32))
    missing = [p for p in ("i16", "i24") if p not in PRECISIONS]
    for p in missing:
        with pytest.raises(errors.UnsupportedError, match="Q6_K"):
            matvec(q, np.ones((1, 512), np.float32), precision=p)
    with pytest.raises(errors.ParameterError):
        matvec(q, np.ones((1, 512), np.float32), cols=768)  # x has 512 columns, not 768


def test_neon_paths_equal_scalar_bytes_under_qemu(tmp_path):
    """NEON F32 and I24 kernels against the scalar references (arbitrary blocks, int16
    activations at the bounds, NaN scales, non-finite x), cross-built and run under qemu."""
    import os
    import shutil
    import subprocess

    cxx, qemu = shutil.which("aarch64-linux-gnu-g++"), shutil.which("qemu-aarch64")
    if not cxx or not qemu:
        pytest.skip("aarch64-linux-gnu-g++ / qemu-aarch64 not installed (NEON parity not run)")
    root = os.path.join(os.path.dirname(__file__), "..")
    d = os.path.join(root, "csrc", "cpu", "types", "q6_k")
    exe = str(tmp_path / "q6k_neon_parity")
    subprocess.run([cxx, "-O2", "-std=c++17", "-ffp-contract=off", "-I", os.path.join(root, "csrc"),
                    "-I", os.path.join(root, "csrc", "include"), os.path.join(root, "tests", "cpp", "neon", "q6_k_parity.cc"),
                    os.path.join(d, "q6_k_scalar.cpp"), os.path.join(d, "q6_k_neon.cpp"), "-o", exe], check=True)
    r = subprocess.run([qemu, "-L", "/usr/aarch64-linux-gnu", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
