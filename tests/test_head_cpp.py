"""The C++ lmt::Head (csrc/include/lmtail/head.hpp) through its binding lmtail._core.CpuHead:
validation at construction, fail-closed checks with untouched outputs, workspace capacity, and
concurrent callers on one Head. (The installed C++ example, tests/cpp/embed_example.cpp, runs
the same API from C++: tests/test_packaging.py.)"""

import threading

import numpy as np
import pytest

import lmtail
from lmtail import _core, ops
from _util import bits, q5k_matrix

COLS = 512


def args(q, gamma=None, norm="rms", eps=1e-5, scale=0.25, cap=15.0, precision="i24", threads=0, **kw):
    return (q, COLS, gamma, norm, eps, scale, cap, precision, threads), kw


def make(rows=300, **kw):
    q = q5k_matrix(rows, COLS, seed=rows)
    g = np.random.default_rng(1).uniform(0.5, 1.5, COLS).astype(np.float32)
    a, k = args(q, g, **kw)
    return _core.CpuHead(*a, **k), q, g


def scratch(T, rows):
    return np.empty((T, COLS), np.float32), np.empty((T, rows), np.float32)


def hidden(T, seed=0):
    return (np.random.default_rng(seed).standard_normal((T, COLS)) * 3).astype(np.float32)


def test_bytes_equal_the_python_head_and_the_ops():
    h, q, g = make()
    x = hidden(3)
    normed, staging = scratch(3, 300)
    out = np.empty((3, 300), np.float32)
    t = h.logits(x, out, normed, staging)
    assert len(t) == 4 and all(v >= 0 for v in t)
    want = ops.softcap(ops.matvec_q5_k(q, ops.rms_norm(x, g)), 0.25, 15.0)
    assert np.array_equal(bits(out), bits(want))
    assert np.array_equal(bits(staging[:3]), bits(want))  # the rows stay in the workspace
    py = lmtail.Head(q, g, logit_scale=0.25, softcap=15.0)
    assert np.array_equal(bits(py.logits(x)), bits(want))
    ids = np.empty(3, np.uint32)
    h.greedy(x, np.array([int(np.argmax(want[0]))], np.uint32), ids, normed, staging)
    assert ids.tolist() == ops.greedy_argmax(want, exclude=[int(np.argmax(want[0]))]).tolist()
    tid, tval = np.empty((3, 7), np.uint32), np.empty((3, 7), np.float32)
    h.topk(x, 7, tid, tval, normed, staging)
    rid, rval = ops.topk(want, 7)
    assert np.array_equal(tid, rid) and np.array_equal(bits(tval), bits(rval))


def test_constructor_refuses_types_the_cpu_does_not_run():
    q = q5k_matrix(4, COLS)
    a, _ = args(q, None)
    for t in (3, 99):  # Q4_1 (a ggml type lmtail does not run), and no type at all
        with pytest.raises(lmtail.UnsupportedError, match=f"weight type {t} .*not run by the cpu backend; it runs .*Q5_K"):
            _core.CpuHead(*a, weight_type=t)


@pytest.mark.parametrize(
    "change,match",
    [
        ({"scale": 0.0}, "logit_scale"),
        ({"scale": float("inf")}, "logit_scale"),
        ({"cap": -1.0}, "softcap"),
        ({"cap": float("nan")}, "softcap"),
        ({"eps": -1e-5}, "eps"),
        ({"eps": float("inf")}, "eps"),
        ({"threads": -1}, "threads"),
        ({"threads": 1025}, "threads"),
        ({"norm": "batch"}, "norm"),
        ({"precision": "bf16"}, "precision"),
    ],
)
def test_constructor_validates_everything(change, match):
    q = q5k_matrix(4, COLS)
    kw = {k: v for k, v in change.items() if k == "weight_type"}
    a, _ = args(q, None, **{k: v for k, v in change.items() if k != "weight_type"})
    with pytest.raises(lmtail.ParameterError, match=match):
        _core.CpuHead(*a, **kw)


