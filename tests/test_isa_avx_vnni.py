"""The avx_vnni tier (Isa::AvxVnni = 7): AVX2 plus the VEX AVX-VNNI dot products.

Its integer kernels (Q4_0, Q4_K, Q6_K i24; Q5_K i16 / i24) regroup the exact int32 sums with
vpdpbusd / vpdpwssd; everything else runs the AVX2 kernel. Either way every type x precision x T
must give the scalar (and AVX2) bytes, outlier rows (taken out and added back, or sent to f32)
included. The per-type tests also list avx_vnni among their ISAs; this file holds the whole matrix
at T = 1..9 and the tier's plumbing.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import lmtail
from lmtail import _core

VNNI = _core.isa_available("avx_vnni")
needs_vnni = pytest.mark.skipif(not VNNI, reason="this CPU (or build) has no AVX-VNNI: the avx_vnni tier is not run here")

TYPES = {t["name"]: t for t in _core.cpu_types()}
CASES = [(name, p) for name, t in TYPES.items() for p in t["precisions"] if p != "ggml"]


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def test_tier_is_avx2_plus_cpuid_avx_vnni():
    if VNNI:
        assert _core.isa_available("avx2")
    flags = cpu_flags()
    if flags is not None and sys.platform.startswith("linux") and _core.isa_available("avx2"):
        assert VNNI == ("avx_vnni" in flags)
    if VNNI:
        assert _core.isa_name("avx_vnni") == "avx_vnni"
    # Auto order: avx512 > avx_vnni > avx2.
    if "LMTAIL_ISA" not in os.environ:
        want = "avx512" if _core.isa_available("avx512") else "avx_vnni" if VNNI else None
        if want is not None:
            assert _core.isa_name() == want


def test_unavailable_tier_is_refused_by_name():
    w = np.zeros((3, 34), np.uint8)
    out = np.empty((1, 3), np.float32)
    x = np.ones((1, 32), np.float32)
    if VNNI:
        _core.matvec(w, 8, 32, x, out, 1, "avx_vnni", "default")
    else:
        with pytest.raises(ValueError, match="avx_vnni"):
            _core.matvec(w, 8, 32, x, out, 1, "avx_vnni", "default")
    with pytest.raises(ValueError, match="avx_vnni"):  # the error lists the names it takes
        _core.matvec(w, 8, 32, x, out, 1, "avx-vnni", "default")


@needs_vnni
def test_lmtail_isa_env_forces_the_tier():
    code = "import lmtail._core as c; print(c.isa_name())"
    env = dict(os.environ, LMTAIL_ISA="avx_vnni")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "avx_vnni"


def weights(name, rows, cols, seed):
    t = TYPES[name]
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    w[1] = 0.0  # an all-zero row
    w[2] *= 1e3  # large scales
    w[3, ::7] *= 40.0  # spiky weights
    out = np.zeros((rows, cols // t["block_elems"] * t["block_bytes"]), np.uint8)
    _core.quantize(t["id"], w, out, 0)
    return out


def activations(T, cols, seed):
    """Gaussian rows with awkward blocks (zero, subnormal, huge, half-step ties, negative max) and
    activation outliers: one spike (taken out and added back), spikes in several blocks, and one
    block with too many (the row takes the f32 kernel), so batches mix the i24 routes."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, cols)).astype(np.float32)
    for t in range(T):
        b0 = ((t * 7) % (cols // 256)) * 256
        blk = x[t, b0 : b0 + 256]
        kind = t % 9
        if kind == 0:
            blk[:] = 0
        elif kind == 1:
            x[t, 7] *= 300.0
        elif kind == 2:
            blk *= np.float32(1e-41)
        elif kind == 3:
            x[t, 0:64:4] *= 1e3  # too many in one block: f32
        elif kind == 4:
            blk[:] = (np.arange(256) % 5 - 2) * np.float32(0.5 / 32767)
            blk[0] = 1.0
        elif kind == 5:
            x[t, 5::32] *= 100.0
        elif kind == 6:
            blk *= np.float32(1e30)
        elif kind == 7:
            blk[3] = -np.abs(blk).max() * 2
        else:
            x[t, [40, 41]] *= [-700.0, 650.0]
    return x


def run(name, q, cols, x, isa, precision, threads=1):
    out = np.empty((x.shape[0], q.shape[0]), np.float32)
    _core.matvec(q, TYPES[name]["id"], cols, x, out, threads, isa, precision)
    return out


@needs_vnni
@pytest.mark.parametrize("name,precision", CASES)
def test_every_type_precision_and_T_equals_scalar_and_avx2(name, precision):
    cols = 1280  # 5 K blocks, 40 Q4_0 / Q8_0 blocks
    q = weights(name, 133, cols, seed=len(name))  # 133 rows: several tasks, ragged groups
    for T in range(1, 10):
        x = activations(T, cols, seed=T)
        ref = run(name, q, cols, x, "scalar", precision)
        a2 = run(name, q, cols, x, "avx2", precision)
        for threads in (1, 2):
            got = run(name, q, cols, x, "avx_vnni", precision, threads)
            assert np.array_equal(bits(got), bits(ref)), (name, precision, T, threads)
        assert np.array_equal(bits(a2), bits(ref)), (name, precision, T)
        # Batch invariance on the tier: each row alone gives the batch's bytes.
        for t in (0, T - 1):
            alone = run(name, q, cols, x[t : t + 1], "avx_vnni", precision)
            assert np.array_equal(bits(alone[0]), bits(ref[t])), (name, precision, T, t)


@needs_vnni
@pytest.mark.parametrize("name", [n for n in ("Q4_0", "Q4_K", "Q5_K", "Q6_K") if n in TYPES])
def test_integer_bounds_at_the_extremes(name):
    """Weights at the codes' extremes against activations at +-32767 steps: the regrouped sums
    reach the bounds the kernels' comments state, and must still equal scalar."""
    cols = 512
    t = TYPES[name]
    rng = np.random.default_rng(5)
    w = np.where(rng.random((40, cols)) < 0.5, -1.0, 1.0).astype(np.float32) * 1e-2
    w[:, ::3] *= -1.0
    q = np.zeros((40, cols // t["block_elems"] * t["block_bytes"]), np.uint8)
    _core.quantize(t["id"], w, q, 0)
    x = np.where(w[:8] > 0, 1.0, -1.0).astype(np.float32) * np.float32(3.0)
    x[1] = -x[1]
    x[2, ::2] = np.float32(2.99999)
    x[3] = 1.0  # every element at the block max
    for T in (1, 3, 8):
        ref = run(name, q, cols, x[:T], "scalar", "default")
        got = run(name, q, cols, x[:T], "avx_vnni", "default", 2)
        assert np.array_equal(bits(got), bits(ref)), (name, T)


@needs_vnni
def test_ops_matvec_takes_the_name():
    rng = np.random.default_rng(3)
    cols, rows = 512, 300
    q = lmtail.quant.quantize(rng.standard_normal((rows, cols)).astype(np.float32), "Q6_K")
    x = rng.standard_normal((4, cols)).astype(np.float32)
    a = lmtail.ops.matvec(q, x, "Q6_K", isa="avx_vnni")
    b = lmtail.ops.matvec(q, x, "Q6_K", isa="scalar")
    assert np.array_equal(bits(a), bits(b))


def test_ggml_precision_does_not_take_the_tier():
    """precision='ggml' names ggml builds; lmtail reproduces no AVX-VNNI build of ggml."""
    w = lmtail.quant.quantize(np.random.default_rng(0).random((8, 256)).astype(np.float32), "Q4_K")
    if "ggml" not in TYPES["Q4_K"]["precisions"]:
        pytest.skip("precision 'ggml' is not offered on this CPU")
    with pytest.raises(lmtail.UnsupportedError, match="avx_vnni build is not reproduced"):
        lmtail.ops.matvec(w, np.ones((1, 256), np.float32), "Q4_K", precision="ggml", isa="avx_vnni")
