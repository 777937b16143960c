"""Exact speculative verification: the draft is allowed to be wrong, the output never is.

Three verifiers, one result type (:class:`Decision`):

:func:`verify` -- stochastic drafts with their probabilities (the standard rule). Draft i is
    accepted with probability min(1, p(x)/q(x)); at the first rejection the replacement is drawn
    from the renormalised residual max(p - q, 0) (p itself when the residual is all zero); when
    every draft is accepted the bonus token is drawn from the last target row. The emitted tokens
    are then distributed exactly as target sampling would distribute them.
:func:`verify_sample_and_match` -- llama-server's rule (``common_sampler_sample_and_accept_n``):
    sample the target chain at every draft position and keep drafts while they equal the sample.
    Seed-identical to llama.cpp, one chain draw per emitted token; the right rule for drafts
    without probabilities (n-gram, argmax drafts), for which it is also the optimal lossless rule.
:func:`verify_greedy` -- greedy targets through ``Head.greedy``: 4 bytes per verified row.

Draw schedule of :func:`verify` (engine outputs of the request's distribution stream ``rng``):
one ``uniform_real_distribution<float>`` draw (1 output) per examined draft -- also when the
outcome is certain (p(x) = 0, p(x) >= q(x)), so the count never depends on the probabilities --
plus one ``uniform_real_distribution<double>`` draw (2 outputs) for the replacement or bonus.
A step therefore consumes ``accepted + 3`` outputs when a draft is rejected and ``n + 2`` when all
n are accepted. ``Decision.draws`` reports it.

Two deliberate differences from the anchor code the design came from: a token the target gives
probability 0 is never emitted (the accept test is ``u < p/q`` with an explicit p(x) = 0 reject;
``u <= p/q`` with "accept when q <= 0" can emit one), and a zero residual falls back to p instead
of returning an arbitrary id.
"""

from __future__ import annotations

import math
import numbers
import threading
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from . import _core
from ._validate import maybe_host_array
from .errors import DTypeError, ParameterError, ShapeError
from .sampling.rng import Mt19937, check_stdlib

# A probability row may miss 1 by float rounding (a float32 softmax over 200k entries is off by
# ~1e-6); more than this means the caller passed logits or an unnormalised row.
PROB_SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Decision:
    """The outcome of one verification step.

    ``accepted``: how many drafts were kept (a prefix of the draft). ``next_token``: the token
    emitted after them (replacement or bonus), None when the step ended on a kept draft (an EOG or
    a grammar trigger stopped it). ``tokens``: every emitted token, in order. ``logprobs``: the
    target model's log-probability of each emitted token (natural log), or None when not
    computed. ``draws``: engine outputs consumed from the distribution stream by this step.
    """

    accepted: int
    next_token: Optional[int]
    tokens: tuple
    logprobs: Optional[tuple] = None
    draws: int = 0


# ---- probability rows ---------------------------------------------------------------------------
class _Row:
    """A probability distribution over the vocabulary: dense (n_vocab,) or sparse (ids, p)."""

    __slots__ = ("dense", "ids", "p", "_sorted", "tok", "ptok")

    def __init__(self, dense=None, ids=None, p=None, tok: int = -1, ptok: float = 0.0):
        self.dense = dense
        self.ids = ids
        self.p = p
        self._sorted: Optional[tuple] = None
        self.tok = tok  # a token looked up while validating (the draft token of this position)
        self.ptok = ptok

    def prob(self, tok: int) -> float:
        if self.dense is not None:
            return float(self.dense[tok])
        if tok == self.tok:
            return self.ptok
        return float(self.probs_at(np.array([tok], np.int64))[0])

    def probs_at(self, toks: np.ndarray) -> np.ndarray:
        """float32 probabilities of ``toks`` (0 for tokens a sparse row does not list)."""
        if self.dense is not None:
            return self.dense[toks]
        if self._sorted is None:
            srt = np.argsort(self.ids, kind="stable")
            self._sorted = (self.ids[srt], self.p[srt])
        sids, sp = self._sorted
        if len(sids) == 0:
            return np.zeros(len(toks), np.float32)
        pos = np.minimum(np.searchsorted(sids, toks), len(sids) - 1)
        return np.where(sids[pos] == toks, sp[pos], np.float32(0.0)).astype(np.float32)


