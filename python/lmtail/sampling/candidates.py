"""The candidate array the samplers work on, shaped like llama.cpp's ``llama_token_data_array``.

The records live in one numpy buffer of ``TOKEN_DATA`` ({int32 id; float32 logit; float32 p},
12 bytes, exactly ``llama_token_data``), so the C++ kernels work on it in place. The active
window is ``buf[offset : offset + size]``: llama.cpp's XTC advances the ``data`` pointer, which
here advances ``offset``. ``selected`` is an index into the window (not a token id), -1 for none;
``sorted`` promises "descending by logit" and, as in llama.cpp, can become a lie (logit-bias does
not clear it) and is trusted anyway.
"""

from __future__ import annotations

import numpy as np

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
assert TOKEN_DATA.itemsize == 12


class Candidates:
    """A ``llama_token_data_array``: records ``buf[offset : offset + size]``, ``selected`` (an index
    into that window, -1 for none) and ``sorted`` (descending by logit, trusted as llama.cpp does)."""

    __slots__ = ("buf", "offset", "size", "selected", "sorted")

    def __init__(self, buf: np.ndarray, size: int | None = None, *, offset: int = 0, selected: int = -1,
                 sorted: bool = False):
        self.buf = buf
        self.offset = offset
        self.size = len(buf) - offset if size is None else size
        self.selected = selected
        self.sorted = sorted

    @classmethod
    def from_logits(cls, logits: np.ndarray, buf: np.ndarray | None = None) -> "Candidates":
        """{id = i, logit = logits[i], p = 0}, unsorted, nothing selected (llama_sampler_sample)."""
        from .. import _core

        n = len(logits)
        if buf is None or len(buf) < n:
            buf = np.empty(n, TOKEN_DATA)
        _core.sampling_fill(buf, logits)
        return cls(buf, n)

    @classmethod
    def from_arrays(cls, ids, logits, probs=None, *, sorted: bool = False) -> "Candidates":
        """Candidates from parallel arrays of ids, logits and (optionally) probabilities."""
        ids = np.asarray(ids)
        buf = np.empty(len(ids), TOKEN_DATA)
        buf["id"] = ids
        buf["logit"] = logits
        buf["p"] = 0.0 if probs is None else probs
        return cls(buf, len(ids), sorted=sorted)

    def view(self) -> np.ndarray:
        """The active records (a view: writes go to the chain's buffer)."""
        return self.buf[self.offset:self.offset + self.size]

    @property
    def ids(self) -> np.ndarray:
        """The active token ids (a view)."""
        return self.view()["id"]

    @property
    def logits(self) -> np.ndarray:
        """The active logits (a view)."""
        return self.view()["logit"]

    @property
    def probs(self) -> np.ndarray:
        """The active probabilities (a view; meaningful after a softmax-computing sampler)."""
        return self.view()["p"]

    @property
    def token(self) -> int:
        """The selected token id (raises if nothing is selected)."""
        if not 0 <= self.selected < self.size:
            from .samplers import SamplingError

            raise SamplingError(f"no candidate selected (selected={self.selected}, size={self.size})")
        return int(self.buf["id"][self.offset + self.selected])

    def copy(self) -> "Candidates":
        """An independent copy of the active window (offset 0)."""
        return Candidates(self.view().copy(), self.size, selected=self.selected, sorted=self.sorted)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"Candidates(size={self.size}, selected={self.selected}, sorted={self.sorted})"


__all__ = ["Candidates", "TOKEN_DATA"]
