"""The top-k read-back route: how many candidates a chain needs, and sampling from them exactly.

A device head can send back the k largest logits of a row (8 bytes each: id + value) instead of the
whole row (4 bytes x n_vocab). That is exact -- same token, same RNG state as the whole-row route
-- when the chain provably never looks past those k candidates:

* :func:`topk_needed` returns the k a chain needs: its truncation point's k (``top_k``'s k, 1 for
  ``greedy``) plus every token the samplers before that point can *lower* (logit biases <= 0, the
  model's suppressed tokens, the last n tokens a repetition penalty can hit): a token outside the
  top (k + lowered) keeps at least k un-lowered tokens above it, so it can never enter the chain's
  top k. It returns 0 (= read the whole row) for chains that read the whole distribution.
* :func:`sample_topk` runs the chain on k + 1 candidates (one more than needed: it bounds every
  unseen logit) and falls back to the whole row whenever a tie could reach the sampled set --
  llama.cpp's order among tied logits depends on tokens outside the top k (its partial sort and
  bucket sort are not stable), so a tie there or at the boundary cannot be resolved from k
  candidates.

The candidates must be the row's top m in canonical order (value descending, id ascending among
equal values), as ``Head.topk`` returns them; the order (and ids, finiteness) is checked, being a
row's top m only when the row is read (a fallback). The sampler works on them in id order, the
relative order they have in a whole row, so array-order rules (greedy's first maximum, logit-bias
application) agree.
"""

from __future__ import annotations

import numbers
import weakref
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import numpy as np

from .._validate import maybe_host_array
from ..errors import ParameterError
from . import samplers as S
from .candidates import TOKEN_DATA, Candidates
from .chain import _DEFAULTS, _EXTRA, _SPECS, Chain, _canonical

f32 = np.float32


@dataclass(frozen=True)
class RoutePlan:
    """Where a chain truncates and what may change before it."""

    index: int  # position of the truncating sampler (top_k or greedy) in the chain
    k: int  # the chain's own k there (top_k's k; 1 for greedy)
    bias_tokens: frozenset  # tokens a logit bias <= 0 can lower before the truncation
    penalty_last_n: int  # tokens a repetition penalty can lower (its last_n), 0 if none

    def needed(self, suppressed: Iterable[int] = ()) -> int:
        """Candidates the chain needs: k + lowered tokens (+ ``suppressed``) + penalty window."""
        return self.k + len(self.bias_tokens | frozenset(int(t) for t in suppressed)) + self.penalty_last_n


def _entries(spec) -> list[tuple[str, dict]]:
    """(name, arguments) per chain entry, with llama.cpp's optional arguments filled in."""
    if isinstance(spec, Chain):
        spec = spec.spec
    if isinstance(spec, (str, bytes)) or not hasattr(spec, "__iter__"):
        raise ParameterError(f"spec: expected a list of (name, *args) tuples or a Chain; found {spec!r}")
    out = []
    for entry in spec:
        if isinstance(entry, str):
            entry = (entry,)
        if not isinstance(entry, (tuple, list)) or not entry:
            raise ParameterError(f"chain entry: expected a tuple (name, *args); found {entry!r}")
        name = _canonical(entry[0])
        args = list(entry[1:])
        if name in _EXTRA:
            out.append((name, {"args": args}))
            continue
        req, opt = _SPECS[name]
        if not len(req) <= len(args) <= len(req) + len(opt):
            sig = ", ".join(list(req) + [f"[{o}]" for o in opt])
            raise ParameterError(f"{name}: expected ({sig}); found {len(args)} argument(s) {tuple(args)!r}")
        a = dict(zip(list(req) + list(opt), args))
        for k in opt:
            a.setdefault(k, _DEFAULTS.get(k))
        out.append((name, a))
    return out


def _real(a: dict, k: str, name: str) -> np.float32:
    v = a[k]
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ParameterError(f"{name}.{k}: expected a real number; found {v!r}")
    return f32(v)


def _int(a: dict, k: str, name: str) -> int:
    v = a[k]
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ParameterError(f"{name}.{k}: expected an integer; found {v!r}")
    return int(v)