def _float_row(a, what: str) -> np.ndarray:
    a = maybe_host_array(a, what)
    if not isinstance(a, np.ndarray):
        raise DTypeError(f"{what}: expected a numpy float32 array; found {type(a).__name__}")
    if a.dtype != np.float32:
        raise DTypeError(f"{what}: expected dtype float32; found {a.dtype} (convert explicitly)")
    return np.ascontiguousarray(a)


def _nonfinite_error(what: str, p: np.ndarray) -> ParameterError:
    i = int(np.flatnonzero(~(np.isfinite(p) & (p >= 0)))[0])
    return ParameterError(f"{what}: probabilities must be finite and >= 0; found {p[i]} at index {i}")


def _sum_error(what: str, total: float) -> ParameterError:
    return ParameterError(f"{what}: probabilities must sum to 1 (within {PROB_SUM_TOLERANCE}); found sum "
                          f"{total:.6g} -- pass the chain's probabilities, not logits")


def _check_probs(p: np.ndarray, what: str, stats=None) -> None:
    """Raise for a dense row that is not a distribution; ``stats`` = (sum, bad count) when the
    row was already measured (a batch of rows in one kernel call)."""
    total, bad = _core.spec_row_stats(p) if stats is None else stats
    if bad:
        raise _nonfinite_error(what, p)
    if not abs(total - 1.0) <= PROB_SUM_TOLERANCE:
        raise _sum_error(what, float(total))


def _check_sparse(rows, label, n_vocab: int, toks: Sequence[int]) -> Optional[list]:
    """Checks (ids int32, probs float32) rows in one C++ call; returns p at each row's token, or
    None when a row is not in that layout (C-contiguous int32 / float32 pairs). ``label(i)`` names
    row i in errors."""
    try:
        sums, ptok, err = _core.spec_sparse_rows(rows, n_vocab, list(toks))
    except ValueError:  # the binding's layout check
        return None
    if err is not None:
        i, kind, v = err
        if kind == "bad_prob":
            raise _nonfinite_error(label(i), rows[i][1])
        raise ParameterError(f"{label(i)}: token id {v} " +
                             ("appears twice" if kind == "repeated" else f"is outside [0, {n_vocab})"))
    bad = np.flatnonzero(~(np.abs(sums - 1.0) <= PROB_SUM_TOLERANCE))
    if len(bad):
        raise _sum_error(label(int(bad[0])), float(sums[int(bad[0])]))
    return ptok.tolist()


def _row(x, what: str, n_vocab: Optional[int], tok: int = -1) -> _Row:
    if isinstance(x, tuple):
        if len(x) != 2:
            raise ParameterError(f"{what}: expected a dense row or an (ids, probs) pair; found a {len(x)}-tuple")
        if n_vocab is None:
            raise ParameterError(f"{what}: a sparse row needs n_vocab")
        ids = x[0]
        if not isinstance(ids, np.ndarray) or ids.dtype != np.int32 or not ids.flags.c_contiguous:
            ids = np.asarray(ids)
            if ids.dtype.kind not in "iu" or ids.ndim != 1:
                raise DTypeError(f"{what}: ids must be a 1-D integer array; found {ids.dtype} with shape {ids.shape}")
            if len(ids) and (ids.min() < 0 or ids.max() >= n_vocab):
                raise ParameterError(f"{what}: token ids must lie in [0, {n_vocab})")
            ids = np.ascontiguousarray(ids, dtype=np.int32)
        p = x[1]
        if not isinstance(p, np.ndarray) or p.dtype != np.float32 or not p.flags.c_contiguous:
            p = _float_row(p, f"{what} probs")
        if p.ndim != 1 or ids.ndim != 1 or p.shape != ids.shape:
            raise ShapeError(f"{what}: ids and probs must have one length; found {ids.shape} and {p.shape}")
        pt = _check_sparse([(ids, p)], lambda i: what, n_vocab, [tok])
        assert pt is not None  # converted to the kernel's layout above
        return _Row(ids=ids, p=p, tok=tok, ptok=float(pt[0]))
    p = _float_row(x, what)
    if p.ndim != 1 or (n_vocab is not None and p.shape[0] != n_vocab):
        raise ShapeError(f"{what}: expected shape ({n_vocab},); found {p.shape}")
    _check_probs(p, what)
    return _Row(dense=p)


