"""Q4_K (ggml type 12) on the CPU, through lmtail._core's typed entry points.

* quantize: ggml's bytes (ggml_quantize_chunk, no importance matrix) wherever ggml's block
  decodes finite; where ggml's fp16 d or dmin overflows, the call is refused (ParameterError).
* dequantize: ggml's dequantize_row_q4_K bit for bit (also on random bytes).
* matvec: every SIMD path byte-identical to the scalar reference (f32 and i24), any thread count,
  batch invariant, a non-finite x row makes that row's logits non-finite and no other row's,
  default precision (i24) <= 1e-6 normwise against float64, odd shapes, strided rows.

Tests needing the oracle (llama-cpp-python's libggml) are marked ``oracle`` and skip without it.
"""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from lmtail import errors
from oracle import _lib

Q4_K = 12
QK_K = 256
BLOCK = 144
PRECISIONS = ["f32", "i24"]


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


def quantize(x, threads=0):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros((x.shape[0], x.shape[1] // QK_K * BLOCK), np.uint8)
    lmtail._core.quantize(Q4_K, x, out, threads)
    return out


def dequantize(q, cols, threads=0):
    out = np.empty((q.shape[0], cols), np.float32)
    lmtail._core.dequantize(Q4_K, np.ascontiguousarray(q), out, threads)
    return out


def matvec(w, cols, x, threads=1, isa="auto", precision="default"):
    x2 = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
    out = np.empty((x2.shape[0], w.shape[0]), np.float32)
    lmtail._core.matvec(w, Q4_K, cols, x2, out, threads, isa, precision)
    return out


def simd_isas():
    return ["avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"]


def weights(rows, cols, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return quantize((rng.standard_normal((rows, cols)) * scale).astype(np.float32))


def nonfinite_scales(q):
    b = np.ascontiguousarray(q).reshape(-1, BLOCK)
    d = b[:, 0].astype(np.uint16) | (b[:, 1].astype(np.uint16) << 8)
    dm = b[:, 2].astype(np.uint16) | (b[:, 3].astype(np.uint16) << 8)
    return ((d & 0x7C00) == 0x7C00) | ((dm & 0x7C00) == 0x7C00)


# ---- the table row ---------------------------------------------------------------------------

def test_cpu_types_row():
    row = next(t for t in lmtail._core.cpu_types() if t["id"] == Q4_K)
    assert row["name"] == "Q4_K" and row["block_elems"] == 256 and row["block_bytes"] == 144
    assert set(row["precisions"]) - {"ggml"} == {"f32", "i24"} and row["default_precision"] == "i24"


def test_unsupported_precision_and_bad_cols():
    w = weights(2, 256)
    with pytest.raises(lmtail.UnsupportedError, match="i16"):
        matvec(w, 256, np.ones(256, np.float32), precision="i16")
    with pytest.raises(errors.LmtailError, match="Q4_K"):
        lmtail._core.matvec(w, Q4_K, 128, np.ones((1, 128), np.float32), np.empty((1, 2), np.float32), 1, "auto", "f32")


# ---- quantize / dequantize against ggml ------------------------------------------------------

def _block(kind, rng):
    n = QK_K
    s = float(10.0 ** rng.uniform(-3, 2))
    if kind == "gauss":
        return rng.standard_normal(n) * s
    if kind == "positive":
        return rng.uniform(0, s, n)
    if kind == "negative":
        return -rng.uniform(0, s, n)
    if kind == "sparse":
        return np.where(rng.random(n) < 0.1, rng.standard_normal(n) * s, 0.0)
    if kind == "constant":
        return np.full(n, rng.standard_normal() * s)
    if kind == "zeros":
        return np.where(rng.random(n) < 0.5, 0.0, -0.0)
    if kind == "denormal":
        u = rng.integers(0, 1 << 23, n, dtype=np.uint32) | (rng.integers(0, 2, n, dtype=np.uint32) << 31)
        return u.view(np.float32)
    if kind == "tiny":  # fp16-subnormal d and dmin
        return rng.standard_normal(n) * 1e-6
    if kind == "outliers":
        x = rng.standard_normal(n) * s
        x[rng.integers(0, n, 2)] *= 2.0 ** rng.uniform(0, 30, 2)
        return x
    if kind == "logwide":  # any magnitude: the overflowing blocks exercise the refusal
        return 2.0 ** rng.uniform(-140, 100, n) * rng.choice([-1.0, 1.0], n)
    if kind == "grid":  # exact rounding ties
        return (rng.integers(0, 16, n) + int(rng.integers(-8, 8))) * 2.0 ** int(rng.integers(-20, 20))
    if kind == "const_subblocks":
        return np.repeat(rng.standard_normal(8) * s, 32)
    raise AssertionError(kind)


KINDS = ["gauss", "positive", "negative", "sparse", "constant", "zeros", "denormal", "tiny", "outliers",
         "logwide", "grid", "const_subblocks"]


def assert_parity(Q, x, what):
    x = np.ascontiguousarray(x, dtype=np.float32)
    want = Q.quantize(Q4_K, x)
    bad = nonfinite_scales(want)
    if bad.any():
        with pytest.raises(errors.ParameterError, match="overflows Q4_K's fp16 scales"):
            quantize(x)
        x = x.reshape(-1, QK_K).copy()
        x[bad] = 0.0
        x = x.reshape(want.shape[0], -1)
        want = Q.quantize(Q4_K, x)
    got = quantize(x)
    diff = np.flatnonzero((got.reshape(-1, BLOCK) != want.reshape(-1, BLOCK)).any(axis=1))
    assert diff.size == 0, f"{what}: {diff.size} blocks differ from ggml's, first {diff[:5]}"


@pytest.mark.oracle
@pytest.mark.parametrize("kind", KINDS)
def test_quantize_matches_ggml(Q, kind):
    rng = np.random.default_rng(KINDS.index(kind))
    x = np.stack([np.concatenate([_block(kind, rng) for _ in range(3)]) for _ in range(24)]).astype(np.float32)
    assert_parity(Q, x, kind)


@pytest.mark.oracle
def test_quantize_matches_ggml_mixed_and_threads(Q):
    rng = np.random.default_rng(7)
    x = np.stack([np.concatenate([_block(KINDS[rng.integers(len(KINDS) - 1)], rng) for _ in range(4)])
                  for _ in range(40)]).astype(np.float32)
    x[np.abs(x) > 1e6] = 0.0  # keep every block quantisable: thread counts compare whole calls
    want = Q.quantize(Q4_K, x)
    for th in (1, 2, 3):
        assert np.array_equal(quantize(x, th), want), th


def test_quantize_refuses_nonfinite_and_overflow():
    x = np.zeros((2, 512), np.float32)
    x[1, 300] = np.nan
    with pytest.raises(errors.ParameterError, match=r"non-finite weight at \(1, 300\)"):
        quantize(x)
    x[1, 300] = 0.0
    x[0, 5] = -4.2e6  # dmin = 4.2e6 / 63 > 65504: the block would decode to -inf
    with pytest.raises(errors.ParameterError, match="row 0, super-block 0"):
        quantize(x)
    x[0, 5] = -4.1e6
    quantize(x)
    x[0, :256] = 6.2e7  # d = (6.2e7 / 15) / 63 > 65504
    with pytest.raises(errors.ParameterError, match="up to about 6.19e7"):
        quantize(x)
    x[0, :256] = 6.19e7
    quantize(x)


@pytest.mark.oracle
def test_dequantize_matches_ggml(Q):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((17, 768)) * 0.05).astype(np.float32)
    q = quantize(x)
    assert np.array_equal(bits(dequantize(q, 768)), bits(Q.dequantize(Q4_K, q, 768)))
    # Random bytes: any scales, any codes (NaN/inf scales included, compared by bits).
    rb = rng.integers(0, 256, (9, 4 * BLOCK), dtype=np.uint8)
    for th in (1, 3):
        assert np.array_equal(bits(dequantize(rb, 1024, th)), bits(Q.dequantize(Q4_K, rb, 1024)))


def test_round_trip_bounded():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 512)).astype(np.float32)
    y = dequantize(quantize(x), 512)
    assert np.linalg.norm(y - x) / np.linalg.norm(x) < 0.12  # ~4.5 bits per weight


