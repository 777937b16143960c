"""Trigger patterns for lazy grammars, matched in linear time.

llama.cpp compiles each trigger pattern with ``std::regex`` (ECMAScript grammar, over the bytes of
the text) and, at every token, runs ``regex_search`` -- or first ``regex_match`` for a pattern
written ``^...$`` -- over the whole untriggered output.  That is quadratic in the output, and a
backtracking pattern such as ``(a+)+c`` is exponential.  This module gives the same answers in
time linear in the output:

* the pattern is parsed here (an ECMAScript subset, bytes as ``std::regex<char>`` sees them) and
  compiled to a Thompson NFA;
* while no trigger has fired, a lazily built DFA (subsets of NFA states, plus the class of the
  previous byte for ``^`` and ``\\b``) is advanced byte by byte over each new piece, so a token
  costs O(its bytes) once the DFA states it visits exist and O(bytes x NFA size) at worst (the
  DFA cache is bounded and flushed when full);
* when the DFA sees a match (a match may need the end of the text: ``$``, ``\\b``), a Pike VM with
  capture slots runs once over the buffer and picks the match ``std::regex`` picks: the leftmost
  start, then ECMAScript's priority (earlier alternatives first, greedy/lazy quantifiers), and,
  for ``^...$`` patterns, the full match first.  The trigger position is llama.cpp's: the start of
  the first capture group that matched non-empty, else the start of the match.

Supported: literals and escapes (``\\n \\r \\t \\f \\v \\0 \\xHH \\uHHHH`` (<= 0x7F) ``\\cX``, an
escaped non-alphanumeric), ``.`` (any byte but ``\\n``/``\\r``, as libstdc++), classes ``[...]``
and ``[^...]`` with ranges and ``\\d \\D \\w \\W \\s \\S`` (ASCII, C locale), ``(...)``, ``(?:...)``,
``|``, ``* + ? {n} {n,} {n,m}`` and their lazy ``?`` forms, ``^ $ \\b \\B``, and lookahead
``(?=B)`` / ``(?!B)`` whose body ``B`` is literal: alternatives of fixed-length sequences of bytes,
escapes and classes (llama.cpp's functionary ``>>>(?!all)`` and muse-glimmer triggers).  As in
``std::regex``, the lookahead sees the text as it stands: at the end of the untriggered buffer a
body that cannot be complete there fails, so ``(?!all)`` holds after ``>>>`` and after ``>>>al``
(the trigger fires unless "all" arrives in the token that completes ``>>>``) and ``(?=all)`` waits
for the whole literal.  Detection threads carry the pending lookaheads (bounded state, see
:class:`TriggerRegex`), so the cost per byte stays constant.  Refused with
:class:`~lmtail.errors.GrammarError` at construction: backreferences, lookbehind and lookahead
with any other body (a linear-time matcher cannot run them), and anything malformed.  Known
differences from libstdc++: bytes are compared unsigned in class ranges (libstdc++ compares
``char``, signed on x86), and a capture group inside a repeated group keeps the value from the
last iteration that set it (ECMAScript clears it at each iteration) -- neither occurs in the
trigger patterns chat templates use.
"""

from __future__ import annotations

from ..errors import GrammarError

__all__ = ["TriggerRegex", "MAX_PROGRAM", "MAX_DFA_STATES"]

MAX_PROGRAM = 20_000  # NFA instructions per pattern ({n,m} copies its operand)
MAX_DFA_STATES = 2_000  # cached DFA states per pattern; the cache is flushed when full
_MAX_DEPTH = 200  # nesting of groups

_CHAR, _SPLIT, _JMP, _SAVE, _ASSERT, _MATCH, _LOOK = range(7)
_BOL, _EOL, _WORDB, _NWORDB = range(4)
_START, _WORD, _OTHER, _END = range(4)  # class of the byte before / after a position

_ALL = (1 << 256) - 1


def _mask(bs) -> int:
    m = 0
    for b in bs:
        m |= 1 << b
    return m