def _all_pairs(x) -> bool:
    # The batch kernel checks dtypes and layout itself (ArgumentError -> the per-row path).
    return all(type(r) is tuple and len(r) == 2 for r in x)


def _sparse_rows_batch(x, what: str, n_vocab: int, toks: Sequence[int]):
    """Candidate rows already in the kernel's layout, checked in one C++ call (the top-k route:
    per-row Python overhead is what the per-row time would otherwise be made of)."""
    pt = _check_sparse(x, lambda i: f"{what}[{i}]", n_vocab, toks)
    if pt is None:  # not the kernel's layout: the per-row path converts each row
        return [_row(r, f"{what}[{i}]", n_vocab, toks[i] if i < len(toks) else -1) for i, r in enumerate(x)]
    return _BatchRows(x, toks, pt)


class _BatchRows:
    """Checked candidate rows of one step; a row object is built only for the row that needs it
    (the rejected or bonus position), the accept tests read ``pt`` (p of each row's draft token)."""

    __slots__ = ("raw", "toks", "pt")

    def __init__(self, raw, toks: Sequence[int], pt: list):
        self.raw, self.toks, self.pt = raw, toks, pt

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i: int) -> _Row:
        r = self.raw[i]
        return _Row(None, r[0], r[1], self.toks[i] if i < len(self.toks) else -1, self.pt[i])


def _rows(x, n: int, what: str, n_vocab: Optional[int], toks: Sequence[int] = ()):
    if isinstance(x, np.ndarray) and x.ndim == 2:
        if x.shape[0] != n:
            raise ShapeError(f"{what}: expected {n} rows; found {x.shape[0]}")
        x = _float_row(x, what)
        if n_vocab is not None and x.shape[1] != n_vocab:
            raise ShapeError(f"{what}: expected rows of length {n_vocab}; found {x.shape[1]}")
        # Every row checked in one C++ dispatch (row, chunk tasks on the pool); errors in row order.
        sums, bads = _core.spec_rows_stats(x)
        for i in range(n):
            _check_probs(x[i], f"{what}[{i}]", (sums[i], bads[i]))
        return [_Row(dense=x[i]) for i in range(n)]
    if isinstance(x, np.ndarray) or not isinstance(x, Sequence):
        raise ShapeError(f"{what}: expected ({n}, n_vocab) or a sequence of {n} rows; found {getattr(x, 'shape', type(x).__name__)}")
    if len(x) != n:
        raise ShapeError(f"{what}: expected {n} rows; found {len(x)}")
    if n_vocab is not None and n and _all_pairs(x):
        return _sparse_rows_batch(x, what, n_vocab, toks)
    return [_row(r, f"{what}[{i}]", n_vocab, toks[i] if i < len(toks) else -1) for i, r in enumerate(x)]


def _n_vocab(*groups) -> Optional[int]:
    for g in groups:
        if g is None:
            continue
        if isinstance(g, np.ndarray) and g.ndim == 2:
            return int(g.shape[1])
        if isinstance(g, Sequence):
            for r in g:
                if isinstance(r, np.ndarray) and r.ndim == 1:
                    return int(r.shape[0])
    return None


