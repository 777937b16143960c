"""The full token mask, vectorised over the vocabulary (numpy).

llama.cpp moves every candidate token one code point at a time through every stack.  Here the
tokens move in *groups*: all tokens that reached the same interned Earley state after the same
number of code points are one group; a group's next code points are classified at once (a
per-state lookup table from code point to "which character sets match"), and the group splits
by class into the memoised successor states.  Two precomputations make it cheap:

* **self-loop slicing**: when a state steps to itself on a set of characters disjoint from
  everything else it can scan (inside a JSON string, inside ``[0-9]*``, a whitespace run), every
  token of the group jumps in one gather to its first code point outside that set
  (``next_stop``, precomputed once per vocabulary and character set);
* **lookup tables** per set signature for code points below ``LUT_N``; rarer code points are
  classified vectorised per set.

End-of-token decisions (nothing pending, or a partial code point that can still complete to a
character of some set the state waits on) are vectorised too.  Small groups fall back to the
scalar walk with memoised per-code-point transitions.
"""

from __future__ import annotations

import numpy as np

from .earley import CharSet, State
from .parser import TOKEN
from .vocab import Vocab

__all__ = ["TokenTable", "compute_mask", "scalar_walk", "end_ok"]

LUT_N = 0x3100  # ASCII, Latin, Greek, Cyrillic, general punctuation, CJK symbols and kana
_SMALL = 6


class TokenTable:
    """Per-vocabulary arrays: each token's decoded code points (no pending bytes), flat."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        flat, offs, lens, fval, fnrem, bad, cont, valid = vocab.tables()
        self.flat, self.offs, self.lens, self.fval, self.fnrem = flat, offs, lens, fval, fnrem
        self.cont, self.valid = cont, valid
        self.ends = offs + lens
        vl = lens[valid]
        self.ended0 = valid[vl == 0]  # valid tokens that decode to no code point at all
        self.valid1 = valid[vl > 0]
        self.first1 = flat[offs[self.valid1]]
        self.cached = 0  # elements held by the split trees (see compute_mask)
        self._stops: dict[tuple, np.ndarray] = {}
        self._dec: dict[int, tuple[tuple[int, ...], tuple[int, int]]] = {}

    def decoded(self, token: int) -> tuple[tuple[int, ...], tuple[int, int]]:
        d = self._dec.get(token)
        if d is None:
            o = int(self.offs[token])
            d = (tuple(self.flat[o : o + int(self.lens[token])].tolist()), (int(self.fval[token]), int(self.fnrem[token])))
            self._dec[token] = d
        return d

    def next_stop(self, sets: tuple[CharSet, ...]) -> np.ndarray:
        """For each flat position p: the first position >= p whose code point is in none of ``sets``."""
        key = tuple(cs.key for cs in sets)
        r = self._stops.get(key)
        if r is None:
            flat = self.flat
            inset = np.zeros(flat.shape, bool)
            for cs in sets:
                inset |= match_vec(cs, flat)
            n = flat.shape[0]
            pos = np.where(inset, n, np.arange(n, dtype=np.int64))
            r = np.minimum.accumulate(pos[::-1])[::-1].copy()
            self._stops[key] = r
        return r


def match_vec(cs: CharSet, cp: np.ndarray) -> np.ndarray:
    if cs.any:
        return np.ones(cp.shape, bool)
    m = np.zeros(cp.shape, bool)
    for lo, hi in cs.ranges:
        if lo == hi:
            m |= cp == lo
        elif lo < hi:
            m |= (cp >= lo) & (cp <= hi)
    return ~m if cs.negated else m


def partial_vec(sets: list[CharSet], sids: tuple[int, ...], v: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Vectorised ``utf8.match_partial``: can the pending (v, r) complete into some set?"""
    valid = (r > 0) & ~((r == 1) & (v < 2))
    sh = np.maximum(r, 0) * 6
    low = (v << sh) & 0xFFFFFFFF
    high = low | ((np.int64(1) << sh) - 1)
    low = np.where((low == 0) & (r == 2), 1 << 11, low)
    low = np.where((low == 0) & (r == 3), 1 << 16, low)
    ok = np.zeros(v.shape, bool)
    for sid in sids:
        cs = sets[sid]
        if cs.any:
            ok |= valid
            continue
        hit = np.zeros(v.shape, bool)
        for lo, hi in cs.ranges:
            hit |= (lo <= high) & (low <= hi)
        ok |= valid & (~hit if cs.negated else hit)
    return ok


def end_ok(state: State, partial: tuple[int, int]) -> bool:
    """Is a token that ends here (no code point left) accepted by this state?"""
    if partial[1] == 0:
        return state.alive
    key = ("p", partial)
    r = state.cache.get(key)
    if r is None:
        from .utf8 import match_partial

        sets = state.prog.sets
        r = any(match_partial(sets[s].ranges, sets[s].negated, sets[s].any, partial) for s in state.sets)
        state.cache[key] = r
    return r


