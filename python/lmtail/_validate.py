"""Argument checks shared by ops and Head. Nothing is silently converted or accepted."""

from __future__ import annotations

import numbers

import numpy as np

from .errors import BackendError, DTypeError, ParameterError, ShapeError

Q5K_BLOCK_BYTES = 176
QK_K = 256


def float32_array(x, name: str, ndims=(1, 2)) -> np.ndarray:
    """``x`` as a C-contiguous, aligned float32 array of ``ndims`` dimensions, without converting
    values: any float32 view is accepted (a ctypes buffer such as llama-cpp-python's logits,
    ``np.frombuffer``, a memoryview, a read-only or memory-mapped array); a copy is made only to
    make it contiguous or aligned. A byte-swapped float32 is refused (convert it explicitly)."""
    if not isinstance(x, np.ndarray):
        raise DTypeError(f"{name}: expected a numpy float32 array; found {type(x).__name__}")
    dt = x.dtype
    if dt.kind == "f" and dt.itemsize == 4 and dt.fields is None and not dt.isnative:
        raise DTypeError(f"{name}: expected float32 in the machine's byte order; found byte-swapped {dt.str!r} "
                         f"(convert with .astype(np.float32))")
    if dt != np.float32 or dt.fields is not None:
        raise DTypeError(f"{name}: expected dtype float32; found {dt} (convert explicitly)")
    if x.ndim not in ndims:
        raise ShapeError(f"{name}: expected {' or '.join(f'{d}-D' for d in ndims)}; found shape {x.shape}")
    if x.size == 0:
        raise ShapeError(f"{name}: expected a non-empty array; found shape {x.shape}")
    if not (x.flags.c_contiguous and x.flags.aligned):
        x = np.require(x, requirements=("C", "A"))
    return x


def q5k_weight(w, name: str = "weight") -> tuple[np.ndarray, int, int]:
    """Return (w, rows, cols) for a Q5_K matrix of shape (rows, cols/256*176) uint8."""
    if not isinstance(w, np.ndarray):
        raise DTypeError(f"{name}: expected a numpy uint8 array of Q5_K blocks; found {type(w).__name__}")
    if w.dtype != np.uint8:
        raise DTypeError(f"{name}: expected dtype uint8 (raw Q5_K blocks); found {w.dtype}")
    if w.ndim != 2:
        raise ShapeError(f"{name}: expected 2-D (rows, row_bytes); found shape {w.shape}")
    rows, nbytes = w.shape
    if rows < 1 or nbytes < 1 or nbytes % Q5K_BLOCK_BYTES:
        raise ShapeError(
            f"{name}: row bytes must be a positive multiple of {Q5K_BLOCK_BYTES} (one Q5_K block per 256 "
            f"weights); found shape {w.shape}"
        )
    if w.dtype.byteorder not in ("=", "|") and not w.dtype.isnative:  # pragma: no cover - uint8 has no byte order
        raise DTypeError(f"{name}: expected native uint8; found {w.dtype.str!r}")
    if rows >= 2**31:
        raise ShapeError(f"{name}: at most 2^31-1 rows (vocabulary ids fit in 31 bits); found {rows}")
    if not (w.flags.c_contiguous or (w.strides[1] == 1 and w.strides[0] >= nbytes)):
        w = np.ascontiguousarray(w)
    elif w.dtype is not np.dtype(np.uint8):
        # An equal dtype instance that is not numpy's own (a ctypes-backed buffer): the same bytes
        # under the canonical dtype, still without a copy.
        w = w.view(np.uint8)
    return w, rows, nbytes // Q5K_BLOCK_BYTES * QK_K


# Upper bound of every ``threads=`` argument (the C++ core's lmt::kMaxThreads).
MAX_THREADS = 1024


def threads_arg(threads) -> int:
    """None -> 0 (the core's default: LMTAIL_NUM_THREADS or the usable CPUs); else 1..MAX_THREADS."""
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or not 1 <= threads <= MAX_THREADS:
        raise ParameterError(f"threads: expected None or an integer in [1, {MAX_THREADS}]; found {threads!r}")
    return int(threads)


def finite_float(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ParameterError(f"{name}: expected a real number; found {v!r}")
    f = float(v)
    if not np.isfinite(f):
        raise ParameterError(f"{name}: expected a finite number; found {f}")
    return f


def token_ids(ids, n: int, name: str) -> np.ndarray:
    """Validate a collection of token ids against [0, n); returns sorted unique uint32."""
    if ids is None:
        return np.zeros(0, dtype=np.uint32)
    if isinstance(ids, (numbers.Number, str, bytes, np.generic)):
        raise ParameterError(f"{name}: expected a collection of integer token ids (e.g. a list or tuple); "
                             f"found {type(ids).__name__} {ids!r} (wrap a single id in a list)")
    if isinstance(ids, np.ndarray):
        arr = ids
    else:
        try:
            arr = np.asarray(list(ids))
        except TypeError:
            raise ParameterError(f"{name}: expected a collection of integer token ids; found {type(ids).__name__}") from None
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint32)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise ParameterError(f"{name}: expected a 1-D collection of integer token ids; found {arr.dtype} {arr.shape}")
    bad = (arr < 0) | (arr >= n)
    if bad.any():
        raise ParameterError(f"{name}: token id {int(arr[bad][0])} out of range [0, {n})")
    return np.unique(arr.astype(np.uint32))


# Activation precision of the Q5_K matvec per backend: the first entry is the backend's default.
# "f32": activations stay f32, f32 arithmetic (the reference the other backends reproduce,
# normwise error ~4e-7); "i24": each 256-block of x as s*(a + b/255), a int16, b uint8 (a 24-bit
# fixed point, step max|x|*2^-23), both summed exactly in integers (~2e-7: more accurate than
# f32 arithmetic, and it meets issue 2's speed goals, which f32 arithmetic cannot on this class
# of CPU: docs/DESIGN.md "Precision"); "i16": the int16 piece alone (~2.7e-5, fastest).
# ggml's q8_K: ~7e-3. The C++ API has the same default (Precision::I24).
PRECISIONS = {"cpu": ("i24", "f32", "i16")}


def precision_arg(precision, backend: str) -> str:
    """The precision to run on ``backend``: None picks the backend's default."""
    allowed = PRECISIONS.get(backend, ("f32",))
    if precision is None:
        return allowed[0]
    if precision not in ("f32", "i16", "i24"):
        raise ParameterError(f"precision: expected 'f32', 'i16', 'i24' or None; found {precision!r}")
    if precision not in allowed:
        raise BackendError(f"precision {precision!r} is not available on backend {backend!r} (it has: {', '.join(allowed)})")
    return precision
