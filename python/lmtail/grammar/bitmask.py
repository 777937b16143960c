"""Token masks in the int32 bitmask layout serving engines use (XGrammar, llguidance, vLLM, SGLang).

A mask over n_vocab tokens is ``W = ceil(n_vocab / 32)`` int32 words; token i is allowed iff bit
``i % 32`` (least significant first) of word ``i // 32`` is set -- i.e. the little-endian bytes
of the words are ``np.packbits(allowed, bitorder="little")``.  Bits past n_vocab in the last word
are written 0 and ignored when applied.  A batch of masks is (B, W), one row per request.

* :meth:`GrammarMatcher.fill_bitmask` (and the lazy matcher's) writes one row;
* :func:`fill_bitmasks` fills one row per matcher; it runs them one after the other: the mask
  computation is Python (the Earley walk) holding the GIL, and matchers of one grammar share its
  mask cache, so a thread pool would add overhead and a race, not speed;
* :func:`apply_bitmask` sets the disallowed logits to -inf in place.
"""

from __future__ import annotations

import sys

import numpy as np

from .. import _core
from .._validate import cuda_tensor, host_array, is_cuda_tensor, stream_arg, threads_arg
from ..errors import DTypeError, ParameterError, ShapeError, UnsupportedError

__all__ = ["bitmask_words", "allocate_bitmask", "check_bitmask_row", "fill_bitmasks", "apply_bitmask"]

_LE = sys.byteorder == "little"


def bitmask_words(n_vocab: int) -> int:
    """W = ceil(n_vocab / 32): int32 words per mask row."""
    return (int(n_vocab) + 31) // 32


def allocate_bitmask(batch: int, n_vocab: int) -> np.ndarray:
    """A (batch, ceil(n_vocab / 32)) int32 array of zeros (nothing allowed)."""
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ParameterError(f"batch: expected an integer >= 1; found {batch!r}")
    return np.zeros((int(batch), bitmask_words(n_vocab)), np.int32)


def _int32(a, name: str) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        a = host_array(a, name)
    dt = a.dtype
    if dt.kind != "i" or dt.itemsize != 4 or dt.fields is not None:
        raise DTypeError(f"{name}: expected an int32 bitmask (XGrammar/llguidance layout); found dtype {dt}")
    if not dt.isnative:
        raise DTypeError(f"{name}: expected int32 in the machine's byte order; found byte-swapped {dt.str!r}")
    return a


def check_bitmask_row(out, row, n_vocab: int) -> np.ndarray:
    """The writeable int32 row ``out[row]`` (out: (B, W) or (W,)), W = ceil(n_vocab / 32); typed
    errors otherwise (DTypeError for the dtype, ShapeError for shape/strides, ParameterError for
    the row index or a read-only array)."""
    out = _int32(out, "out")
    W = bitmask_words(n_vocab)
    if out.ndim not in (1, 2) or out.shape[-1] != W:
        raise ShapeError(f"out: expected shape (B, {W}) or ({W},) (ceil(n_vocab / 32) words for n_vocab {n_vocab}); "
                         f"found {out.shape}")
    if not out.flags.writeable:
        raise ParameterError("out: the bitmask is read-only")
    if out.strides[-1] != 4:
        raise ShapeError(f"out: each row's words must be contiguous (strides {out.strides})")
    B = 1 if out.ndim == 1 else out.shape[0]
    if isinstance(row, bool) or not isinstance(row, (int, np.integer)) or not -B <= int(row) < B:
        raise ParameterError(f"row: expected an integer in [0, {B}); found {row!r}")
    return out if out.ndim == 1 else out[int(row)]


def write_packed(dst: np.ndarray, packed: np.ndarray) -> None:
    """Write little-bit-order packed bytes (``np.packbits(m, bitorder="little")``) into one int32
    row, zero-padding the last word."""
    if _LE:
        b = dst.view(np.uint8)
        b[: packed.size] = packed
        b[packed.size:] = 0
    else:  # pragma: no cover - big-endian hosts: the words' values, not their bytes, are the layout
        buf = np.zeros(dst.size * 4, np.uint8)
        buf[: packed.size] = packed
        dst[:] = buf.view("<i4")


def fill_bitmasks(matchers, out) -> np.ndarray:
    """Row r of ``out`` (B, W) <- ``matchers[r]``'s mask (``fill_bitmask(out, r)``); a matcher
    may be None (row r then allows every token). Returns ``out``."""
    ms = list(matchers)
    out = _int32(out, "out")
    if out.ndim != 2 or out.shape[0] != len(ms):
        raise ShapeError(f"out: expected ({len(ms)}, W), one row per matcher; found {out.shape}")
    for r, m in enumerate(ms):
        if m is None:
            check_bitmask_row(out, r, out.shape[1] * 32)[:] = -1
        else:
            m.fill_bitmask(out, r)
    return out