def _disabled(name: str, a: dict) -> bool:
    """The samplers llama.cpp's init_* turns into no-ops (chain.build_sampler's conditions)."""
    if name == "top_k":
        return _int(a, "k", name) <= 0
    if name == "top_p":
        return bool(_real(a, "p", name) >= 1.0)
    if name == "min_p":
        return bool(_real(a, "p", name) <= 0.0)
    if name == "typical":
        return bool(_real(a, "p", name) >= 1.0)
    if name == "temp":
        return bool(_real(a, "t", name) == 1.0)
    if name == "temp_ext":
        return bool(_real(a, "t", name) == 1.0 and _real(a, "delta", name) <= 0.0)
    if name == "xtc":
        return bool(_real(a, "probability", name) <= 0.0 or _real(a, "threshold", name) > 0.5)
    if name == "top_n_sigma":
        return bool(_real(a, "n", name) <= 0.0)
    if name == "penalties":
        return S.Penalties.disabled(max(_int(a, "last_n", name), 0), _real(a, "repeat", name),
                                    _real(a, "freq", name), _real(a, "present", name))
    if name == "dry":
        return not (_real(a, "multiplier", name) != 0.0 and _real(a, "base", name) >= 1.0
                    and _int(a, "last_n", name) != 0)
    if name == "logit_bias":
        b = a["biases"]
        return not (list(b.items()) if isinstance(b, dict) else list(b))
    return False


# Samplers that read the whole distribution wherever they stand (the list: mirostat, DRY,
# top-n-sigma, dynamic temperature), and grammar-like samplers registered from outside.
def _whole_anywhere(name: str, a: dict) -> bool:
    if name in ("mirostat", "mirostat_v2", "dry", "top_n_sigma") or name in _EXTRA:
        return True
    if name == "temp_ext":
        return bool(_real(a, "delta", name) > 0.0)
    return False


def route_plan(spec) -> Optional[RoutePlan]:
    """The chain's truncation point and what precedes it; None when it needs the whole row."""
    bias: set[int] = set()
    pen = 0
    plan = None
    for idx, (name, a) in enumerate(_entries(spec)):
        if _disabled(name, a):
            continue
        if _whole_anywhere(name, a):
            return None
        if plan is not None:
            continue  # after the truncation the chain only sees the candidates
        if name == "logit_bias":
            b = a["biases"]
            for it in (list(b.items()) if isinstance(b, dict) else list(b)):
                if not (isinstance(it, (tuple, list)) and len(it) == 2):
                    raise ParameterError(f"logit_bias: expected (token, bias) pairs; found {it!r}")
                v = it[1]
                if isinstance(v, bool) or not isinstance(v, numbers.Real):
                    raise ParameterError(f"logit_bias: expected a real bias; found {v!r}")
                if not f32(v) <= 0.0:  # a positive (or NaN) bias can lift any token: whole row
                    return None
                bias.add(int(it[0]))
        elif name == "penalties":
            rep, freq, pres = _real(a, "repeat", name), _real(a, "freq", name), _real(a, "present", name)
            # repeat >= 1 divides positive logits and multiplies negative ones: never raises;
            # freq, present >= 0 subtract. Anything else can raise a token: whole row.
            if not (rep >= 1.0 and freq >= 0.0 and pres >= 0.0):
                return None
            pen += max(_int(a, "last_n", name), 0)
        elif name in ("temp", "temp_ext"):
            continue  # a positive scale keeps the order; t <= 0 keeps one maximum (ties: fallback)
        elif name == "top_k":
            plan = RoutePlan(idx, _int(a, "k", name), frozenset(), 0)
        elif name == "greedy":
            plan = RoutePlan(idx, 1, frozenset(), 0)
        else:  # dist, top_p/min_p/typical/xtc before top_k, adaptive_p, infill: whole row
            return None
    if plan is None:
        return None
    return RoutePlan(plan.index, plan.k, frozenset(bias), pen)


def _grammar_constrains(grammar) -> bool:
    # A lazy grammar still waiting for its trigger allows every token: it constrains nothing.
    return grammar is not None and not getattr(grammar, "awaiting_trigger", False)


