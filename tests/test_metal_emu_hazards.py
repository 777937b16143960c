"""metal-emu hazard checker and schedule-order tests with planted bugs.

* A dispatch of a concurrent encoder that touches a buffer an earlier dispatch wrote, with no
  covering memoryBarrier, raises lmtail.errors.HazardError naming both dispatches and the buffer.
* Snapshot mode runs anyway, with the unordered reader seeing the pre-write contents, so the
  missing barrier also gives wrong numbers.
* A kernel without its in-loop threadgroup_barrier gives schedule-dependent results; the correct
  kernel gives identical bytes under every order.
* The greedy latch is proven in the kernel: a NaN planted between the head and the argmax makes
  the raw phase-2 slot 0xFFFFFFFF.

The planted bugs and the hooks that plant them (``set_debug``, ``dispatch``) exist only in the
test-only module ``_lmtail_testing`` (tests/_metal_testing.py builds it from this checkout with
CMake ``LMTAIL_TESTING=ON``), which holds its own copy of the emulator, host code and kernels; these
tests run on it as backend ``metal-emu-testing``. The shipped ``metal-emu`` has no hooks
(tests/test_metal_emu.py::test_shipped_modules_hold_no_test_hooks).
"""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from lmtail import ops
from lmtail.errors import HazardError, LmtailError, NonFiniteLogitsError

import _metal_testing
from _util import q5k_matrix

pytestmark = [
    pytest.mark.skipif("metal-emu" not in lmtail.backends(), reason="built without LMTAIL_EMU"),
    pytest.mark.skipif(_metal_testing.unavailable() is not None,
                       reason=f"test-only module _lmtail_testing: {_metal_testing.unavailable()}"),
]
EMU = _metal_testing.backend_name()


@pytest.fixture
def me(monkeypatch):
    _metal_testing.register(monkeypatch)
    m = _metal_testing.load().metal_emu
    m.configure("forward", 1, "raise")
    m.set_debug([], -1)
    m.take_hazards()
    yield m
    m.configure("forward", 1, "raise")
    m.set_debug([], -1)
    m.take_hazards()


def test_hazard_error_is_lmtail_error():
    assert issubclass(HazardError, LmtailError)


def test_skip_all_barriers_raises(me):
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    me.set_debug(["all"], -1)
    with pytest.raises(HazardError):
        ops.argmax(x, backend=EMU)
    with pytest.raises(HazardError):
        ops.softcap(x, 0.5, 20.0, backend=EMU)
    me.set_debug([], -1)
    assert ops.argmax(x, backend=EMU) == ops.argmax(x)


def test_testing_module_is_its_own_emulator(me):
    """Hooks set on the test module never reach the shipped metal-emu (a separate emulator)."""
    from lmtail import _core

    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    me.set_debug(["all"], -1)
    assert ops.argmax(x, backend="metal-emu") == ops.argmax(x)
    names = {k["name"] for k in me.kernels()}
    assert "debug_argmax_f32_phase1_nobarrier" in names and "argmax_f32_phase1" in names
    assert not any(k["name"].startswith("debug_") for k in _core.metal_emu.kernels())
    me.configure("reverse", 3, "snapshot")
    assert _core.metal_emu.config()["order"] == "forward"


def test_phase_barrier_removed(me):
    x = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
    me.set_debug(["argmax_phases"], -1)
    with pytest.raises(HazardError) as ei:
        ops.argmax(x, backend=EMU)
    msg = str(ei.value)
    assert "RAW hazard" in msg
    assert "dispatch #1 'argmax_f32_phase2'" in msg and "dispatch #0 'argmax_f32_phase1'" in msg
    assert "'argmax_partial_keys'" in msg
    # snapshot mode: phase 2 sees the partial buffers as they were before phase 1 (poison)
    me.configure("forward", 1, "snapshot")
    got = ops.argmax(x, backend=EMU)
    assert got != ops.argmax(x)
    hz = me.take_hazards()
    assert len(hz) == 2 and all("argmax_f32_phase2" in h for h in hz)


