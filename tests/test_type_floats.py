"""The float weight types F32 (ggml 0), F16 (1) and BF16 (30) on the CPU, through lmtail._core.

* quantize: ggml's bytes (ggml_quantize_chunk: a copy, ggml_fp32_to_fp16, ggml_compute_fp32_to_bf16)
  for every f32 bit pattern class: random bits (NaN payloads, inf, subnormals), f16 rounding
  midpoints and the overflow threshold; dequantize: ggml's to_float bit for bit (all 65536 halves).
* matvec (one precision, f32 = default): scalar == every SIMD path byte for byte, any thread
  count, batch invariant, <= 1e-6 normwise against float64, non-finite x poisons its row only,
  any cols (block of 1: tails of cols % 16), strided rows.
Oracle tests carry the ``oracle`` marker and skip when llama-cpp-python is absent.
"""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from lmtail import errors
from oracle import _lib

TYPES = {"F32": 0, "F16": 1, "BF16": 30}
ELEM = {"F32": 4, "F16": 2, "BF16": 2}


@pytest.fixture(scope="module")
def Q():
    _lib.require()
    from oracle import quant

    try:
        quant._api()
    except _lib.OracleUnavailable as e:  # pragma: no cover - environment
        pytest.skip(str(e))
    return quant


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def quantize(name, x, threads=0):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty((x.shape[0], x.shape[1] * ELEM[name]), np.uint8)
    lmtail._core.quantize(TYPES[name], x, out, threads)
    return out


def dequantize(name, q, cols, threads=0):
    out = np.empty((q.shape[0], cols), np.float32)
    lmtail._core.dequantize(TYPES[name], q, out, threads)
    return out


def matvec(name, w, cols, x, threads=1, isa="auto", precision="default"):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty((x.shape[0], w.shape[0]), np.float32)
    lmtail._core.matvec(w, TYPES[name], cols, x, out, threads, isa, precision)
    return out


def weights(name, rows, cols, seed=0, scale=0.05):
    w = (np.random.default_rng(seed).standard_normal((rows, cols)) * scale).astype(np.float32)
    return quantize(name, w)


def awkward_bits(n, seed=0):
    """f32 values that stress the conversions: random bit patterns (every NaN payload class,
    infs, f32 subnormals), f16 midpoints (ties to even, both parities), the f16 overflow edge and
    its subnormal range, bf16 midpoints."""
    rng = np.random.default_rng(seed)
    r = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    half = rng.integers(0, 2**16, n, dtype=np.uint64).astype(np.uint32)
    # f32 values exactly halfway between two f16 neighbours (normal range; exponent 0 / 31 give
    # f16-subnormal-range and overflow-range inputs instead)
    f16_mid = (((half & 0x7FFF) << 13) + (112 << 23)) | 0x1000
    edge = np.array([0x477FEFFF, 0x477FF000, 0x477FF001, 0x477FE000, 0x7F800000, 0xFF800000, 0x7FC00000,
                     0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF, 0x00000001, 0x80000000, 0x33000000, 0x33000001,
                     0x337FFFFF, 0x33800000, 0x38800000, 0x387FFFFF, 0x387FE000, 0x387FF000, 0x7F7FFFFF,
                     0x7F7F8000, 0x7F7F7FFF, 0x3F808000, 0x3F818000, 0x3F80C000], np.uint32)
    sub = (rng.random(n) * 2.0**-14).astype(np.float32).view(np.uint32)  # f16 subnormal range
    ties_sub = (rng.integers(0, 1024, n).astype(np.float64) * 2.0**-24 + 2.0**-25).astype(np.float32).view(np.uint32)
    bf_mid = (r & 0xFFFF0000) | 0x8000
    allb = np.concatenate([r, f16_mid, edge, sub, ties_sub, bf_mid])
    allb ^= (rng.integers(0, 2, allb.size) << 31).astype(np.uint32)  # both signs
    return allb.view(np.float32)


