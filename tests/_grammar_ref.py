"""A second, independent model of llama.cpp's grammar sampler for tests: its pushdown-stack
algorithm (``src/llama-grammar.cpp``: advance_stack, accept_chr, reject_candidates_for_stack,
apply, accept_token) written directly over lmtail's parsed rules, with none of the Earley engine.

Stacks are tuples of positions ``(rule, index)``, top last.  It is exponential on ambiguous
grammars and loops on hidden left recursion -- exactly like llama.cpp -- so every path is
bounded: :class:`TooBig` is raised when a stack set or a stack grows past a bound, or when one
operation (constructor, ``allowed``, ``accept``) has done more than ``MAX_WORK`` steps; tests
skip those inputs.  (``accept`` once had no bound and ran for over 30 minutes on a grammar
hypothesis drew.)
"""

from __future__ import annotations

from lmtail.grammar.parser import (
    ALT, CHAR, CHAR_ALT, CHAR_ANY, CHAR_NOT, CHAR_RNG_UPPER, END, RULE_REF, TOKEN, TOKEN_NOT, ParsedGrammar,
)  # fmt: skip
from lmtail.grammar.utf8 import decode_piece

MAX_STACKS = 2000
MAX_DEPTH = 200
MAX_WORK = 50_000  # steps (stack expansions, character checks) per public operation


class TooBig(Exception):
    pass