_DIGIT = _mask(range(0x30, 0x3A))
_WORDM = _mask([*range(0x30, 0x3A), *range(0x41, 0x5B), *range(0x61, 0x7B), 0x5F])
_SPACE = _mask(b" \t\n\v\f\r")
_DOT = _ALL & ~_mask(b"\n\r")
_IS_WORD = [bool(_WORDM >> b & 1) for b in range(256)]
_CLASS_ESC = {ord("d"): _DIGIT, ord("D"): _ALL & ~_DIGIT, ord("w"): _WORDM, ord("W"): _ALL & ~_WORDM,
              ord("s"): _SPACE, ord("S"): _ALL & ~_SPACE}  # fmt: skip
_CHAR_ESC = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("f"): 12, ord("v"): 11}
_HEXD = frozenset(b"0123456789abcdefABCDEF")
_ALNUM = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class _Parser:
    """Recursive descent over the pattern bytes; the AST is tuples (see ``_compile``)."""

    def __init__(self, pat: bytes):
        self.p = pat
        self.i = 0
        self.ngroups = 0
        # lookaheads: (positive, alternatives), each alternative a tuple of byte masks
        self.looks: list[tuple[bool, tuple[tuple[int, ...], ...]]] = []

    def fail(self, msg: str, at: int | None = None):
        at = self.i if at is None else at
        raise GrammarError(f"trigger pattern {self.p!r}: {msg} at offset {at}")

    def peek(self) -> int | None:
        return self.p[self.i] if self.i < len(self.p) else None

    def parse(self):
        node = self.disjunction(0)
        if self.i < len(self.p):
            self.fail("unmatched ')'")
        return node

    def disjunction(self, depth: int):
        if depth > _MAX_DEPTH:
            self.fail("groups nested too deeply")
        alts = [self.alternative(depth)]
        while self.peek() == 0x7C:  # '|'
            self.i += 1
            alts.append(self.alternative(depth))
        return alts[0] if len(alts) == 1 else ("alt", alts)

    def alternative(self, depth: int):
        items = []
        while True:
            c = self.peek()
            if c is None or c == 0x7C or c == 0x29:  # end, '|', ')'
                break
            start = self.i
            atom = self.term(depth)
            q = self.quantifier()
            if q is not None:
                if atom[0] in ("assert", "look"):
                    self.fail("nothing to repeat", start)
                atom = ("rep", atom, *q)
            items.append(atom)
        return ("cat", items)

    def quantifier(self):
        c = self.peek()
        if c is None:
            return None
        at = self.i
        if c == 0x2A:  # '*'
            lo, hi = 0, None
            self.i += 1
        elif c == 0x2B:  # '+'
            lo, hi = 1, None
            self.i += 1
        elif c == 0x3F:  # '?'
            lo, hi = 0, 1
            self.i += 1
        elif c == 0x7B:  # '{'
            self.i += 1
            lo = self.number()
            if lo is None:
                self.fail("bad {n,m} quantifier (write a literal '{' as \\{)", at)
            hi = lo
            if self.peek() == 0x2C:  # ','
                self.i += 1
                hi = self.number()
            if self.peek() != 0x7D:
                self.fail("bad {n,m} quantifier", at)
            self.i += 1
            if hi is not None and hi < lo:
                self.fail(f"quantifier {{{lo},{hi}}}: maximum below minimum", at)
        else:
            return None
        greedy = True
        if self.peek() == 0x3F:
            greedy = False
            self.i += 1
        if self.peek() in (0x2A, 0x2B, 0x3F, 0x7B):
            self.fail("nothing to repeat")
        return lo, hi, greedy

    def number(self) -> int | None:
        s = self.i
        while self.peek() is not None and 0x30 <= self.peek() <= 0x39:
            self.i += 1
        if self.i == s:
            return None
        n = int(self.p[s : self.i])
        if n > MAX_PROGRAM:
            self.fail(f"repetition count {n} is too large (limit {MAX_PROGRAM})", s)
        return n

    def term(self, depth: int):
        c = self.p[self.i]
        at = self.i
        if c == 0x5E:  # '^'
            self.i += 1
            return ("assert", _BOL)
        if c == 0x24:  # '$'
            self.i += 1
            return ("assert", _EOL)
        if c == 0x28:  # '('
            self.i += 1
            if self.p[self.i : self.i + 2] == b"?:":
                self.i += 2
                idx = None
            elif self.p[self.i : self.i + 2] in (b"?=", b"?!"):
                return self.lookahead(depth, at)
            elif self.peek() == 0x3F:  # '?'
                if self.p[self.i : self.i + 3] in (b"?<=", b"?<!"):
                    self.fail("lookbehind is not supported (a linear-time matcher cannot run it)", at)
                self.fail("unsupported group syntax '(?'", at)
            else:
                self.ngroups += 1
                idx = self.ngroups
            node = self.disjunction(depth + 1)
            if self.peek() != 0x29:
                self.fail("missing ')'", at)
            self.i += 1
            return node if idx is None else ("group", idx, node)
        if c in (0x2A, 0x2B, 0x3F, 0x7B):
            self.fail("nothing to repeat (write a literal '*', '+', '?' or '{' with a backslash)")
        if c == 0x2E:  # '.'
            self.i += 1
            return ("set", _DOT)
        if c == 0x5B:  # '['
            return ("set", self.char_class())
        if c == 0x5C:  # backslash
            e = self.p[self.i + 1] if self.i + 1 < len(self.p) else None
            if e == 0x62:  # \b
                self.i += 2
                return ("assert", _WORDB)
            if e == 0x42:  # \B
                self.i += 2
                return ("assert", _NWORDB)
            if e is not None and 0x31 <= e <= 0x39:
                self.fail("backreferences are not supported (a linear-time matcher cannot run them)")
            if e in _CLASS_ESC:
                self.i += 2
                return ("set", _CLASS_ESC[e])
            return ("set", 1 << self.escape(in_class=False))
        self.i += 1
        return ("set", 1 << c)

    def lookahead(self, depth: int, at: int):
        """``(?=...)`` / ``(?!...)`` at ``self.i`` (past the '('): the body must be an alternation
        of fixed-length sequences of single bytes or classes, so a thread checks it with bounded
        state while it consumes the text (see ``TriggerRegex``)."""
        positive = self.p[self.i + 1] == 0x3D
        self.i += 2
        groups = self.ngroups
        body = self.disjunction(depth + 1)
        if self.peek() != 0x29:
            self.fail("missing ')'", at)
        self.i += 1
        alts = body[1] if body[0] == "alt" else [body]
        out = []
        for a in alts:
            if self.ngroups != groups or any(x[0] != "set" for x in a[1]):
                self.fail("a lookahead body must be literal text (bytes, escapes, classes, '|'); "
                          "other lookaheads cannot run in linear time", at)
            out.append(tuple(x[1] for x in a[1]))
        self.looks.append((positive, tuple(out)))
        return ("look", len(self.looks) - 1)

    def escape(self, in_class: bool) -> int:
        """The byte of the escape at ``self.i`` (the backslash); advances past it."""
        at = self.i
        if self.i + 1 >= len(self.p):
            self.fail("pattern ends with a backslash", at)
        e = self.p[self.i + 1]
        self.i += 2
        if e in _CHAR_ESC:
            return _CHAR_ESC[e]
        if e == 0x62 and in_class:  # [\b] is backspace
            return 8
        if e == 0x30:
            if self.peek() is not None and 0x30 <= self.peek() <= 0x39:
                self.fail("octal escapes are not supported", at)
            return 0
        if e == 0x78 or e == 0x75:  # \xHH, \uHHHH
            n = 2 if e == 0x78 else 4
            h = self.p[self.i : self.i + n]
            if len(h) != n or any(b not in _HEXD for b in h):
                self.fail(f"\\{chr(e)} needs {n} hex digits", at)
            self.i += n
            v = int(h, 16)
            if v > 0x7F and e == 0x75:
                self.fail("\\u escapes above 0x7F name no single byte (std::regex<char> matches bytes)", at)
            return v
        if e == 0x63:  # \cX
            x = self.peek()
            if x is None or not (0x41 <= x <= 0x5A or 0x61 <= x <= 0x7A):
                self.fail("\\c needs a letter", at)
            self.i += 1
            return x % 32
        if e in _ALNUM:
            if 0x31 <= e <= 0x39:
                self.fail("backreferences are not supported (a linear-time matcher cannot run them)", at)
            self.fail(f"unknown escape \\{chr(e)}", at)
        return e

    def char_class(self) -> int:
        at = self.i
        self.i += 1
        neg = self.peek() == 0x5E
        if neg:
            self.i += 1
        m = 0
        while True:
            c = self.peek()
            if c is None:
                self.fail("missing ']'", at)
            if c == 0x5D:
                self.i += 1
                break
            lo_at = self.i
            lo, lo_set = self.class_atom()
            if self.peek() == 0x2D and self.i + 1 < len(self.p) and self.p[self.i + 1] != 0x5D:
                self.i += 1
                hi, hi_set = self.class_atom()
                if lo_set is not None or hi_set is not None:
                    self.fail("a class escape cannot bound a range", lo_at)
                if hi < lo:
                    self.fail("range out of order in character class", lo_at)
                m |= ((1 << (hi + 1)) - 1) & ~((1 << lo) - 1)
            else:
                m |= lo_set if lo_set is not None else 1 << lo
        return _ALL & ~m if neg else m

    def class_atom(self) -> tuple[int, int | None]:
        c = self.p[self.i]
        if c == 0x5C:
            e = self.p[self.i + 1] if self.i + 1 < len(self.p) else None
            if e in _CLASS_ESC:
                self.i += 2
                return 0, _CLASS_ESC[e]
            return self.escape(in_class=True), None
        self.i += 1
        return c, None