def _tokens(draft_tokens, n_vocab: Optional[int]) -> list:
    toks = []
    for i, t in enumerate(draft_tokens):
        if type(t) is int and 0 <= t and (n_vocab is None or t < n_vocab):  # the common case, cheaply
            toks.append(t)
            continue
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (numbers.Integral, np.integer)):
            raise ParameterError(f"draft_tokens[{i}]: expected a token id; found {t!r}")
        t = int(t)
        if t < 0 or (n_vocab is not None and t >= n_vocab):
            raise ParameterError(f"draft_tokens[{i}]: token id {t} outside [0, {n_vocab})")
        toks.append(t)
    return toks


def _stream(rng) -> Mt19937:
    if isinstance(rng, Mt19937):
        return rng
    r = getattr(rng, "distribution_rng", None)  # RequestSamplerState
    if isinstance(r, Mt19937):
        return r
    raise ParameterError(f"rng: expected an Mt19937 (the request's distribution stream) or a RequestSamplerState "
                         f"with one; found {type(rng).__name__}")


# ---- the residual / bonus draw ----------------------------------------------------------------
class _Scratch(threading.local):
    # Per thread: the kernels release the GIL, so two threads verifying at once must not share.
    def __init__(self) -> None:
        self.d: dict = {}


_TLS = _Scratch()
_STDLIB_CODE = {"libstdc++": 0, "libc++": 1, "c++26": 2}