# ---- quantize / dequantize against ggml ----


@pytest.mark.oracle
@pytest.mark.parametrize("name", TYPES)
def test_quantize_bytes_equal_ggml(Q, name):
    x = awkward_bits(4000, seed=1)
    x = x[: (x.size // 37) * 37].reshape(-1, 37)
    got = quantize(name, x, threads=3)
    want = Q.quantize(TYPES[name], x)
    assert got.shape == want.shape
    bad = np.flatnonzero((got != want).reshape(-1, ELEM[name]).any(axis=1))
    assert bad.size == 0, [(hex(int(x.reshape(-1).view(np.uint32)[i])), got.reshape(-1, ELEM[name])[i].tobytes().hex(),
                            want.reshape(-1, ELEM[name])[i].tobytes().hex()) for i in bad[:5]]
    g = np.random.default_rng(2).standard_normal((7, 896)).astype(np.float32)
    assert np.array_equal(quantize(name, g), Q.quantize(TYPES[name], g))


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["F16", "BF16"])
def test_dequantize_every_half_equals_ggml(Q, name):
    q = np.arange(65536, dtype=np.uint16).view(np.uint8).reshape(256, 512)
    got = dequantize(name, q, 256, threads=2)
    want = Q.dequantize(TYPES[name], q, 256)
    bad = np.flatnonzero(bits(got) != bits(want))
    assert bad.size == 0, [(hex(int(i)), hex(int(bits(got).reshape(-1)[i])), hex(int(bits(want).reshape(-1)[i])))
                           for i in bad[:5]]


@pytest.mark.oracle
def test_dequantize_f32_is_the_bytes(Q):
    x = awkward_bits(2000, seed=3)[:1998].reshape(-1, 9)
    q = quantize("F32", x)
    assert np.array_equal(q.view(np.uint32), x.view(np.uint32))
    assert np.array_equal(bits(dequantize("F32", q, 9)), bits(Q.dequantize(0, q, 9)))


@pytest.mark.parametrize("name", TYPES)
def test_roundtrip_and_cpu_types_row(name):
    row = {t["name"]: t for t in lmtail._core.cpu_types()}[name]
    assert row["id"] == TYPES[name] and row["block_elems"] == 1 and row["block_bytes"] == ELEM[name]
    assert [p for p in row["precisions"] if p != "ggml"] == ["f32"]
    w = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    back = dequantize(name, quantize(name, w), 5)
    if name == "F32":
        assert np.array_equal(back, w)
    elif name == "F16":
        assert np.array_equal(back, w.astype(np.float16).astype(np.float32))
    else:
        assert np.max(np.abs(back - w) / np.abs(w)) <= 2.0**-8


# ---- matvec ----


def ref64(name, q, cols, x):
    w = dequantize(name, q, cols).astype(np.float64)
    return x.astype(np.float64) @ w.T


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("cols", [1, 7, 16, 17, 100, 640, 2880])
def test_accuracy_normwise(name, cols):
    q = weights(name, 65, cols, seed=cols)
    x = np.random.default_rng(cols + 1).standard_normal((3, cols)).astype(np.float32)
    for prec in ("default", "f32"):
        y = matvec(name, q, cols, x, precision=prec)
        ref = ref64(name, q, cols, x)
        assert np.linalg.norm(y - ref) <= 1e-6 * np.linalg.norm(ref)


def awkward_x(T, cols, seed):
    x = np.random.default_rng(seed).standard_normal((T, cols)).astype(np.float32)
    for t in range(T):
        k = t % 5
        if k == 0:
            x[t] = 0
        elif k == 1:
            x[t] = 0
            x[t, (7 * t) % cols] = -3.5
        elif k == 2:
            x[t] *= np.float32(1e-41)  # subnormal
        elif k == 3:
            x[t] *= np.float32(1e30)
        else:
            x[t, ::3] *= np.float32(1e6)
    return x


@pytest.mark.parametrize("name", TYPES)
def test_accuracy_awkward_weights_and_x(name):
    cols = 1000
    rng = np.random.default_rng(9)
    w = rng.standard_normal((40, cols)).astype(np.float32)
    w[0] = 0
    w[1, 5] = 3e4  # a spike
    w[2] *= np.float32(1e-6)  # f16 subnormals
    w[3] *= np.float32(1e3)
    q = quantize(name, w)
    x = awkward_x(10, cols, 4)
    y = matvec(name, q, cols, x)
    ref = ref64(name, q, cols, x)
    for t in range(10):
        if t % 5 == 0:
            assert np.all(y[t] == 0)
        assert np.linalg.norm(y[t] - ref[t]) <= 1e-6 * np.linalg.norm(ref[t]) + 1e-38


def isas():
    return ["avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"]


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("isa", isas())
def test_simd_equals_scalar_bytes(name, isa):
    if not lmtail._core.isa_available(isa):
        pytest.skip(f"{isa} is not available on this CPU/build (not run here)")
    for rows, cols in ((1, 33), (7, 16), (65, 17), (129, 640), (66, 1)):
        q = weights(name, rows, cols, seed=rows)
        for T in range(1, 12):
            for x in (np.random.default_rng(T).standard_normal((T, cols)).astype(np.float32), awkward_x(T, cols, T)):
                a = matvec(name, q, cols, x, isa="scalar")
                b = matvec(name, q, cols, x, isa=isa)
                assert np.array_equal(bits(a), bits(b)), (rows, cols, T)


@pytest.mark.parametrize("name", TYPES)
def test_threads_and_batch_invariance(name):
    cols = 896
    q = weights(name, 301, cols, seed=5)
    x = np.random.default_rng(6).standard_normal((11, cols)).astype(np.float32)
    base = matvec(name, q, cols, x, threads=1)
    for th in (2, 3):
        assert np.array_equal(bits(base), bits(matvec(name, q, cols, x, threads=th)))
    for t in range(11):
        assert np.array_equal(bits(base[t]), bits(matvec(name, q, cols, x[t : t + 1])[0]))
    for t0, t1 in ((0, 8), (3, 11), (2, 5)):
        assert np.array_equal(bits(base[t0:t1]), bits(matvec(name, q, cols, x[t0:t1], threads=2)))


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("isa", ["scalar", "auto"])
def test_nonfinite_x_poisons_its_row_only(name, isa):
    cols = 300
    q = weights(name, 70, cols, seed=8)
    x = np.random.default_rng(1).standard_normal((5, cols)).astype(np.float32)
    clean = matvec(name, q, cols, x, isa=isa)
    x[1, 299] = np.nan  # in the scalar tail
    x[3, 4] = np.inf
    x[4, 20] = -np.inf
    y = matvec(name, q, cols, x, isa=isa)
    for t in (1, 3, 4):
        assert not np.isfinite(y[t]).any(), t
    for t in (0, 2):
        assert np.array_equal(bits(y[t]), bits(clean[t]))


@pytest.mark.parametrize("name", TYPES)
def test_strided_rows(name):
    cols = 50
    q = weights(name, 20, cols, seed=2)
    wide = np.zeros((20, q.shape[1] + 24), np.uint8)
    wide[:, 8 : 8 + q.shape[1]] = q
    view = wide[:, 8 : 8 + q.shape[1]]
    assert view.strides[0] > q.shape[1]
    x = np.random.default_rng(3).standard_normal((4, cols)).astype(np.float32)
    for isa in ("scalar", "auto"):
        assert np.array_equal(bits(matvec(name, view, cols, x, isa=isa)), bits(matvec(name, q, cols, x, isa=isa)))


@pytest.mark.parametrize("name", TYPES)
def test_integer_precisions_are_refused(name):
    q = weights(name, 2, 8)
    for p in ("i16", "i24"):
        with pytest.raises(errors.UnsupportedError, match=name):
            matvec(name, q, 8, np.ones((1, 8), np.float32), precision=p)
