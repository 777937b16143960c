"""Q5_K (de)quantisation through llama.cpp's own ggml (llama-cpp-python's libggml-base).

* ``quantize_q5_k(x)``: ``ggml_quantize_chunk(GGML_TYPE_Q5_K, ...)`` without an importance
  matrix, i.e. ggml's ``quantize_row_q5_K_ref`` (what ``llama-quantize`` does for a Q5_K tensor
  when no imatrix is given).
* ``dequantize_q5_k(q, cols)``: ggml's ``dequantize_row_q5_K`` (the type traits' ``to_float``).

Both work on whole C-contiguous matrices: x is (rows, cols) float32 with cols % 256 == 0, q is
(rows, cols // 256 * 176) uint8.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from . import _lib

GGML_TYPE_Q5_K = 13
QK_K = 256
BLOCK_BYTES = 176


class _TypeTraits(ctypes.Structure):
    # struct ggml_type_traits (ggml.h of the pinned oracle version)
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


_TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


@functools.lru_cache(maxsize=None)
def _api():
    lib = _lib.load("ggml-base")

    quantize_chunk = lib.ggml_quantize_chunk
    quantize_chunk.restype = ctypes.c_size_t
    quantize_chunk.argtypes = [
        ctypes.c_int,  # enum ggml_type
        ctypes.c_void_p,  # const float * src
        ctypes.c_void_p,  # void * dst
        ctypes.c_int64,  # start
        ctypes.c_int64,  # nrows
        ctypes.c_int64,  # n_per_row
        ctypes.c_void_p,  # const float * imatrix (NULL)
    ]

    row_size = lib.ggml_row_size
    row_size.restype = ctypes.c_size_t
    row_size.argtypes = [ctypes.c_int, ctypes.c_int64]

    # Dequantisation: the exported dequantize_row_q5_K, or the type traits' to_float.
    try:
        deq = lib.dequantize_row_q5_K
        deq.restype = None
        deq.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64]
    except AttributeError:  # pragma: no cover - depends on the oracle build
        get_traits = lib.ggml_get_type_traits
        get_traits.restype = ctypes.POINTER(_TypeTraits)
        get_traits.argtypes = [ctypes.c_int]
        traits = get_traits(GGML_TYPE_Q5_K).contents
        assert traits.blck_size == QK_K and traits.type_size == BLOCK_BYTES
        deq = _TO_FLOAT(traits.to_float)
    return quantize_chunk, row_size, deq


def row_bytes(cols: int) -> int:
    return cols // QK_K * BLOCK_BYTES


def quantize_q5_k(x: np.ndarray) -> np.ndarray:
    """ggml's Q5_K bytes of a (rows, cols) float32 matrix; returns (rows, cols // 256 * 176) uint8."""
    quantize_chunk, row_size, _ = _api()
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] % QK_K != 0 or x.shape[1] == 0:
        raise ValueError(f"expected a (rows, 256*k) matrix, found shape {x.shape}")
    rows, cols = x.shape
    assert row_size(GGML_TYPE_Q5_K, cols) == row_bytes(cols)
    out = np.zeros((rows, row_bytes(cols)), dtype=np.uint8)
    if rows == 0:
        return out
    n = quantize_chunk(GGML_TYPE_Q5_K, x.ctypes.data, out.ctypes.data, 0, rows, cols, None)
    assert n == out.nbytes, (n, out.nbytes)
    return out


def dequantize_q5_k(q: np.ndarray, cols: int | None = None) -> np.ndarray:
    """ggml's dequantize_row_q5_K of (rows, nbytes) uint8 Q5_K rows; returns (rows, cols) float32."""
    _, _, deq = _api()
    q = np.ascontiguousarray(q, dtype=np.uint8)
    if q.ndim == 1:
        q = q.reshape(1, -1)
    if q.ndim != 2 or q.shape[1] % BLOCK_BYTES != 0:
        raise ValueError(f"expected (rows, 176*k) uint8 rows, found shape {q.shape}")
    rows = q.shape[0]
    if cols is None:
        cols = q.shape[1] // BLOCK_BYTES * QK_K
    if row_bytes(cols) != q.shape[1]:
        raise ValueError(f"cols={cols} needs {row_bytes(cols)} bytes per row, found {q.shape[1]}")
    out = np.empty((rows, cols), dtype=np.float32)
    if rows:
        deq(q.ctypes.data, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), rows * cols)
    return out


# ---- Any ggml type (the weight-type matrix) ---------------------------------------------------
# ggml type ids of the types lmtail runs, and their (block elements, block bytes).
GGML_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "BF16": 30}


@functools.lru_cache(maxsize=None)
def _traits(type_id: int):
    lib = _lib.load("ggml-base")
    get_traits = lib.ggml_get_type_traits
    get_traits.restype = ctypes.POINTER(_TypeTraits)
    get_traits.argtypes = [ctypes.c_int]
    t = get_traits(type_id).contents
    return int(t.blck_size), int(t.type_size), _TO_FLOAT(t.to_float) if t.to_float else None


def type_row_bytes(type_id: int, cols: int) -> int:
    """ggml_row_size(type, cols) (cols must be a multiple of the type's block)."""
    blck, size, _ = _traits(type_id)
    if cols % blck:
        raise ValueError(f"cols={cols} is not a multiple of the block {blck}")
    return cols // blck * size


def quantize(type_id: int, x: np.ndarray) -> np.ndarray:
    """ggml_quantize_chunk(type, x) without an importance matrix: (rows, row_bytes) uint8. For
    F16/BF16/F32 ggml_quantize_chunk runs ggml's row conversions."""
    quantize_chunk, row_size, _ = _api()
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"expected a (rows, cols) matrix, found shape {x.shape}")
    rows, cols = x.shape
    rb = type_row_bytes(type_id, cols)
    assert row_size(type_id, cols) == rb
    out = np.zeros((rows, rb), dtype=np.uint8)
    if rows:
        n = quantize_chunk(type_id, x.ctypes.data, out.ctypes.data, 0, rows, cols, None)
        assert n == out.nbytes, (n, out.nbytes)
    return out


def dequantize(type_id: int, q: np.ndarray, cols: int) -> np.ndarray:
    """ggml's to_float (dequantize_row_* / the f16, bf16 conversions) of (rows, row_bytes) uint8."""
    _, _, to_float = _traits(type_id)
    q = np.ascontiguousarray(q, dtype=np.uint8)
    rows = q.shape[0]
    if q.shape != (rows, type_row_bytes(type_id, cols)):
        raise ValueError(f"expected ({rows}, {type_row_bytes(type_id, cols)}) bytes, found {q.shape}")
    if type_id == 0:  # F32 has no to_float in the traits: the bytes are the floats
        return q.view(np.float32).reshape(rows, cols).copy()
    out = np.empty((rows, cols), dtype=np.float32)
    if rows:
        to_float(q.ctypes.data, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), rows * cols)
    return out