def test_softcap_barrier_removed(me):
    x = (np.random.default_rng(2).standard_normal(4096) * 40).astype(np.float32)
    me.set_debug(["softcap_tanh"], -1)
    with pytest.raises(HazardError) as ei:
        ops.softcap(x, 0.5, 20.0, four_pass=True, backend=EMU)
    msg = str(ei.value)
    assert "dispatch #2 'tanh_f32_4'" in msg and "dispatch #1 'scale_f32_4'" in msg and "'logits'" in msg
    # snapshot: tanh reads the buffer from before x*(1/cap) -> wrong numbers, not just a report
    me.configure("forward", 1, "snapshot")
    got = ops.softcap(x, 0.5, 20.0, four_pass=True, backend=EMU)
    want = ops.softcap(x, 0.5, 20.0, four_pass=True)
    assert got.tobytes() != want.tobytes()
    assert me.take_hazards()
    # every barrier present: no hazard in either mode, same bytes as the CPU
    me.set_debug([], -1)
    assert ops.softcap(x, 0.5, 20.0, backend=EMU).tobytes() == want.tobytes()
    assert me.take_hazards() == []


def test_barrier_names(me):
    names = set(me.barrier_names())
    assert {"argmax_phases", "softcap_inv", "softcap_tanh", "softcap_cap", "head_scale", "norm_head"} <= names
    with pytest.raises(LmtailError):
        me.set_debug(["no_such_barrier"], -1)


def _ties(n, seed=0):
    return np.random.default_rng(seed).integers(0, 5000, n).astype(np.float32)


