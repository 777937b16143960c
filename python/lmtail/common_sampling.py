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

from . import _core
from ._validate import float32_array, threads_arg
from .errors import ParameterError, ShapeError
from .sampling import Candidates, Chain, SamplingError, TopKRows
from .sampling import samplers as S
from .sampling.topk_route import STATS, _grammar_constrains

__all__ = ["common_sample", "common_sample_row", "common_sample_rows"]


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


# ---- many rows at once ------------------------------------------------------------------------
# The samplers of a chain that lmtail._core.sampling_run_rows runs itself, as (kind, args...) ops
# (the kinds of csrc/cpu/sampling.hpp's RowOpKind). Exact types only: a subclass may override
# apply. A builder returns None when the sampler would do nothing in apply (llama.cpp's own
# early returns, checked at call time as apply checks them).
def _op_penalties(s):
    # Penalties.disabled, on the float32 values the sampler holds
    if s.last_n == 0 or (s.repeat == 1.0 and s.freq == 0.0 and s.present == 0.0):
        return None
    return (1, s.counts, list(s.prev), s.repeat, s.freq, s.present)


def _op_bias(s):
    if not s.biases:
        return None
    return (2, [t for t, _ in s.biases], [float(b) for _, b in s.biases])


_ROW_OPS = {
    S.Penalties: _op_penalties,
    S.LogitBias: _op_bias,
    S.TopK: lambda s: (3, s.k) if s.k > 0 else None,
    S.TopP: lambda s: (4, s.p, s.min_keep) if s.p < 1.0 else None,
    S.MinP: lambda s: (5, s.p, s.min_keep) if s.p > 0.0 else None,
    S.Typical: lambda s: (6, s.p, s.min_keep) if s.p < 1.0 else None,
    S.Temp: lambda s: (7, s.t),
    S.TempExt: lambda s: (8, s.t, s.delta, s.exponent) if s.delta > 0 else (7, s.t),
    S.TopNSigma: lambda s: (9, s.n) if s.n > 0.0 else None,
    S.Greedy: lambda s: (10,),
    S.Dist: None,  # the draw is made by _plan
}
_GREEDY_FRESH = [(12,)]


def _compile(samplers) -> tuple:
    """(samplers as a tuple, [(index, op builder or None for dist, sampler)] up to the first
    sampler without a C++ path, that index): what _plan walks, kept per chain."""
    steps = []
    for j, s in enumerate(samplers):
        t = type(s)
        if t is S.Empty:
            continue
        if t not in _ROW_OPS or len(steps) == 64:
            return tuple(samplers), steps, j
        steps.append((j, _ROW_OPS[t], s))
    return tuple(samplers), steps, len(samplers)


def _plan(chain):
    """(ops, stop, draws): the ops for the chain's samplers [0, stop) (the rest run in Python),
    and for each dist op (op index, sampler, its engine before the draw made for it).
    Parameters are read at every call (as apply reads them); only the chain's shape is cached."""
    samplers = chain.samplers
    cache = chain.__dict__.get("_rows_plan")
    if cache is None or cache[0] != tuple(samplers):  # a tuple compares its items by identity first
        cache = chain.__dict__["_rows_plan"] = _compile(samplers)
    _, steps, stop = cache
    ops: list = []
    draws: list = []
    fresh = True  # the array is still in id order with every token (a logit-bias op needs that)
    for j, f, s in steps:
        if f is None:  # dist: one uniform_real_distribution<double> draw, given back if unused
            rng = s.rng
            draws.append((len(ops), s, rng.copy()))
            ops.append((11, rng.uniform_double(s.stdlib)))
            fresh = False
            continue
        op = f(s)
        if op is None:
            continue
        kind = op[0]
        if kind == 2 and not fresh:
            return ops, j, draws
        if kind > 2:
            fresh = False
        ops.append(op)
    return ops, stop, draws


def _finish(chain, plan, res, grammar_row: bool) -> int:
    """Give back the draws the row did not use, run the chain's remaining samplers in Python,
    and return the selected token (chain.last as the single-row call leaves it)."""
    ops, stop, draws = plan
    off, size, sel, srt, used, err = res
    for j, s, rng0 in draws:
        if not (used >> j) & 1:
            s.rng.assign(rng0)
    if err:
        raise _RowFallback()
    if ops is _GREEDY_FRESH:
        chain.last = None
        return sel
    c = Candidates(chain._buf, size, offset=off, selected=sel, sorted=srt)
    samplers = chain.samplers
    if stop < len(samplers):
        for s in samplers[stop:]:
            s.apply(c)
    chain.last = c
    sel = c.selected
    if not 0 <= sel < c.size:
        if grammar_row:
            _selected(chain, c)
        raise SamplingError(f"the chain {chain.names} selected no token (selected={c.selected}, size={c.size}); "
                            "end it with a terminal sampler (dist, greedy, mirostat...)")
    return int(c.buf[c.offset + sel][0])


class _RowFallback(Exception):
    """The row met a state the C++ rows leave to the single-row path (which reports it)."""