def _compile(node, prog: list, pat: bytes) -> None:
    """Append the Thompson code of ``node`` to ``prog`` (instructions are small lists)."""

    def emit(ins) -> int:
        if len(prog) >= MAX_PROGRAM:
            raise GrammarError(f"trigger pattern {pat!r} compiles to more than {MAX_PROGRAM} NFA states")
        prog.append(ins)
        return len(prog) - 1

    def gen(n) -> None:
        kind = n[0]
        if kind == "set":
            emit([_CHAR, n[1]])
        elif kind == "cat":
            for x in n[1]:
                gen(x)
        elif kind == "alt":
            jumps = []
            alts = n[1]
            for k, a in enumerate(alts):
                if k < len(alts) - 1:
                    sp = emit([_SPLIT, 0, 0])
                    prog[sp][1] = len(prog)
                    gen(a)
                    jumps.append(emit([_JMP, 0]))
                    prog[sp][2] = len(prog)
                else:
                    gen(a)
            for j in jumps:
                prog[j][1] = len(prog)
        elif kind == "group":
            emit([_SAVE, 2 * n[1]])
            gen(n[2])
            emit([_SAVE, 2 * n[1] + 1])
        elif kind == "assert":
            emit([_ASSERT, n[1]])
        elif kind == "look":
            emit([_LOOK, n[1]])
        elif kind == "rep":
            _, body, lo, hi, greedy = n
            for _ in range(lo):
                gen(body)
            if hi is None:
                loop = emit([_SPLIT, 0, 0])
                gen(body)
                emit([_JMP, loop])
                out = len(prog)
                prog[loop][1:] = [loop + 1, out] if greedy else [out, loop + 1]
            else:
                splits = []
                for _ in range(hi - lo):
                    sp = emit([_SPLIT, 0, 0])
                    splits.append(sp)
                    gen(body)
                out = len(prog)
                for sp in splits:
                    prog[sp][1:] = [sp + 1, out] if greedy else [out, sp + 1]
        else:  # pragma: no cover
            raise AssertionError(kind)

    gen(node)