# ---- matvec ----------------------------------------------------------------------------------

def ref64(q, cols, x):
    w = dequantize(q, cols).astype(np.float64)
    return np.atleast_2d(x).astype(np.float64) @ w.T


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("isa", simd_isas())
def test_simd_paths_equal_scalar_bytes(isa, precision):
    if not lmtail._core.isa_available(isa):
        pytest.skip(f"{isa} is not available on this CPU/build (path compiled but not run here)")
    rng = np.random.default_rng(11)
    cols = 768
    q = weights(13, cols, seed=1)
    for T in range(1, 12):
        x = rng.standard_normal((T, cols)).astype(np.float32)
        a = matvec(q, cols, x, isa="scalar", precision=precision)
        b = matvec(q, cols, x, isa=isa, precision=precision)
        assert np.array_equal(bits(a), bits(b)), (isa, precision, T)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_threads_and_batch_invariance(precision):
    rng = np.random.default_rng(12)
    cols = 512
    q = weights(200, cols, seed=2)  # 200 rows: several 64-row tasks, a partial last one
    x = rng.standard_normal((11, cols)).astype(np.float32)
    base = matvec(q, cols, x, threads=1, precision=precision)
    for th in (2, 3):
        assert np.array_equal(bits(matvec(q, cols, x, threads=th, precision=precision)), bits(base)), th
    for T in range(1, 12):
        got = matvec(q, cols, x[:T], threads=2, precision=precision)
        assert np.array_equal(bits(got), bits(base[:T])), T
    for t in (0, 5, 10):
        assert np.array_equal(bits(matvec(q, cols, x[t], precision=precision)[0]), bits(base[t])), t


