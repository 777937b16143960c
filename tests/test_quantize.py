"""Q5_K quantisation / dequantisation: lmtail against llama.cpp's ggml and gguf-py.

* ``lmtail.quantize_q5_k`` must produce ggml's bytes (``ggml_quantize_chunk`` for GGML_TYPE_Q5_K
  with no importance matrix, i.e. ``quantize_row_q5_K_ref``) for every finite input it accepts:
  ordinary weights, zeros, constants, one-signed sub-blocks, tiny (1e-30, subnormal) magnitudes,
  super-block scales at fp16's largest finite value. It refuses (ParameterError) exactly the
  inputs for which ggml's block has an inf/NaN fp16 d or dmin (the block would decode to
  inf/NaN): weights below about -4.13e6 or above about 1.28e8, huge values (1e30) included;
  every parity test checks that rule block by block against ggml's own bytes.
* ``lmtail.dequantize_q5_k`` must equal gguf-py's ``gguf.quants.dequantize`` and ggml's
  ``dequantize_row_q5_K`` bit for bit.
* Errors: ShapeError (ndim / cols not a multiple of 256 / row bytes not a multiple of 176),
  DTypeError (quantize: not float32, dequantize: not uint8), ParameterError (non-finite weights).

Tests needing the oracle (llama-cpp-python) are marked ``oracle`` and skip when it is absent.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import gguf
import lmtail
from lmtail import errors
from oracle import _lib

QK_K = 256
BLOCK_BYTES = 176


@pytest.fixture(scope="module")
def Q():
    _lib.require()
    from oracle import quant

    try:
        quant._api()
    except _lib.OracleUnavailable as e:  # pragma: no cover - environment
        pytest.skip(str(e))
    return quant


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_same_q(got: np.ndarray, want: np.ndarray, x: np.ndarray, what: str) -> None:
    assert got.dtype == np.uint8, f"{what}: dtype {got.dtype}, expected uint8"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != ggml's {want.shape}"
    g = got.reshape(-1, BLOCK_BYTES)
    w = want.reshape(-1, BLOCK_BYTES)
    bad = np.flatnonzero((g != w).any(axis=1))
    if bad.size:
        xb = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, QK_K)
        lines = []
        for b in bad[:3]:
            j = int(np.flatnonzero(g[b] != w[b])[0])
            lines.append(
                f"  block {b} byte {j}: lmtail {g[b, j]:#04x} ggml {w[b, j]:#04x}; "
                f"x[min,max]=({xb[b].min()!r}, {xb[b].max()!r})"
            )
        pytest.fail(f"{what}: {bad.size} of {g.shape[0]} Q5_K blocks differ from ggml's bytes, first:\n" + "\n".join(lines))


def assert_same_f32(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}, expected float32"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bad = np.flatnonzero(bits(got).ravel() != bits(want).ravel())
    if bad.size:
        i = bad[:5]
        lines = [f"  [{j}] lmtail {got.ravel()[j]!r} ({bits(got).ravel()[j]:#010x}) want "
                 f"{want.ravel()[j]!r} ({bits(want).ravel()[j]:#010x})" for j in i]
        pytest.fail(f"{what}: {bad.size} of {got.size} values differ bitwise, first:\n" + "\n".join(lines))


def _nonfinite_scales(q: np.ndarray) -> np.ndarray:
    """Per block: is the fp16 d or dmin of these Q5_K bytes inf/NaN (exponent all ones)?"""
    b = np.ascontiguousarray(q).reshape(-1, BLOCK_BYTES)
    d = b[:, 0].astype(np.uint16) | (b[:, 1].astype(np.uint16) << 8)
    dmin = b[:, 2].astype(np.uint16) | (b[:, 3].astype(np.uint16) << 8)
    return ((d & 0x7C00) == 0x7C00) | ((dmin & 0x7C00) == 0x7C00)


def assert_parity(Q, x: np.ndarray, what: str) -> None:
    """lmtail == ggml byte for byte where ggml's blocks decode finite; where one does not,
    lmtail refuses the whole call and still matches ggml on the other blocks."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    want = Q.quantize_q5_k(x)
    bad = _nonfinite_scales(want)
    if not bad.any():
        assert_same_q(lmtail.quantize_q5_k(x), want, x, what)
        return
    with pytest.raises(errors.ParameterError, match="overflows Q5_K's fp16 scales"):
        lmtail.quantize_q5_k(x)
    x2 = x.reshape(-1, QK_K).copy()
    x2[bad] = 0.0
    x2 = x2.reshape(x.shape)
    assert_same_q(lmtail.quantize_q5_k(x2), Q.quantize_q5_k(x2), x2, what + " (refused blocks zeroed)")


