"""Lazy grammars: unconstrained until a trigger, then the grammar (llama.cpp's ``grammar_lazy``).

Semantics of ``llama_grammar_accept_impl`` / ``llama_grammar_apply_impl`` (src/llama-grammar.cpp,
llama-cpp-python 0.3.36) while ``awaiting_trigger``:

* the mask is a no-op: every token is allowed, EOG included;
* accepting a **trigger token** switches the grammar on and feeds that token to it;
* any other token's piece is appended to a buffer; every trigger **pattern** is then looked for in
  the whole buffer (a pattern written ``^...$`` first tries a full match, then a search); the
  constrained text starts at the first non-empty capture group, else at the match start.  The
  grammar is switched on and the buffered tokens overlapping that start are replayed with their
  ids, the first one cut to the part after the start.
* **trigger words** (the deprecated ``llama_sampler_init_grammar_lazy``) become one pattern
  ``[\\s\\S]*?(w1|w2|...)[\\s\\S]*`` (regex metacharacters escaped); llama-server's
  ``TYPE_WORD`` triggers become escaped patterns.

Cost: llama.cpp re-runs every pattern over the whole untriggered output at every token (O(n^2)).
Here a pattern that is a plain literal (an escaped word) and the trigger-words pattern are
searched incrementally -- only the bytes that can complete a new occurrence are looked at, so the
cost is linear in the output length.  Other patterns are matched with Python's ``re`` on bytes
(close to, but not exactly, ECMAScript ``std::regex``: no differences for the patterns chat
templates use -- escaped words, ``[\\s\\S]``, classes, groups, ``^``/``$`` -- but e.g. Python
has no ``\\cX`` escapes) and rescan the buffer like llama.cpp.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from ..errors import GrammarError, ParameterError
from .matcher import Grammar, GrammarMatcher
from .vocab import Vocab

__all__ = ["LazyGrammarMatcher", "words_pattern"]

_SPECIAL = re.compile(rb"[.^$|()*+?\[\]{}\\]")


def _escape(word: bytes) -> bytes:
    return _SPECIAL.sub(lambda m: b"\\" + m.group(0), word)


def words_pattern(words: Iterable[str | bytes]) -> bytes:
    """The single pattern llama.cpp builds from trigger words."""
    ws = [w.encode() if isinstance(w, str) else bytes(w) for w in words]
    return b"[\\s\\S]*?(" + b"|".join(_escape(w) for w in ws) + b")[\\s\\S]*"


def _literal(pattern: bytes) -> bytes | None:
    """The literal text of a pattern made only of plain and escaped-metacharacter bytes."""
    out = bytearray()
    i = 0
    while i < len(pattern):
        c = pattern[i : i + 1]
        if c == b"\\":
            nxt = pattern[i + 1 : i + 2]
            if not nxt or not _SPECIAL.fullmatch(nxt):
                return None
            out += nxt
            i += 2
        elif _SPECIAL.fullmatch(c):
            return None
        else:
            out += c
            i += 1
    return bytes(out) if out else None


class _Trigger:
    def __init__(self, pattern: bytes, words: Sequence[bytes] | None = None):
        self.pattern = pattern
        self.words = list(words) if words is not None else None
        if self.words is None:
            lit = _literal(pattern)
            if lit is not None:
                self.words = [lit]
                self.literal_group = False
        else:
            self.literal_group = True
        self.regex = None if self.words is not None else re.compile(pattern)
        self.full = pattern[:1] == b"^" and pattern[-1:] == b"$"
        self.maxlen = max((len(w) for w in self.words), default=0) if self.words else 0

    def find(self, buf: bytes, prev_len: int) -> int | None:
        if self.words is not None:
            # The earliest occurrence of any word; none ended before prev_len (else it would have
            # fired), so only occurrences overlapping the new bytes need a look.
            lo = max(0, prev_len - self.maxlen + 1)
            best = None
            for w in self.words:
                if not w:
                    continue
                p = buf.find(w, lo)
                if p >= 0 and (best is None or p < best):
                    best = p
            return best
        m = None
        if self.full:
            m = self.regex.fullmatch(buf)
        if m is None:
            m = self.regex.search(buf)
        if m is None:
            return None
        for i in range(1, (m.re.groups or 0) + 1):
            s, e = m.span(i)
            if s >= 0 and e > s:
                return s
        return m.start()


class LazyGrammarMatcher:
    """A :class:`GrammarMatcher` that stays off until a trigger token or pattern appears."""

    def __init__(
        self,
        grammar: Grammar,
        vocab: Vocab,
        *,
        trigger_patterns: Iterable[str | bytes] = (),
        trigger_tokens: Iterable[int] = (),
        trigger_words: Iterable[str | bytes] = (),
    ):
        pats = [p.encode() if isinstance(p, str) else bytes(p) for p in trigger_patterns]
        words = [w.encode() if isinstance(w, str) else bytes(w) for w in trigger_words]
        if words and pats:
            raise ParameterError("give trigger_words or trigger_patterns, not both (llama.cpp asserts)")
        self.triggers = [_Trigger(words_pattern(words), words)] if words else [_Trigger(p) for p in pats]
        self.trigger_tokens = frozenset(int(t) for t in trigger_tokens)
        self.inner = GrammarMatcher(grammar, vocab)
        self.vocab = vocab
        self.awaiting = True
        self._buf = bytearray()
        self._pos: list[tuple[int, int, int]] = []  # (token, start, end) in the buffer

    @property
    def awaiting_trigger(self) -> bool:
        return self.awaiting

    def allows(self, token: int) -> bool:
        return True if self.awaiting else self.inner.allows(token)

    def mask(self, out: np.ndarray | None = None) -> np.ndarray:
        if self.awaiting:
            if out is None:
                return np.ones(self.vocab.n_vocab, bool)
            out[:] = True
            return out
        return self.inner.mask(out)

    def is_complete(self) -> bool:
        return True if self.awaiting else self.inner.is_complete()

    def explain(self, token: int) -> str:
        if self.awaiting:
            return f"token {token} is allowed: the lazy grammar is still waiting for a trigger"
        return self.inner.explain(token)

    def snapshot(self):
        return (self.awaiting, bytes(self._buf), tuple(self._pos), self.inner.snapshot())

    def restore(self, snap) -> None:
        self.awaiting, buf, pos, inner = snap
        self._buf = bytearray(buf)
        self._pos = list(pos)
        self.inner.restore(inner)

    def accept(self, token: int, *, check: bool = True) -> None:
        t = int(token)
        if not 0 <= t < self.vocab.n_vocab:
            raise ParameterError(f"token {token} is outside the vocabulary [0, {self.vocab.n_vocab})")
        if not self.awaiting:
            self.inner.accept(t, check=check)
            return
        piece = self.vocab.pieces[t]
        snap = self.snapshot()
        if t in self.trigger_tokens:
            self.awaiting = False
            self._buf.clear()
            try:
                self.inner.accept_bytes(piece, t)
            except GrammarError:
                self.restore(snap)
                raise
            return
        prev = len(self._buf)
        self._pos.append((t, prev, prev + len(piece)))
        self._buf += piece
        buf = bytes(self._buf)
        for trig in self.triggers:
            start = trig.find(buf, prev)
            if start is None:
                continue
            self.awaiting = False
            try:
                for tok, s, e in self._pos:
                    if e <= start:
                        continue
                    self.inner.accept_bytes(buf[max(s, start) : e], tok)
            except GrammarError:
                self.restore(snap)
                raise
            self._buf.clear()
            self._pos.clear()
            return