def token_matches(state: State, token: int) -> bool:
    for (typ, val), _q, _c in state.toks:
        if (typ == TOKEN) == (val == token):
            return True
    return False


def scalar_walk(st: State, token: int, cps, fin: tuple[int, int], start: int = 0) -> bool:
    """One token from code point ``start`` on, llama.cpp's rules (see matcher module docstring)."""
    for i in range(start, len(cps)):
        if st.toks and token_matches(st, token):
            return True
        st = st.step(cps[i])
        if st is None:
            return False
    return end_ok(st, fin)


def _loop_sets(st: State) -> tuple[int, ...]:
    """Sets on which ``st`` steps to itself and which overlap no other set of ``st``."""
    r = st.cache.get("loop")
    if r is None:
        prog = st.prog
        dcache = prog.__dict__.setdefault("_disjoint_sids", {})
        alone = dcache.get(st.sets)
        if alone is None:  # sets of this signature that overlap no other set of it
            sets = prog.sets
            alone = dcache[st.sets] = tuple(
                sid for sid in st.sets if all(sets[sid].disjoint(sets[o]) for o in st.sets if o != sid)
            )
        r = tuple(sid for sid in alone if st.step_class((sid,)) is st)
        st.cache["loop"] = r
    return r


def _classifier(st: State):
    """(lut, classes, code_of) for the state's set signature, cached on the Program."""
    prog = st.prog
    cache = prog.__dict__.setdefault("_luts", {})
    sig = st.sets
    c = cache.get(sig)
    if c is None:
        sets = prog.sets
        cps = np.arange(LUT_N, dtype=np.int64)
        if len(sig) <= 62:
            code = np.zeros(LUT_N, np.int64)
            for j, sid in enumerate(sig):
                code |= match_vec(sets[sid], cps).astype(np.int64) << j
            u, inv = np.unique(code, return_inverse=True)
            classes = [tuple(sid for j, sid in enumerate(sig) if (int(k) >> j) & 1) for k in u.tolist()]
            code_of = {int(k): i for i, k in enumerate(u.tolist())}
            lut = inv.reshape(-1).astype(np.int32)
        else:
            lut = None
            classes, code_of = [], {}
        c = cache[sig] = (lut, classes, code_of)
    return c


def _classify(st: State, cps: np.ndarray) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    lut, classes, code_of = _classifier(st)
    sets = st.prog.sets
    sig = st.sets
    if lut is None:  # > 62 sets: classify distinct code points one by one
        u, inv = np.unique(cps, return_inverse=True)
        out = np.empty(u.shape, np.int64)
        for i, cp in enumerate(u.tolist()):
            cl = st.classify(cp)
            k = code_of.get(cl)
            if k is None:
                k = code_of[cl] = len(classes)
                classes.append(cl)
            out[i] = k
        return out[inv.reshape(-1)], classes
    small = cps < LUT_N
    if small.all():
        return lut[cps], classes
    ci = np.empty(cps.shape, np.int64)
    ci[small] = lut[cps[small]]
    big = ~small
    bc = cps[big]
    code = np.zeros(bc.shape, np.int64)
    for j, sid in enumerate(sig):
        code |= match_vec(sets[sid], bc).astype(np.int64) << j
    u, inv = np.unique(code, return_inverse=True)
    ks = np.empty(u.shape, np.int64)
    for i, k in enumerate(u.tolist()):
        idx = code_of.get(k)
        if idx is None:
            idx = code_of[k] = len(classes)
            classes.append(tuple(sid for j, sid in enumerate(sig) if (k >> j) & 1))
        ks[i] = idx
    ci[big] = ks[inv.reshape(-1)]
    return ci, classes


def _ended(tab: TokenTable, st: State, e: np.ndarray, m: np.ndarray) -> None:
    nr = tab.fnrem[e]
    zero = nr == 0
    if st.alive and zero.any():
        m[e[zero]] = True
    if st.sets and not zero.all():
        pe = e[~zero]
        ok = partial_vec(st.prog.sets, st.sets, tab.fval[pe], tab.fnrem[pe])
        m[pe[ok]] = True


def _tok_hits(st: State, idx: np.ndarray) -> np.ndarray:
    hit = np.zeros(idx.shape, bool)
    for (typ, val), _q, _c in st.toks:
        hit |= (idx == val) if typ == TOKEN else (idx != val)
    return hit


CACHE_ELEMENTS = 24_000_000  # int32 ids + depths kept in split trees per vocabulary (<= 96 MB)