def drop_refused(x: np.ndarray) -> np.ndarray:
    """x with every super-block lmtail refuses (scale overflow) set to zero (no oracle needed)."""
    x = np.ascontiguousarray(x, dtype=np.float32).copy()
    blocks = x.reshape(-1, QK_K)
    for i in range(blocks.shape[0]):
        try:
            lmtail.quantize_q5_k(blocks[i:i + 1])
        except errors.ParameterError:
            blocks[i] = 0.0
    return x


def gguf_dequantize(q: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):  # inf*0 in blocks with non-finite d/dmin is intended
        out = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q5_K)
    return np.asarray(out, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# inputs: every 256-weight block is drawn from one of these generators
# ---------------------------------------------------------------------------------------------

SCALES = [1e-45, 1e-40, 1e-38, 1e-30, 1e-20, 1e-10, 1e-7, 1e-5, 1e-3, 0.02, 0.5, 1.0, 100.0,
          1e4, 65504.0, 1e6, 1e10, 1e15, 1e19, 1e20, 1e25, 1e30, 1e35, 3e38]

F32_MAX = float(np.finfo(np.float32).max)


def _f32(y) -> np.ndarray:
    return np.clip(np.asarray(y, dtype=np.float64), -F32_MAX, F32_MAX).astype(np.float32)


def _block(kind: str, rng: np.random.Generator, s: float) -> np.ndarray:
    n = QK_K
    if kind == "gauss":
        return _f32(rng.standard_normal(n) * s)
    if kind == "uniform":
        return _f32(rng.uniform(-s, s, n))
    if kind == "positive":
        return _f32(rng.uniform(0, s, n))
    if kind == "negative":
        return _f32(-rng.uniform(0, s, n))
    if kind == "sparse":
        return _f32(np.where(rng.random(n) < 0.1, rng.standard_normal(n) * s, 0.0))
    if kind == "constant":
        return np.full(n, _f32(rng.standard_normal() * s), dtype=np.float32)
    if kind == "zeros":  # +0 and -0
        return np.where(rng.random(n) < 0.5, np.float32(0.0), np.float32(-0.0)).astype(np.float32)
    if kind == "denormal":  # random subnormal bit patterns of both signs
        u = rng.integers(0, 1 << 23, n, dtype=np.uint32) | (rng.integers(0, 2, n, dtype=np.uint32) << 31)
        return u.view(np.float32)
    if kind == "anybits":  # any finite float32 bit pattern
        u = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        f = u.view(np.float32)
        return np.where(np.isfinite(f), f, np.float32(1.0)).astype(np.float32)
    if kind == "subblocks":  # each sub-block its own scale and sign pattern
        out = np.empty(n, dtype=np.float32)
        for j in range(8):
            ss = SCALES[rng.integers(len(SCALES))]
            k = rng.integers(6)
            seg = [rng.standard_normal(32) * ss, rng.uniform(0, ss, 32), -rng.uniform(0, ss, 32),
                   np.zeros(32), np.full(32, ss), np.full(32, -ss)][k]
            out[32 * j:32 * j + 32] = _f32(seg)
        return out
    if kind == "grid":  # small integers times a power of two: exact rounding ties
        st = 2.0 ** int(rng.integers(-20, 20))
        off = int(rng.integers(-20, 20))
        v = (rng.integers(0, 64, n) + off) * st * np.where(rng.random(n) < 0.25, 0.5, 1.0)
        return _f32(v)
    if kind == "outliers":
        x = rng.standard_normal(n) * s
        x[rng.integers(0, n, 2)] *= 2.0 ** rng.uniform(0, 40, 2)
        return _f32(x)
    if kind == "logwide":  # magnitudes log-uniform over the whole float32 range, random signs
        return _f32(2.0 ** rng.uniform(-140, 127.9, n) * rng.choice([-1.0, 1.0], n))
    if kind == "fp16edge":  # super-block scale max/63 anywhere from fp16-subnormal to fp16-overflow
        base = float(2.0 ** rng.uniform(-25, 17))
        return _f32(base * rng.integers(0, 32, n) * 63.0 / 31.0 * np.where(rng.random(n) < 0.125, -1.0, 1.0))
    if kind == "const_subblocks":
        return _f32(np.repeat(rng.standard_normal(8) * s, 32))
    raise AssertionError(kind)


KINDS = ["gauss", "uniform", "positive", "negative", "sparse", "constant", "zeros", "denormal",
         "anybits", "subblocks", "grid", "outliers", "logwide", "fp16edge", "const_subblocks"]


def make_matrix(kind: str, rows: int, nblk: int, seed: int, mixed: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.empty((rows, nblk * QK_K), dtype=np.float32)
    for r in range(rows):
        for b in range(nblk):
            k = KINDS[rng.integers(len(KINDS))] if mixed and rng.random() < 0.3 else kind
            s = SCALES[rng.integers(len(SCALES))] * (2.0 ** rng.uniform(-4, 4) if rng.random() < 0.3 else 1.0)
            x[r, b * QK_K:(b + 1) * QK_K] = _block(k, rng, s)
    assert np.isfinite(x).all()
    return x


# ---------------------------------------------------------------------------------------------
# quantize == ggml, byte for byte
# ---------------------------------------------------------------------------------------------


@pytest.mark.oracle
@pytest.mark.parametrize("kind", KINDS)
def test_quantize_matches_ggml(Q, kind):
    x = make_matrix(kind, rows=24, nblk=4, seed=zlib.crc32(kind.encode()))  # 96 blocks per kind
    assert_parity(Q, x, f"quantize[{kind}]")


@pytest.mark.oracle
@pytest.mark.parametrize("seed", range(4))
def test_quantize_matches_ggml_mixed(Q, seed):
    x = make_matrix(KINDS[seed], rows=50, nblk=6, seed=1000 + seed, mixed=True)
    assert_parity(Q, x, f"quantize[mixed {seed}]")


@pytest.mark.oracle
@pytest.mark.parametrize("scale", [1e-30, 1e-6, 0.02, 1.0, 1e3, 1e8, 1e18, 1e30])
def test_quantize_matches_ggml_gaussian_scales(Q, scale):
    # A realistic LM-head shape slice: many rows, hidden size 6656 = 26 super-blocks.
    rng = np.random.default_rng(int(np.log10(scale) + 40))
    x = _f32(rng.standard_normal((16, 6656)) * scale)
    assert_parity(Q, x, f"quantize[gauss*{scale:g}]")


SPECIAL_ROWS = {
    "zeros": np.zeros(QK_K),
    "neg_zeros": np.full(QK_K, -0.0),
    "ones": np.ones(QK_K),
    "minus_ones": -np.ones(QK_K),
    "huge": np.full(QK_K, 1e30),
    "minus_huge": np.full(QK_K, -1e30),
    "max": np.full(QK_K, F32_MAX),
    "pm_max": np.tile([F32_MAX, -F32_MAX], QK_K // 2),
    "tiny": np.full(QK_K, 1e-30),
    "min_subnormal": np.full(QK_K, 1e-45),
    "pm_min_subnormal": np.tile([1e-45, -1e-45], QK_K // 2),
    "ramp": np.arange(QK_K) - 128.0,
    "ramp_pos": np.arange(QK_K) * 1.0,
    "one_spike": np.eye(1, QK_K, 77)[0] * 3.0,
    "one_neg_spike": np.eye(1, QK_K, 200)[0] * -3.0,
    # sub-block step ~ range/31 and d = max step / 63: d near fp16's largest finite / overflow
    "fp16_max_d": np.tile(np.linspace(0, 65504.0 * 63 * 31, 32), 8),
    "fp16_over_d": np.tile(np.linspace(0, 65520.0 * 63 * 31, 32), 8),
    "fp16_subnormal_d": np.tile(np.linspace(0, 2.0**-20 * 63 * 31, 32), 8),
    "fp16_zero_d": np.tile(np.linspace(0, 2.0**-26 * 63 * 31, 32), 8),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(SPECIAL_ROWS))
def test_quantize_matches_ggml_special(Q, name):
    x = _f32(SPECIAL_ROWS[name]).reshape(1, QK_K)
    x = np.concatenate([x, -x, x * np.float32(0.5), x[:, ::-1]], axis=1).reshape(1, -1)  # 4 blocks
    x = np.ascontiguousarray(x, dtype=np.float32)
    assert_parity(Q, x, f"quantize[{name}]")


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError:  # pragma: no cover - hypothesis is a test extra
    given = None

if given is not None:

    _shapes = st.tuples(st.integers(1, 3), st.integers(1, 2)).map(lambda t: (t[0], t[1] * QK_K))

    @pytest.mark.oracle
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(x=hnp.arrays(np.float32, _shapes, elements=st.floats(width=32, allow_nan=False, allow_infinity=False)))
    def test_quantize_property_any_floats(Q, x):
        assert_parity(Q, x, "quantize[hypothesis]")

    @pytest.mark.oracle
    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        q=hnp.arrays(np.int8, _shapes, elements=st.integers(-64, 63)),
        e=st.integers(-30, 30),
    )
    def test_quantize_property_grid(Q, q, e):
        # Integer grids times a power of two: ties in every rounding step.
        x = (q.astype(np.float32) * np.float32(2.0**e)).astype(np.float32)
        assert_parity(Q, x, "quantize[hypothesis grid]")


# ---------------------------------------------------------------------------------------------
# dequantize == gguf-py == ggml, bit for bit
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gauss", "subblocks", "logwide", "fp16edge", "outliers"])
def test_dequantize_matches_gguf(kind):
    x = drop_refused(make_matrix(kind, rows=8, nblk=3, seed=7 + len(kind), mixed=True))
    q = lmtail.quantize_q5_k(x)
    assert_same_f32(lmtail.dequantize_q5_k(q), gguf_dequantize(q), f"dequantize[{kind}] vs gguf-py")


def _random_blocks(rows: int, nblk: int, seed: int, finite_scales: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 256, (rows, nblk * BLOCK_BYTES), dtype=np.uint8)
    if finite_scales:  # keep d and dmin finite fp16 (clear the top exponent bit when all ones)
        blk = q.reshape(-1, BLOCK_BYTES)
        for off in (1, 3):  # high bytes of d, dmin
            hi = blk[:, off]
            blk[:, off] = np.where((hi & 0x7C) == 0x7C, hi & 0xBF, hi)
    return q


def test_dequantize_random_bytes_matches_gguf():
    q = _random_blocks(32, 4, seed=3, finite_scales=True)
    assert_same_f32(lmtail.dequantize_q5_k(q), gguf_dequantize(q), "dequantize[random bytes] vs gguf-py")


def test_dequantize_random_bytes_nonfinite_scales_matches_gguf():
    q = _random_blocks(32, 4, seed=4, finite_scales=False)
    blk = q.reshape(-1, BLOCK_BYTES)
    blk[:8, 0:2] = np.frombuffer(np.array([0x7C00, 0xFC00, 0x7E00, 0x7C01] * 2, "<u2").tobytes(), np.uint8).reshape(8, 2)
    got, want = lmtail.dequantize_q5_k(q), gguf_dequantize(q)
    # NaN payloads can legitimately differ between numpy's and C's half->float (quieting), so
    # compare NaN-ness there and bits everywhere else.
    assert np.array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    assert_same_f32(got[fin], want[fin], "dequantize[non-finite d/dmin] vs gguf-py")


@pytest.mark.oracle
def test_dequantize_matches_ggml(Q):
    x = drop_refused(make_matrix("gauss", rows=16, nblk=5, seed=11, mixed=True))
    q = lmtail.quantize_q5_k(x)
    assert_same_f32(lmtail.dequantize_q5_k(q), Q.dequantize_q5_k(q), "dequantize vs ggml")
    r = _random_blocks(16, 5, seed=12, finite_scales=False)
    assert_same_f32(lmtail.dequantize_q5_k(r), Q.dequantize_q5_k(r), "dequantize[random bytes] vs ggml")


def test_dequantize_shape_and_empty():
    q = lmtail.quantize_q5_k(np.zeros((3, 512), dtype=np.float32))
    assert q.shape == (3, 2 * BLOCK_BYTES) and q.dtype == np.uint8
    y = lmtail.dequantize_q5_k(q)
    assert y.shape == (3, 512) and y.dtype == np.float32
    assert not y.any()


# ---------------------------------------------------------------------------------------------
# round trip and thread independence (no oracle needed)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1e-3, 0.02, 1.0, 1e4])
def test_round_trip_error_bounded(scale):
    rng = np.random.default_rng(5)
    x = _f32(rng.standard_normal((64, 1024)) * scale)
    y = lmtail.dequantize_q5_k(lmtail.quantize_q5_k(x))
    assert y.shape == x.shape and np.isfinite(y).all()
    err = (y.astype(np.float64) - x).reshape(-1, 32)
    ref = x.astype(np.float64).reshape(-1, 32)
    # 5-bit codes over each 32-weight sub-block's range: the error is a fraction of a step,
    # i.e. a small fraction of the sub-block's range.
    rng_sub = ref.max(axis=1) - np.minimum(ref.min(axis=1), 0.0)
    assert (np.abs(err).max(axis=1) <= 0.1 * rng_sub + 1e-30).all()
    rel_rms = np.sqrt((err**2).mean()) / np.sqrt((ref**2).mean())
    assert rel_rms < 0.045, rel_rms  # about 0.036 for Gaussian weights


@pytest.mark.parametrize("k", [-10, 0, 3])
def test_round_trip_exact_on_grid(k):
    # Sub-blocks holding 0..31 steps of 63*2^k: d = 2^k is exact in fp16, sc = 63, m = 0, so
    # every weight is representable and must come back exactly.
    step = np.float32(63 * 2.0**k)
    x = np.tile(np.arange(32, dtype=np.float32) * step, (4, 16)).reshape(4, 512)
    y = lmtail.dequantize_q5_k(lmtail.quantize_q5_k(x))
    np.testing.assert_array_equal(y, x)


def test_zero_and_constant_rows():
    x = np.zeros((2, 256), dtype=np.float32)
    x[1] = -1.5
    y = lmtail.dequantize_q5_k(lmtail.quantize_q5_k(x))
    np.testing.assert_array_equal(y[0], 0.0)
    np.testing.assert_allclose(y[1], -1.5, rtol=1e-3)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_quantize_independent_of_threads(threads):
    x = drop_refused(make_matrix("gauss", rows=37, nblk=3, seed=21, mixed=True))
    base = lmtail.quantize_q5_k(x, threads=1)
    got = lmtail.quantize_q5_k(x, threads=threads)
    assert np.array_equal(got, base)
    assert np.array_equal(lmtail.quantize_q5_k(x), base)  # default thread count


def test_quantize_empty():
    assert lmtail.quantize_q5_k(np.zeros((0, 256), dtype=np.float32)).shape == (0, BLOCK_BYTES)


def test_quantize_views():
    x = drop_refused(make_matrix("gauss", rows=6, nblk=2, seed=9))
    want = lmtail.quantize_q5_k(x)
    # a row slice is still C-contiguous; a strided one may be copied or rejected, never wrong
    np.testing.assert_array_equal(lmtail.quantize_q5_k(x[2:5]), want[2:5])
    try:
        got = lmtail.quantize_q5_k(x[::2])
    except errors.DTypeError:
        pass
    else:
        np.testing.assert_array_equal(got, want[::2])


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 100), (2, 255), (1, 257), (3, 0), (1, 384)])
def test_quantize_bad_cols(shape):
    with pytest.raises(errors.ShapeError):
        lmtail.quantize_q5_k(np.zeros(shape, dtype=np.float32))


