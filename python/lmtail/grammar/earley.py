"""An Earley recognizer over code points whose states are canonical, so work can be memoised.

The grammar is llama.cpp's element array (see :mod:`.parser`), all rules concatenated; an Earley
item is ``(p, ctx)``: ``p`` points at the next element of an alternative, ``ctx`` names the set
of *return points* to advance when that rule completes (Earley's origin, expressed as the items
waiting for the rule rather than as a position).  Two choices make states position-independent:

* **tail calls**: a reference in the last position of an alternative does not add a return point;
  the callee inherits the caller's return points (llama.cpp does the same on its stacks).  The
  right-recursive rules that ``*``/``+``/``{m,}`` desugar to therefore give *equal* states at
  every repetition (inside a JSON string, every character leads back to the same state);
* **interning**: the return-point sets created while closing one Earley set form a *frame*; a
  frame is interned by value (its references to itself are written relatively), and a state is
  interned by its kernel (the items after a scan).  Equal states have equal futures, so
  transitions (``state x character class -> state``), token checks and masks are memoised per
  state.

All parses stay alive (no exponential blow-up on ambiguous grammars: at most one context per
rule and closure), left recursion -- also the hidden kinds llama.cpp loops on -- is handled by the
context cycles, and the completed start rule is the ``complete`` flag (llama.cpp: an empty stack).
"""

from __future__ import annotations

from .parser import ALT, CHAR, CHAR_ALT, CHAR_ANY, CHAR_NOT, CHAR_RNG_UPPER, END, RULE_REF, TOKEN, TOKEN_NOT, ParsedGrammar

__all__ = ["CharSet", "Program", "State"]

_K_END, _K_REF, _K_CHARS, _K_TOK, _K_OTHER = range(5)
_CUR = -3  # context created in the closure being computed
_SELF = -2  # inside a stored frame: a context of the same frame
ACCEPT = (-1, 0)  # context of the start rule: completing it completes the root
_ACCEPT_MEMBER = (-1, None)


class CharSet:
    """One terminal: a llama.cpp character set (``CHAR``/``CHAR_NOT``/``CHAR_ANY`` + modifiers)."""

    __slots__ = ("sid", "ranges", "negated", "any", "key", "lo", "hi")

    def __init__(self, sid: int, ranges: tuple[tuple[int, int], ...], negated: bool, any_char: bool):
        self.sid = sid
        self.ranges = ranges
        self.negated = negated
        self.any = any_char
        self.key = (ranges, negated, any_char)

    def intervals(self) -> tuple[tuple[int, int], ...]:
        """The code points this set matches, as sorted disjoint inclusive intervals in [0, 2^32)."""
        top = 0xFFFFFFFF
        if self.any:
            return ((0, top),)
        iv = sorted((lo, hi) for lo, hi in self.ranges if lo <= hi)
        merged: list[list[int]] = []
        for lo, hi in iv:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        if not self.negated:
            return tuple((a, b) for a, b in merged)
        out, nxt = [], 0
        for lo, hi in merged:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = max(nxt, hi + 1)
        if nxt <= top:
            out.append((nxt, top))
        return tuple(out)

    def disjoint(self, other: "CharSet") -> bool:
        a, b = self.intervals(), other.intervals()
        i = j = 0
        while i < len(a) and j < len(b):
            if a[i][1] < b[j][0]:
                i += 1
            elif b[j][1] < a[i][0]:
                j += 1
            else:
                return False
        return True

    def __contains__(self, cp: int) -> bool:
        if self.any:
            return True
        found = False
        for lo, hi in self.ranges:
            if lo <= cp <= hi:
                found = True
                break
        return found != self.negated

    def describe(self) -> str:
        if self.any:
            return "."

        def ch(c: int) -> str:
            if c in (0x5C, 0x5D, 0x2D, 0x5E):
                return "\\" + chr(c)
            if 0x20 <= c < 0x7F:
                return chr(c)
            return f"\\x{c:02X}" if c < 0x100 else (f"\\u{c:04X}" if c < 0x10000 else f"\\U{c:08X}")

        if not self.negated and len(self.ranges) == 1 and self.ranges[0][0] == self.ranges[0][1]:
            c = self.ranges[0][0]
            return '"' + (ch(c) if c != 0x22 else '\\"') + '"'
        body = "".join(ch(lo) if lo == hi else f"{ch(lo)}-{ch(hi)}" for lo, hi in self.ranges)
        return "[" + ("^" if self.negated else "") + body + "]"