def _scratch(n: int) -> tuple:
    # Retained buffers for the residual weights and their block sums (no vocabulary-sized
    # allocation per step); both are consumed before verify returns.
    d = _TLS.d
    w = d.get("w")
    if w is None or len(w) < n:
        w = np.empty(max(n, 1024), np.float32)
        d["w"] = w
        d["blocks"] = np.empty(len(w) // 32 + 1, np.float64)
    return w, d["blocks"]


def _order(order, row: _Row, what: str) -> Optional[np.ndarray]:
    if order is None:
        # default: the sparse row's own order, or ascending ids (None) for a dense row
        return row.ids if row.dense is None else None
    o = np.asarray(order)
    if o.ndim != 1 or o.dtype.kind not in "iu":
        raise DTypeError(f"{what}: expected a 1-D integer array of token ids; found {o.dtype} with shape {o.shape}")
    if o.dtype != np.int32:
        if len(o) and (o.min() < 0 or o.max() >= 2 ** 31):
            raise ParameterError(f"{what}: token ids must be non-negative 32-bit integers")
        o = o.astype(np.int32)
    return np.ascontiguousarray(o)


def _residual_weights(p: _Row, q: Optional[_Row], order: Optional[np.ndarray], what: str, n_vocab: int):
    """Weights max(p - q, 0) along ``order`` (q None: p) and how many are positive.

    ``order`` None: ascending ids over the whole vocabulary. Raises unless the order lists every
    token of positive weight (a missing one would silently be impossible to draw)."""
    if p.dense is not None:
        w, blocks = _scratch(n_vocab if order is None else len(order))
        qd = None if q is None else q.dense
        if q is not None and qd is None:
            # A candidate draft row against a full target row: spread q into a retained zero row
            # (cleared again below) and take the dense kernel path.
            qd = _TLS.d.get("qzero")
            if qd is None or len(qd) != n_vocab:
                qd = np.zeros(n_vocab, np.float32)
                _TLS.d["qzero"] = qd
            qd[q.ids] = q.p
        try:
            n = int(_core.spec_residual_weights(p.dense, qd, order, w, blocks))
            support = n if order is None else int(_core.spec_residual_support(p.dense, qd))
        except ValueError as e:  # lmt::ArgumentError surfaces as ValueError
            raise ParameterError(f"{what}: {e}") from None
        finally:
            if q is not None and q.dense is None and qd is not None:
                qd[q.ids] = 0.0
        w = w[: n_vocab if order is None else len(order)]
        _TLS.d["valid_blocks"] = (w, blocks)
    elif p.dense is None and (order is None or order is p.ids):
        # Candidate rows in their own order (the top-k route's common case): the ids were checked
        # when the row was, and the residual's support is the order itself.
        order = p.ids
        d = p.p if q is None else np.float32(p.p - q.probs_at(order))
        w = np.ascontiguousarray(np.maximum(d, np.float32(0.0)), dtype=np.float32)
        n = support = int(np.count_nonzero(w))
    else:
        if order is None:
            order = np.arange(n_vocab, dtype=np.int32)
        if len(order) and (order.min() < 0 or order.max() >= n_vocab):
            raise ParameterError(f"{what}: token ids must lie in [0, {n_vocab})")
        if len(np.unique(order)) != len(order):
            raise ParameterError(f"{what}: repeated token id")
        pw = p.probs_at(order)
        d = pw if q is None else np.float32(pw - q.probs_at(order))
        w = np.ascontiguousarray(np.maximum(d, np.float32(0.0)), dtype=np.float32)
        n = int(np.count_nonzero(w > 0))
        pq = p.p if q is None else np.float32(p.p - q.probs_at(p.ids))
        support = int(np.count_nonzero(pq > 0))
    if n != support:
        raise ParameterError(f"{what}: the order lists {n} of the {support} tokens with positive "
                             f"{'probability' if q is None else 'residual'}; it must cover them all")
    return order, w, n


def _draw(order: Optional[np.ndarray], w: np.ndarray, rng: Mt19937, stdlib: str, p: _Row) -> tuple:
    """(token, its target probability) drawn from the weights along the order."""
    u = rng.uniform_double(stdlib)
    pre = _TLS.d.pop("valid_blocks", None)  # block sums from the residual pass, if for these weights
    j = int(_core.spec_select(w, len(w), u, pre[1] if pre is not None and pre[0] is w else None))
    if order is None:
        return j, p.prob(j)
    if order is p.ids:  # candidate rows in their own order: p is at the same position
        return int(order[j]), float(p.p[j])
    y = int(order[j])
    return y, p.prob(y)


def _logp(p: float) -> float:
    return math.log(p) if p > 0 else float("-inf")


# ---- verify -------------------------------------------------------------------------------------
def verify(draft_tokens, draft_probs, target_probs, target_orders, rng, stdlib: str = "libstdc++", *,
           n_vocab: Optional[int] = None) -> Decision:
    """One exact speculative verification step (n drafts, n draft rows, n + 1 target rows).

    ``draft_probs``: the draft's distribution at each draft position -- an (n, n_vocab) float32
    array, or a sequence of rows, each dense (n_vocab,), a sparse ``(ids, probs)`` pair, or None
    for a deterministic (argmax / n-gram) draft, i.e. q one-hot at the drafted token; None for
    all rows at once. ``target_probs``: the target chain's distribution at each of the n + 1
    positions, in the same forms (no None). Rows must be finite, >= 0 and sum to 1.
    ``target_orders``: n + 1 token orders (or None): the order in which the replacement / bonus
    draw walks the tokens -- e.g. the target chain's candidate order; it must list every token
    with positive residual. None: a sparse row's own order, ascending ids for a dense row.
    ``rng``: the request's distribution stream (an :class:`Mt19937`, or a RequestSamplerState);
    ``stdlib``: its draw convention. ``n_vocab`` is needed only when every row is sparse.

    Returns a :class:`Decision` with the target log-probabilities of the emitted tokens. On an
    error the stream is left untouched.
    """
    stdlib = check_stdlib(stdlib)
    stream = _stream(rng)
    if isinstance(draft_tokens, np.ndarray):
        draft_tokens = draft_tokens.tolist()
    n = len(draft_tokens)
    V = n_vocab if n_vocab is not None else _n_vocab(target_probs, draft_probs)
    if V is None:
        raise ParameterError("n_vocab: required when every probability row is sparse")
    V = int(V)
    toks = _tokens(draft_tokens, V)
    P = _rows(target_probs, n + 1, "target_probs", V, toks)
    if draft_probs is None:
        Q: list = [None] * n
    elif isinstance(draft_probs, np.ndarray) and draft_probs.ndim == 2:
        Q = _rows(draft_probs, n, "draft_probs", V, toks)
    else:
        if isinstance(draft_probs, np.ndarray) or not isinstance(draft_probs, Sequence) or len(draft_probs) != n:
            raise ShapeError(f"draft_probs: expected {n} rows; found {getattr(draft_probs, 'shape', None) or len(draft_probs)}")
        if n and _all_pairs(draft_probs):
            Q = _sparse_rows_batch(draft_probs, "draft_probs", V, toks)
        else:
            Q = [None if r is None else _row(r, f"draft_probs[{i}]", V, toks[i]) for i, r in enumerate(draft_probs)]
    if target_orders is None:
        orders = [None] * (n + 1)
    else:
        if isinstance(target_orders, np.ndarray) and target_orders.ndim != 2:
            raise ShapeError(f"target_orders: expected {n + 1} orders; found shape {target_orders.shape}")
        if len(target_orders) != n + 1:
            raise ShapeError(f"target_orders: expected {n + 1} orders (one per target row); found {len(target_orders)}")
        orders = list(target_orders)

    saved = stream.copy()
    try:
        return _verify(toks, Q, P, orders, stream, stdlib, V)
    except Exception:
        _reset_stream(stream, saved)
        raise


def _reset_stream(dst: Mt19937, src: Mt19937) -> None:
    # Cheaper than snapshot()/restore() (no byte packing) on the common, error-free path.
    dst._mt, dst._idx, dst.consumed, dst.seed = src._mt, src._idx, src.consumed, src.seed


def _verify(toks, Q, P, orders, rng: Mt19937, stdlib: str, V: int) -> Decision:
    start = rng.consumed
    logps: list = []
    n = len(toks)
    p_at = P.pt[:n] if isinstance(P, _BatchRows) else [P[i].prob(x) for i, x in enumerate(toks)]
    q_at = Q.pt[:n] if isinstance(Q, _BatchRows) else [1.0 if Q[i] is None else Q[i].prob(x) for i, x in enumerate(toks)]
    draw_float = rng.uniform_float_value
    log = math.log
    i0 = rng._idx
    rejected = -1
    if n and i0 + n <= len(rng._mt):
        # The next n engine outputs are the state words [i0, i0 + n) (no twist falls inside): the
        # accept tests run in C++ on them (the same rule as below), and the engine advances by the
        # outputs examined.
        acc = int(_core.spec_accept_run(p_at, q_at, rng._mt[i0:i0 + n], _STDLIB_CODE[stdlib]))
        examined = min(acc + 1, n)
        rng._idx += examined
        rng.consumed += examined
        logps = [log(p_at[j]) for j in range(acc)]
        if acc < n:
            rejected = acc
    else:
        for i in range(n):
            p, q = p_at[i], q_at[i]
            u = draw_float(stdlib)  # one output per examined draft, always
            # Accept: never a token the target cannot produce (p = 0); always when the ratio is
            # >= 1 (q(x) = 0 means the draft could not have sampled x); else with probability p/q.
            if p > 0.0 and (q <= 0.0 or p >= q or u < p / q):
                logps.append(log(p))
                continue
            rejected = i
            break
    if rejected >= 0:
        i = rejected
        x = toks[i]
        Pi, Qi = P[i], Q[i]
        order = _order(orders[i], Pi, f"target_orders[{i}]")
        qrow = Qi if Qi is not None else _Row(ids=np.array([x], np.int32), p=np.array([1.0], np.float32))
        order, w, m = _residual_weights(Pi, qrow, order, f"target_orders[{i}]", V)
        if m == 0:  # p == q: the residual is empty, its limit is p itself
            order, w, m = _residual_weights(Pi, None, order, f"target_orders[{i}]", V)
        y, py = _draw(order, w, rng, stdlib, Pi)
        logps.append(_logp(py))
        return Decision(i, y, tuple(toks[:i]) + (y,), tuple(logps), rng.consumed - start)
    Pn = P[n]
    order = _order(orders[n], Pn, f"target_orders[{n}]")
    order, w, _ = _residual_weights(Pn, None, order, f"target_orders[{n}]", V)
    y, py = _draw(order, w, rng, stdlib, Pn)
    logps.append(_logp(py))
    return Decision(n, y, tuple(toks) + (y,), tuple(logps), rng.consumed - start)


# ---- sample-and-match (llama-server) -----------------------------------------------------------
def verify_sample_and_match(chain, target, draft_tokens, *, grammar=None, grammar_first: bool = False,
                            eog_ids=(), n_probs: int = 0) -> Decision:
    """llama-server's verification (``common_sampler_sample_and_accept_n``), seed-identical to it.

    ``target``: the target logits of the n + 1 positions -- an (n + 1, n_vocab) float32 array
    (whole rows) or a :class:`lmtail.sampling.TopKRows` (top-k candidates with a whole-row
    fallback; see :func:`lmtail.sampling.topk_needed`). At each position the chain samples (with
    ``grammar`` as ``common_sample`` applies it) and the token is accepted into the chain and the
    grammar; the step stops at the first sample that differs from the draft, or after a sampled
    EOG token (``eog_ids``) that is not the last draft; when the whole draft matched, one more
    sample is the bonus. One rule beyond llama.cpp 0.3.36: when a token fires a lazy grammar's
    trigger the step stops after it (the grammar constrains from the next token on, which needs a
    whole row), on either kind of ``target``, so both routes emit the same tokens.

    ``n_probs`` > 0 (whole rows only) also reports each emitted token's target log-probability as
    llama-server computes it (softmax of the raw row); llama.cpp's server reports 0.0 there.

    All-or-nothing: the step changes the chain (RNG streams, histories) and the grammar only if
    it returns; on any error (a token the grammar rejects, a bad row, a failing sampler) both are
    put back exactly as they were before the call, so the caller can retry or fall back. The
    grammar therefore needs ``snapshot()``/``restore()`` (GrammarMatcher and LazyGrammarMatcher
    have them).
    """
    from .common_sampling import common_sample, common_sample_row
    from .sampling import Chain
    from .sampling.topk_route import TopKRows

    if not isinstance(chain, Chain):
        raise ParameterError(f"chain: expected an lmtail.sampling.Chain; found {type(chain).__name__}")
    if isinstance(draft_tokens, np.ndarray):
        draft_tokens = draft_tokens.tolist()
    if isinstance(draft_tokens, (str, bytes)) or not hasattr(draft_tokens, "__len__"):
        raise ParameterError(f"draft_tokens: expected a sequence of token ids; found {type(draft_tokens).__name__}")
    n = len(draft_tokens)
    toks = _tokens(draft_tokens, chain.n_vocab)
    if isinstance(eog_ids, (str, bytes)) or not hasattr(eog_ids, "__iter__"):
        raise ParameterError(f"eog_ids: expected an iterable of token ids; found {eog_ids!r}")
    eog_list = list(eog_ids)
    for t in eog_list:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (numbers.Integral, np.integer)) or \
                not 0 <= int(t) < chain.n_vocab:
            raise ParameterError(f"eog_ids: expected token ids in [0, {chain.n_vocab}); found {t!r}")
    eog = frozenset(int(t) for t in eog_list)
    if isinstance(n_probs, bool) or not isinstance(n_probs, numbers.Integral) or n_probs < 0:
        raise ParameterError(f"n_probs: expected an integer >= 0; found {n_probs!r}")
    if grammar is not None and not (callable(getattr(grammar, "snapshot", None))
                                    and callable(getattr(grammar, "restore", None))):
        raise ParameterError("grammar: needs snapshot()/restore() so that a failed step can be undone "
                             f"(found {type(grammar).__name__})")
    if isinstance(target, TopKRows):
        if len(target) != n + 1:
            raise ShapeError(f"target: expected {n + 1} rows (n drafts + 1); found {len(target)}")
        if n_probs:
            raise ParameterError("n_probs > 0 needs whole rows (topk_needed returns 0 for it)")
        rows = None
    else:
        rows = _logit_rows(target, n + 1, chain.n_vocab)

    def sample(i: int) -> int:
        if rows is None:
            return common_sample_row(chain, target, i, grammar, grammar_first)
        return common_sample(chain, rows[i], grammar, grammar_first)

    saved = chain._save("all")
    gsnap = grammar.snapshot() if grammar is not None else None
    try:
        return _sample_and_match(chain, sample, toks, n, rows, grammar, eog, n_probs)
    except BaseException:
        chain._load(saved)
        if grammar is not None:
            grammar.restore(gsnap)
        raise


