"""lmtail's CPU ops against llama.cpp's own ggml CPU graph (llama-cpp-python 0.3.36, via ctypes).

* soft cap, scale, tanh, rms_norm(+gamma): lmtail must give ggml's bytes, bit for bit;
* Q5_K quantise / dequantise: ggml's (ggml_quantize_chunk, gguf-py's dequantiser) bytes;
* Q5_K mat-vec: both against a float64 reference; lmtail (f32 activations) must be within 1e-5
  normwise, ggml (q8_K activations) is reported (about 7e-3) and must be worse than lmtail.

Every test here skips, with the reason, when the oracle is not installed.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import lmtail
import lmtail.ops
from oracle import _lib

pytestmark = pytest.mark.oracle


@pytest.fixture(scope="module")
def G():
    _lib.require()
    from oracle import graph

    try:
        graph.api()
    except graph.OracleUnavailable as e:  # pragma: no cover - environment
        pytest.skip(str(e))
    return graph


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_same_bytes(got: np.ndarray, want: np.ndarray, x: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} != ggml's {want.shape}"
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}, expected float32"
    bad = np.flatnonzero(bits(got).ravel() != bits(want).ravel())
    if bad.size:
        i = bad[:5]
        xs = np.asarray(x, np.float32).ravel()
        lines = [
            f"  [{j}] x={xs[j]!r} ({xs[j].view(np.uint32):#010x}) lmtail={got.ravel()[j]!r} "
            f"({bits(got).ravel()[j]:#010x}) ggml={want.ravel()[j]!r} ({bits(want).ravel()[j]:#010x})"
            for j in i
        ]
        pytest.fail(f"{what}: {bad.size} of {got.size} values differ from ggml's bytes, first:\n" + "\n".join(lines))


# ---------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------

SIZES = [1, 7, 99, 4097, 202048]
# (logit scale, soft cap): the seed model's 0.196116/20, llama.cpp's default cap 30 with and
# without a 1/30 scale, Gemma-2-like 1/50-ish, and odd ones where 1/cap is inexact in binary32.
PAIRS = [(0.196116, 20.0), (1.0, 30.0), (1.0 / 30.0, 30.0), (0.0883883, 50.0), (2.5, 7.0), (1.0, 3.0)]
RANGES = ["gauss", "wide", "saturating", "tiny", "special"]


def _pool(kind: str, scale: float, cap: float, rng: np.random.Generator, n: int) -> np.ndarray:
    """n float32 logits whose scaled values x*s land where the soft cap is interesting."""
    s = float(np.float32(scale))
    if kind == "gauss":  # ordinary logits
        y = rng.standard_normal(n) * 8.0
    elif kind == "wide":  # |x*s| log-uniform over 1e-3 .. 1e3: the cap bites hard at the top
        y = 10.0 ** rng.uniform(-3, 3, n) * rng.choice([-1.0, 1.0], n)
    elif kind == "saturating":  # x*s/cap where tanhf goes from < 1 to exactly 1 (~9.01) and beyond
        y = rng.uniform(6.5, 11.0, n) * cap * rng.choice([-1.0, 1.0], n)
        y[: n // 4] = rng.uniform(0.5, 3.0, n // 4) * cap  # and the curved part
    elif kind == "tiny":  # subnormal / underflowing products, tanh(y) == y region
        y = 10.0 ** rng.uniform(-45, -20, n) * rng.choice([-1.0, 1.0], n)
        return (y / s).astype(np.float32)  # tiny x (not tiny*scale: keep subnormal inputs)
    elif kind == "special":
        sp = np.array(
            [
                -0.0, 0.0, 1.4e-45, -1.4e-45, 1.1754942e-38, -1.1754943e-38, 1e-30, -1e-30,
                np.finfo(np.float32).max, -np.finfo(np.float32).max, 1.0, -1.0,
                cap, -cap, cap / s, -cap / s, 9.010913 * cap / s, -9.010913 * cap / s,
            ],
            np.float32,
        )
        y = rng.standard_normal(n) * 40.0 * s
        y = (y / s).astype(np.float32)
        m = min(n, sp.size)
        y[:m] = sp[:m]
        if n > sp.size:  # sprinkle more specials (incl. -0.0) through the rest
            idx = rng.integers(sp.size, n, size=max(1, n // 50))
            y[idx] = rng.choice(sp, idx.size)
        return y
    else:  # pragma: no cover
        raise ValueError(kind)
    return (y / s).astype(np.float32)


def _seed(*parts) -> int:
    """A seed that is the same in every run (str hashing is randomised per process)."""
    return zlib.crc32(repr(parts).encode())


# ---------------------------------------------------------------------------------------------
# soft cap, scale, tanh
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", RANGES)
@pytest.mark.parametrize("scale,cap", PAIRS)
def test_softcap_bytes_match_ggml_four_nodes(G, n, kind, scale, cap):
    rng = np.random.default_rng(_seed(n, kind, scale, cap))
    x = _pool(kind, scale, cap, rng, n)
    want = G.softcap_four_nodes(x, scale, cap)
    x_before = x.copy()
    four = lmtail.ops.softcap(x, scale, cap, four_pass=True)
    fused = lmtail.ops.softcap(x, scale, cap, four_pass=False)
    assert np.array_equal(bits(x), bits(x_before)), "softcap must return a new array, not modify x"
    assert_same_bytes(four, want, x, f"softcap four_pass n={n} {kind} s={scale} cap={cap}")
    assert_same_bytes(fused, want, x, f"softcap fused n={n} {kind} s={scale} cap={cap}")
    if n > 16384:  # large enough for lmtail to split the work over threads
        for fp in (True, False):
            got = lmtail.ops.softcap(x, scale, cap, four_pass=fp, threads=2)
            assert_same_bytes(got, want, x, f"softcap four_pass={fp} threads=2 n={n} {kind}")


@pytest.mark.parametrize("shape", [(3, 4097), (8, 99), (2, 202048)])
def test_softcap_2d_bytes_match_ggml(G, shape):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 200.0).astype(np.float32)
    want = G.softcap_four_nodes(x, 0.196116, 20.0)
    assert_same_bytes(lmtail.ops.softcap(x, 0.196116, 20.0, four_pass=True), want, x, f"softcap 2-D {shape}")
    assert_same_bytes(lmtail.ops.softcap(x, 0.196116, 20.0, four_pass=False), want, x, f"softcap fused 2-D {shape}")


def test_softcap_ggml_threads_do_not_change_bytes(G):
    # sanity of the oracle itself: ggml's elementwise nodes are thread-count independent
    x = _pool("wide", 0.196116, 20.0, np.random.default_rng(3), 202048).reshape(4, -1)
    assert np.array_equal(bits(G.softcap_four_nodes(x, 0.196116, 20.0, threads=1)),
                          bits(G.softcap_four_nodes(x, 0.196116, 20.0, threads=2)))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("s", [0.196116, 1.0 / 20.0, 20.0, 1.0 / 3.0, -0.5, 3.0e-39, 1.0e30])
def test_scale_bytes_match_ggml_scale(G, n, s):
    rng = np.random.default_rng(_seed(n, s))
    x = np.concatenate([_pool("special", 1.0, 20.0, rng, n), _pool("wide", 1.0, 20.0, rng, n)])[:n]
    assert_same_bytes(lmtail.ops.scale(x, s, backend="cpu"), G.scale(x, s), x, f"scale n={n} s={s}")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["gauss", "saturating", "tiny", "special", "dense"])
def test_tanh_bytes_match_ggml_tanh(G, n, kind):
    rng = np.random.default_rng(_seed(n, kind))
    if kind == "dense":  # every float in a band around the saturation point and around 0.55
        x = np.concatenate([
            np.arange(np.float32(9.0).view(np.uint32), np.float32(9.02).view(np.uint32), dtype=np.uint32).view(np.float32),
            np.arange(np.float32(0.55).view(np.uint32), np.float32(0.5501).view(np.uint32), dtype=np.uint32).view(np.float32),
        ])
        x = np.concatenate([x, -x])
        x = x[rng.integers(0, x.size, n)] if n < x.size else np.resize(x, n)
    else:
        x = _pool(kind, 1.0, 1.0, rng, n)
    assert_same_bytes(lmtail.ops.tanh(x), G.tanh(x), x, f"tanh n={n} {kind}")


@pytest.mark.parametrize("scale", [0.196116, 1.0])
def test_softcap_disabled_is_scale_only(G, scale):
    # llama.cpp only adds the three cap nodes when the cap is > 0
    x = _pool("wide", scale, 20.0, np.random.default_rng(11), 4097)
    want = G.scale(x, scale)
    for fp in (True, False):
        assert_same_bytes(lmtail.ops.softcap(x, scale, 0.0, four_pass=fp), want, x, f"softcap cap=0 four_pass={fp}")


# ---------------------------------------------------------------------------------------------
# final RMSNorm (ggml_rms_norm -> ggml_mul(gamma))
# ---------------------------------------------------------------------------------------------


def _norm_inputs(kind: str, T: int, cols: int, rng):
    x = rng.standard_normal((T, cols)).astype(np.float32)
    if kind == "outliers":  # a few huge channels, as real hidden states have
        ch = rng.choice(cols, size=max(1, cols // 200), replace=False)
        x[:, ch] *= 300.0
    elif kind == "tiny":
        x *= np.float32(1e-4)
    gamma = (1.0 + 0.3 * rng.standard_normal(cols)).astype(np.float32)
    return x, gamma


@pytest.mark.parametrize("T", [1, 3, 8])
@pytest.mark.parametrize("cols", [256, 6656])
@pytest.mark.parametrize("kind", ["gauss", "outliers", "tiny"])
@pytest.mark.parametrize("eps", [1e-5, 1e-6])
def test_rms_norm_bytes_match_ggml(G, T, cols, kind, eps):
    rng = np.random.default_rng(_seed(T, cols, kind, eps))
    x, gamma = _norm_inputs(kind, T, cols, rng)
    fused = G.rms_norm_mul(x, gamma, eps, fuse=True)  # what llama.cpp's CPU backend runs
    split = G.rms_norm_mul(x, gamma, eps, fuse=False)  # two nodes
    # Both ggml routes compute (x*scale)*gamma with the same scale, so they must agree; if a
    # future ggml changes that, this says so before blaming lmtail.
    assert_same_bytes(fused, split, x, "ggml fused RMS_NORM+MUL vs two nodes")
    got = lmtail.ops.rms_norm(x, gamma, eps=eps)
    assert_same_bytes(got, fused, x, f"rms_norm T={T} cols={cols} {kind} eps={eps}")


# ---------------------------------------------------------------------------------------------
# Q5_K: quantise / dequantise bytes, and the mat-vec against float64
# ---------------------------------------------------------------------------------------------

MV_ROWS, MV_COLS = 4097, 6656


@pytest.fixture(scope="module")
def q5k_slab():
    rng = np.random.default_rng(20251129)
    w = (rng.standard_normal((MV_ROWS, MV_COLS)) * 0.02).astype(np.float32)
    q = lmtail.quantize_q5_k(w)
    assert q.dtype == np.uint8 and q.shape == (MV_ROWS, MV_COLS // 256 * 176)
    import gguf

    dq = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q5_K)
    return w, q, np.asarray(dq, np.float32).reshape(MV_ROWS, MV_COLS)


def test_quantize_q5_k_bytes_match_ggml(G, q5k_slab):
    w, q, _ = q5k_slab
    rows = slice(0, 256)  # ggml's reference quantiser is slow (~18 M weights/s)
    want = G.quantize_q5_k(np.ascontiguousarray(w[rows]))
    bad = np.flatnonzero((q[rows] != want).any(axis=1))
    assert bad.size == 0, f"{bad.size} of 256 Q5_K rows differ from ggml_quantize_chunk, first rows {bad[:8]}"


def test_quantize_q5_k_awkward_values_match_ggml(G):
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((16, 512)) * 0.02).astype(np.float32)
    w[1] = 0.0
    w[2] = -0.0
    w[3, :] = 1e-30
    w[4, ::7] = 50.0  # outliers inside a block
    w[5] = np.linspace(-1, 1, 512, dtype=np.float32)
    w[6] = 1.0  # constant row
    w[7, :256] = -3.0
    w[8] *= 1e4
    w[9] = np.float32(1.4e-45)
    assert np.array_equal(lmtail.quantize_q5_k(w), G.quantize_q5_k(w))


def test_dequantize_q5_k_bytes_match_gguf(q5k_slab):
    # gguf-py's dequantiser is bit-identical to ggml's to_float (shared/research/perf-anchors.md)
    _, q, dq = q5k_slab
    assert_same_bytes(lmtail.dequantize_q5_k(q).reshape(dq.shape), dq, np.zeros(dq.size, np.float32), "dequantize_q5_k")


def _isas() -> list:
    """lmtail's CPU matvec paths on this machine ("auto" first)."""
    from lmtail import _core

    return ["auto"] + [i for i in ("scalar", "avx2", "avx512", "neon", "neon_dotprod") if _core.isa_available(i)]