def awkward_inputs():
    rng = np.random.default_rng(13)
    cols = 1024
    out = {}
    out["gauss"] = (rng.standard_normal((64, cols)), rng.standard_normal((3, cols)))
    w = rng.standard_normal((64, cols)) * 0.02
    w[:, ::97] *= 300.0  # spikes
    x = rng.standard_normal((3, cols))
    x[:, ::61] *= 1e3
    x[1, :256] = 0.0  # an all-zero activation block
    out["spikes"] = (w, x)
    w = rng.standard_normal((64, cols)) * np.repeat(10.0 ** rng.uniform(-4, 3, (64, 4)), 256, axis=1)
    out["huge_tiny_scales"] = (w, rng.standard_normal((3, cols)) * 10.0 ** rng.uniform(-20, 20, (3, 1)))
    out["subnormal_d"] = (rng.standard_normal((64, cols)) * 1e-4, rng.standard_normal((3, cols)))  # fp16-subnormal d
    w = rng.standard_normal((64, cols))
    w[:, 256:512] = 0.0
    out["zero_blocks"] = (w, rng.standard_normal((3, cols)))
    out["one_signed"] = (np.abs(rng.standard_normal((64, cols))), np.abs(rng.standard_normal((3, cols))))
    return out


AWKWARD = awkward_inputs()


@pytest.mark.parametrize("name", list(AWKWARD))
@pytest.mark.parametrize("precision", ["default", "i24", "f32"])
def test_accuracy_normwise(name, precision):
    # "spikes": 1000x activation outliers; i24 alone reached ~1.4e-5 there (the small elements are
    # held to max|x_block| * 2^-24), so such elements are taken out and added back in f32, or the
    # row takes the f32 kernel (cpu/i24_outliers.hpp).
    bound = 1e-6
    w, x = AWKWARD[name]
    cols = w.shape[1]
    q = quantize(w.astype(np.float32))
    if name == "subnormal_d":
        d = q.reshape(-1, BLOCK)[:, :2].copy().view(np.uint16).ravel()
        assert np.all((d & 0x7C00) == 0) and np.all(d != 0)
    x = x.astype(np.float32)
    want = ref64(q, cols, x)
    got = matvec(q, cols, x, threads=2, precision=precision).astype(np.float64)
    for t in range(x.shape[0]):
        n = np.linalg.norm(want[t])
        if n == 0.0:
            assert not np.any(got[t]), (name, t)
            continue
        err = np.linalg.norm(got[t] - want[t]) / n
        assert err <= bound, (name, precision, t, err)