def _sample_and_match(chain, sample, toks, n, rows, grammar, eog, n_probs) -> Decision:
    out: list[int] = []
    logps: list[float] = []
    accepted = 0
    for i in range(n + 1):
        tok = sample(i)
        waiting = bool(getattr(grammar, "awaiting_trigger", False))
        chain.accept(tok)
        if grammar is not None:
            grammar.accept(tok)
        out.append(tok)
        if n_probs and rows is not None:
            from .sampling.logprobs import server_logprobs

            pr = server_logprobs(rows[i], n_probs, tok).prob
            logps.append(_logp(pr) if pr is not None else float("-inf"))
        if i == n:
            return Decision(n, tok, tuple(out), tuple(logps) if n_probs else None)
        triggered = waiting and not bool(getattr(grammar, "awaiting_trigger", False))
        if toks[i] != tok:
            return Decision(i, tok, tuple(out), tuple(logps) if n_probs else None)
        accepted += 1
        if (tok in eog and i + 1 < n) or triggered:
            return Decision(accepted, None, tuple(out), tuple(logps) if n_probs else None)
    raise AssertionError("unreachable")  # pragma: no cover


def _logit_rows(target, T: int, n_vocab: int) -> np.ndarray:
    target = maybe_host_array(target, "target")
    a = _float_row(target, "target") if isinstance(target, np.ndarray) else None
    if a is None:
        raise DTypeError(f"target: expected a ({T}, {n_vocab}) float32 array or a TopKRows; found {type(target).__name__}")
    if a.shape != (T, n_vocab):
        raise ShapeError(f"target: expected shape ({T}, {n_vocab}) (n drafts + 1 rows); found {a.shape}")
    return a