def _rel_l2(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("T", [1, 3, 8])
def test_matvec_q5_k_vs_float64_and_ggml(G, q5k_slab, T, record_property):
    _, q, dq = q5k_slab
    rng = np.random.default_rng(100 + T)
    x = rng.standard_normal((T, MV_COLS)).astype(np.float32)
    ref = x.astype(np.float64) @ dq.astype(np.float64).T  # (T, rows)

    with G.MatMulQ5K(q, T) as mm:
        y_gg = mm.run(x)
    e_gg = _rel_l2(y_gg, ref)
    record_property("rel_l2_ggml", e_gg)
    # ggml quantises x to q8_K: ~7e-3 for Gaussian x. Bounds only check the oracle ran sanely.
    assert 1e-4 < e_gg < 5e-2, f"ggml's error {e_gg:.3e} is outside the expected q8_K range"

    report = []
    # f32 activations: ~4e-7; i24 (24-bit block fixed point): ~2e-7; i16: ~2.7e-5. ggml: ~7e-3.
    for precision, col_bound, factor in (("f32", 1e-5, 100), ("i24", 1e-5, 100), ("i16", 1e-4, 50)):
        for isa in _isas():
            y_lm = lmtail.ops.matvec_q5_k(q, x, isa=isa, precision=precision)
            assert y_lm.shape == (T, MV_ROWS) and y_lm.dtype == np.float32
            e_lm = _rel_l2(y_lm, ref)
            e_lm_col = max(_rel_l2(y_lm[t], ref[t]) for t in range(T))
            record_property(f"rel_l2_lmtail_{precision}_{isa}", e_lm)
            report.append(f"lmtail[{precision},{isa}] {e_lm:.3e} (worst column {e_lm_col:.3e})")
            assert e_lm_col < col_bound, f"lmtail matvec ({precision}, {isa}) rel L2 error {e_lm_col:.3e} (T={T})"
            assert e_lm < e_gg / factor, f"lmtail ({precision}, {isa}) {e_lm:.3e} vs ggml {e_gg:.3e}"
            assert np.array_equal(np.argmax(y_lm, axis=1), np.argmax(ref, axis=1))
    print(f"\nmatvec Q5_K {MV_ROWS}x{MV_COLS} T={T}: normwise rel err vs float64: "
          + ", ".join(report) + f"; ggml {e_gg:.3e} (q8_K activations)")