def _node(tab: TokenTable, s: State, loop: tuple[int, ...], idx: np.ndarray, dep: np.ndarray):
    """Process one group of tokens in a state without token references.

    Everything here depends only on the state's set signature and self-loop sets, never on the
    state itself, so the result is cached in the split tree: (accepted token ids, groups by the
    class of the next code point [(class, ids, depths)], classes).
    """
    acc = []
    ln = tab.lens[idx]
    e = dep == ln
    if e.any():
        acc.append(idx[e])
        keep = ~e
        idx, dep = idx[keep], dep[keep]
    if loop and idx.size:
        e_idx, idx, dep = _slice(tab, s, loop, idx, dep)
        if e_idx.size:
            acc.append(e_idx)
    ended = np.concatenate(acc) if acc else idx[:0]
    if ended.size:  # end-of-token rule: nothing pending, or a completable partial code point
        nr = tab.fnrem[ended]
        zero = nr == 0
        if not zero.all():
            pe = ended[~zero]
            ok = partial_vec(s.prog.sets, s.sets, tab.fval[pe], tab.fnrem[pe])
            ended = np.concatenate((ended[zero], pe[ok]))
    groups = []
    classes: list = []
    if idx.size:
        cps = tab.flat[tab.offs[idx] + dep]
        ci, classes = _classify(s, cps)
        classes = list(classes)
        dep1 = dep + 1
        nk = len(classes)
        counts = np.bincount(ci, minlength=nk)
        present = np.flatnonzero(counts)
        if present.size == 1:
            k = int(present[0])
            if classes[k]:
                groups.append((k, idx, dep1))
        else:
            order = np.argsort(ci.astype(np.int16) if nk < 32768 else ci, kind="stable")
            bounds = np.concatenate(([0], np.cumsum(counts)))
            for k in present.tolist():
                if classes[k]:
                    sel = order[bounds[k] : bounds[k + 1]]
                    groups.append((k, idx[sel], dep1[sel]))
    return ended, groups, classes


def _slice(tab: TokenTable, s: State, loop: tuple[int, ...], idx: np.ndarray, dep: np.ndarray):
    """Advance every token over its run of code points in the state's self-loop sets.
    Returns (ended tokens, remaining tokens, their depths)."""
    start = tab.offs[idx]
    ns = tab.next_stop(tuple(s.prog.sets[x] for x in loop))
    dep = np.minimum(ns[start + dep], tab.ends[idx]) - start
    e = dep == tab.lens[idx]
    if e.any():
        keep = ~e
        return idx[e], idx[keep], dep[keep]
    return idx[:0], idx, dep


def compute_mask(tab: TokenTable, st: State, m: np.ndarray) -> None:
    """Set ``m[t]`` for every non-EOG token ``t`` the state accepts (no pending bytes).

    Groups of tokens walk the interned states; for states without token references the numpy
    work of a group is cached in a *split tree* (per vocabulary and grammar, keyed by set
    signature and self-loop sets), so a mask in a state met before in another context only
    replays index arrays.
    """
    roots = tab.__dict__.setdefault("_roots", {})
    prog = st.prog
    r = roots.get(id(prog))
    if r is None or r[0] is not prog:
        r = roots[id(prog)] = (prog, {})
    work: list = [(st, tab.valid, np.zeros(tab.valid.shape, np.int64), r[1])]
    while work:
        s, idx, dep, slot = work.pop()
        if idx.size <= _SMALL:
            for t, d in zip(idx.tolist(), dep.tolist()):
                cps, fin = tab.decoded(t)
                if scalar_walk(s, t, cps, fin, d):
                    m[t] = True
            continue
        if not s.toks:
            if not s.sets:  # only the completed root: accepts tokens that end right here
                e = idx[dep == tab.lens[idx]]
                m[e[tab.fnrem[e] == 0]] = True
                continue
            loop = _loop_sets(s)
            key = (s.sets, loop)
            node = slot.get(key) if slot is not None else None
            if node is None:
                ended, groups, classes = _node(tab, s, loop, idx, dep)
                size = ended.size + 2 * sum(gi.size for _k, gi, _gd in groups)
                if slot is not None and tab.cached + size <= CACHE_ELEMENTS:
                    tab.cached += size
                    node = slot[key] = (
                        ended.astype(np.int32),
                        [(k, gi.astype(np.int32), gd.astype(np.int32), {}) for k, gi, gd in groups],
                        classes,
                    )
                else:
                    node = (ended, [(k, gi, gd, None) for k, gi, gd in groups], classes)
            ended, groups, classes = node
            if ended.size:
                m[ended] = True
            for k, gi, gd, child in groups:
                nxt = s.step_class(classes[k])
                if nxt is not None:
                    work.append((nxt, gi, gd, child))
            continue
        # a state with token references (<[id]>, !<[id]>): uncached generic step
        ln = tab.lens[idx]
        e = dep == ln
        if e.any():
            _ended(tab, s, idx[e], m)
            keep = ~e
            idx, dep = idx[keep], dep[keep]
        if idx.size:
            hit = _tok_hits(s, idx)
            if hit.any():
                m[idx[hit]] = True
                keep = ~hit
                idx, dep = idx[keep], dep[keep]
        if not s.sets or not idx.size:
            continue
        ended, groups, classes = _node(tab, s, _loop_sets(s), idx, dep)
        if ended.size:
            m[ended] = True
        for k, gi, gd in groups:
            nxt = s.step_class(classes[k])
            if nxt is not None:
                work.append((nxt, gi, gd, None))