@pytest.mark.parametrize("shape", [(256,), (1, 1, 256), ()])
def test_quantize_bad_ndim(shape):
    with pytest.raises(errors.ShapeError):
        lmtail.quantize_q5_k(np.zeros(shape, dtype=np.float32))


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.uint8])
def test_quantize_bad_dtype(dtype):
    with pytest.raises(errors.DTypeError):
        lmtail.quantize_q5_k(np.zeros((1, 256), dtype=dtype))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_quantize_non_finite(bad):
    x = np.ones((3, 512), dtype=np.float32)
    x[2, 300] = bad
    with pytest.raises(errors.ParameterError):
        lmtail.quantize_q5_k(x)
    assert issubclass(errors.ParameterError, ValueError)


@pytest.mark.parametrize("shape", [(1, 100), (1, 175), (2, 177), (1, 0), (176,), (1, 1, 176)])
def test_dequantize_bad_shape(shape):
    with pytest.raises(errors.ShapeError):
        lmtail.dequantize_q5_k(np.zeros(shape, dtype=np.uint8))


@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.uint16])
def test_dequantize_bad_dtype(dtype):
    with pytest.raises(errors.DTypeError):
        lmtail.dequantize_q5_k(np.zeros((1, BLOCK_BYTES), dtype=dtype))