def common_sample_rows(chains, logits, grammars=None, *, threads=None) -> np.ndarray:
    """One token per row, int32 (B,): row r is exactly ``common_sample(chains[r], logits[r],
    grammars[r])`` -- the same token, the same RNG draws, the same ``chain.last``.

    ``chains``: B distinct :class:`~lmtail.sampling.Chain` of one n_vocab; ``logits``: (B, n_vocab)
    float32 (any host array form ``common_sample`` takes); ``grammars``: None or B entries (None
    for a row without one).  Nothing is accepted.  The logits fill, the fused leading samplers
    (penalties, logit-bias, top-k read straight from the row) and the built-in samplers after
    them run in C++ for all rows at once, without the GIL, rows split over ``threads`` (None: the
    core's default); only grammar checks, RNG draws and samplers without a C++ path run in Python.
    A row's result depends on nothing else: not the other rows, not the thread count.
    All or nothing: if a row raises, no chain's state has advanced.
    """
    if isinstance(chains, Chain) or not hasattr(chains, "__len__"):
        raise ParameterError(f"chains: expected a sequence of lmtail.sampling.Chain; found {type(chains).__name__}")
    chains = list(chains)
    if not chains:
        raise ParameterError("chains: expected at least one chain")
    for c in chains:
        if not isinstance(c, Chain):
            raise ParameterError(f"chains: expected lmtail.sampling.Chain entries; found {type(c).__name__}")
    if len({id(c) for c in chains}) != len(chains):
        raise ParameterError("chains: a chain appears twice (each row needs its own chain: RNG streams, buffer)")
    V = chains[0].n_vocab
    if any(c.n_vocab != V for c in chains):
        raise ShapeError(f"chains: expected one n_vocab; found {sorted({c.n_vocab for c in chains})}")
    if grammars is None:
        grammars = [None] * len(chains)
    else:
        grammars = list(grammars)
        if len(grammars) != len(chains):
            raise ShapeError(f"grammars: expected {len(chains)} entries (one per chain, None for none); "
                             f"found {len(grammars)}")
        live = [id(g) for g in grammars if g is not None]
        if len(set(live)) != len(live):
            raise ParameterError("grammars: a grammar appears twice (each row needs its own parse state)")
    x = float32_array(logits, "logits", ndims=(2,))
    if x.shape != (len(chains), V):
        raise ShapeError(f"logits: expected shape ({len(chains)}, {V}) (one row per chain, n_vocab); found {x.shape}")
    t = threads_arg(threads)
    return _sample_rows(chains, x, grammars, t if t else int(_core.default_threads()))


def _rollback(chain, saved) -> None:
    """Put a row's chain back as it was before _sample_rows touched it."""
    draws, full, last = saved
    if full is not None:
        chain._load(full)
    for _, s, rng0 in draws:  # the dist engines before the first draw made for them
        s.rng.assign(rng0)
    chain.last = last


def _sample_rows(chains, x, grammars, threads: int, note=None) -> np.ndarray:
    B = len(chains)
    out = np.empty(B, np.int32)
    saved: list = []
    r = 0
    # With helpers, rows start as soon as they are planned and are finished as they come back,
    # so this thread's Python work overlaps the helpers' rows (the GIL is never needed by them).
    # A grammar row whose draw its grammar rejects is resampled on its mask: with helpers it joins
    # the same job (index B + j) as soon as it is found, so the resamples overlap the finishing
    # of the other rows instead of waiting for all of them.
    G = sum(g is not None for g in grammars)
    job = _core.SamplingRows(x, B + G, threads) if threads > 1 and B > 1 else None
    try:
        plans = []
        items = []
        for r, (c, g) in enumerate(zip(chains, grammars)):
            last = c.last
            if g is None and c._greedy_only:
                p = (_GREEDY_FRESH, len(c.samplers), ())
            else:
                p = _plan(c)
            # A row the C++ runs whole changes only its dist engines (undone from the plan's
            # copies); a row with a Python tail or a grammar may change any sampler: saved whole
            # (after the plan's draws, which leaves the samplers the plan stopped before as they were).
            saved.append((p[2], c._save("apply") if g is not None or p[1] < len(c.samplers) else None, last))
            plans.append(p)
            if job is None:
                items.append((r, c._buf, p[0], None))
            else:
                job.add((r, c._buf, p[0], None))
        res = _core.sampling_run_rows(x, items, 1) if job is None else None
        again = []  # (row, plan) of the resamples, in the order they were added
        items = []
        for r in range(B):
            c, g = chains[r], grammars[r]
            try:
                tok = _finish(c, plans[r], res[r] if job is None else job.result(r), g is not None)
            except _RowFallback:
                _rollback(c, saved[r])
                out[r] = common_sample(c, x[r], g)
                continue
            out[r] = tok
            if g is None or g.allows(tok):
                continue
            # llama-server's resample: the whole chain again on the masked row (the row's
            # buffer is free again: its first result was read above)
            m = g.mask()
            if not (isinstance(m, np.ndarray) and m.dtype == np.bool_ and m.shape == (x.shape[1],)):
                # not a mask of n_vocab flags: the single-row path (and its error, if any)
                _rollback(c, saved[r])
                out[r] = common_sample(c, x[r], g)
                continue
            p = _plan(c)
            item = (r, c._buf, p[0], np.ascontiguousarray(m))
            if job is None:
                items.append(item)
            else:
                job.add(item)
            again.append((r, p))
        res2 = _core.sampling_run_rows(x, items, threads) if items else None
        for j, (r, p) in enumerate(again):
            try:
                out[r] = _finish(chains[r], p, job.result(B + j) if res2 is None else res2[j], True)
            except _RowFallback:
                _rollback(chains[r], saved[r])
                out[r] = common_sample(chains[r], x[r], grammars[r])
    except BaseException as e:
        if job is not None:
            job.close()  # before any state is put back: no row runs after this
        for c, sv in zip(chains, saved):
            _rollback(c, sv)
        if note is not None and hasattr(e, "add_note"):
            e.add_note(note(r))
        raise
    finally:
        if job is not None:
            job.close()
    return out
