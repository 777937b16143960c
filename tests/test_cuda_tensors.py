"""CUDA tensors in and out of the cuda backend without a host round trip (issue 16, item 2):
``__cuda_array_interface__`` and ``__dlpack__`` producers as hidden states / matvec inputs /
``out=`` buffers, ``DeviceArray`` results (both protocols), the caller's stream, and strict
validation. Runs where lmtail was built with LMTAIL_CUDA=ON and a GPU is present (the lent H200);
the CPU-side refusal of a CUDA tensor is tested everywhere (test_host_inputs.py and below)."""

import ctypes
import ctypes.util

import numpy as np
import pytest

import lmtail
from lmtail import ops
from lmtail.errors import DTypeError, NonFiniteLogitsError, ParameterError, ShapeError, UnsupportedError
from _util import bits

HAS_CUDA = "cuda" in lmtail.backends()
cuda = pytest.mark.skipif(not HAS_CUDA, reason="CUDA backend not available (LMTAIL_CUDA=ON build and a GPU)")

ROWS, COLS = 4097, 1536


class CAI:
    """A bare __cuda_array_interface__ producer over someone else's device memory."""

    def __init__(self, ptr, shape, typestr="<f4", strides=None, readonly=False, owner=None, stream=None):
        self._d = {"shape": tuple(shape), "typestr": typestr, "data": (int(ptr), readonly), "strides": strides,
                   "version": 3}
        if stream is not None:
            self._d["stream"] = stream
        self.owner = owner  # keeps the memory alive

    @property
    def __cuda_array_interface__(self):
        return self._d


