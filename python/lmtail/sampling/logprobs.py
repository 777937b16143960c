"""Token probabilities as llama-server reports them (``n_probs`` / ``logprobs``).

Default (``post_sampling_probs = false``): ``get_token_probabilities`` — a std::partial_sort of
the raw logits for the top n, then a float softmax over the *whole* vocabulary (max = the first
sorted logit; float sum in the post-partial-sort array order). The sampled token's probability is
looked up in that array.

``post_sampling_probs = true``: the chain's final candidates sorted by p descending (std::sort,
unstable), top n with p == 0 entries dropped; the sampled token's p from the same array.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .. import _core
from .._validate import maybe_host_array
from ..errors import ParameterError
from .candidates import TOKEN_DATA, Candidates


@dataclass
class TokenLogprobs:
    token: int
    prob: float | None  # probability of the sampled token (None if absent from the array)
    top: list[tuple[int, float]]  # (token id, probability), most likely first

    @property
    def logprob(self) -> float | None:
        """Natural log of ``prob`` (-inf for 0), None when ``prob`` is None."""
        import math

        return None if self.prob is None else (math.log(self.prob) if self.prob > 0 else float("-inf"))


def _n(n_probs) -> int:
    if isinstance(n_probs, bool) or not isinstance(n_probs, numbers.Integral) or n_probs < 0:
        raise ParameterError(f"n_probs: expected an integer >= 0; found {n_probs!r}")
    return int(n_probs)


def server_logprobs(logits: np.ndarray, n_probs: int, token: int) -> TokenLogprobs:
    """get_token_probabilities + populate_token_probs (pre-sampling probabilities)."""
    n_probs = _n(n_probs)
    logits = maybe_host_array(logits, "logits")
    if not isinstance(logits, np.ndarray) or logits.dtype != np.float32 or logits.ndim != 1 or not len(logits):
        raise ParameterError("logits: expected a non-empty 1-D float32 array")
    buf = np.empty(len(logits), TOKEN_DATA)
    _core.sampling_fill(buf, np.ascontiguousarray(logits))
    _core.sampling_server_probs(buf, 0, len(buf), n_probs)
    ids = buf["id"]
    hit = np.flatnonzero(ids == token)
    prob = float(buf["p"][hit[0]]) if len(hit) else None
    n = min(n_probs, len(buf))
    top = [(int(buf["id"][i]), float(buf["p"][i])) for i in range(n)]
    return TokenLogprobs(int(token), prob, top)


def post_sampling_logprobs(cands: Candidates, n_probs: int, token: int | None = None) -> TokenLogprobs:
    """common_sampler_get_candidates(do_sort=true) + populate_token_probs(post_sampling=true).

    Sorts ``cands`` in place by p (as llama.cpp does) unless it is already flagged sorted.
    """
    n_probs = _n(n_probs)
    if token is None:
        token = cands.token
    if not cands.sorted:
        _core.sampling_sort_by_p(cands.buf, cands.offset, cands.size)
        v = cands.view()
        hit = np.flatnonzero(v["id"] == token)
        if len(hit):
            cands.selected = int(hit[0])
        cands.sorted = True
    v = cands.view()
    hit = np.flatnonzero(v["id"] == token)
    prob = float(v["p"][hit[0]]) if len(hit) else None
    top = []
    for i in range(min(n_probs, cands.size)):
        if v["p"][i] == 0.0:
            break
        top.append((int(v["id"][i]), float(v["p"][i])))
    return TokenLogprobs(int(token), prob, top)


__all__ = ["TokenLogprobs", "server_logprobs", "post_sampling_logprobs"]
