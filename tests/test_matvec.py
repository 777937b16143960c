"""Q5_K matvec: accuracy against a float64 reference, and byte-level determinism contracts."""

import numpy as np
import pytest

import lmtail
from _util import bits, q5k_matrix, reference_matvec, slab, tiled_head

# Error bound, elementwise: |y - ref| <= 3e-5 * (|W| @ |x|). An f32 sum of n = 6656 terms has a
# worst case of ~n*eps = 4e-4 relative to sum|w||x|; the 16-lane tree keeps chains to n/16
# terms, whose worst case is 2.5e-5 + tree depth. Measured: ~4e-7 normwise.
BOUND = 3e-5


@pytest.mark.parametrize("rows", [1, 7, 99, 4097])
@pytest.mark.parametrize("cols", [256, 6656])
@pytest.mark.parametrize("T", [1, 3, 8])
def test_matches_float64_reference(rows, cols, T):
    q = q5k_matrix(rows, cols, seed=rows * 31 + cols)
    x = np.random.default_rng(T).standard_normal((T, cols)).astype(np.float32)
    y = lmtail.ops.matvec_q5_k(q, x)
    assert y.shape == (T, rows) and y.dtype == np.float32
    ref, mag = reference_matvec(q, x)
    assert np.all(np.abs(y - ref) <= BOUND * mag + 1e-30)
    assert np.linalg.norm(y - ref) <= 1e-5 * np.linalg.norm(ref)


def test_1d_input_gives_1d_output():
    q = q5k_matrix(5, 512)
    x = np.ones(512, np.float32)
    y = lmtail.ops.matvec_q5_k(q, x)
    assert y.shape == (5,)
    assert np.array_equal(bits(y), bits(lmtail.ops.matvec_q5_k(q, x[None])[0]))


def available_isas():
    out = []
    for isa in ("scalar", "avx2", "avx512", "neon"):
        if lmtail._core.isa_available(isa):
            out.append(isa)
    return out


@pytest.mark.parametrize("isa", ["avx2", "avx512", "neon"])
def test_simd_paths_equal_scalar_bytes(isa):
    if not lmtail._core.isa_available(isa):
        pytest.skip(f"{isa} is not available on this CPU/build (path compiled but not run here)")
    q = q5k_matrix(333, 1536, seed=7)
    for T in (1, 2, 5, 8, 11):
        x = np.random.default_rng(T).standard_normal((T, 1536)).astype(np.float32)
        a = lmtail.ops.matvec_q5_k(q, x, isa="scalar")
        b = lmtail.ops.matvec_q5_k(q, x, isa=isa)
        assert np.array_equal(bits(a), bits(b)), (isa, T)


def test_thread_count_and_batch_invariance():
    q = q5k_matrix(1000, 2048, seed=3)
    x = np.random.default_rng(0).standard_normal((8, 2048)).astype(np.float32)
    base = lmtail.ops.matvec_q5_k(q, x, threads=1)
    for th in (2, 3, 7):
        assert np.array_equal(bits(base), bits(lmtail.ops.matvec_q5_k(q, x, threads=th)))
    for t in range(8):  # row t of a T=8 batch == the same row computed alone
        assert np.array_equal(bits(base[t]), bits(lmtail.ops.matvec_q5_k(q, x[t])))
    for _ in range(3):  # run to run
        assert np.array_equal(bits(base), bits(lmtail.ops.matvec_q5_k(q, x)))


def test_strided_weight_rows_without_copy():
    q = q5k_matrix(64, 512, seed=5)
    wide = np.zeros((64, q.shape[1] + 176), np.uint8)
    wide[:, : q.shape[1]] = q
    view = wide[:, : q.shape[1]]  # row stride > row bytes
    x = np.random.default_rng(1).standard_normal(512).astype(np.float32)
    assert np.array_equal(bits(lmtail.ops.matvec_q5_k(view, x)), bits(lmtail.ops.matvec_q5_k(q, x)))


@pytest.mark.slow
def test_full_size_head_202048x6656():
    s = slab()
    w = tiled_head(202048, s)
    x = np.random.default_rng(11).standard_normal((3, 6656)).astype(np.float32)
    y = lmtail.ops.matvec_q5_k(w, x)
    ref, mag = reference_matvec(s, x)  # the head is the slab tiled, so is its reference
    reps = -(-202048 // s.shape[0])
    ref = np.tile(ref, (1, reps))[:, :202048]
    mag = np.tile(mag, (1, reps))[:, :202048]
    assert np.all(np.abs(y - ref) <= BOUND * mag + 1e-30)
    assert np.array_equal(bits(y[1]), bits(lmtail.ops.matvec_q5_k(w, x[1])))


def test_errors():
    q = q5k_matrix(4, 256)
    with pytest.raises(lmtail.ShapeError):
        lmtail.ops.matvec_q5_k(q, np.ones(512, np.float32))
    with pytest.raises(lmtail.DTypeError):
        lmtail.ops.matvec_q5_k(q, np.ones(256, np.float64))
    with pytest.raises(lmtail.DTypeError):
        lmtail.ops.matvec_q5_k(q.view(np.int8), np.ones(256, np.float32))
    with pytest.raises(lmtail.ShapeError):
        lmtail.ops.matvec_q5_k(q[:, :100], np.ones(256, np.float32))
    with pytest.raises(lmtail.ShapeError):
        lmtail.ops.matvec_q5_k(q, np.ones((2, 2, 256), np.float32))
    with pytest.raises(lmtail.BackendError):
        lmtail.ops.matvec_q5_k(q, np.ones(256, np.float32), backend="nope")
    with pytest.raises(lmtail.ParameterError):
        lmtail.ops.matvec_q5_k(q, np.ones(256, np.float32), threads=0)
    with pytest.raises(ValueError):
        lmtail.ops.matvec_q5_k(q, np.ones(256, np.float32), isa="sse9")