class Program:
    """A parsed grammar flattened for the recognizer, plus its interned states and frames."""

    def __init__(self, parsed: ParsedGrammar, root: str):
        rules = parsed.rules
        root_id = parsed.symbol_ids[root]
        elems: list[tuple[int, int]] = []
        starts: list[int] = []
        for rule in rules:
            starts.append(len(elems))
            elems.extend(rule)
        self.start_pos = len(elems)
        elems.extend([(RULE_REF, root_id), (END, 0)])
        self.elems = elems
        n = len(elems)
        kind = [_K_OTHER] * n
        arg = [0] * n  # REF: rule id; CHARS: set id; TOK: (type, value)
        after = [0] * n  # CHARS: the element after the set; REF/TOK: p + 1
        tail = [False] * n
        self.sets: list[CharSet] = []
        set_ids: dict[tuple, int] = {}
        for p, (typ, val) in enumerate(elems):
            if typ in (END, ALT):
                kind[p] = _K_END
            elif typ == RULE_REF:
                kind[p] = _K_REF
                arg[p] = val
                after[p] = p + 1
                tail[p] = elems[p + 1][0] in (END, ALT)
            elif typ in (TOKEN, TOKEN_NOT):
                kind[p] = _K_TOK
                arg[p] = (typ, val)  # type: ignore[assignment]
                after[p] = p + 1
            elif typ in (CHAR, CHAR_NOT, CHAR_ANY):
                ranges: list[tuple[int, int]] = []
                q = p
                any_char = False
                while True:
                    t, v = elems[q]
                    if elems[q + 1][0] == CHAR_RNG_UPPER:
                        ranges.append((v, elems[q + 1][1]))
                        q += 2
                    elif t == CHAR_ANY:
                        any_char = True
                        q += 1
                    else:
                        ranges.append((v, v))
                        q += 1
                    if elems[q][0] != CHAR_ALT:
                        break
                key = (tuple(ranges), typ == CHAR_NOT, any_char)
                sid = set_ids.get(key)
                if sid is None:
                    sid = set_ids[key] = len(self.sets)
                    self.sets.append(CharSet(sid, key[0], key[1], any_char))
                kind[p] = _K_CHARS
                arg[p] = sid
                after[p] = q
        self.kind, self.arg, self.after, self.tail = kind, arg, after, tail
        # the set element whose scan leads to position q (to rebuild an unscanned item)
        self.set_start = {after[p]: p for p in range(n) if kind[p] == _K_CHARS}
        alts: list[list[int]] = []
        for rid, rule in enumerate(rules):
            a = [starts[rid]]
            for i, (typ, _) in enumerate(rule):
                if typ == ALT:
                    a.append(starts[rid] + i + 1)
            alts.append(a)
        self.alts = alts
        self.names = {v: k for k, v in parsed.symbol_ids.items()}
        self.rule_of = [0] * n
        for rid, st in enumerate(starts):
            for p in range(st, st + len(rules[rid])):
                self.rule_of[p] = rid
        self.rule_of[self.start_pos] = self.rule_of[self.start_pos + 1] = -1
        self._frames: list[dict[int, frozenset]] = []
        self._frame_ids: dict[frozenset, int] = {}
        self._resolved: dict[tuple[int, int], tuple] = {ACCEPT: (_ACCEPT_MEMBER,)}
        self._states: dict[frozenset, State] = {}
        self.initial = self.state(frozenset([(self.start_pos, ACCEPT)]))

    # -- frames ------------------------------------------------------------------------------

    def members(self, ctx: tuple[int, int]) -> tuple:
        r = self._resolved.get(ctx)
        if r is None:
            fid, rid = ctx
            r = tuple((q, (fid, c[1]) if c is not None and c[0] == _SELF else c) for q, c in self._frames[fid][rid])
            self._resolved[ctx] = r
        return r

    def state(self, kernel: frozenset) -> "State":
        st = self._states.get(kernel)
        if st is None:
            st = self._states[kernel] = State(self, kernel)
        return st

    @property
    def n_states(self) -> int:
        return len(self._states)

    # -- the closure -------------------------------------------------------------------------

    def close(self, kernel: frozenset):
        """Earley predict/complete from ``kernel``; returns (complete, chars, toks).

        Contexts created here are keyed ``(_CUR, rule)``; a tail call makes the callee's context
        inherit (now and later) every member of the caller's context; a member added to a rule
        that already completed empty here fires at once (the Aycock-Horspool nullable fix).
        """
        kind, arg, after, tail, alts = self.kind, self.arg, self.after, self.tail, self.alts
        members = self.members
        cur: dict[int, set] = {}
        subs: dict[int, set] = {}
        completed: set[int] = set()
        items: set = set(kernel)
        work: list = list(kernel)
        complete = False
        chars: dict[int, set] = {}
        toks: set = set()
        K_END, K_REF, K_CHARS = _K_END, _K_REF, _K_CHARS
        pop, append, add_item = work.pop, work.append, items.add

        def add_member(rid: int, m) -> None:
            nonlocal complete
            pend = [(rid, m)]
            while pend:
                r, mm = pend.pop()
                ms = cur[r]
                if mm in ms:
                    continue
                ms.add(mm)
                if r in completed:
                    if mm[0] == -1:
                        complete = True
                    elif mm not in items:
                        add_item(mm)
                        append(mm)
                sr = subs.get(r)
                if sr:
                    for r2 in sr:
                        pend.append((r2, mm))

        while work:
            it = pop()
            p, ctx = it
            k = kind[p]
            if k == K_END:
                if ctx[0] == _CUR:
                    r = ctx[1]
                    if r in completed:
                        continue
                    completed.add(r)
                    ms = list(cur[r])
                else:
                    ms = members(ctx)
                for m in ms:
                    if m[0] == -1:
                        complete = True
                    elif m not in items:
                        add_item(m)
                        append(m)
            elif k == K_REF:
                r = arg[p]
                if r not in cur:
                    cur[r] = set()
                    c2 = (_CUR, r)
                    for a in alts[r]:
                        it2 = (a, c2)
                        if it2 not in items:
                            add_item(it2)
                            append(it2)
                if tail[p]:
                    if ctx[0] == _CUR:
                        x = ctx[1]
                        if x != r:
                            sx = subs.get(x)
                            if sx is None:
                                sx = subs[x] = set()
                            if r not in sx:
                                sx.add(r)
                                for m in list(cur[x]):
                                    add_member(r, m)
                    else:
                        for m in members(ctx):
                            add_member(r, m)
                else:
                    add_member(r, (after[p], ctx))
            elif k == K_CHARS:
                sid = arg[p]
                cs = chars.get(sid)
                if cs is None:
                    chars[sid] = {(after[p], ctx)}
                else:
                    cs.add((after[p], ctx))
            else:
                toks.add((arg[p], after[p], ctx))
        gid = self._freeze(cur) if cur else {}
        chars_out = {
            sid: frozenset([(q, gid[c[1]]) if c[0] == _CUR else (q, c) for q, c in its]) for sid, its in chars.items()
        }
        toks_out = tuple(sorted(((tv, q, gid[c[1]] if c[0] == _CUR else c) for tv, q, c in toks), key=repr))
        return complete, chars_out, toks_out

    def _freeze(self, cur: dict[int, set]) -> dict[int, tuple[int, int]]:
        """Intern the contexts created by one closure; returns rule -> global context id.

        Each context is interned by value (its set of return points), so two contexts with the
        same return points are one context wherever they were created -- that is what makes
        states repeat across repetitions (the second and third record of a JSON array).  Contexts
        that reference each other in a cycle (left recursion) are interned together as a group,
        their mutual references written relatively (``_SELF``).
        """
        # Tarjan's SCCs over "context R has a member whose context is (_CUR, R')"
        index: dict[int, int] = {}
        low: dict[int, int] = {}
        on: set[int] = set()
        stack: list[int] = []
        order: list[list[int]] = []  # SCCs, dependencies first
        counter = 0
        for root in cur:
            if root in index:
                continue
            work = [(root, iter([c[1] for _q, c in cur[root] if c is not None and c[0] == _CUR]))]
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on.add(root)
            while work:
                v, it = work[-1]
                advanced = False
                for w in it:
                    if w not in index:
                        index[w] = low[w] = counter
                        counter += 1
                        stack.append(w)
                        on.add(w)
                        work.append((w, iter([c[1] for _q, c in cur[w] if c is not None and c[0] == _CUR])))
                        advanced = True
                        break
                    elif w in on:
                        low[v] = min(low[v], index[w])
                if advanced:
                    continue
                work.pop()
                if work:
                    u = work[-1][0]
                    low[u] = min(low[u], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    order.append(comp)
        gid: dict[int, tuple[int, int]] = {}
        frame_ids, frames = self._frame_ids, self._frames
        for comp in order:
            cs = set(comp)
            if len(comp) == 1 and not any(c is not None and c[0] == _CUR and c[1] == comp[0] for _q, c in cur[comp[0]]):
                r = comp[0]
                ms = frozenset([(q, gid[c[1]]) if (c is not None and c[0] == _CUR) else (q, c) for q, c in cur[r]])
                key = frozenset([(-1, ms)])
                fid = frame_ids.get(key)
                if fid is None:
                    fid = frame_ids[key] = len(frames)
                    frames.append({-1: ms})
                gid[r] = (fid, -1)
                continue
            parts = []
            for r in comp:
                parts.append((r, frozenset([
                    (q, (_SELF, c[1]) if c[1] in cs else gid[c[1]]) if (c is not None and c[0] == _CUR) else (q, c)
                    for q, c in cur[r]
                ])))  # fmt: skip
            key = frozenset(parts)
            fid = frame_ids.get(key)
            if fid is None:
                fid = frame_ids[key] = len(frames)
                frames.append(dict(parts))
            for r in comp:
                gid[r] = (fid, r)
        return gid


class State:
    """An interned Earley state (after closure): what can be scanned next, and whether the root
    rule is complete here.  Transitions are memoised per character class and per code point."""

    __slots__ = ("prog", "kernel", "complete", "chars", "toks", "sets", "_by_cp", "_by_class", "cache", "alive", "__weakref__")

    def __init__(self, prog: Program, kernel: frozenset):
        self.prog = prog
        self.kernel = kernel
        complete, chars, toks = prog.close(kernel)
        self.complete = complete
        self.chars = chars  # set id -> frozenset of kernel items after scanning that set
        self.toks = toks  # ((type, value), next p, ctx) for TOKEN / TOKEN_NOT elements
        self.sets = tuple(sorted(chars))
        self.alive = bool(complete or chars or toks)
        self._by_cp: dict[int, State | None] = {}
        self._by_class: dict[tuple[int, ...], State | None] = {}
        self.cache: dict = {}  # per-state memo for the matcher (masks, partial checks)

    def classify(self, cp: int) -> tuple[int, ...]:
        sets = self.prog.sets
        return tuple(sid for sid in self.sets if cp in sets[sid])

    def step_class(self, cls: tuple[int, ...]) -> "State | None":
        try:
            return self._by_class[cls]
        except KeyError:
            pass
        if not cls:
            nxt = None
        else:
            k: set = set()
            for sid in cls:
                k |= self.chars[sid]
            nxt = self.prog.state(frozenset(k))
            if not nxt.alive:
                nxt = None
        self._by_class[cls] = nxt
        return nxt

    def step(self, cp: int) -> "State | None":
        """The state after scanning code point ``cp`` (None: no parse survives)."""
        try:
            return self._by_cp[cp]
        except KeyError:
            nxt = self._by_cp[cp] = self.step_class(self.classify(cp))
            return nxt

    def token_step(self, token: int) -> frozenset:
        """Kernel items produced by matching ``token`` against TOKEN/TOKEN_NOT elements."""
        out = set()
        for (typ, val), q, ctx in self.toks:
            if (typ == TOKEN) == (val == token):
                out.add((q, ctx))
        return frozenset(out)

    def token_matches(self, token: int) -> bool:
        for (typ, val), _q, _ctx in self.toks:
            if (typ == TOKEN) == (val == token):
                return True
        return False

    def char_kernel(self) -> frozenset:
        """The items waiting on a character (what survives a token that decodes to nothing)."""
        out = set()
        prog = self.prog
        for sid, its in self.chars.items():
            for q, ctx in its:
                out.add((prog.set_start[q], ctx))
        return frozenset(out)
