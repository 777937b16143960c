"""RMSNorm, scale, tanh and the soft cap (four-pass and fused)."""

import math

import numpy as np
import pytest

import lmtail
from lmtail import ops
from _util import bits


@pytest.mark.parametrize("T,cols", [(1, 256), (3, 6656), (8, 777)])
def test_rms_norm_matches_float64(T, cols):
    rng = np.random.default_rng(T * cols)
    x = (rng.standard_normal((T, cols)) * 3).astype(np.float32)
    g = rng.standard_normal(cols).astype(np.float32)
    y = ops.rms_norm(x, g, eps=1e-5)
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64**2).mean(axis=1, keepdims=True) + 1e-5) * g
    assert np.allclose(y, ref, rtol=2e-6, atol=1e-7)
    assert np.array_equal(bits(ops.rms_norm(x, None)), bits(ops.rms_norm(x, np.ones(cols, np.float32))))
    assert ops.rms_norm(x[0], g).shape == (cols,)


def test_rms_norm_errors():
    x = np.ones((2, 8), np.float32)
    with pytest.raises(lmtail.ShapeError):
        ops.rms_norm(x, np.ones(7, np.float32))
    with pytest.raises(lmtail.ParameterError):
        ops.rms_norm(x, None, eps=-1.0)
    with pytest.raises(lmtail.ParameterError):
        ops.rms_norm(x, None, eps=float("nan"))


def awkward_logits(n, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1, 30, 300, 3000], n)).astype(np.float32)
    x[: min(n, 4)] = np.array([0.0, -0.0, 1e-30, -1e30], np.float32)[: min(n, 4)]
    return x


@pytest.mark.parametrize("n", [1, 7, 99, 4097, 202048])
@pytest.mark.parametrize("s,cap", [(0.196116, 20.0), (1.0, 30.0), (1 / 30, 50.0), (2.0, 0.0), (0.5, -1.0)])
def test_softcap_fused_equals_four_pass(n, s, cap):
    x = awkward_logits(n, seed=n)
    a = ops.softcap(x, s, cap, four_pass=True)
    b = ops.softcap(x, s, cap, four_pass=False)
    assert np.array_equal(bits(a), bits(b))
    if cap > 0:
        # the four passes are literally scale, scale(1/cap), tanh, scale(cap)
        inv = np.float32(1.0) / np.float32(cap)
        c = ops.scale(ops.tanh(ops.scale(ops.scale(x, s), float(inv))), cap)
        assert np.array_equal(bits(a), bits(c))
        ref = cap * np.tanh(x.astype(np.float64) * s / cap)
        assert np.allclose(a, ref, rtol=1e-5, atol=1e-5)
        assert np.all(np.abs(a) <= cap)
    else:
        assert np.array_equal(bits(a), bits(ops.scale(x, s)))


def test_tanh_is_libm_tanhf():
    import ctypes
    import ctypes.util

    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.tanhf.restype = ctypes.c_float
    libm.tanhf.argtypes = [ctypes.c_float]
    x = awkward_logits(2000, seed=9) / np.float32(100)
    y = ops.tanh(x)
    ref = np.array([libm.tanhf(float(v)) for v in x], np.float32)
    assert np.array_equal(bits(y), bits(ref))


def test_unary_out_and_inputs_untouched():
    x = np.linspace(-5, 5, 101, dtype=np.float32)
    keep = x.copy()
    y = ops.scale(x, 3.0)
    assert np.array_equal(x, keep) and np.allclose(y, keep * 3)
    out = np.empty_like(x)
    r = ops.softcap(x, 1.0, 2.0, out=out)
    assert r is out and np.array_equal(x, keep)
    ops.scale(x, 2.0, out=x)  # in place allowed
    assert np.array_equal(x, keep * 2)
    with pytest.raises(lmtail.ShapeError):
        ops.scale(keep, 2.0, out=np.empty(3, np.float32))
    with pytest.raises(lmtail.ParameterError):
        ops.softcap(keep, math.inf, 20.0)


@pytest.mark.parametrize("T,cols", [(1, 256), (3, 6656), (8, 777)])
def test_layer_norm_matches_float64(T, cols):
    rng = np.random.default_rng(T + cols)
    x = (rng.standard_normal((T, cols)) * 3 + 5).astype(np.float32)  # non-zero mean
    g = rng.standard_normal(cols).astype(np.float32)
    y = ops.layer_norm(x, g, eps=1e-5)
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * g
    assert np.allclose(y, ref, rtol=3e-6, atol=3e-6)
    assert np.array_equal(bits(ops.layer_norm(x, None)), bits(ops.layer_norm(x, np.ones(cols, np.float32))))


def test_layer_norm_close_to_ggml_norm():
    from oracle import _lib, graph

    _lib.require()
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 6656)) * 2 + 1).astype(np.float32)
    g = rng.uniform(0.5, 1.5, 6656).astype(np.float32)
    ours = ops.layer_norm(x, g, eps=1e-5)
    theirs = graph.norm_mul(x, g, eps=1e-5)
    # ggml sums in float in its SIMD lane order; the two agree to a few ulps of the result.
    assert np.allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", [ops.rms_norm, ops.layer_norm])
def test_norm_overflow_raises_and_other_rows_keep_their_bytes(op):
    # A finite row whose squares overflow float would normalise to all zeros (ggml's bytes):
    # the op raises NonFiniteLogitsError naming the row instead (issue 18 item 1).
    x = (np.random.default_rng(5).standard_normal((3, 512)) * 3).astype(np.float32)
    g = np.random.default_rng(6).uniform(0.5, 1.5, 512).astype(np.float32)
    want = op(x, g)
    for v in (1e21, 3e38, -3e38, 2e19):
        bad = x.copy()
        bad[2, 17] = v
        with pytest.raises(lmtail.NonFiniteLogitsError, match=r"row 2.*overflowed"):
            op(bad, g)
    big = x.copy()
    big[2, 17] = 1e18  # squares finite: no overflow, a normal result
    assert np.isfinite(op(big, g)).all()
    assert np.array_equal(bits(op(x, g)), bits(want))
    # all-zero (or constant) row with eps = 0: 1/sqrt(0) is infinite -> refused too
    with pytest.raises(lmtail.NonFiniteLogitsError, match="is 0"):
        op(np.zeros((1, 256), np.float32), None, eps=0.0)
    assert np.all(op(np.zeros((1, 256), np.float32), None) == 0.0)  # eps > 0: zeros, as before
    # rows that already hold NaN/Inf propagate (the caller's finite checks own them)
    nan = x.copy()
    nan[0, 1] = np.nan
    assert np.isnan(op(nan, g)[0]).all() and np.array_equal(bits(op(nan, g)[1:]), bits(want[1:]))