def topk_needed(spec, n_probs: int = 0, suppressed: Iterable[int] = (), *, n_vocab: Optional[int] = None,
                grammar=None) -> int:
    """The k a chain needs to sample the same token from the top-k candidates, or 0 for the whole row.

    ``spec`` is a chain spec (list of tuples, as :class:`Chain` takes) or a :class:`Chain` (then
    n_vocab and a ``common_chain``'s n_probs come from it). k = the chain's top_k (1 when
    greedy) + the tokens it can lower before that point: logit biases <= 0, ``suppressed``
    (the model's suppressed tokens), and a repetition penalty's last_n. 0 for chains that read the
    whole distribution: n_probs > 0, mirostat, DRY, top_n_sigma, dynamic temperature, top_p /
    min_p / typical / XTC / dist before any top_k, positive biases, negative frequency or presence
    penalties, repeat penalty < 1, and a grammar that constrains the next token (a lazy grammar
    waiting for its trigger does not). Samplers disabled by their parameters count as absent.
    With n_vocab known, 0 also when k candidates (8 bytes each) would cost as much as the row.

    Read k + 1 candidates: :func:`sample_topk` uses the extra one to bound the unseen logits.
    """
    if isinstance(n_probs, bool) or not isinstance(n_probs, numbers.Integral) or n_probs < 0:
        raise ParameterError(f"n_probs: expected an integer >= 0; found {n_probs!r}")
    if isinstance(spec, Chain):
        n_probs = max(int(n_probs), int(spec.params.get("n_probs", 0) or 0))
        n_vocab = spec.n_vocab if n_vocab is None else n_vocab
    supp = [int(t) for t in suppressed]
    if n_probs > 0 or _grammar_constrains(grammar):
        return 0
    plan = route_plan(spec)
    if plan is None:
        return 0
    k = plan.needed(supp)
    if n_vocab is not None and 2 * (k + 1) >= int(n_vocab):
        return 0  # 8 (k + 1) bytes >= 4 n_vocab: the whole row is no more expensive
    return k


def batch_topk_needed(needs: Iterable[int]) -> int:
    """k for a batch: the largest any request needs, or 0 if one needs the whole row."""
    out = 0
    for k in needs:
        if k == 0:
            return 0
        out = max(out, int(k))
    return out


_PLANS: "weakref.WeakKeyDictionary[Chain, tuple]" = weakref.WeakKeyDictionary()


def _chain_plan(chain: Chain) -> Optional[RoutePlan]:
    key = tuple(repr(e) for e in chain.spec)
    hit = _PLANS.get(chain)
    if hit is not None and hit[0] == key:
        return hit[1]
    plan = route_plan(chain)
    _PLANS[chain] = (key, plan)
    return plan


class RouteStats:
    """Counts of how rows were sampled (for benches and tests)."""

    def __init__(self) -> None:
        self.topk = 0
        self.fallback = 0
        self.whole = 0

    def __repr__(self) -> str:
        return f"RouteStats(topk={self.topk}, fallback={self.fallback}, whole={self.whole})"


STATS = RouteStats()


def _apply_bias_full_row_rule(bias: S.LogitBias, c: Candidates) -> None:
    # On a whole row every valid entry takes llama.cpp's direct path (the token sits at its own
    # index): every entry is added, in list order, duplicates included. Reproduce that on the
    # id-ordered subset rather than the search path the subset would otherwise take.
    v = c.view()
    ids = v["id"]
    logit = v["logit"]
    for tok, b in bias.biases:
        if 0 <= tok < bias.n_vocab:
            pos = int(np.searchsorted(ids, tok))
            if pos < len(ids) and ids[pos] == tok:
                logit[pos] = f32(logit[pos] + b)


