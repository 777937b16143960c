"""Host array objects at every entry point that takes hidden states or logits (issue 16 item 2,
host part): CPU ``__dlpack__`` producers (numpy's own, through an object that is not an ndarray;
PyTorch CPU tensors when PyTorch is installed) and ``__array_interface__`` objects are read in
place; a tensor on a device is an UnsupportedError naming the device; float64 stays a DTypeError.
"""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from lmtail import ops
from lmtail._validate import host_array
from lmtail.errors import DTypeError, UnsupportedError
from lmtail.grammar import apply_bitmask, bitmask_words
from lmtail.sampling import Chain, common_chain, sample_topk, server_logprobs, topk_needed
from _util import bits, q5k_matrix

N = 300
COLS = 256


class Dl:
    """numpy's own DLPack export behind an object that is not an ndarray."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class Iface:
    """Only ``__array_interface__`` (kept alive by holding the array)."""

    def __init__(self, a):
        self.a = a
        self.__array_interface__ = a.__array_interface__


class OnDevice:
    def __init__(self, kind: int, idx: int):
        self.dev = (kind, idx)

    def __dlpack__(self, **kw):  # pragma: no cover - refused before any export
        raise AssertionError("a device tensor was read")

    def __dlpack_device__(self):
        return self.dev


def producers(a: np.ndarray):
    ro = a.copy()
    ro.flags.writeable = False
    return [("dlpack", Dl(a)), ("dlpack_readonly", Dl(ro)), ("array_interface", Iface(a)),
            ("array_interface_readonly", Iface(ro))]


def test_host_array_reads_in_place():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    for name, p in producers(a)[::2]:
        v = host_array(p, "x")
        assert isinstance(v, np.ndarray) and np.shares_memory(v, a), name
    assert not host_array(Dl(a[:, ::2]), "x").flags.c_contiguous  # strides come through as they are
    with pytest.raises(UnsupportedError, match="cuda:0"):
        host_array(OnDevice(2, 0), "hidden")
    with pytest.raises(UnsupportedError, match="metal:0"):
        host_array(OnDevice(8, 0), "hidden")
    with pytest.raises(DTypeError):
        host_array([1.0, 2.0], "hidden")


def test_head_takes_host_objects():
    q = q5k_matrix(N, COLS, seed=6)
    head = lmtail.Head(q, np.ones(COLS, np.float32), logit_scale=0.5, softcap=10.0)
    h = np.random.default_rng(7).standard_normal((3, COLS)).astype(np.float32)
    want = head.logits(h)
    for name, p in producers(h):
        assert np.array_equal(bits(head.logits(p)), bits(want)), name
        assert head.greedy(p).tolist() == head.greedy(h).tolist(), name
        assert np.array_equal(head.topk(p, 4)[0], head.topk(h, 4)[0]), name
    wide = np.zeros((3, 2 * COLS), np.float32)
    wide[:, ::2] = h
    assert np.array_equal(bits(head.logits(Dl(wide[:, ::2]))), bits(want))  # strided: copied to contiguous
    for bad in (Dl(h.astype(np.float64)), Iface(h.astype(np.float64))):
        with pytest.raises(DTypeError):
            head.logits(bad)
    with pytest.raises(UnsupportedError, match="cuda:1"):
        head.logits(OnDevice(2, 1))
    assert ops.argmax(Dl(want[0])) == ops.argmax(want[0])


def test_samplers_take_host_objects():
    x = (np.random.default_rng(3).standard_normal(N) * 2).astype(np.float32)
    for name, p in producers(x):
        a, b = common_chain(N, seed=11), common_chain(N, seed=11)
        assert a.sample(p) == b.sample(x), name
        ch, ref = common_chain(N, seed=12), common_chain(N, seed=12)
        ids, vals = ops.topk(x, topk_needed(ch) + 1)
        assert sample_topk(ch, Dl(ids), Dl(vals), lambda: p) == ref.sample(x), name
        assert server_logprobs(p, 3, 5) == server_logprobs(x, 3, 5), name
    with pytest.raises(UnsupportedError, match="cuda:0"):
        Chain([("greedy",)], N).sample(OnDevice(2, 0))
    with pytest.raises(DTypeError):
        Chain([("greedy",)], N).sample(Dl(x.astype(np.float64)))


def test_apply_bitmask_writes_through_a_dlpack_producer():
    x = np.ones((2, 70), np.float32)
    m = np.zeros((2, bitmask_words(70)), np.int32)
    m[:, 0] = 1  # only token 0 allowed
    apply_bitmask(Dl(x), Iface(m))
    assert x[:, 0].tolist() == [1.0, 1.0] and np.isneginf(x[:, 1:]).all()




def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed (optional: CPU tensors via DLPack)")


def test_torch_cpu_tensors():
    t = _torch()
    q = q5k_matrix(N, COLS, seed=6)
    head = lmtail.Head(q, None)
    h = np.random.default_rng(8).standard_normal((2, COLS)).astype(np.float32)
    th = t.from_numpy(h)
    assert np.array_equal(bits(head.logits(th)), bits(head.logits(h)))
    assert np.shares_memory(host_array(th, "hidden"), h)  # read in place
    ro = t.from_numpy(h).requires_grad_(False)
    assert head.greedy(ro).tolist() == head.greedy(h).tolist()
    with pytest.raises(DTypeError):
        head.logits(th.double())
    x = (np.random.default_rng(9).standard_normal(N)).astype(np.float32)
    assert common_chain(N, seed=1).sample(t.from_numpy(x)) == common_chain(N, seed=1).sample(x)
    y = t.ones((1, 32))
    apply_bitmask(y, np.array([[0b101]], np.int32))  # tokens 0 and 2
    assert y[0, 0].item() == 1.0 and y[0, 2].item() == 1.0 and t.isneginf(y[0, 1]).item()
    assert t.isneginf(y[0, 3:]).all().item()
