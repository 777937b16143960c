"""Quantisation to every weight type the CPU runs, byte-identical to ggml's reference quantisers."""

from __future__ import annotations

from typing import Optional

import numpy as np

from . import _core
from . import _backend
from ._validate import block_cols, threads_arg, weight_array
from .errors import DTypeError, ParameterError, ShapeError


def quantize(x: np.ndarray, dtype, *, threads: Optional[int] = None) -> np.ndarray:
    """Quantise f32 ``x`` (rows, cols) to ggml type ``dtype``: the GGUF bytes, uint8 (rows, row_bytes).

    ``dtype`` is a ggml type name in any case or id (see :func:`lmtail.ops.matvec`); cols must be
    a multiple of the type's block. The bytes equal ggml's ``ggml_quantize_chunk`` without an
    importance matrix (``quantize_row_*_ref``; F16/BF16 ggml's row conversions, F32 the floats
    themselves), i.e. what ``llama-quantize`` writes without an imatrix. The result is what
    :func:`lmtail.ops.matvec` and :class:`lmtail.Head` take with the same ``dtype``.

    Non-finite weights raise :class:`~lmtail.errors.ParameterError` (nothing is returned): ggml
    would write blocks that decode to inf/NaN (and for Q5_K also any block whose fp16 scales
    overflow; see :func:`quantize_q5_k`). A type no backend runs raises
    :class:`lmtail.UnsupportedError`.
    """
    t = _backend.weight_type(dtype, "cpu", "quantize")
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise DTypeError(f"x: expected a float32 numpy array; found {getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim != 2:
        raise ShapeError(f"x: expected 2-D (rows, cols); found shape {x.shape}")
    rows, cols = x.shape
    block_cols(cols, t, "x")
    x = np.ascontiguousarray(x)
    if not np.isfinite(x).all():
        r, c = np.argwhere(~np.isfinite(x))[0]
        raise ParameterError(f"x: weights must be finite; found {x[r, c]} at ({r}, {c})")
    out = np.empty((rows, t.row_bytes(cols)), dtype=np.uint8)
    _core.quantize(t.id, x, out, threads_arg(threads))
    return out


def dequantize(weight: np.ndarray, dtype, cols: Optional[int] = None, *, threads: Optional[int] = None) -> np.ndarray:
    """The f32 (rows, cols) matrix of ``weight`` of ggml type ``dtype``, bit-identical to ggml's
    ``dequantize_row_*`` (and gguf-py's ``gguf.quants.dequantize``).

    ``weight`` takes the forms :func:`lmtail.ops.matvec` takes (raw GGUF bytes, or the float
    arrays of F16/BF16/F32). ``cols``, when given, must equal the cols the row bytes hold
    (a check against reading a tensor with the wrong shape); None derives it.
    """
    t = _backend.weight_type(dtype, "cpu", "dequantize")
    if isinstance(weight, np.ndarray) and weight.ndim == 2 and weight.shape[0] == 0:
        # No rows: the shape checks of one row, on a stand-in row (weight_array wants >= 1 row).
        _, _, wcols = weight_array(np.zeros((1,) + weight.shape[1:], weight.dtype), t, "weight")
        return np.zeros((0, wcols if cols is None else int(cols)), np.float32)
    if isinstance(weight, np.ndarray) and weight.ndim == 2 and weight.dtype.fields is None:
        # The result is a new array anyway: a weight of any layout is read, packed first.
        weight = np.ascontiguousarray(weight)
    w, rows, wcols = weight_array(weight, t, "weight")
    if cols is not None:
        if isinstance(cols, bool) or not isinstance(cols, (int, np.integer)):
            raise ParameterError(f"cols: expected an integer or None; found {cols!r}")
        block_cols(int(cols), t, "cols")
        if int(cols) != wcols:
            raise ShapeError(f"weight: {w.shape[1]} bytes per row hold {wcols} {t.name} weights, not cols={int(cols)}")
    out = np.empty((rows, wcols), dtype=np.float32)
    _core.dequantize(t.id, w, out, threads_arg(threads))
    return out


def quantize_q5_k(w: np.ndarray, *, threads: Optional[int] = None) -> np.ndarray:
    """Quantise f32 ``w`` (rows, cols), cols a multiple of 256, to Q5_K blocks (rows, cols/256*176) uint8.

    Bytes equal ggml's ``quantize_row_q5_K_ref`` (``ggml_quantize_chunk`` without an importance
    matrix). The result is the array :class:`lmtail.Head` takes.

    Fails closed (:class:`~lmtail.errors.ParameterError`, nothing returned) on a non-finite
    weight and on any 256-weight super-block whose fp16 scale ``d`` (largest sub-block step / 63)
    or min scale ``dmin`` (largest sub-block offset / 63) reaches 65520 and so rounds to inf:
    ggml writes such a block, but it decodes to inf/NaN. In practice that is a weight below
    -4127760 (= 65520 * 63: one such weight makes dmin overflow) or above about 1.2796e8 (a
    sub-block of such weights makes d overflow); the exact limit depends on the block, and the
    rule is exactly "ggml's bytes for this block would have an inf/NaN d or dmin". Every
    accepted input gives ggml's bytes.
    """
    if not isinstance(w, np.ndarray) or w.dtype != np.float32:
        raise DTypeError(f"w: expected a float32 numpy array; found {getattr(w, 'dtype', type(w).__name__)}")
    if w.ndim != 2:
        raise ShapeError(f"w: expected 2-D (rows, cols); found shape {w.shape}")
    if w.shape[1] == 0 or w.shape[1] % 256:
        raise ShapeError(f"w: cols must be a positive multiple of 256 (Q5_K's block); found {w.shape[1]}")
    return quantize(w, "Q5_K", threads=threads)


def dequantize_q5_k(q: np.ndarray, *, threads: Optional[int] = None) -> np.ndarray:
    """Q5_K blocks (rows, nbytes) uint8 -> f32 (rows, nbytes/176*256), bit-identical to ggml/gguf-py."""
    if not isinstance(q, np.ndarray) or q.dtype != np.uint8:
        raise DTypeError(f"q: expected a uint8 numpy array of Q5_K blocks; found {getattr(q, 'dtype', type(q).__name__)}")
    return dequantize(q, "Q5_K", threads=threads)
