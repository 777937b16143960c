"""llama-server's grammar-constrained sampling discipline (``common_sampler_sample``).

This module sits above both :mod:`lmtail.sampling` (the chain) and :mod:`lmtail.grammar` (the
matcher), as ``common/sampling.cpp`` sits above llama.cpp's samplers and its grammar: it imports
the sampling package and takes the grammar by its protocol (``allows(t)``, ``mask()``, and
``awaiting_trigger`` for a lazy grammar), so neither lower package imports the other or this one.

``common/sampling.cpp`` in llama-cpp-python 0.3.36, with ``grammar_first = false`` (what
llama-server does for every request):

1. fill the candidates ``{id = i, logit = logits[i], p = 0}`` and run the whole chain on the
   *unmasked* logits; take its winner;
2. check only the winner against the grammar (llama.cpp applies the grammar sampler to a
   one-element array); if allowed, return it -- the grammar never looks at the rest of the
   vocabulary;
3. otherwise refill the candidates from the logits, apply the grammar mask (rejected tokens get
   ``-inf``), and run the **whole chain again**.

The rejected first draw is not undone: every stochastic sampler in the chain has already consumed
its random numbers (``dist`` draws again, so a rejection costs it two draws; XTC and mirostat draw
twice and mirostat's ``mu`` moves twice).  Reproducing that is what keeps a seeded,
grammar-constrained generation token-identical to llama-server.

``grammar_first = true`` (speculative decoding's draft sampling) masks first and runs the chain
once.  The caller accepts the returned token into both the chain and the grammar, as
``common_sampler_accept`` does.
"""

from __future__ import annotations

import numpy as np

from .sampling import Candidates, SamplingError, TopKRows
from .sampling.topk_route import STATS, _grammar_constrains

__all__ = ["common_sample", "common_sample_row"]


def _mask_candidates(c, grammar) -> None:
    """llama_sampler_apply(grammar, cur_p): -inf on every candidate the grammar rejects."""
    m = grammar.mask()
    view = c.view()
    ids = view["id"]
    bad = ~m[ids]
    if bad.any():
        logit = view["logit"]
        logit[bad] = -np.inf
        view["logit"] = logit


def common_sample(chain, logits: np.ndarray, grammar=None, grammar_first: bool = False) -> int:
    """One token as ``common_sampler_sample(gsmpl, ctx, idx, grammar_first)`` returns it.

    ``chain`` is an :class:`lmtail.sampling.Chain`; ``grammar`` a
    :class:`~lmtail.grammar.GrammarMatcher` (or anything with ``allows(t)`` and ``mask()``), or
    None for no grammar.  Neither is advanced: accept the token into both afterwards.
    """
    if grammar is None:
        return chain.sample(logits)
    logits = chain.check_logits(logits)
    # Two chain runs and a grammar check: all-or-nothing, so a failure in the resample (a grammar
    # that raises, a chain that selects nothing) leaves no half-consumed RNG or moved mu behind.
    with chain.atomic():
        c = Candidates.from_logits(logits)
        if grammar_first:
            _mask_candidates(c, grammar)
        chain.apply_candidates(c)
        tok = _selected(chain, c)
        if grammar_first or grammar.allows(tok):
            return tok
        c = Candidates.from_logits(logits)
        _mask_candidates(c, grammar)
        chain.apply_candidates(c)
        return _selected(chain, c)


def common_sample_row(chain, rows: TopKRows, t: int, grammar=None, grammar_first: bool = False) -> int:
    """Row t of a :class:`~lmtail.sampling.TopKRows` as ``common_sample(chain, whole_row_t,
    grammar, grammar_first)`` returns it (not accepted).

    A grammar that constrains needs the whole row (fetched through ``rows.row``); no grammar, or
    a lazy grammar still waiting for its trigger, keeps the top-k route
    (``rows.sample(chain, t)``).  All-or-nothing: on an error the chain's state is as before.
    """
    if not isinstance(rows, TopKRows):
        from .errors import ParameterError

        raise ParameterError(f"rows: expected an lmtail.sampling.TopKRows; found {type(rows).__name__}")
    if not _grammar_constrains(grammar):
        return rows.sample(chain, t)
    t = rows._index(t)
    saved = chain._save("apply")  # common_sample may run the chain twice
    try:
        tok = common_sample(chain, rows.row(t), grammar, grammar_first)
    except BaseException:
        chain._load(saved)
        raise
    STATS.whole += 1
    return tok


def _selected(chain, c) -> int:
    if not 0 <= c.selected < c.size:
        raise SamplingError(f"the chain {chain.names} selected no token (selected={c.selected}, size={c.size})")
    return int(c.buf["id"][c.offset + c.selected])