def test_i24_spikes_block_bound():
    # Per logit: |err| <= 2^-22 * sum_b max|x_b| * sum_{i in b} |w_i| (the activation pieces) plus
    # f32-grade rounding of the sum of |w_i x_i| (the integer sums are exact).
    w, x = AWKWARD["spikes"]
    cols = w.shape[1]
    q = quantize(w.astype(np.float32))
    x = x.astype(np.float32)
    wd = np.abs(dequantize(q, cols).astype(np.float64))
    amax = np.repeat(np.abs(x.astype(np.float64)).reshape(x.shape[0], -1, 256).max(axis=2), 256, axis=1)
    bound = 2.0**-22 * (amax @ wd.T) + 2.0**-20 * (np.abs(x.astype(np.float64)) @ wd.T)
    got = matvec(q, cols, x, threads=2, precision="i24").astype(np.float64)
    assert np.all(np.abs(got - ref64(q, cols, x)) <= bound)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_x_poisons_only_its_row(precision, bad):
    rng = np.random.default_rng(14)
    cols = 768
    q = weights(70, cols, seed=3)
    x = rng.standard_normal((4, cols)).astype(np.float32)
    clean = matvec(q, cols, x, precision=precision)
    x[2, 400] = bad
    for isa in ["scalar"] + [i for i in simd_isas() if lmtail._core.isa_available(i)]:
        got = matvec(q, cols, x, threads=2, isa=isa, precision=precision)
        assert not np.isfinite(got[2]).any(), (isa, bad)
        keep = [0, 1, 3]
        assert np.array_equal(bits(got[keep]), bits(clean[keep])), isa


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("rows", [1, 7, 65, 129])
@pytest.mark.parametrize("cols", [256, 1280])
def test_odd_shapes(rows, cols, precision):
    rng = np.random.default_rng(rows * 7 + cols)
    q = weights(rows, cols, seed=rows)
    x = rng.standard_normal((3, cols)).astype(np.float32)
    got = matvec(q, cols, x, threads=3, precision=precision)
    want = ref64(q, cols, x)
    assert got.shape == (3, rows)
    assert np.linalg.norm(got - want) <= 1e-6 * np.linalg.norm(want)
    for isa in [i for i in simd_isas() if lmtail._core.isa_available(i)]:
        assert np.array_equal(bits(matvec(q, cols, x, isa=isa, precision=precision)),
                              bits(matvec(q, cols, x, isa="scalar", precision=precision)))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_row_stride_wider_than_row(precision):
    rng = np.random.default_rng(15)
    cols = 512
    q = weights(9, cols, seed=4)
    wide = np.full((9, q.shape[1] + 40), 0xFF, np.uint8)  # padding: NaN scales if ever read
    wide[:, 8:8 + q.shape[1]] = q
    view = wide[:, 8:8 + q.shape[1]]
    assert view.strides[0] == q.shape[1] + 40
    x = rng.standard_normal((2, cols)).astype(np.float32)
    for isa in ["scalar"] + [i for i in simd_isas() if lmtail._core.isa_available(i)]:
        got = matvec(view, cols, x, threads=2, isa=isa, precision=precision)
        assert np.array_equal(bits(got), bits(matvec(q, cols, x, isa=isa, precision=precision))), isa