def test_errors_are_exported():
    assert lmtail.ShapeError is errors.ShapeError
    assert lmtail.DTypeError is errors.DTypeError
    assert lmtail.ParameterError is errors.ParameterError


# ---------------------------------------------------------------------------------------------
# fail closed: a block whose fp16 scales overflow would decode to inf/NaN (issue 18 item 13)
# ---------------------------------------------------------------------------------------------

F16_OVERFLOW = 65520.0  # the smallest float32 that rounds to fp16 +inf


def _accepts(x: np.ndarray) -> bool:
    try:
        lmtail.quantize_q5_k(x)
    except errors.ParameterError as e:
        assert "overflows Q5_K's fp16 scales" in str(e)
        return False
    return True


def _threshold(make) -> np.float32:
    """The smallest magnitude v (float32) with make(v) refused, by bisection over float bits."""
    lo, hi = int(np.float32(1.0).view(np.uint32)), int(np.float32(1e12).view(np.uint32))
    assert _accepts(make(np.uint32(lo).view(np.float32))) and not _accepts(make(np.uint32(hi).view(np.float32)))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _accepts(make(np.uint32(mid).view(np.float32))):
            lo = mid
        else:
            hi = mid
    return np.uint32(hi).view(np.float32)


def _one_negative(v):  # dmin = v / 63: one weight -v, the rest 0 (the fit keeps the offset v exactly)
    x = np.zeros((1, QK_K), np.float32)
    x[0, 77] = -v
    return x


