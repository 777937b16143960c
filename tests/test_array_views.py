"""Any float32 array is accepted as it is, everywhere an array is taken (issue 19 item 2).

numpy dtype objects are not singletons: an array over a ctypes buffer (how llama-cpp-python
exposes its logits: ``np.ctypeslib.as_array(ctx.get_logits(), shape=(n_vocab,))``) carries its
own ``'<f4'`` instance, which the bindings used to refuse by identity ("expected dtype float32,
found float32"). Also np.frombuffer, memoryview-backed and read-only arrays; a byte-swapped
float32 is a clear DTypeError, never a silent conversion.
"""

import ctypes

import numpy as np
import pytest

import lmtail
from lmtail import ops
from _util import bits, q5k_matrix

N = 300
COLS = 256


def views(a: np.ndarray):
    """(name, array) pairs holding a's values: ctypes, frombuffer, memoryview, read-only."""
    a = np.ascontiguousarray(a, np.float32)
    buf = (ctypes.c_float * a.size)(*a.ravel().tolist())
    ct = np.ctypeslib.as_array(ctypes.cast(buf, ctypes.POINTER(ctypes.c_float)), shape=a.shape)
    assert ct.dtype == np.float32 and ct.dtype is not np.dtype(np.float32)  # the case that failed
    fb = np.frombuffer(bytearray(a.tobytes()), dtype=np.float32).reshape(a.shape)
    mv = np.asarray(memoryview(bytearray(a.tobytes())).cast("f", a.shape))
    ro = a.copy()
    ro.flags.writeable = False
    ro_fb = np.frombuffer(a.tobytes(), dtype=np.float32).reshape(a.shape)  # bytes: read-only
    return [("ctypes", ct, buf), ("frombuffer", fb, None), ("memoryview", mv, None), ("readonly", ro, None),
            ("readonly_frombuffer", ro_fb, None)]


def row():
    x = (np.random.default_rng(3).standard_normal(N) * 2).astype(np.float32)
    x[17] = 9.0
    return x


def test_ops_take_every_view():
    x = row()
    x2 = np.stack([x, x[::-1].copy()])
    hid = (np.random.default_rng(4).standard_normal((2, COLS))).astype(np.float32)
    q = q5k_matrix(N, COLS, seed=1)
    for name, v, _keep in views(x):
        assert ops.argmax(v) == ops.argmax(x), name
        assert ops.greedy_argmax(v, exclude=[17]) == ops.greedy_argmax(x, exclude=[17]), name
        i, val = ops.topk(v, 5)
        ri, rval = ops.topk(x, 5)
        assert np.array_equal(i, ri) and np.array_equal(bits(val), bits(rval)), name
        assert np.array_equal(bits(ops.softcap(v, 0.5, 20.0)), bits(ops.softcap(x, 0.5, 20.0))), name
        assert np.array_equal(bits(ops.scale(v, 0.5)), bits(ops.scale(x, 0.5))), name
        assert np.array_equal(bits(ops.tanh(v)), bits(ops.tanh(x))), name
    for name, v, _keep in views(x2):
        assert ops.argmax(v).tolist() == ops.argmax(x2).tolist(), name
    for name, v, _keep in views(hid):
        assert np.array_equal(bits(ops.rms_norm(v, None)), bits(ops.rms_norm(hid, None))), name
        assert np.array_equal(bits(ops.layer_norm(v, None)), bits(ops.layer_norm(hid, None))), name
        assert np.array_equal(bits(ops.matvec_q5_k(q, v)), bits(ops.matvec_q5_k(q, hid))), name
        g = views(np.full(COLS, 1.5, np.float32))[0][1]
        assert np.array_equal(bits(ops.rms_norm(v, g)), bits(ops.rms_norm(hid, np.full(COLS, 1.5, np.float32)))), name


def test_ctypes_uint8_weights_and_float32_gamma():
    q = q5k_matrix(N, COLS, seed=2)
    qbuf = (ctypes.c_uint8 * q.size).from_buffer_copy(q.tobytes())
    qv = np.ctypeslib.as_array(qbuf).reshape(q.shape)
    assert qv.dtype == np.uint8 and qv.dtype is not np.dtype(np.uint8)
    g = np.random.default_rng(0).uniform(0.5, 1.5, COLS).astype(np.float32)
    h = np.random.default_rng(5).standard_normal((2, COLS)).astype(np.float32)
    for name, gv, _keep in views(g):
        head = lmtail.Head(qv, gv, logit_scale=0.5, softcap=10.0)
        ref = lmtail.Head(q, g, logit_scale=0.5, softcap=10.0)
        assert np.array_equal(bits(head.logits(h)), bits(ref.logits(h))), name
    assert np.array_equal(bits(ops.matvec_q5_k(qv, h)), bits(ops.matvec_q5_k(q, h)))


