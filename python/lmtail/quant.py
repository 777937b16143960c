"""Q5_K quantisation, byte-identical to ggml's reference quantiser."""

from __future__ import annotations

from typing import Optional

import numpy as np

from . import _core
from ._validate import Q5K_BLOCK_BYTES, QK_K, threads_arg
from .errors import DTypeError, ParameterError, ShapeError


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
    rows, cols = w.shape
    if cols == 0 or cols % QK_K:
        raise ShapeError(f"w: cols must be a positive multiple of {QK_K}; found {cols}")
    w = np.ascontiguousarray(w)
    if not np.isfinite(w).all():
        r, c = np.argwhere(~np.isfinite(w))[0]
        raise ParameterError(f"w: weights must be finite; found {w[r, c]} at ({r}, {c})")
    out = np.empty((rows, cols // QK_K * Q5K_BLOCK_BYTES), dtype=np.uint8)
    _core.quantize_q5_k(w, out, threads_arg(threads))
    return out


def dequantize_q5_k(q: np.ndarray, *, threads: Optional[int] = None) -> np.ndarray:
    """Q5_K blocks (rows, nbytes) uint8 -> f32 (rows, nbytes/176*256), bit-identical to ggml/gguf-py."""
    if not isinstance(q, np.ndarray) or q.dtype != np.uint8:
        raise DTypeError(f"q: expected a uint8 numpy array of Q5_K blocks; found {getattr(q, 'dtype', type(q).__name__)}")
    if q.ndim != 2:
        raise ShapeError(f"q: expected 2-D (rows, row_bytes); found shape {q.shape}")
    rows, nbytes = q.shape
    if nbytes == 0 or nbytes % Q5K_BLOCK_BYTES:
        raise ShapeError(f"q: row bytes must be a positive multiple of {Q5K_BLOCK_BYTES}; found {nbytes}")
    q = np.ascontiguousarray(q)
    out = np.empty((rows, nbytes // Q5K_BLOCK_BYTES * QK_K), dtype=np.float32)
    _core.dequantize_q5_k(q, out, threads_arg(threads))
    return out