def test_constructor_validates_gamma_and_stride():
    q = q5k_matrix(4, COLS)
    g = np.ones(COLS, np.float32)
    g[9] = np.nan
    with pytest.raises(lmtail.ParameterError, match=r"gamma\[9\]"):
        _core.CpuHead(*args(q, g)[0])
    with pytest.raises(lmtail.ParameterError, match="without a norm"):
        _core.CpuHead(*args(q, np.ones(COLS, np.float32), norm="none")[0])
    # Overlapping rows (a stride below the row's bytes) are refused, not read twice.
    short = np.lib.stride_tricks.as_strided(q, shape=q.shape, strides=(100, 1))
    with pytest.raises(lmtail.ParameterError, match="row_stride 100"):
        _core.CpuHead(*args(short)[0])
    # A larger stride (rows inside a bigger buffer) is fine and reads the right rows.
    wide = np.zeros((4, q.shape[1] + 64), np.uint8)
    wide[:, : q.shape[1]] = q
    view = wide[:, : q.shape[1]]
    a = _core.CpuHead(*args(view, norm="none")[0])
    b = _core.CpuHead(*args(q, norm="none")[0])
    x = hidden(1)
    oa, ob = np.empty((1, 4), np.float32), np.empty((1, 4), np.float32)
    a.logits(x, oa, None, np.empty((1, 4), np.float32))
    b.logits(x, ob, None, np.empty((1, 4), np.float32))
    assert np.array_equal(bits(oa), bits(ob))


def test_failures_leave_the_outputs_untouched():
    h, q, g = make()
    normed, staging = scratch(2, 300)
    out = np.full((2, 300), 5.0, np.float32)
    ids = np.full(2, 77, np.uint32)
    tid, tval = np.full((2, 3), 9, np.uint32), np.full((2, 3), 9.0, np.float32)
    for bad_value, match in ((np.nan, "hidden: non-finite"), (1e21, "overflowed"), (3e38, "overflowed")):
        x = hidden(2)
        x[1, 3] = bad_value
        with pytest.raises(lmtail.NonFiniteLogitsError, match=match):
            h.logits(x, out, normed, staging)
        with pytest.raises(lmtail.NonFiniteLogitsError, match=match):
            h.greedy(x, np.zeros(0, np.uint32), ids, normed, staging)
        with pytest.raises(lmtail.NonFiniteLogitsError, match=match):
            h.topk(x, 3, tid, tval, normed, staging)
        assert np.all(out == 5.0) and np.all(ids == 77) and np.all(tid == 9) and np.all(tval == 9.0)
    # A pre-cap overflow (an fp16 +inf block scale): tanh would hide it.
    qb = q.copy()
    qb[4, 0:2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)
    hb = _core.CpuHead(*args(qb, g)[0])
    with pytest.raises(lmtail.NonFiniteLogitsError, match="before the soft cap"):
        hb.logits(hidden(2), out, normed, staging)
    assert np.all(out == 5.0)


def test_workspace_capacity_and_operands_are_checked():
    h, _, _ = make()
    x = hidden(3)
    out = np.empty((3, 300), np.float32)
    with pytest.raises(lmtail.ParameterError, match="logits buffer holds"):
        h.logits(x, out, np.empty((3, COLS), np.float32), np.empty((2, 300), np.float32))
    with pytest.raises(lmtail.ParameterError, match="normed buffer holds"):
        h.logits(x, out, np.empty((2, COLS), np.float32), np.empty((3, 300), np.float32))
    with pytest.raises(lmtail.ParameterError, match="has a norm"):
        h.logits(x, out, None, np.empty((3, 300), np.float32))
    with pytest.raises(lmtail.ParameterError, match="excludes all"):
        h.greedy(x, np.arange(300, dtype=np.uint32), np.empty(3, np.uint32), *scratch(3, 300))
    with pytest.raises(lmtail.ParameterError, match="k must be"):
        h.topk(x, 301, np.empty((3, 301), np.uint32), np.empty((3, 301), np.float32), *scratch(3, 300))
    ro = np.empty((3, 300), np.float32)
    ro.flags.writeable = False
    with pytest.raises(lmtail.ParameterError, match="writable"):
        h.logits(x, ro, *scratch(3, 300))


@pytest.mark.parametrize("threads", [1, 2])
def test_one_head_many_threads_each_with_its_own_workspace(threads):
    h, q, g = make(rows=1500, threads=threads)
    inputs = [hidden(2, s) for s in range(6)]
    want = [ops.softcap(ops.matvec_q5_k(q, ops.rms_norm(x, g)), 0.25, 15.0) for x in inputs]
    errors = []

    def worker(i):
        normed, staging = scratch(2, 1500)
        out = np.empty((2, 1500), np.float32)
        ids = np.empty(2, np.uint32)
        try:
            for rep in range(6):
                j = (i + rep) % 6
                h.logits(inputs[j], out, normed, staging)
                if not np.array_equal(bits(out), bits(want[j])):
                    errors.append(("logits", i, j))
                h.greedy(inputs[j], np.zeros(0, np.uint32), ids, normed, staging)
                if ids.tolist() != [int(np.argmax(r)) for r in want[j]]:
                    errors.append(("greedy", i, j))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
