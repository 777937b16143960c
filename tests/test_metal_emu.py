"""metal-emu: the Metal kernels (metal/*.metal) and host code (csrc/metal) on the CPU emulator,
checked op by op against the CPU backend.

Per-op bounds (emulator vs cpu):
* scale, tanh, softcap (both routes): identical bytes. The emulator's MSL `tanh` is the host
  libm's tanhf, the CPU backend's too; on a real GPU Metal's tanh differs (see DESIGN.md).
* rms_norm: rel 4e-6 (float partial sums per lane + simd_sum against the CPU's double sum).
* matvec (every type of metal/matvec.metal): |gpu - cpu f32| <= 2e-6 * (|W| @ |x|) + 1e-30
  (lane-partial fma sums + simd_sum); row t of a batch identical to that row alone.
* argmax, greedy_argmax, topk: identical (ids and value bytes), ties included.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import lmtail
from lmtail import ops
from lmtail.errors import LmtailError, NonFiniteLogitsError, ParameterError

import _metal_testing
from _util import q5k_matrix

pytestmark = pytest.mark.skipif("metal-emu" not in lmtail.backends(), reason="built without LMTAIL_EMU")
EMU = "metal-emu"
ORDERS = [("forward", 1), ("reverse", 1), ("random", 1), ("random", 2)]
METAL_TYPES = lmtail.capabilities()[EMU]["matvec"]["dtypes"]
BLOCK = {r["name"]: r["block_elems"] for r in lmtail._core.cpu_types()}


@pytest.fixture
def me():
    from lmtail import _core

    m = _core.metal_emu
    m.configure("forward", 1, "raise")
    yield m
    m.configure("forward", 1, "raise")


def under_orders(me, fn):
    """Run fn under every lane order; assert identical bytes; return the first result."""
    outs = []
    for order, seed in ORDERS:
        me.configure(order, seed, "raise")
        outs.append(fn())
    me.configure("forward", 1, "raise")
    for o in outs[1:]:
        for a, b in zip(np.atleast_1d(outs[0]) if not isinstance(outs[0], tuple) else outs[0],
                        np.atleast_1d(o) if not isinstance(o, tuple) else o):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    return outs[0]


# ---- registry and generator metadata ----------------------------------------------------------


def test_registered_and_kernels_listed(me):
    assert EMU in lmtail.backends()
    names = {k["name"]: k for k in me.kernels()}
    for n in ["argmax_f32_phase1", "argmax_f32_phase2", "greedy_argmax_f32_phase1", "greedy_argmax_f32_phase2",
              "scale_f32", "scale_f32_4", "tanh_f32", "tanh_f32_4", "scale_softcap_f32", "rms_norm_f32",
              "topk_f32", "get_rows_f32"] + [f"mul_mv_{d.lower().replace('_k', '_K')}_f32" for d in METAL_TYPES]:
        assert n in names, n
    acc = {b["name"]: b["access"] for b in names["argmax_f32_phase1"]["buffers"]}
    assert acc == {"x": "read", "partial_key": "write", "partial_idx": "write", "args": "read"}
    for d in METAL_TYPES:
        k = names[f"mul_mv_{d.lower().replace('_k', '_K')}_f32"]
        assert {b["name"]: b["access"] for b in k["buffers"]} == {"w": "read", "x": "read", "y": "write", "args": "read"}
        assert k["file"] == "metal/matvec.metal"  # one kernel family
    assert names["argmax_f32_phase1"]["file"] == "metal/argmax.metal"


def test_generator_rejects_unsupported(tmp_path):
    tool = os.path.join(os.path.dirname(__file__), "..", "tools", "msl_trampolines.py")
    if not os.path.exists(tool):
        pytest.skip("source tree not available")
    bad = {
        "template <typename T> kernel void k(device T *x [[buffer(0)]]) {}": "template kernel",
        "kernel void k(texture2d<float> t [[texture(0)]]) {}": "not supported",
        "kernel void k(device float *x [[buffer(0)]], device float *y [[buffer(0)]]) {}": "twice",
        "kernel void k(device float *x) {}": "exactly one",
    }
    for src, msg in bad.items():
        p = tmp_path / "k.metal"
        p.write_text(src + "\n")
        r = subprocess.run([sys.executable, tool, str(p), str(tmp_path / "k.cpp")], capture_output=True, text=True)
        assert r.returncode == 1 and msg in r.stderr, (src, r.stderr)


# ---- element-wise ops ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 4, 99, 1000, 4097])
def test_unary_identical_to_cpu(me, n):
    x = (np.random.default_rng(n).standard_normal(n) * 30).astype(np.float32)
    for four_pass in (True, False):
        for cap in (20.0, 0.0):
            want = ops.softcap(x, 0.196116, cap, four_pass=four_pass)
            got = under_orders(me, lambda: ops.softcap(x, 0.196116, cap, four_pass=four_pass, backend=EMU))
            assert got.tobytes() == want.tobytes()
    assert ops.scale(x, 0.3, backend=EMU).tobytes() == ops.scale(x, 0.3).tobytes()
    assert ops.tanh(x, backend=EMU).tobytes() == ops.tanh(x).tobytes()


@pytest.mark.parametrize("shape", [(1, 256), (3, 999), (2, 6656), (1, 1)])
@pytest.mark.parametrize("with_gamma", [True, False])
def test_rms_norm(me, shape, with_gamma):
    rng = np.random.default_rng(shape[1])
    x = rng.standard_normal(shape).astype(np.float32) * 3
    g = rng.standard_normal(shape[1]).astype(np.float32) if with_gamma else None
    want = ops.rms_norm(x, g, 1e-6)
    got = under_orders(me, lambda: ops.rms_norm(x, g, 1e-6, backend=EMU))
    np.testing.assert_allclose(got, want, rtol=4e-6, atol=1e-30)


@pytest.mark.parametrize("rows,cols,T", [(1, 256, 1), (7, 512, 2), (33, 256, 5), (64, 1024, 1)])
def test_matvec(me, rows, cols, T):
    w = q5k_matrix(rows, cols, seed=rows)
    x = np.random.default_rng(cols).standard_normal((T, cols)).astype(np.float32)
    want = ops.matvec_q5_k(w, x, precision="f32")  # the CPU reference the Metal kernel reproduces
    got = under_orders(me, lambda: ops.matvec_q5_k(w, x, backend=EMU))
    bound = np.abs(lmtail.dequantize_q5_k(w)).astype(np.float64) @ np.abs(x.astype(np.float64)).T
    assert np.all(np.abs(got.astype(np.float64) - want) <= 2e-6 * bound.T + 1e-30)
    assert ops.matvec_q5_k(w, x[0], backend=EMU).shape == (rows,)


def _typed(dtype, rows, cols, seed):
    w = (np.random.default_rng(seed).standard_normal((rows, cols)) * 0.05).astype(np.float32)
    return lmtail.quantize(w, dtype)


def _bound(q, dtype, x):
    return (np.abs(lmtail.dequantize(q, dtype)).astype(np.float64) @ np.abs(x.astype(np.float64)).T).T


# Awkward shapes per block size: one row, odd row counts (a threadgroup's second SIMD-group with
# no row), a last slice pass that only some lanes reach, and (block-of-1 types) cols ending
# mid-slice.
def _shapes(dtype):
    blk = BLOCK[dtype]
    if blk == 256:
        return [(1, 256, 1), (9, 512, 5), (13, 1280, 2)]
    if blk == 32:
        return [(1, 32, 1), (9, 640, 5), (13, 96, 2)]
    return [(1, 3, 1), (9, 640, 5), (13, 109, 2)]


@pytest.mark.parametrize("dtype", METAL_TYPES)
def test_matvec_every_type(me, dtype):
    for rows, cols, T in _shapes(dtype):
        q = _typed(dtype, rows, cols, seed=rows + cols)
        x = np.random.default_rng(cols).standard_normal((T, cols)).astype(np.float32)
        want = ops.matvec(q, x, dtype, precision="f32")  # the CPU reference
        got = under_orders(me, lambda: ops.matvec(q, x, dtype, backend=EMU))
        assert np.all(np.abs(got.astype(np.float64) - want) <= 2e-6 * _bound(q, dtype, x) + 1e-30), (rows, cols, T)
        for t in range(T):  # batch invariant: each token's reduction order is independent of T
            assert ops.matvec(q, x[t], dtype, backend=EMU).tobytes() == got[t].tobytes()


@pytest.mark.parametrize("dtype", METAL_TYPES)
def test_matvec_misaligned_and_strided_rows(me, dtype):
    # A byte view at an odd offset (rows the kernel cannot read aligned: packed once) and rows
    # with a stride above the row bytes (wrapped in place): the same bytes as the compact rows.
    cols = 2 * BLOCK[dtype] if BLOCK[dtype] > 1 else 40
    q = _typed(dtype, 5, cols, seed=7)
    x = np.random.default_rng(1).standard_normal((2, cols)).astype(np.float32)
    base = ops.matvec(q, x, dtype, backend=EMU).tobytes()
    raw = np.zeros(q.nbytes + 1, np.uint8)
    odd = raw[1:].reshape(q.shape)
    odd[...] = q
    assert ops.matvec(odd, x, dtype, backend=EMU).tobytes() == base
    wide = np.zeros((q.shape[0], q.shape[1] + 6), np.uint8)
    wide[:, : q.shape[1]] = q
    assert ops.matvec(wide[:, : q.shape[1]], x, dtype, backend=EMU).tobytes() == base


@pytest.mark.parametrize("dtype", METAL_TYPES)
def test_head_graph_every_type(me, dtype):
    # The whole tail in one encoder (norm -> mul_mv_<type> -> scale -> cap -> greedy) per type.
    cols = 512 if BLOCK[dtype] == 256 else 640
    q = _typed(dtype, 300, cols, seed=3)
    gamma = np.random.default_rng(3).uniform(0.5, 1.5, cols).astype(np.float32)
    h = np.random.default_rng(4).standard_normal((2, cols)).astype(np.float32)
    type_id = next(r["id"] for r in lmtail._core.cpu_types() if r["name"] == dtype)
    logits = np.empty((2, 300), np.float32)
    res, _, _ = me.head_greedy(q, cols, gamma, h, 1e-6, 0.5, 20.0, np.zeros(0, np.uint32), logits, False, None,
                               False, type_id)
    ref = lmtail.Head(q, gamma, dtype=dtype, logit_scale=0.5, softcap=20.0, eps=1e-6, precision="f32").logits(h)
    np.testing.assert_allclose(logits, ref, rtol=1e-5, atol=1e-5)
    assert res.tolist() == ops.greedy_argmax(logits).tolist()
    # the graph's logits are the ops composition's on the same backend, byte for byte
    emu = lmtail.Head(q, gamma, dtype=dtype, backend=EMU, logit_scale=0.5, softcap=20.0, eps=1e-6)
    assert emu.logits(h).tobytes() == logits.tobytes()
    with pytest.raises(lmtail.UnsupportedError, match="no Metal kernel"):  # Q4_1 (ggml id 3)
        me.head_greedy(np.zeros((2, 20), np.uint8), 32, None, np.zeros((1, 32), np.float32), 1e-6, 1.0, 0.0,
                       np.zeros(0, np.uint32), None, False, None, False, 3)


@pytest.mark.parametrize("dtype", METAL_TYPES)
def test_head_from_gguf_every_type(me, tmp_path, dtype):
    from _gguf_util import HEAD_TYPES, head_model

    type_id, blk, _ = HEAD_TYPES[dtype]
    cols = 512 if blk == 256 else 640
    path, _ = head_model(tmp_path / "m.gguf", "llama", rows=200, cols=cols, head_type=type_id)
    cpu = lmtail.Head.from_gguf(path, precision="f32")
    emu = lmtail.Head.from_gguf(path, backend=EMU)
    assert emu.dtype == dtype == cpu.dtype
    h = np.random.default_rng(0).standard_normal((2, cols)).astype(np.float32)
    lc = cpu.logits(h).copy()
    np.testing.assert_allclose(emu.logits(h), lc, rtol=1e-5, atol=1e-6 * float(np.abs(lc).max()))
    assert emu.greedy(h).tolist() == ops.greedy_argmax(emu.logits(h)).tolist()


def test_matvec_zero_copy_offset_view(me):
    # A weight that starts mid-page (like a GGUF tensor at a 32-byte offset): bound through a
    # page-aligned no-copy buffer plus weight_offset.
    w = q5k_matrix(9, 512, seed=3)
    raw = np.zeros(w.nbytes + 4096 + 32, dtype=np.uint8)
    off = (-raw.ctypes.data) % 4096 + 32
    view = raw[off : off + w.nbytes].reshape(w.shape)
    view[...] = w
    x = np.random.default_rng(0).standard_normal(512).astype(np.float32)
    assert ops.matvec_q5_k(view, x, backend=EMU).tobytes() == ops.matvec_q5_k(w, x, backend=EMU).tobytes()


def test_matvec_result_is_a_view_of_the_shared_buffer(me):
    # Per-op zero copy out: the logits are a numpy view of the shared buffer's contents (the
    # array does not own its data; a capsule keeps the buffer alive), equal to the copying entry.
    import gc

    w = q5k_matrix(40, 512, seed=5)
    x = np.random.default_rng(2).standard_normal((3, 512)).astype(np.float32)
    y = ops.matvec_q5_k(w, x, backend=EMU)
    assert not y.flags.owndata and y.base is not None and y.flags.c_contiguous
    copied = np.empty((3, 40), np.float32)
    lmtail._backend.get(EMU).matvec_q5_k(w, 512, x, copied, 0, "auto")
    assert y.tobytes() == copied.tobytes()
    row = ops.matvec_q5_k(w, x[1], backend=EMU)  # 1-D input: a view of row 0 of its own buffer
    assert row.tobytes() == copied[1].tobytes()
    keep = y[2].copy()
    ys = [ops.matvec_q5_k(w, x, backend=EMU) for _ in range(20)]  # buffers freed as views die
    del ys, y
    gc.collect()
    assert ops.matvec_q5_k(w, x, backend=EMU)[2].tobytes() == keep.tobytes()
    with pytest.raises(ValueError):
        ops.matvec_q5_k(w, x, backend=EMU, isa="sse9")


# ---- reductions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 31, 1023, 1024, 1025, 4097, 20000])
@pytest.mark.parametrize("kind", ["random", "ties", "negative"])
def test_argmax_identical(me, n, kind):
    rng = np.random.default_rng(n)
    if kind == "random":
        x = rng.standard_normal((3, n)).astype(np.float32)
    elif kind == "ties":
        x = rng.integers(0, 50, (3, n)).astype(np.float32)
    else:
        x = (-1 - rng.random((3, n)) * 10).astype(np.float32)
    got = under_orders(me, lambda: ops.argmax(x, backend=EMU))
    assert got.tolist() == ops.argmax(x).tolist()
    excl = rng.choice(n, size=min(3, n - 1), replace=False).astype(np.uint32) if n > 1 else None
    want = ops.greedy_argmax(x, excl)
    got = under_orders(me, lambda: ops.greedy_argmax(x, excl, backend=EMU))
    assert got.tolist() == want.tolist()


def test_argmax_nan_and_signed_zero(me):
    cases = [
        [np.nan, np.nan, np.nan],
        [np.nan, -np.inf, 1.0],
        [np.nan, -np.inf],
        [-0.0, 0.0, -0.0],
        [0.0, -0.0],
        [-np.inf, -np.inf],
        [np.inf, 1.0, np.inf],
    ]
    for c in cases:
        x = np.array(c, dtype=np.float32)
        assert ops.argmax(x, backend=EMU) == ops.argmax(x), c
    x = np.full(1500, np.nan, dtype=np.float32)  # the ragged chunk: padding must lose to NaN
    x[1200] = np.nan
    assert ops.argmax(x, backend=EMU) == 0


def test_ties_through_ops_lowest_index(me):
    # Identical inputs with the maximum in many chunks: lowest index wins, by index comparison.
    for n in [5, 2048, 202048]:
        x = np.zeros(n, dtype=np.float32)
        assert ops.argmax(x, backend=EMU) == 0
        x[[n - 1, n // 2, 7 % n]] = 1.0
        assert ops.argmax(x, backend=EMU) == ops.argmax(x) == min(n - 1, n // 2, 7 % n)
        assert ops.greedy_argmax(x, backend=EMU) == ops.argmax(x)


def test_full_vocab_argmax_and_greedy(me):
    # The full 202048-row argmax: 198 chunks, the last holding 320; heavy ties, max in the tail.
    rng = np.random.default_rng(7)
    x = rng.integers(0, 5000, 202048).astype(np.float32)
    x[202043] = 6000.0
    x[202047] = 6000.0
    t0 = time.perf_counter()
    assert ops.argmax(x, backend=EMU) == 202043
    dt = time.perf_counter() - t0
    assert ops.greedy_argmax(x, [202043], backend=EMU) == 202047
    y = rng.integers(0, 5000, 202048).astype(np.float32)
    assert ops.argmax(y, backend=EMU) == ops.argmax(y)
    print(f"metal-emu argmax 202048: {dt * 1e3:.0f} ms")


def test_greedy_fail_closed(me):
    x = np.random.default_rng(0).standard_normal(3000).astype(np.float32)
    for bad in [np.nan, np.inf, -np.inf]:
        y = x.copy()
        y[2999] = bad
        with pytest.raises(NonFiniteLogitsError):
            ops.greedy_argmax(y, backend=EMU)
        with pytest.raises(NonFiniteLogitsError):  # an excluded id still latches
            ops.greedy_argmax(y, [2999], backend=EMU)
    # the raw kernel result: 0xFFFFFFFF latch, and 0xFFFFFFFE when everything is excluded
    out = np.empty(1, dtype=np.uint32)
    y = x[None, :].copy()
    y[0, 5] = np.nan
    me.greedy_argmax_rows(y, np.zeros(0, np.uint32), out, 0)
    assert int(out[0]) == 0xFFFFFFFF
    me.greedy_argmax_rows(x[None, :8].copy(), np.arange(8, dtype=np.uint32), out, 0)
    assert int(out[0]) == 0xFFFFFFFE
    with pytest.raises(ParameterError):
        ops.greedy_argmax(x[:4], [0, 1, 2, 3], backend=EMU)


@pytest.mark.parametrize("n,k", [(1, 1), (5, 5), (100, 7), (2049, 40), (3000, 1)])
def test_topk_identical(me, n, k):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 20, (2, n)).astype(np.float32)  # many ties
    x[0, rng.integers(0, n)] = np.nan
    x[1, 0] = -0.0
    wi, wv = ops.topk(x, k)
    gi, gv = under_orders(me, lambda: ops.topk(x, k, backend=EMU))
    assert gi.tolist() == wi.tolist()
    assert gv.tobytes() == wv.tobytes()


# ---- the Head on metal-emu -------------------------------------------------------------------


def test_head_on_metal_emu(me):
    rows, cols = 3001, 512
    w = q5k_matrix(rows, cols, seed=5, scale=0.05)
    gamma = np.random.default_rng(1).standard_normal(cols).astype(np.float32)
    h = np.random.default_rng(2).standard_normal((2, cols)).astype(np.float32)
    cpu = lmtail.Head(w, gamma, logit_scale=0.5, softcap=20.0, eog_ids=[3], precision="f32")
    emu = lmtail.Head(w, gamma, logit_scale=0.5, softcap=20.0, eog_ids=[3], backend=EMU)
    lc, le = cpu.logits(h).copy(), emu.logits(h).copy()
    np.testing.assert_allclose(le, lc, rtol=1e-5, atol=1e-5)
    top2 = np.sort(lc, axis=1)[:, -2:]
    if np.all(top2[:, 1] - top2[:, 0] > 1e-4):
        assert emu.greedy(h).tolist() == cpu.greedy(h).tolist()
    ids_e, _ = emu.topk(h, 5)
    ids_c, _ = cpu.topk(h, 5)
    assert ids_e[:, 0].tolist() == ids_c[:, 0].tolist()


# ---- emulator faults (never hangs) ---------------------------------------------------------------


def test_kernel_faults_raise():
    # The faulty kernels are planted bugs: only the test-only module has them (tests/_metal_testing.py).
    if _metal_testing.unavailable():
        pytest.skip(f"test-only module _lmtail_testing: {_metal_testing.unavailable()}")
    me = _metal_testing.load().metal_emu
    me.configure("forward", 1, "raise")
    out = np.zeros(64, dtype=np.uint32)
    with pytest.raises(LmtailError, match=r"returned while .* wait at threadgroup_barrier tests/metal/debug.metal:\d+"):
        me.dispatch("debug_divergent_barrier", [1], [64], {0: out})
    f = np.zeros(64, dtype=np.float32)
    with pytest.raises(LmtailError, match="32 KiB"):
        me.dispatch("debug_threadgroup_overflow", [1], [64], {0: f})
    me.dispatch("debug_read_unwritten", [1], [64], {0: f})
    assert f[0] == 1.0 and np.isnan(f[1:]).all()  # threadgroup memory is poisoned with NaN
    with pytest.raises(LmtailError, match="not bound"):
        me.dispatch("scale_f32", [1], [32], {1: np.zeros(2, np.uint32).tobytes()})
    with pytest.raises(LmtailError, match="threads per threadgroup"):
        me.dispatch("scale_f32", [1], [2048], {0: f, 1: np.zeros(2, np.uint32).tobytes()})


@pytest.mark.slow
def test_full_head_202048_x_6656(me):
    # The full head on the emulator (~1 min on 2 slow cores: lane-serial dequantisation).
    from _util import slab, tiled_head

    w = tiled_head(202048, slab())
    x = np.random.default_rng(0).standard_normal(6656).astype(np.float32)
    t0 = time.perf_counter()
    got = ops.matvec_q5_k(w, x, backend=EMU)
    dt = time.perf_counter() - t0
    want = ops.matvec_q5_k(w, x, precision="f32")
    s = slab()
    bound = (np.abs(lmtail.dequantize_q5_k(s)).astype(np.float64) @ np.abs(x.astype(np.float64)))
    bound = np.tile(bound, -(-202048 // s.shape[0]))[:202048]
    assert np.all(np.abs(got.astype(np.float64) - want) <= 2e-6 * bound + 1e-30)
    assert ops.argmax(got, backend=EMU) == ops.argmax(want) or abs(float(got.max()) - float(want.max())) < 1e-5
    print(f"metal-emu matvec 202048 x 6656: {dt:.1f} s")


def test_head_from_gguf_zero_copy_weights(me, tmp_path):
    # GGUF tensor data is memory-mapped read-only and only 32-byte aligned: the host wraps the
    # page-rounded region in one no-copy buffer and binds the tensor at its offset.
    from _gguf_util import head_model

    path, arr = head_model(tmp_path / "m.gguf", "llama", rows=300, cols=512)
    cpu = lmtail.Head.from_gguf(path, precision="f32")  # the reference the Metal kernels reproduce
    emu = lmtail.Head.from_gguf(path, backend=EMU)
    h = np.random.default_rng(0).standard_normal((3, 512)).astype(np.float32)
    lc = cpu.logits(h).copy()
    # random Q5_K bytes give logits ~100: an absolute bound scaled to the row (lane-partial sums)
    np.testing.assert_allclose(emu.logits(h), lc, rtol=1e-5, atol=1e-6 * float(np.abs(lc).max()))
    ids_e, vals_e = emu.topk(h, 4)
    ids_c, vals_c = cpu.topk(h, 4)
    assert ids_e[:, 0].tolist() == ids_c[:, 0].tolist()


def test_unimplemented_op_raises_backend_error(me):
    from lmtail import _backend
    from lmtail.errors import BackendError

    impl = _backend.get(EMU)
    with pytest.raises(BackendError, match="metal-emu"):
        impl.no_such_kernel(np.zeros(4, np.float32))
    if hasattr(ops, "layer_norm"):  # an op the CPU runs and metal-emu does not (the capability table)
        with pytest.raises(lmtail.UnsupportedError, match="layer_norm .*metal-emu.*: cpu"):
            ops.layer_norm(np.ones((1, 8), np.float32), backend=EMU)


# ---- no test hooks in what lmtail ships (issue 19 item 8) ------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HOOKS = ("set_debug", "dispatch", "barrier_names")


def test_shipped_modules_hold_no_test_hooks():
    from lmtail import _core

    for sub in ("metal_emu", "metal"):
        mod = getattr(_core, sub, None)
        if mod is not None:
            assert [h for h in _HOOKS if hasattr(mod, h)] == [], sub
    kernels = _core.metal_emu.kernels()
    assert kernels and all(k["file"].startswith("metal/") for k in kernels)
    assert not [k["name"] for k in kernels if k["name"].startswith("debug_")]
    # The shipped binary holds neither the planted kernels nor the barrier switch (strings a build
    # with them would contain: kernel names in the emulator's registry, the env var's name).
    blob = open(_core.__file__, "rb").read()
    for needle in (b"debug_argmax_f32_phase1_nobarrier", b"debug_plant_nan_f32", b"PLANTED", b"SKIP_BARRIERS",
                   b"skip_barriers"):
        assert needle not in blob, needle
    assert hasattr(_core, "read_bytes_checksum")  # the bandwidth probe stays reachable (lmtail bench)


def test_shipped_metal_emu_ignores_the_old_barrier_switch(me, monkeypatch):
    # The shipped host code used to drop every barrier when LMTAIL_METAL_SKIP_BARRIERS=1.
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    monkeypatch.setenv("LMTAIL_METAL_SKIP_BARRIERS", "1")
    assert ops.argmax(x, backend=EMU) == ops.argmax(x)
    assert ops.softcap(x, 0.5, 20.0, backend=EMU).tobytes() == ops.softcap(x, 0.5, 20.0).tobytes()


@pytest.mark.skipif(not os.path.isfile(os.path.join(REPO, "CMakeLists.txt")), reason="source tree not available")
def test_sources_keep_the_test_hooks_test_only():
    from pathlib import Path

    root = Path(REPO)
    # Kernel sources of the metallib and of the shipped emulator: metal/*.metal, no planted bug.
    assert not (root / "metal" / "debug.metal").exists()
    for f in (root / "metal").glob("*.metal"):
        text = f.read_text()
        assert "PLANTED" not in text and "kernel void debug_" not in text, f
    # CMake: the planted bugs, LMTAIL_METAL_TESTING and _lmtail_testing appear only inside the
    # LMTAIL_TESTING block, which refuses a scikit-build (pip / wheel) configure.
    cm = "\n".join(ln for ln in (root / "CMakeLists.txt").read_text().splitlines() if not ln.lstrip().startswith("#"))
    start = cm.index("option(LMTAIL_TESTING")
    block = cm[start:]
    for needle in ("tests/metal", "debug.metal", "LMTAIL_METAL_TESTING", "_lmtail_testing"):
        assert needle not in cm[:start], needle
    guard = block.index("if(LMTAIL_TESTING)")
    assert block[guard:].split("\n")[1].strip() == "if(SKBUILD)" and "FATAL_ERROR" in block[guard:guard + 200]
    assert "install(" not in block
    # Host code: no environment switch, and every hook behind LMTAIL_METAL_TESTING (which the
    # header refuses outside the emulator build).
    for f in sorted((root / "csrc" / "metal").glob("*")) + sorted((root / "csrc" / "bindings").glob("*")):
        text = f.read_text()
        assert "getenv" not in text and "SKIP_BARRIERS" not in text, f
    backend = (root / "csrc" / "metal" / "backend.hpp").read_text()
    assert '#if defined(LMTAIL_METAL_TESTING) && !defined(LMTAIL_METAL_EMU)\n#error' in backend
    # Public headers: the bandwidth probe is internal.
    for f in (root / "csrc" / "include").rglob("*"):
        if f.is_file():
            assert "read_bytes_checksum" not in f.read_text(), f


def test_installed_headers_hold_no_probe():
    from pathlib import Path

    inc = Path(lmtail.__file__).parent / "include"
    if not inc.is_dir():
        pytest.skip("this install has no headers")
    for f in inc.rglob("*"):
        if f.is_file():
            assert "read_bytes_checksum" not in f.read_text(errors="replace"), f