def _apply_bitmask_cuda(logits, bitmask, stream) -> None:
    from .. import _backend

    if "cuda" not in _backend.backends():
        where = ""
        if hasattr(logits, "__dlpack_device__"):
            where = f" on cuda:{int(logits.__dlpack_device__()[1])}"
        raise UnsupportedError(f"logits: a {type(logits).__name__}{where} (CUDA memory), but the cuda backend is not "
                               f"available in this build (move it to the CPU, or build with LMTAIL_CUDA=ON)")
    impl = _backend.get("cuda")
    s = stream_arg(stream)
    x = cuda_tensor(logits, "logits", impl, s, writable=True)
    V = x.shape[-1]
    W = bitmask_words(V)
    B = 1 if len(x.shape) == 1 else x.shape[0]
    want = ((W,), (1, W)) if len(x.shape) == 1 else ((B, W),)
    if is_cuda_tensor(bitmask):
        m = cuda_tensor(bitmask, "bitmask", impl, s, dtype="int32")
        shape, ptr, host = m.shape, m.ptr, None
    else:
        host = np.ascontiguousarray(_int32(bitmask, "bitmask"))
        shape, ptr = host.shape, 0
    if shape not in want:
        raise ShapeError(f"bitmask: expected {' or '.join(map(str, want))} for logits of shape {x.shape} "
                         f"(ceil({V} / 32) = {W} words); found {shape}")
    impl.apply_bitmask_device(x.ptr, B, V, ptr, host, s)


def apply_bitmask(logits, bitmask, *, threads=None, stream=None) -> None:
    """Set ``logits[..., i] = -inf`` wherever the bitmask's bit i is clear, in place.

    ``logits`` (B, V) float32 with ``bitmask`` (B, ceil(V / 32)) int32, or a 1-D row (V,) with a
    (W,) or (1, W) mask.  ``logits`` must be writeable (a numpy array or a CPU ``__dlpack__``
    object, written through); bits past V are ignored.  Typed errors: DTypeError (dtypes),
    ShapeError (shapes, V vs W), ParameterError (read-only logits).  The C++ kernel splits the
    rows over ``threads`` (None: the core's default); each logit is written by one thread.

    CUDA logits (a ``__cuda_array_interface__`` / ``__dlpack__`` tensor, e.g. from
    ``Head.logits(..., device=True)``) are masked on the device by the cuda backend, with the
    mask in device memory or on the host (uploaded, W * 4 bytes per row), on ``stream``.
    """
    nt = threads_arg(threads)
    if is_cuda_tensor(logits):
        return _apply_bitmask_cuda(logits, bitmask, stream)
    if stream is not None:
        raise UnsupportedError("stream: host logits take no CUDA stream")
    x = logits if isinstance(logits, np.ndarray) else host_array(logits, "logits")
    dt = x.dtype
    if dt != np.float32 or dt.fields is not None or not dt.isnative:
        raise DTypeError(f"logits: expected native float32; found {dt}")
    if x.ndim not in (1, 2) or x.shape[-1] == 0:
        raise ShapeError(f"logits: expected (V,) or (B, V) with V >= 1; found {x.shape}")
    if not x.flags.writeable:
        raise ParameterError("logits: apply_bitmask writes in place; the array is read-only")
    m = _int32(bitmask, "bitmask")
    V = x.shape[-1]
    W = bitmask_words(V)
    if x.ndim == 1:
        if m.shape not in ((W,), (1, W)):
            raise ShapeError(f"bitmask: expected ({W},) or (1, {W}) for logits of shape {x.shape} (ceil({V} / 32) = {W} "
                             f"words); found {m.shape}")
        x2, m2 = x.reshape(1, V), m.reshape(1, W)
    else:
        if m.shape != (x.shape[0], W):
            raise ShapeError(f"bitmask: expected ({x.shape[0]}, {W}) for logits of shape {x.shape} (ceil({V} / 32) = {W} "
                             f"words); found {m.shape}")
        x2, m2 = x, m
    if x2.size == 0:
        return
    if x2.strides[-1] == 4 or V == 1:
        if not _LE:  # pragma: no cover - the kernel reads the words' values; numpy gives them native
            m2 = m2.astype(np.int32)
        if m2.strides[-1] != 4 and W > 1:
            m2 = np.ascontiguousarray(m2)
        _core.bitmask_apply(x2, m2, nt)
        return
    # rows with strided elements (a column slice): numpy, the same result
    words = np.ascontiguousarray(m2) if _LE else np.ascontiguousarray(m2).astype("<i4")
    allowed = np.unpackbits(words.view(np.uint8), axis=1, count=V, bitorder="little").view(np.bool_)
    np.copyto(x2, np.float32(-np.inf), where=~allowed)