def test_head_takes_every_hidden_view():
    q = q5k_matrix(N, COLS, seed=6)
    head = lmtail.Head(q, np.ones(COLS, np.float32), logit_scale=0.5, softcap=10.0)
    h = np.random.default_rng(7).standard_normal((3, COLS)).astype(np.float32)
    want = head.logits(h)
    for name, v, _keep in views(h):
        assert np.array_equal(bits(head.logits(v)), bits(want)), name
        assert head.greedy(v, exclude=[0]).tolist() == head.greedy(h, exclude=[0]).tolist(), name
        assert np.array_equal(head.topk(v, 4)[0], head.topk(h, 4)[0]), name


def test_sampling_entry_points_take_every_view():
    from lmtail.sampling import Chain, common_chain, sample_topk, topk_needed

    x = row()
    for name, v, _keep in views(x):
        assert Chain([("greedy",)], N).sample(v) == int(np.argmax(x)), name
        a, b = common_chain(N, seed=11), common_chain(N, seed=11)
        assert a.sample(v) == b.sample(x), name
        ch, ref = common_chain(N, seed=12), common_chain(N, seed=12)
        ids, vals = ops.topk(x, topk_needed(ch) + 1)
        for vname, vv, _k in views(vals):
            assert sample_topk(ch, ids, vv, lambda: v) == ref.sample(x), (name, vname)
            ref.accept(0)
            ch.accept(0)


def test_byte_swapped_float32_is_a_clear_dtype_error():
    x = row()
    sw = x.astype(">f4" if np.little_endian else "<f4")
    assert sw.dtype == np.dtype(">f4" if np.little_endian else "<f4")
    for call in (lambda: ops.argmax(sw), lambda: ops.greedy_argmax(sw), lambda: ops.topk(sw, 3),
                 lambda: ops.softcap(sw, 1.0, 2.0), lambda: ops.scale(sw, 2.0), lambda: ops.tanh(sw)):
        with pytest.raises(lmtail.DTypeError, match="byte"):
            call()
    head = lmtail.Head(q5k_matrix(N, COLS, seed=6), None)
    hs = np.ones((1, COLS), ">f4" if np.little_endian else "<f4")
    for call in (lambda: head.logits(hs), lambda: head.greedy(hs), lambda: head.topk(hs, 2),
                 lambda: lmtail.Head(q5k_matrix(N, COLS), hs[0])):
        with pytest.raises(lmtail.DTypeError, match="byte"):
            call()
    from lmtail.sampling import common_chain

    with pytest.raises(lmtail.DTypeError):
        common_chain(N, seed=1).sample(sw)


def test_bindings_compare_dtypes_by_value_and_name_byte_swaps():
    # The binding-level checks (below the Python validation) on their own.
    from lmtail import _core

    x = row()
    for name, v, _keep in views(x.reshape(1, -1)):
        out = np.empty(1, np.uint32)
        _core.argmax_rows(v, out, 1)
        assert int(out[0]) == 17, name
    sw = x.reshape(1, -1).astype(">f4" if np.little_endian else "<f4")
    with pytest.raises(lmtail.DTypeError, match="byte-swapped"):
        _core.argmax_rows(sw, np.empty(1, np.uint32), 1)
    with pytest.raises(lmtail.DTypeError, match="expected dtype float32"):
        _core.argmax_rows(x.reshape(1, -1).astype(np.float64), np.empty(1, np.uint32), 1)
    unaligned = np.frombuffer(bytearray(4 * N + 1), dtype=np.float32, offset=1, count=N).reshape(1, N)
    assert not unaligned.flags.aligned
    with pytest.raises(lmtail.DTypeError, match="aligned"):
        _core.argmax_rows(unaligned, np.empty(1, np.uint32), 1)
    # ...while the Python layer copies an unaligned input to an aligned one instead of refusing it.
    unaligned[:] = x
    assert ops.argmax(unaligned[0]) == 17