class RefGrammar:
    def __init__(self, parsed: ParsedGrammar, root: str = "root"):
        self.rules = parsed.rules
        self.work = 0
        start = parsed.symbol_ids[root]
        stacks: list[tuple] = []
        rule = self.rules[start]
        i = 0
        while True:
            st = () if self._eos((start, i)) else ((start, i),)
            self._advance(st, stacks)
            while not self._eos((start, i)):
                i += 1
            if rule[i][0] == ALT:
                i += 1
            else:
                break
        self.stacks = stacks
        self.partial = (0, 0)

    def el(self, pos):
        return self.rules[pos[0]][pos[1]]

    def _tick(self, n: int = 1) -> None:
        self.work += n
        if self.work > MAX_WORK:
            raise TooBig

    def _eos(self, pos) -> bool:
        return self.el(pos)[0] in (END, ALT)

    def _advance(self, stack: tuple, out: list, out_set: set | None = None) -> None:
        """llama_grammar_advance_stack; ``out_set`` mirrors ``out`` for O(1) deduplication."""
        if out_set is None:
            out_set = set(out)
        todo = [stack]
        seen = set()
        while todo:
            cur = todo.pop()
            if cur in seen:
                continue
            seen.add(cur)
            self._tick()
            if len(seen) > MAX_STACKS or len(cur) > MAX_DEPTH:
                raise TooBig
            if not cur:
                if cur not in out_set:
                    out_set.add(cur)
                    out.append(cur)
                continue
            pos = cur[-1]
            typ, val = self.el(pos)
            if typ == RULE_REF:
                rule = self.rules[val]
                j = 0
                while True:
                    nxt = cur[:-1]
                    if not self._eos((pos[0], pos[1] + 1)):
                        nxt = nxt + ((pos[0], pos[1] + 1),)
                    if not self._eos((val, j)):
                        nxt = nxt + ((val, j),)
                    todo.append(nxt)
                    while not self._eos((val, j)):
                        j += 1
                    if rule[j][0] == ALT:
                        j += 1
                    else:
                        break
            elif typ in (CHAR, CHAR_NOT, CHAR_ANY, TOKEN, TOKEN_NOT):
                if cur not in out_set:
                    out_set.add(cur)
                    out.append(cur)
            else:  # pragma: no cover
                raise AssertionError("stack left on a modifier")
        if len(out) > MAX_STACKS:
            raise TooBig

    def _match_char(self, pos, chr_):
        typ = self.el(pos)[0]
        positive = typ in (CHAR, CHAR_ANY)
        found = False
        r, i = pos
        rule = self.rules[r]
        while True:
            t, v = rule[i]
            if rule[i + 1][0] == CHAR_RNG_UPPER:
                found = found or (v <= chr_ <= rule[i + 1][1])
                i += 2
            elif t == CHAR_ANY:
                found = True
                i += 1
            else:
                found = found or v == chr_
                i += 1
            if rule[i][0] != CHAR_ALT:
                break
        return found == positive, (r, i)

    def _match_partial(self, pos, partial) -> bool:
        typ = self.el(pos)[0]
        positive = typ in (CHAR, CHAR_ANY)
        value, n = partial
        if n < 0 or (n == 1 and value < 2):
            return False
        low = (value << (n * 6)) & 0xFFFFFFFF
        high = low | ((1 << (n * 6)) - 1)
        if low == 0:
            if n == 2:
                low = 1 << 11
            elif n == 3:
                low = 1 << 16
        r, i = pos
        rule = self.rules[r]
        while True:
            t, v = rule[i]
            if rule[i + 1][0] == CHAR_RNG_UPPER:
                if v <= high and low <= rule[i + 1][1]:
                    return positive
                i += 2
            elif t == CHAR_ANY:
                return True
            else:
                if low <= v <= high:
                    return positive
                i += 1
            if rule[i][0] != CHAR_ALT:
                break
        return not positive

    def _accept_chr(self, stack, c, out, out_set) -> None:
        self._tick()
        if not stack:
            return
        pos = stack[-1]
        if self.el(pos)[0] in (TOKEN, TOKEN_NOT):
            return
        ok, after = self._match_char(pos, c)
        if ok:
            nxt = stack[:-1]
            if not self._eos(after):
                nxt = nxt + (after,)
            self._advance(nxt, out, out_set)

    # -- the sampler ---------------------------------------------------------------------------

    def complete(self) -> bool:
        return any(not s for s in self.stacks)

    def allowed(self, token: int, piece: bytes, is_eog: bool) -> bool:
        if is_eog:
            return self.complete()
        if not piece or piece[0] == 0:
            return False
        self.work = 0
        cps, fin = decode_piece(piece, self.partial)
        if 0 in cps:
            cps = cps[: cps.index(0)]
        return any(self._ok(s, token, cps, 0, fin) for s in self.stacks)

    def _ok(self, stack, token, cps, k, fin) -> bool:
        self._tick()
        if not stack:
            return k == len(cps) and fin[1] == 0
        pos = stack[-1]
        typ, val = self.el(pos)
        if typ in (TOKEN, TOKEN_NOT):
            if k == len(cps):
                return fin[1] == 0
            return (val == token) if typ == TOKEN else (val != token)
        if k == len(cps):
            return fin[1] == 0 or self._match_partial(pos, fin)
        ok, after = self._match_char(pos, cps[k])
        if not ok:
            return False
        nxt = stack[:-1]
        if not self._eos(after):
            nxt = nxt + (after,)
        outs: list = []
        self._advance(nxt, outs)
        return any(self._ok(s, token, cps, k + 1, fin) for s in outs)

    def accept(self, token: int, piece: bytes) -> bool:
        """llama_grammar_accept_token; returns False where llama.cpp throws (state unchanged)."""
        self.work = 0
        cps, fin = decode_piece(piece, self.partial)
        new: list = []
        new_set: set = set()
        for stack in self.stacks:
            if not stack:
                continue
            pos = stack[-1]
            typ, val = self.el(pos)
            if typ in (TOKEN, TOKEN_NOT):
                if (val == token) == (typ == TOKEN):
                    nxt = stack[:-1]
                    if not self._eos((pos[0], pos[1] + 1)):
                        nxt = nxt + ((pos[0], pos[1] + 1),)
                    self._advance(nxt, new, new_set)
            else:
                cur = [stack]
                for c in cps:
                    nxt_stacks: list = []
                    nxt_set: set = set()
                    for s in cur:
                        self._accept_chr(s, c, nxt_stacks, nxt_set)
                    if len(nxt_stacks) > MAX_STACKS:
                        raise TooBig
                    cur = nxt_stacks
                    if not cur:
                        break
                for s in cur:
                    self._tick()
                    if s not in new_set:
                        new_set.add(s)
                        new.append(s)
            if len(new) > MAX_STACKS:
                raise TooBig
        if not new:
            return False
        self.stacks = new
        self.partial = fin
        return True