def _check_candidates(ids: np.ndarray, values: np.ndarray, what: str) -> tuple:
    """(ids int64, values float32) of one or more rows (last axis) of candidates; ParameterError
    unless integer ids >= 0 and finite values come in canonical order (value non-increasing, ids
    strictly increasing among equal values) with no id twice."""
    if ids.dtype.kind not in "iu" or values.dtype.kind != "f":
        raise ParameterError(f"{what}: expected integer ids and float values; found {ids.dtype} and {values.dtype}")
    v = values.astype(np.float32, copy=False)  # the precision the samplers see (ties included)
    i = ids.astype(np.int64, copy=False)
    if not np.isfinite(v).all():
        raise ParameterError(f"{what}: candidate values must be finite (a head's top-k never holds NaN/inf)")
    if i.size and i.min() < 0:
        raise ParameterError(f"{what}: token ids must be >= 0; found {int(i.min())}")
    lower = v[..., 1:] > v[..., :-1]
    tie = (v[..., 1:] == v[..., :-1]) & (i[..., 1:] <= i[..., :-1])
    if lower.any() or tie.any():
        bad = np.argwhere(lower | tie)[0]
        raise ParameterError(f"{what}: candidates are not in canonical order (value descending, id ascending "
                             f"among equal values) at position {int(bad[-1]) + 1}{f' of row {int(bad[0])}' if v.ndim > 1 else ''}"
                             f" -- pass Head.topk's output unchanged")
    srt = np.sort(i, axis=-1)
    if (srt[..., 1:] == srt[..., :-1]).any():
        raise ParameterError(f"{what}: a token id appears twice among the candidates")
    return i, v


def _check_top_m(row: np.ndarray, ids: np.ndarray, v: np.ndarray) -> None:
    # Exactly the row's top m in canonical order: the values are the row's, no other token lies
    # above the smallest, and the tokens tied with it are the lowest ids holding that value.
    if ids.max() >= len(row) or not np.array_equal(row[ids], v):
        raise ParameterError("candidates: the values are not the row's logits at those ids")
    vmin = v[-1]
    if np.count_nonzero(row > vmin) != np.count_nonzero(v > vmin):
        raise ParameterError("candidates: they are not the row's top m (a larger logit is missing)")
    at = ids[v == vmin]
    if not np.array_equal(np.flatnonzero(row == vmin)[:len(at)], at):
        raise ParameterError("candidates: among tokens tied at the smallest value they are not the lowest ids")


def sample_topk(chain: Chain, ids: np.ndarray, values: np.ndarray,
                row: Optional[Callable[[], np.ndarray]] = None, *, suppressed: Iterable[int] = (),
                _checked: bool = False) -> int:
    """The token ``chain.sample(whole_row)`` would return, from top candidates of that row.

    ``ids``/``values``: the row's m largest logits in canonical order (value descending, id
    ascending among equal values), m >= ``topk_needed(chain) + 1`` (``Head.topk(hidden, k + 1)``
    returns exactly this). ``row()`` returns the whole row; it is called only on a fallback (a tie
    that could reach the sampled set, too few candidates, or a chain that needs the whole row).
    The chain's RNG streams advance exactly as on the whole row; the token is not accepted (call
    ``chain.accept``).

    Preconditions. Checked (ParameterError): integer ids in [0, n_vocab), each at most once;
    finite values; canonical order. Not checkable without the row: that the candidates *are* the
    row's top m -- other candidates can give a token the whole row would not. Whenever the row is
    read on a fallback it is checked too (values equal the row's at those ids, nothing larger
    outside, ties at the smallest value resolved to the lowest ids), and a violation raises.

    All-or-nothing: on any error the chain's state (RNG streams) is as before the call.
    """
    ids = np.asarray(maybe_host_array(ids, "ids"))
    values = np.asarray(maybe_host_array(values, "values"))
    if ids.ndim != 1 or values.shape != ids.shape or len(ids) == 0:
        raise ParameterError(f"candidates: expected equal-length 1-D ids and values; found {ids.shape} and {values.shape}")
    if not _checked:
        ids, values = _check_candidates(ids, values, "candidates")
    if ids.max() >= chain.n_vocab:
        raise ParameterError(f"candidates: token ids must lie in [0, {chain.n_vocab}); found {int(ids.max())}")
    m = len(ids)
    plan = _chain_plan(chain)

    def whole(stat: str, check: bool = False) -> int:
        if row is None:
            raise ParameterError("sample_topk: the candidates cannot decide this row exactly and no whole-row "
                                 "fetch (row=) was given")
        r = chain.check_logits(row())
        if check:
            _check_top_m(r, ids, values)
        tok = chain.sample(r)
        setattr(STATS, stat, getattr(STATS, stat) + 1)
        return tok

    if plan is None:
        return whole("whole")
    if m < plan.needed(suppressed) + 1 and m < chain.n_vocab:
        return whole("whole")
    order = np.argsort(ids, kind="stable")
    buf = np.empty(m, TOKEN_DATA)
    buf["id"] = ids[order]
    buf["logit"] = values[order]
    buf["p"] = 0.0
    c = Candidates(buf, m)
    saved = chain._save("apply")
    try:
        for s in chain.samplers[:plan.index]:
            if isinstance(s, S.LogitBias):
                _apply_bias_full_row_rule(s, c)
            else:
                s.apply(c)
        # Exactness check on the logits the truncating sampler will see. Every unseen token's
        # logit is <= the smallest candidate's (it can only have been lowered), so the chain's top
        # k is decided iff its k-th value is strictly above that bound, strictly above the (k+1)-th
        # candidate, and the kept values are pairwise distinct (their order is then unique).
        mod = np.sort(c.view()["logit"])[::-1]
        kk = min(plan.k, m)
        theta = mod[kk - 1]
        ok = bool(np.all(mod[:kk - 1] > mod[1:kk]))
        if ok and kk < m:
            ok = bool(theta > mod[kk])
        if ok and m < chain.n_vocab:
            ok = bool(theta > values.min())
        if not ok:
            return whole("fallback", check=True)
        for s in chain.samplers[plan.index:]:
            s.apply(c)
        if not 0 <= c.selected < c.size:
            raise S.SamplingError(f"the chain {chain.names} selected no token (selected={c.selected}, size={c.size})")
    except BaseException:
        chain._load(saved)
        raise
    chain.last = c
    STATS.topk += 1
    return int(c.buf["id"][c.offset + c.selected])