def _all_positive(v):  # d = (v / 31) / 63: every weight v
    return np.full((1, QK_K), v, np.float32)


def test_quantize_refuses_dmin_overflow_exact_threshold():
    t = _threshold(_one_negative)
    # dmin = float(v / 63) overflows fp16 from 65520 on: v = 65520 * 63 (exact in float32)
    assert t == np.float32(F16_OVERFLOW * 63) == np.float32(4127760.0)
    below = np.nextafter(t, np.float32(0))
    y = lmtail.dequantize_q5_k(lmtail.quantize_q5_k(_one_negative(below)))
    assert np.isfinite(y).all() and abs(float(y[0, 77]) + float(below)) <= 0.01 * float(below)
    with pytest.raises(errors.ParameterError, match=r"row 0, super-block 0 .*-4127760"):
        lmtail.quantize_q5_k(_one_negative(t))


def test_quantize_refuses_d_overflow_exact_threshold():
    t = _threshold(_all_positive)
    assert abs(float(t) / (F16_OVERFLOW * 63 * 31) - 1) < 1e-6, t  # float roundings of v/31/63
    below = np.nextafter(t, np.float32(0))
    y = lmtail.dequantize_q5_k(lmtail.quantize_q5_k(_all_positive(below)))
    assert np.isfinite(y).all()
    assert not _accepts(_all_positive(t))


def test_quantize_refusal_names_the_first_bad_block_and_any_thread_count():
    x = np.zeros((5, 3 * QK_K), np.float32)
    x[3, 2 * QK_K + 4] = -1e7
    x[4, 0] = -1e30
    for threads in (1, 2, 5):
        with pytest.raises(errors.ParameterError, match=r"row 3, super-block 2 "):
            lmtail.quantize_q5_k(x, threads=threads)


@pytest.mark.oracle
def test_quantize_threshold_blocks_match_ggml(Q):
    # Just below each threshold ggml's bytes decode finite and lmtail gives them; at the threshold
    # ggml's block has an inf scale (it would decode to inf/NaN) and lmtail refuses it.
    for make in (_one_negative, _all_positive):
        t = _threshold(make)
        below = make(np.nextafter(t, np.float32(0)))
        want = Q.quantize_q5_k(below)
        assert not _nonfinite_scales(want).any()
        assert_same_q(lmtail.quantize_q5_k(below), want, below, f"quantize[{make.__name__} below]")
        at = Q.quantize_q5_k(make(t))
        assert _nonfinite_scales(at).all()
        with np.errstate(all="ignore"):
            assert not np.isfinite(Q.dequantize_q5_k(at)).all()
