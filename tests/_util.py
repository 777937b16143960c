"""Shared test helpers: seeded Q5_K matrices and float64 references (built by the tests)."""

from __future__ import annotations

import functools

import numpy as np

import lmtail


def q5k_matrix(rows: int, cols: int, seed: int = 0, scale: float = 0.02) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    return lmtail.quantize_q5_k(w)


@functools.lru_cache(maxsize=4)
def slab(rows: int = 4096, cols: int = 6656, seed: int = 1234) -> np.ndarray:
    q = q5k_matrix(rows, cols, seed)
    q.flags.writeable = False
    return q


def tiled_head(rows: int, slab_q: np.ndarray) -> np.ndarray:
    """A full-size head made by tiling a quantised slab (quantising 1.3e9 floats takes minutes)."""
    reps = -(-rows // slab_q.shape[0])
    return np.tile(slab_q, (reps, 1))[:rows]


def reference_matvec(q: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 reference from gguf-py's dequantiser: (W @ x, |W| @ |x|) with x (T, cols)."""
    import gguf

    w = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q5_K).astype(np.float64)
    w = w.reshape(q.shape[0], -1)
    x64 = x.astype(np.float64)
    return (w @ x64.T).T, (np.abs(w) @ np.abs(x64).T).T


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)