class TopKRows:
    """T rows of top candidates (``Head.topk(hidden, k + 1)``) plus a whole-row fetch (``Head.row``).

    ``ids``/``values``: (T, m) arrays, each row the m largest logits of its row in canonical order
    (value descending, id ascending among equal values) -- exactly what ``Head.topk`` returns.
    Integer ids, each at most once per row, finite values and the order are checked here
    (ParameterError); that each row really is its row's top m cannot be checked without reading
    the rows, which is what the route avoids: it is checked on every fallback, when ``row(t)`` is
    read anyway (see :func:`sample_topk`). ``row(t)`` is only called when a row cannot be decided
    from its candidates (a fallback) or needs the whole distribution (a grammar that constrains the
    token).
    """

    def __init__(self, ids: np.ndarray, values: np.ndarray, row: Optional[Callable[[int], np.ndarray]] = None):
        ids = np.asarray(maybe_host_array(ids, "ids"))
        values = np.asarray(maybe_host_array(values, "values"))
        if ids.ndim != 2 or values.shape != ids.shape or ids.shape[1] == 0:
            raise ParameterError(f"TopKRows: expected (T, m) ids and values of one shape, m >= 1; found "
                                 f"{ids.shape} and {values.shape}")
        if row is not None and not callable(row):
            raise ParameterError(f"TopKRows: row must be a callable row(t) -> logits; found {type(row).__name__}")
        self.ids, self.values = _check_candidates(ids, values, "TopKRows")
        self._row = row

    def __len__(self) -> int:
        """T, the number of rows."""
        return int(self.ids.shape[0])

    def row(self, t: int) -> np.ndarray:
        """Row t's whole logits (through the ``row`` callable; ParameterError without one)."""
        if self._row is None:
            raise ParameterError("TopKRows: no whole-row fetch was given (row=)")
        return self._row(t)

    def _index(self, t) -> int:
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or not 0 <= int(t) < len(self):
            raise ParameterError(f"TopKRows: row index must be an integer in [0, {len(self)}); found {t!r}")
        return int(t)

    def sample(self, chain: Chain, t: int) -> int:
        """Row t's token as ``chain.sample(whole_row_t)`` returns it (not accepted). All-or-nothing:
        on an error the chain's state is as before. With a grammar:
        :func:`lmtail.common_sampling.common_sample_row` (above this package)."""
        t = self._index(t)
        return sample_topk(chain, self.ids[t], self.values[t], (lambda: self.row(t)) if self._row else None,
                           _checked=True)


__all__ = ["topk_needed", "batch_topk_needed", "route_plan", "RoutePlan", "sample_topk", "TopKRows", "STATS"]