class DLOnly:
    """Only the DLPack protocol of a DeviceArray (no __cuda_array_interface__)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None, **kw):
        return self.a.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def _dev(a):
    return lmtail._core.cuda.DeviceArray.from_numpy(np.ascontiguousarray(a))


def _head_args(seed=0):
    w = (np.random.default_rng(seed).standard_normal((ROWS, COLS)) * 0.02).astype(np.float32)
    q = lmtail.quantize(w, "Q6_K")
    g = np.random.default_rng(seed + 1).uniform(0.5, 1.5, COLS).astype(np.float32)
    return q, g


def test_cpu_head_refuses_a_cuda_tensor_naming_it():
    class OnCuda:
        def __dlpack__(self, stream=None):
            raise AssertionError("read")

        def __dlpack_device__(self):
            return (2, 0)

    q, g = _head_args()
    head = lmtail.Head(q, g, dtype="Q6_K")
    with pytest.raises(UnsupportedError, match="cuda:0"):
        head.greedy(OnCuda())
    with pytest.raises(UnsupportedError, match="stream"):
        head.greedy(np.zeros(COLS, np.float32), stream=7)


@cuda
def test_device_array_protocols():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = _dev(a)
    assert d.shape == (3, 4) and d.dtype == np.float32 and np.array_equal(d.numpy(), a)
    cai = d.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["data"][0] == d.ptr and cai["version"] == 3
    assert d.__dlpack_device__() == (2, lmtail._core.cuda.current_device())
    info = lmtail._core.cuda.tensor_info(DLOnly(d), 0)
    assert info["ptr"] == d.ptr and info["shape"] == (3, 4) and info["typestr"] == "<f4"
    assert info["protocol"] == "__dlpack__"
    del info
    cap = d.__dlpack__()  # an unconsumed capsule frees its reference when collected
    del cap, d


@cuda
@pytest.mark.parametrize("wrap", ["cai", "dlpack"])
def test_head_reads_cuda_hidden_in_place(wrap):
    q, g = _head_args(3)
    head = lmtail.Head(q, g, logit_scale=0.25, softcap=15.0, dtype="Q6_K", backend="cuda", eog_ids=[5])
    h = np.random.default_rng(4).standard_normal((3, COLS)).astype(np.float32)
    d = _dev(h)
    dh = d if wrap == "cai" else DLOnly(d)
    ref_logits = head.logits(h)
    ref_greedy = head.greedy(h, exclude=[5])
    ref_ids, ref_vals = head.topk(h, 40)
    before = head.bytes_read_back
    assert head.greedy(dh, exclude=[5]).tolist() == ref_greedy.tolist()
    assert head.bytes_read_back - before == 4 * 3  # the hidden state was not uploaded from the host
    ids, vals = head.topk(dh, 40)
    assert np.array_equal(ids, ref_ids) and np.array_equal(bits(vals), bits(ref_vals))
    assert np.array_equal(bits(head.logits(dh)), bits(ref_logits))
    assert np.array_equal(bits(head.row(2)), bits(ref_logits[2]))
    # 1-D hidden
    assert head.greedy(_dev(h[1])).tolist() == ref_greedy[1:2].tolist()


@cuda
def test_logits_stay_on_the_device():
    q, g = _head_args(5)
    head = lmtail.Head(q, g, logit_scale=0.5, softcap=0.0, dtype="Q6_K", backend="cuda")
    h = np.random.default_rng(6).standard_normal((2, COLS)).astype(np.float32)
    ref = head.logits(h)
    before = head.bytes_read_back
    d = head.logits(_dev(h), device=True)
    assert isinstance(d, lmtail._core.cuda.DeviceArray) and d.shape == (2, ROWS)
    # only the two latches (pre-cap, capped) crossed to the host: 4 bytes per row each
    assert head.bytes_read_back - before == 2 * 4 * 2
    assert np.array_equal(bits(d.numpy()), bits(ref))
    # host hidden, device result
    assert np.array_equal(bits(head.logits(h, device=True).numpy()), bits(ref))
    # out= a writable CUDA tensor: filled in place
    out = _dev(np.zeros((2, ROWS), np.float32))
    assert head.logits(_dev(h), out=out) is out
    assert np.array_equal(bits(out.numpy()), bits(ref))
    out1 = _dev(np.zeros(ROWS, np.float32))
    head.logits(_dev(h[0]), out=out1)
    assert np.array_equal(bits(out1.numpy()), bits(ref[0]))


@cuda
def test_matvec_cuda_tensor_in_device_array_out():
    q, _ = _head_args(7)
    x = np.random.default_rng(8).standard_normal((4, COLS)).astype(np.float32)
    ref = ops.matvec(q, x, "Q6_K", backend="cuda")
    d = ops.matvec(q, _dev(x), "Q6_K", backend="cuda")
    assert isinstance(d, lmtail._core.cuda.DeviceArray)
    assert np.array_equal(bits(d.numpy()), bits(ref))
    d1 = ops.matvec(q, DLOnly(_dev(x[2])), "Q6_K", backend="cuda")
    assert d1.shape == (ROWS,) and np.array_equal(bits(d1.numpy()), bits(ref[2]))
    # a misaligned (4-byte but not 16-byte aligned) row start is copied on the device, same bytes
    big = _dev(np.concatenate([np.zeros(1, np.float32), x[2]]))
    d2 = ops.matvec(q, CAI(big.ptr + 4, (COLS,), owner=big), "Q6_K", backend="cuda")
    assert np.array_equal(bits(d2.numpy()), bits(ref[2]))


@cuda
def test_cuda_tensor_validation():
    q, g = _head_args(9)
    head = lmtail.Head(q, g, dtype="Q6_K", backend="cuda")
    h = np.random.default_rng(1).standard_normal((2, COLS))
    d64 = _dev(h.astype(np.float32))  # memory to point at; the CAI claims other dtypes / strides
    with pytest.raises(DTypeError, match="float64"):
        head.greedy(CAI(d64.ptr, (1, COLS), "<f8", owner=d64))
    with pytest.raises(ShapeError, match="C-contiguous"):
        head.greedy(CAI(d64.ptr, (2, COLS // 2), strides=(8 * COLS, 8), owner=d64))
    with pytest.raises(ShapeError, match=str(COLS)):
        head.greedy(CAI(d64.ptr, (2, COLS // 2), owner=d64))
    with pytest.raises(ShapeError, match="non-empty"):
        head.greedy(CAI(d64.ptr, (0, COLS), owner=d64))
    with pytest.raises(ParameterError, match="device memory"):
        host = np.zeros(COLS, np.float32)
        head.greedy(CAI(host.ctypes.data, (COLS,), owner=host))
    ro = _dev(np.zeros((2, ROWS), np.float32))
    with pytest.raises(ParameterError, match="read-only"):
        head.logits(d64, out=CAI(ro.ptr, (2, ROWS), readonly=True, owner=ro))
    with pytest.raises(ShapeError, match="out"):
        head.logits(d64, out=_dev(np.zeros((3, ROWS), np.float32)))
    with pytest.raises(ParameterError, match="stream"):
        head.greedy(d64, stream="s")
    bad = h.astype(np.float32)
    bad[1, 7] = np.nan
    with pytest.raises(NonFiniteLogitsError):
        head.greedy(_dev(bad))
    with pytest.raises(NonFiniteLogitsError):
        head.logits(_dev(bad), device=True)
    assert head.greedy(d64).shape == (2,)  # the head is still usable


def _cudart():
    for name in ("cudart", "cudart64_12"):
        p = ctypes.util.find_library(name)
        if p:
            return ctypes.CDLL(p)
    for p in ("libcudart.so", "libcudart.so.12", "libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so"):
        try:
            return ctypes.CDLL(p)
        except OSError:
            pass
    pytest.skip("libcudart not found for a ctypes stream (needed only to create a stream in this test)")


@cuda
def test_callers_stream():
    rt = _cudart()
    stream = ctypes.c_void_p()
    assert rt.cudaStreamCreateWithFlags(ctypes.byref(stream), ctypes.c_uint(1)) == 0  # non-blocking
    try:
        q, g = _head_args(11)
        head = lmtail.Head(q, g, softcap=30.0, dtype="Q6_K", backend="cuda")
        h = np.random.default_rng(2).standard_normal((2, COLS)).astype(np.float32)
        ref = head.logits(h)
        d = _dev(h)
        # the producer's stream (CAI v3) is waited for; the tail runs on the caller's stream
        src = CAI(d.ptr, (2, COLS), owner=d, stream=int(stream.value))
        assert np.array_equal(bits(head.logits(src, stream=int(stream.value), device=True).numpy()), bits(ref))
        assert head.greedy(d, stream=int(stream.value)).tolist() == ref.argmax(axis=1).tolist()
        # producer on the caller's stream, tail on the default stream: an event orders them
        assert head.greedy(src).tolist() == ref.argmax(axis=1).tolist()
        assert np.array_equal(bits(head.row(1)), bits(ref[1]))  # after the call, on the default stream
    finally:
        rt.cudaStreamDestroy(stream)


@cuda
def test_torch_cuda_tensors():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional interop check)")
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch build has no CUDA")
    q, g = _head_args(13)
    head = lmtail.Head(q, g, dtype="Q6_K", backend="cuda")
    h = np.random.default_rng(3).standard_normal((2, COLS)).astype(np.float32)
    th = torch.from_numpy(h).cuda()
    assert head.greedy(th).tolist() == head.greedy(h).tolist()
    t = torch.from_dlpack(head.logits(th, device=True))
    assert t.is_cuda and np.array_equal(bits(t.cpu().numpy()), bits(head.logits(h)))
    with pytest.raises(DTypeError, match="float64"):
        head.greedy(th.double())


@cuda
def test_cupy_arrays():
    cp = pytest.importorskip("cupy", reason="CuPy is not installed (optional interop check)")
    q, g = _head_args(15)
    head = lmtail.Head(q, g, dtype="Q6_K", backend="cuda")
    h = np.random.default_rng(5).standard_normal((2, COLS)).astype(np.float32)
    ch = cp.asarray(h)  # __cuda_array_interface__ (and __dlpack__)
    assert head.greedy(ch).tolist() == head.greedy(h).tolist()
    c = cp.from_dlpack(head.logits(ch, device=True))
    assert np.array_equal(bits(cp.asnumpy(c)), bits(head.logits(h)))
    out = cp.zeros((2, ROWS), cp.float32)
    head.logits(ch, out=out)
    assert np.array_equal(bits(cp.asnumpy(out)), bits(head.logits(h)))
    with pytest.raises(ShapeError, match="C-contiguous"):
        head.greedy(cp.asarray(np.repeat(h, 2, axis=1))[:, ::2])


@cuda
def test_apply_bitmask_on_device_logits():
    from lmtail.grammar import apply_bitmask
    from lmtail.grammar.bitmask import bitmask_words

    rng = np.random.default_rng(21)
    B, V = 3, 1000
    x = rng.standard_normal((B, V)).astype(np.float32)
    allowed = rng.random((B, V)) < 0.3
    words = np.packbits(allowed, axis=1, bitorder="little")
    m = np.zeros((B, bitmask_words(V) * 4), np.uint8)
    m[:, : words.shape[1]] = words
    m = m.view(np.int32)
    ref = x.copy()
    apply_bitmask(ref, m)
    for mask in (m, _dev(m)):  # host mask (uploaded) and device mask
        d = _dev(x)
        apply_bitmask(d, mask)
        assert np.array_equal(bits(d.numpy()), bits(ref))
    d1 = _dev(x[1])
    apply_bitmask(d1, m[1])
    assert np.array_equal(bits(d1.numpy()), bits(ref[1]))
    with pytest.raises(ShapeError, match="bitmask"):
        apply_bitmask(_dev(x), m[:2])
    with pytest.raises(DTypeError, match="int32"):
        apply_bitmask(_dev(x), _dev(m.view(np.uint32)))
    with pytest.raises(DTypeError, match="float32"):
        apply_bitmask(_dev(m), m)


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal where the cuda backend is absent")
def test_apply_bitmask_refuses_cuda_logits_without_the_backend():
    from lmtail.grammar import apply_bitmask

    class OnCuda:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (1 << 20, False), "version": 3}

    with pytest.raises(UnsupportedError, match="cuda backend"):
        apply_bitmask(OnCuda(), np.zeros(1, np.int32))
    with pytest.raises(UnsupportedError, match="stream"):
        apply_bitmask(np.zeros(4, np.float32), np.zeros(1, np.int32), stream=3)