def _phase1_partials(me, kernel, x, order, seed):
    n = x.size
    chunks = -(-n // 1024)
    args = np.array([n, 1, chunks, 0], dtype=np.uint32).tobytes()
    idx = np.zeros(chunks, dtype=np.uint32)
    me.configure(order, seed, "raise")
    if kernel == "good":
        keys = np.zeros(chunks, dtype=np.uint32)
        me.dispatch("argmax_f32_phase1", [chunks, 1], [1024], {0: x, 1: keys, 2: idx, 3: args})
    else:
        me.dispatch("debug_argmax_f32_phase1_nobarrier", [chunks], [1024], {0: x, 1: idx, 2: args})
    return idx


def test_missing_inloop_barrier_is_order_dependent(me):
    x = _ties(16 * 1024 - 100)
    want = np.array([c * 1024 + int(np.argmax(x[c * 1024 : (c + 1) * 1024])) for c in range(16)])
    orders = [("forward", 1), ("reverse", 1), ("random", 1), ("random", 2), ("random", 3)]
    good = [_phase1_partials(me, "good", x, o, s) for o, s in orders]
    for g in good:
        assert g.tobytes() == good[0].tobytes()
        assert g.tolist() == want.tolist()
    bad = [_phase1_partials(me, "bad", x, o, s).tobytes() for o, s in orders]
    assert len(set(bad)) > 1, "the planted race should give schedule-dependent partials"
    assert any(b != want.astype(np.uint32).tobytes() for b in bad)


# ---- the head graph: norm -> head -> scale -> x(1/cap) -> tanh -> x cap -> phase 1 -> phase 2 ----


@pytest.fixture(scope="module")
def head_data():
    rows, cols = 2500, 512
    w = q5k_matrix(rows, cols, seed=11, scale=0.05)
    gamma = np.random.default_rng(3).standard_normal(cols).astype(np.float32)
    h = np.random.default_rng(4).standard_normal((2, cols)).astype(np.float32)
    return w, cols, gamma, h


def _graph(me, d, excl=(), raw=False, embed=None, logits=None):
    w, cols, gamma, h = d
    res, rows, _ = me.head_greedy(w, cols, gamma, h, 1e-6, 0.5, 20.0, np.asarray(excl, dtype=np.uint32), logits,
                                  raw, embed)
    return res, rows


def test_head_graph_matches_head(me, head_data):
    w, cols, gamma, h = head_data
    logits = np.empty((2, w.shape[0]), dtype=np.float32)
    res, _ = _graph(me, head_data, logits=logits)
    cpu = lmtail.Head(w, gamma, logit_scale=0.5, softcap=20.0, eps=1e-6, precision="f32")
    ref = cpu.logits(h)
    np.testing.assert_allclose(logits, ref, rtol=1e-5, atol=1e-5)
    assert res.tolist() == ops.greedy_argmax(logits).tolist()
    excl = [int(res[0]), int(res[1])]
    res2, _ = _graph(me, head_data, excl=excl)
    assert res2.tolist() == ops.greedy_argmax(logits, excl).tolist()
    # identical bytes under every lane order
    outs = []
    table = np.arange(w.shape[0] * 3, dtype=np.float32).reshape(-1, 3)
    for order, seed in [("forward", 1), ("reverse", 1), ("random", 5)]:
        me.configure(order, seed, "raise")
        lg = np.empty_like(logits)
        r, g = _graph(me, head_data, logits=lg, embed=table)
        outs.append((r.tobytes(), lg.tobytes(), g.tobytes()))
    assert len(set(outs)) == 1


@pytest.mark.parametrize("barrier", ["norm_head", "head_scale", "softcap_inv", "softcap_tanh", "softcap_cap",
                                     "cap_argmax", "argmax_phases"])
def test_head_graph_each_barrier_is_needed(me, head_data, barrier):
    me.set_debug([barrier], -1)
    with pytest.raises(HazardError):
        _graph(me, head_data)


@pytest.mark.parametrize("dtype", ["Q6_K", "Q8_0", "F16"])
@pytest.mark.parametrize("barrier", ["norm_head", "head_scale"])
def test_head_graph_barriers_around_every_type_head(me, dtype, barrier):
    # The head dispatch of another type (its table row in csrc/metal/matvec.cpp) reads the
    # normed rows and writes the logits: the checker sees both edges, as for Q5_K.
    ids = {r["name"]: r["id"] for r in lmtail._core.cpu_types()}
    cols = 256 if dtype.endswith("_K") else 320
    w = lmtail.quantize((np.random.default_rng(1).standard_normal((40, cols)) * 0.05).astype(np.float32), dtype)
    gamma = np.ones(cols, np.float32)
    h = np.random.default_rng(2).standard_normal((1, cols)).astype(np.float32)
    args = (w, cols, gamma, h, 1e-6, 0.5, 20.0, np.zeros(0, np.uint32), None, False, None, False, ids[dtype])
    me.head_greedy(*args)  # every barrier in place: no hazard
    me.set_debug([barrier], -1)
    with pytest.raises(HazardError):
        me.head_greedy(*args)


def test_head_graph_route_a_zero_copy_view(me, head_data):
    w, cols, gamma, h = head_data
    copy = np.empty((2, w.shape[0]), dtype=np.float32)
    res, _, view = me.head_greedy(w, cols, gamma, h, 1e-6, 0.5, 20.0, np.zeros(0, np.uint32), copy, False, None, True)
    assert view.shape == copy.shape and not view.flags.writeable and not view.flags.owndata
    assert view.tobytes() == copy.tobytes()
    res2, _, view2 = me.head_greedy(w, cols, gamma, h * 2, 1e-6, 0.5, 20.0, np.zeros(0, np.uint32), None, False,
                                    None, True)
    assert view.tobytes() == copy.tobytes()  # a later call has its own buffer: the first view is intact
    assert view2.tobytes() != copy.tobytes()
    me.set_debug([], 3)  # a failing call publishes nothing
    with pytest.raises(NonFiniteLogitsError):
        me.head_greedy(w, cols, gamma, h, 1e-6, 0.5, 20.0, np.zeros(0, np.uint32), None, False, None, True)
    del view2
    assert view.tobytes() == copy.tobytes()


def test_head_graph_planted_nan_latches_in_kernel(me, head_data):
    me.set_debug([], 1234)
    res, _ = _graph(me, head_data, raw=True)
    assert int(res[0]) == 0xFFFFFFFF  # the raw phase-2 slot: the latch is set inside the kernel
    with pytest.raises(NonFiniteLogitsError, match="latch"):
        _graph(me, head_data)


def test_head_graph_get_rows_reads_the_device_slot(me, head_data):
    table = np.random.default_rng(9).standard_normal((head_data[0].shape[0], 48)).astype(np.float32)
    res, rows = _graph(me, head_data, embed=table)
    assert rows.tobytes() == table[res].tobytes()
    me.set_debug([], 0)  # NaN planted: the slot holds 0xFFFFFFFF, the gathered row is NaN (fail closed)
    res, rows = _graph(me, head_data, embed=table, raw=True)
    assert int(res[0]) == 0xFFFFFFFF and np.isnan(rows[0]).all()


def test_loading_the_testing_module_keeps_every_core_error_type():
    # pybind11 tries the newest translator first, across modules: the test module once mapped
    # lmt::UnsupportedError to ParameterError for every later call in the process.
    _metal_testing.load()
    w = np.zeros((2, 34), np.uint8)
    x = np.ones((1, 32), np.float32)
    out = np.empty((1, 2), np.float32)
    with pytest.raises(lmtail.UnsupportedError, match="precision i16"):
        lmtail._core.matvec(w, 8, 32, x, out, 1, "auto", "i16")  # Q8_0 runs f32 only
    with pytest.raises(lmtail.DTypeError):
        lmtail._core.matvec(w.astype(np.int8), 8, 32, x, out, 1, "auto", "f32")