def test_neon_paths_equal_scalar_bytes_under_qemu(tmp_path):
    """NEON F32 and I24 kernels against the scalar references (T = 1..11, a NaN row), cross-built
    with the type's sources and run under qemu."""
    import os
    import shutil
    import subprocess

    cxx, qemu = shutil.which("aarch64-linux-gnu-g++"), shutil.which("qemu-aarch64")
    if not cxx or not qemu:
        pytest.skip("aarch64-linux-gnu-g++ / qemu-aarch64 not installed (NEON parity not run)")
    root = os.path.join(os.path.dirname(__file__), "..")
    d = os.path.join(root, "csrc", "cpu", "types", "q4_k")
    srcs = [os.path.join(d, f) for f in ("q4_k.cpp", "q4_k_quantize.cpp", "q4_k_scalar.cpp", "q4_k_neon.cpp")]
    srcs += [os.path.join(root, "csrc", "core", f) for f in ("thread_pool.cpp", "cpu_features.cpp")]
    srcs.append(os.path.join(root, "csrc", "cpu", "activations_k.cpp"))
    srcs.append(os.path.join(root, "tests", "cpp", "neon", "q4_k_parity.cc"))
    exe = str(tmp_path / "q4k_neon_parity")
    flags = ["-O2", "-std=c++17", "-ffp-contract=off", "-DLMTAIL_HAVE_NEON=1", "-I", os.path.join(root, "csrc"),
             "-I", os.path.join(root, "csrc", "include")]
    dot = str(tmp_path / "q4_k_neon_dot.o")  # the dotprod file alone gets +dotprod, as in CMakeLists.txt
    subprocess.run([cxx, *flags, "-march=armv8.2-a+dotprod", "-c", os.path.join(d, "q4_k_neon_dot.cpp"), "-o", dot],
                   check=True)
    subprocess.run([cxx, *flags, *srcs, dot, "-o", exe, "-lpthread"], check=True)
    # -cpu max: a CPU with the dot product (the driver runs isa neon and neon_dotprod).
    r = subprocess.run([qemu, "-cpu", "max", "-L", "/usr/aarch64-linux-gnu", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr

# ---- i24 with activation outliers (taken out and added back, or the f32 kernel) -------------
SPIKE_RATIOS = [1, 10, 30, 100, 300, 1000, 10000]


def spike_case(ratio, spiky_w, per_block, rows=96, cols=1024, T=3, seed=21):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)) * 0.02
    if spiky_w:
        w[:, ::97] *= 300.0
    x = rng.standard_normal((T, cols))
    # ~per_block spikes per 256-block, never on a spiky weight column (::97): the logits are then
    # dominated by ordinary x elements, whose relative precision is what i24 loses.
    x[:, 37 :: (256 if per_block == 1 else 61)] *= ratio
    return quantize(w.astype(np.float32)), x.astype(np.float32)


@pytest.mark.parametrize("per_block", [1, 4])
@pytest.mark.parametrize("spiky_w", [False, True])
@pytest.mark.parametrize("ratio", SPIKE_RATIOS)
def test_i24_activation_spikes_normwise(ratio, spiky_w, per_block):
    q, x = spike_case(ratio, spiky_w, per_block)
    cols = x.shape[1]
    want = ref64(q, cols, x)
    for precision in ("i24", "default"):
        got = matvec(q, cols, x, precision=precision).astype(np.float64)
        err = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
        assert err.max() <= 1e-6, (precision, err)


def mixed_spike_batch(cols=1024):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, cols))
    x[1, ::61] *= 1e3
    x[4, 300] *= 1e4  # one outlier: taken out and added back (test_i24_outliers.py)
    return x.astype(np.float32)


def test_i24_spiky_rows_route_and_batch_stays_invariant():
    cols = 1024
    q = weights(130, cols, seed=9, scale=0.02)
    x = mixed_spike_batch(cols)
    f32 = matvec(q, cols, x, precision="f32")
    for threads in (1, 2):
        got = matvec(q, cols, x, threads=threads, precision="i24")
        for t in range(x.shape[0]):
            one = matvec(q, cols, x[t], threads=threads, precision="i24")[0]
            assert np.array_equal(bits(got[t]), bits(one)), (threads, t)
        assert np.array_equal(bits(got[1]), bits(f32[1]))  # too many outliers in a block: f32
        assert not np.array_equal(bits(got[4]), bits(f32[4]))  # one outlier: taken out, i24
        assert not np.array_equal(bits(got[0]), bits(f32[0]))  # ordinary rows keep i24
    sub = matvec(q, cols, x[[4, 0, 1]], precision="i24")
    assert np.array_equal(bits(sub), bits(got[[4, 0, 1]]))


@pytest.mark.parametrize("isa", simd_isas())
def test_i24_mixed_spike_batch_simd_equals_scalar(isa):
    if not lmtail._core.isa_available(isa):
        pytest.skip(f"{isa} not available on this machine")
    cols = 1024
    q = weights(130, cols, seed=9, scale=0.02)
    x = mixed_spike_batch(cols)
    ref = matvec(q, cols, x, isa="scalar", precision="i24")
    got = matvec(q, cols, x, threads=2, isa=isa, precision="i24")
    assert np.array_equal(bits(got), bits(ref))