class _DState:
    __slots__ = ("owner", "heads", "ctx", "trans", "end")

    def __init__(self, owner: "TriggerRegex", heads: frozenset, ctx: int):
        self.owner = owner
        self.heads = heads  # threads (pc, constraints); see TriggerRegex
        self.ctx = ctx
        self.trans: dict[int, tuple[_DState, bool]] = {}
        self.end: bool | None = None


class TriggerRegex:
    """One compiled trigger pattern: incremental detection and llama.cpp's trigger position.

    ``feed(state, data)`` advances a detection state (opaque, immutable: ``initial`` to start)
    over new bytes and returns ``(state, seen)``; ``seen`` is True once some match lies inside
    the bytes fed so far (not needing their end).  ``at_end(state)`` says whether a match exists
    if the text ended here.  ``trigger_start(buf)`` is llama.cpp's ``find`` on the whole text
    (None when nothing matches); it is linear and is called once, when a trigger fires.
    ``steps`` counts the work done (bytes fed plus NFA states visited while building DFA states).

    Lookahead: a detection thread is ``(pc, constraints)``; passing ``(?=B)``/``(?!B)`` adds the
    constraint ``(look, offset, alive)`` (``alive``: bit set of B's alternatives still matching
    the bytes since), advanced by every byte the thread consumes.  B matching kills a negative
    constraint's thread and discharges a positive one; B failing does the reverse.  A thread that
    reaches MATCH with constraints pending waits for them.  At the end of the text a pending
    constraint is decided as ``std::regex`` decides it on the text as it stands: B cannot match
    there, so negative ones hold and positive ones fail.  Offsets stay below B's length, so the
    state is bounded and the cost per byte stays constant.
    """

    def __init__(self, pattern: bytes):
        if not isinstance(pattern, bytes):
            raise GrammarError(f"trigger pattern must be bytes, got {type(pattern).__name__}")
        self.pattern = pattern
        p = _Parser(pattern)
        ast = p.parse()
        self.ngroups = p.ngroups
        self.looks = p.looks
        self._look_empty = [any(len(a) == 0 for a in alts) for _, alts in self.looks]
        self._look_len = [max(len(a) for a in alts) for _, alts in self.looks]
        prog: list = []
        _compile(ast, prog, pattern)
        prog.append([_MATCH])
        self.prog = [tuple(x) for x in prog]
        self._match_pc = len(prog) - 1
        self.full = pattern[:1] == b"^" and pattern[-1:] == b"$"
        self.steps = 0
        self._dfa: dict[tuple, _DState] = {}
        # detection states: one per mode; the full-match mode (regex_match) only for ^...$
        self.initial = (self._dstate(frozenset(), _START),
                        self._dstate(frozenset([(0, ())]), _START) if self.full else None)  # fmt: skip

    # -- detection (DFA over sets of NFA threads) --------------------------------------------

    def _dstate(self, heads: frozenset, ctx: int) -> _DState:
        key = (heads, ctx)
        d = self._dfa.get(key)
        if d is None:
            if len(self._dfa) >= MAX_DFA_STATES:
                self._dfa.clear()  # bounded memory; states are rebuilt on demand
            d = self._dfa[key] = _DState(self, heads, ctx)
        return d

    def _advance(self, cons: tuple, b: int) -> tuple | None:
        """Lookahead constraints after consuming byte ``b``; None when one of them fails."""
        out = []
        for lid, off, alive in cons:
            positive, alts = self.looks[lid]
            hit = False
            left = 0
            j = 0
            a = alive
            while a:
                if a & 1:
                    alt = alts[j]
                    if alt[off] >> b & 1:
                        if len(alt) == off + 1:
                            hit = True
                        else:
                            left |= 1 << j
                a >>= 1
                j += 1
            if hit or not left:  # the body matched (hit) or cannot match any more
                if hit != positive:
                    return None
            else:
                out.append((lid, off + 1, left))
        return tuple(out)

    def _closure(self, heads, prev: int, nxt: int) -> tuple[list, list, bool]:
        """Threads at CHAR instructions reachable from ``heads`` at a position between bytes of
        class ``prev`` and ``nxt`` (assertions decided there), threads waiting at MATCH on
        lookahead constraints, and whether a match is complete here."""
        prog = self.prog
        seen = set()
        todo = list(heads)
        chars: list = []
        waiting: list = []
        matched = False
        wprev = prev == _WORD
        wnext = nxt == _WORD
        at_end = nxt == _END
        while todo:
            th = todo.pop()
            if th in seen:
                continue
            seen.add(th)
            pc, cons = th
            ins = prog[pc]
            op = ins[0]
            if op == _CHAR:
                chars.append(th)
            elif op == _SPLIT:
                todo.append((ins[1], cons))
                todo.append((ins[2], cons))
            elif op == _JMP:
                todo.append((ins[1], cons))
            elif op == _SAVE:
                todo.append((pc + 1, cons))
            elif op == _ASSERT:
                k = ins[1]
                if (k == _BOL and prev == _START) or (k == _EOL and at_end) or \
                        (k == _WORDB and wprev != wnext) or (k == _NWORDB and wprev == wnext):
                    todo.append((pc + 1, cons))
            elif op == _LOOK:
                lid = ins[1]
                positive = self.looks[lid][0]
                if self._look_empty[lid] or at_end:  # decided here: B matches iff it can be empty
                    if self._look_empty[lid] == positive:
                        todo.append((pc + 1, cons))
                else:
                    c = (lid, 0, (1 << len(self.looks[lid][1])) - 1)
                    todo.append((pc + 1, cons if c in cons else tuple(sorted((*cons, c)))))
            elif not cons or (at_end and not any(self.looks[c[0]][0] for c in cons)):
                matched = True
            else:
                waiting.append(cons)
        self.steps += len(seen)
        return chars, waiting, matched

    def _step(self, d: _DState, b: int, search: bool) -> tuple[_DState, bool]:
        heads = d.heads | {(0, ())} if search else d.heads
        chars, waiting, matched = self._closure(heads, d.ctx, _WORD if _IS_WORD[b] else _OTHER)
        prog = self.prog
        nxt = set()
        for pc, cons in chars:
            if prog[pc][1] >> b & 1:
                c = self._advance(cons, b) if cons else cons
                if c is not None:
                    nxt.add((pc + 1, c))
        if search:  # (a full match must end at the end of the text: waiting there is useless)
            for cons in waiting:
                c = self._advance(cons, b)
                if c == ():
                    matched = True  # the match before ``b`` is now confirmed
                elif c is not None:
                    nxt.add((self._match_pc, c))
        r = (self._dstate(frozenset(nxt), _WORD if _IS_WORD[b] else _OTHER), matched)
        d.trans[b] = r
        return r

    def feed(self, state, data: bytes):
        """Advance the detection ``state`` over ``data``; returns ``(state, seen)``."""
        ds, df = state
        seen = False
        self.steps += len(data)
        for b in data:
            r = ds.trans.get(b)
            if r is None:
                r = self._step(ds, b, True)
            ds = r[0]
            seen = seen or r[1]
            if df is not None and df.heads:
                r = df.trans.get(b)
                if r is None:
                    r = self._step(df, b, False)
                df = r[0]
        return (ds, df), seen

    def at_end(self, state) -> bool:
        """Would a match exist if the text ended here (``$`` true, ``\\b`` against the end,
        lookaheads against nothing)?"""
        out = False
        for d, search in zip(state, (True, False)):
            if d is None:
                continue
            if d.end is None:
                d.end = self._closure(d.heads | {(0, ())} if search else d.heads, d.ctx, _END)[2]
            out = out or d.end
        return out

    def check_state(self, state) -> bool:
        """Is ``state`` a detection state of this pattern (for validating snapshots)?"""
        if type(state) is not tuple or len(state) != 2:
            return False
        ds, df = state
        n = len(self.prog)

        def ok_cons(cons) -> bool:
            return type(cons) is tuple and all(
                type(c) is tuple and len(c) == 3 and all(type(x) is int for x in c) and
                0 <= c[0] < len(self.looks) and 0 <= c[1] < self._look_len[c[0]] and
                0 < c[2] < 1 << len(self.looks[c[0]][1]) for c in cons)  # fmt: skip

        def ok(d) -> bool:
            return isinstance(d, _DState) and d.owner is self and d.ctx in (_START, _WORD, _OTHER) and \
                type(d.heads) is frozenset and all(
                    type(th) is tuple and len(th) == 2 and type(th[0]) is int and 0 <= th[0] < n and ok_cons(th[1])
                    for th in d.heads)  # fmt: skip

        return ok(ds) and ((df is None) if not self.full else ok(df))

    # -- the trigger position (Pike VM with capture slots) -----------------------------------

    def _pike(self, buf: bytes, anchored_full: bool):
        """Leftmost-first match of the pattern in ``buf`` (``regex_search``), or with
        ``anchored_full`` the full match (``regex_match``); returns the capture slots or None."""
        prog = self.prog
        n = len(buf)
        nslots = 2 * (self.ngroups + 1)

        def cls(i: int) -> int:
            if i < 0:
                return _START
            if i >= n:
                return _END
            return _WORD if _IS_WORD[buf[i]] else _OTHER

        def add(lst: list, seen: set, pc0: int, caps0: tuple, i: int) -> None:
            # depth-first in priority order, iteratively (patterns can be long)
            stack = [(pc0, caps0)]
            prev, nxt = cls(i - 1), cls(i)
            while stack:
                pc, caps = stack.pop()
                if pc in seen:
                    continue
                seen.add(pc)
                self.steps += 1
                ins = prog[pc]
                op = ins[0]
                if op == _JMP:
                    stack.append((ins[1], caps))
                elif op == _SPLIT:
                    stack.append((ins[2], caps))
                    stack.append((ins[1], caps))
                elif op == _SAVE:
                    c = list(caps)
                    c[ins[1]] = i
                    stack.append((pc + 1, tuple(c)))
                elif op == _ASSERT:
                    k = ins[1]
                    if (k == _BOL and prev == _START) or (k == _EOL and nxt == _END) or \
                            (k == _WORDB and (prev == _WORD) != (nxt == _WORD)) or \
                            (k == _NWORDB and (prev == _WORD) == (nxt == _WORD)):
                        stack.append((pc + 1, caps))
                elif op == _LOOK:
                    # the whole text is here: std::regex's test on the text as it stands
                    positive, alts = self.looks[ins[1]]
                    self.steps += self._look_len[ins[1]]
                    hit = any(len(a) <= n - i and all(m >> buf[i + k] & 1 for k, m in enumerate(a)) for a in alts)
                    if hit == positive:
                        stack.append((pc + 1, caps))
                else:
                    lst.append((pc, caps))

        empty = (-1,) * nslots
        clist: list = []
        seen: set = set()
        best = None
        for i in range(n + 1):
            if best is None and (i == 0 or not anchored_full):
                c = list(empty)
                c[0] = i
                add(clist, seen, 0, tuple(c), i)
            nlist: list = []
            nseen: set = set()
            for pc, caps in clist:
                ins = prog[pc]
                if ins[0] == _MATCH:
                    if anchored_full and i != n:
                        continue
                    c = list(caps)
                    c[1] = i
                    best = tuple(c)
                    break  # lower-priority threads lose to this match
                if i < n and ins[1] >> buf[i] & 1:
                    add(nlist, nseen, pc + 1, caps, i + 1)
            clist, seen = nlist, nseen
            if not clist and (best is not None or anchored_full):
                break
        return best

    def trigger_start(self, buf: bytes) -> int | None:
        """llama.cpp's ``llama_grammar_trigger_pattern::find``: where the constrained text starts."""
        caps = None
        if self.full:
            caps = self._pike(buf, True)
        if caps is None:
            caps = self._pike(buf, False)
        if caps is None:
            return None
        for k in range(1, self.ngroups + 1):
            s, e = caps[2 * k], caps[2 * k + 1]
            if s >= 0 and e > s:
                return s
        return caps[0]