# ---- greedy -------------------------------------------------------------------------------------
def verify_greedy(head, hidden, draft_tokens, exclude=None) -> Decision:
    """Greedy verification through ``head.greedy`` on the n + 1 target rows: 4 bytes per row.

    ``hidden``: (n + 1, cols) final hidden states of the verify batch; ``exclude`` masks tokens
    inside the argmax only (e.g. ``head.eog_ids`` for ignore-eos). Keeps drafts while they equal
    the row's argmax; the next token is the argmax of the first mismatching row (or the bonus row).
    """
    if isinstance(draft_tokens, np.ndarray):
        draft_tokens = draft_tokens.tolist()
    n = len(draft_tokens)
    toks = _tokens(draft_tokens, head.rows)
    hidden = maybe_host_array(hidden, "hidden")
    h = np.asarray(hidden)
    if h.ndim != 2 or h.shape[0] != n + 1:
        raise ShapeError(f"hidden: expected {n + 1} rows (n drafts + 1); found shape {h.shape}")
    best = head.greedy(hidden, exclude)
    for i in range(n):
        if int(best[i]) != toks[i]:
            return Decision(i, int(best[i]), tuple(toks[:i]) + (int(best[i]),))
    return Decision(n, int(best[n]), tuple(toks) + (int(best[n]),))


__all__ = ["Decision", "verify", "verify_sample_and_match", "verify_greedy", "PROB_SUM_TOLERANCE"]
