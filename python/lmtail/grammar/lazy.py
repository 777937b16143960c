"""Lazy grammars: unconstrained until a trigger, then the grammar (llama.cpp's ``grammar_lazy``).

Semantics of ``llama_grammar_accept_impl`` / ``llama_grammar_apply_impl`` (src/llama-grammar.cpp,
llama-cpp-python 0.3.36) while ``awaiting_trigger``:

* the mask is a no-op: every token is allowed, EOG included;
* accepting a **trigger token** switches the grammar on and feeds that token to it;
* any other token's piece is appended to a buffer; every trigger **pattern** is then looked for in
  the whole buffer, in order, the first that matches wins (a pattern written ``^...$`` first tries
  a full match, then a search); the constrained text starts at the first non-empty capture
  group, else at the match start.  The grammar is switched on and the buffered tokens
  overlapping that start are replayed with their ids, the first one cut to the part after the
  start.
* **trigger words** (the deprecated ``llama_sampler_init_grammar_lazy``) become one pattern
  ``[\\s\\S]*?(w1|w2|...)[\\s\\S]*`` (regex metacharacters escaped); llama-server's
  ``TYPE_WORD`` triggers become escaped patterns.

Cost: llama.cpp re-runs every pattern with ``std::regex`` over the whole untriggered output at
every token -- quadratic in the output, and exponential for a backtracking pattern such as
``(a+)+c``.  Here nothing is ever rescanned: a pattern that is a plain literal (an escaped word)
and the trigger-words pattern are searched incrementally (only the bytes that can complete a new
occurrence are looked at), and every other pattern runs on :mod:`.regex`'s automaton, advanced
over each new piece only, with one linear pass over the buffer when it fires.  The answers are
llama.cpp's (see :mod:`.regex` for the pattern subset: lookahead over literal text is run with
``std::regex``'s answer on the buffer as it stands at each token; backreferences, lookbehind and
other lookaheads are refused with :class:`~lmtail.errors.GrammarError` when the matcher is built).

Errors: a malformed or unsupported pattern is a :class:`~lmtail.errors.GrammarError`; a token or
trigger token that is not an integer id in the vocabulary, a pattern or word that is not
str/bytes, or a bad snapshot is a :class:`~lmtail.errors.ParameterError` (the same rules as
:class:`~lmtail.grammar.GrammarMatcher`).  Every state change is all or nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from ..errors import GrammarError, ParameterError
from .bitmask import check_bitmask_row, write_packed
from .matcher import Grammar, GrammarMatcher, GrammarSnapshot, token_id
from .regex import TriggerRegex
from .utf8 import NO_PARTIAL
from .vocab import Vocab

__all__ = ["LazyGrammarMatcher", "LazySnapshot", "words_pattern"]

SNAPSHOT_VERSION = 1

_SPECIAL = re.compile(rb"[.^$|()*+?\[\]{}\\]")


def _escape(word: bytes) -> bytes:
    return _SPECIAL.sub(lambda m: b"\\" + m.group(0), word)


def _text(x, what: str) -> bytes:
    if isinstance(x, str):
        return x.encode("utf-8", "surrogateescape")
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise ParameterError(f"{what} must be str or bytes, got {type(x).__name__}")


def _items(xs, what: str) -> list:
    if isinstance(xs, (str, bytes, bytearray, memoryview)) or not isinstance(xs, Iterable):
        raise ParameterError(f"{what} must be a list (or other iterable) of items, got {type(xs).__name__}")
    return list(xs)


def words_pattern(words: Iterable[str | bytes]) -> bytes:
    """The single pattern llama.cpp builds from trigger words."""
    ws = [_text(w, "trigger word") for w in _items(words, "trigger_words")]
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
    """One trigger pattern: a literal searched incrementally, or a :class:`TriggerRegex`."""

    def __init__(self, pattern: bytes, words: Sequence[bytes] | None = None):
        self.pattern = pattern
        self.words = list(words) if words is not None else None
        if self.words is None:
            lit = _literal(pattern)
            if lit is not None:
                self.words = [lit]
        elif not all(self.words):
            self.words = None  # an empty word matches at once: let the automaton say so
        self.regex = None if self.words is not None else TriggerRegex(pattern)
        self.maxlen = max((len(w) for w in self.words), default=0) if self.words else 0

    @property
    def initial(self):
        return None if self.regex is None else self.regex.initial

    def find(self, buf: bytearray, prev_len: int, state):
        """(start or None, new detection state) once ``buf[prev_len:]`` has been appended."""
        if self.regex is None:
            # The earliest occurrence of any word; none ended before prev_len (else it would have
            # fired), so only occurrences overlapping the new bytes need a look.
            lo = max(0, prev_len - self.maxlen + 1)
            best = None
            for w in self.words:
                p = buf.find(w, lo)
                if p >= 0 and (best is None or p < best):
                    best = p
            return best, None
        rx = self.regex
        state, seen = rx.feed(state, memoryview(buf)[prev_len:])
        if seen or rx.at_end(state):
            start = rx.trigger_start(bytes(buf))
            if start is not None:
                return start, state
        return None, state


class LazySnapshot(NamedTuple):
    """A :class:`LazyGrammarMatcher`'s whole state (see :meth:`LazyGrammarMatcher.snapshot`)."""

    awaiting: bool
    buffer: bytes
    positions: tuple  # (token, start, end) of each buffered token
    detection: tuple  # one automaton state per trigger (None for literal triggers)
    inner: GrammarSnapshot
    version: int = SNAPSHOT_VERSION


class LazyGrammarMatcher:
    """A :class:`GrammarMatcher` that stays off until a trigger token or pattern appears.

    ``trigger_patterns`` (llama.cpp's ``llama_sampler_init_grammar_lazy_patterns``),
    ``trigger_words`` (the deprecated ``llama_sampler_init_grammar_lazy``; not with patterns) and
    ``trigger_tokens`` (ids of the vocabulary).  While awaiting a trigger every token is allowed;
    after it, this is the inner :class:`GrammarMatcher` (``inner``).  Trigger matching costs time
    linear in the output (see the module docstring).
    """

    def __init__(
        self,
        grammar: Grammar,
        vocab: Vocab,
        *,
        trigger_patterns: Iterable[str | bytes] = (),
        trigger_tokens: Iterable[int] = (),
        trigger_words: Iterable[str | bytes] = (),
    ):
        if not isinstance(vocab, Vocab):
            raise ParameterError(f"vocab must be an lmtail.grammar.Vocab, got {type(vocab).__name__}")
        pats = [_text(p, "trigger pattern") for p in _items(trigger_patterns, "trigger_patterns")]
        words = [_text(w, "trigger word") for w in _items(trigger_words, "trigger_words")]
        toks = [token_id(t, vocab.n_vocab, "trigger token") for t in _items(trigger_tokens, "trigger_tokens")]
        if words and pats:
            raise ParameterError("give trigger_words or trigger_patterns, not both (llama.cpp asserts)")
        self.inner = GrammarMatcher(grammar, vocab)
        self.triggers = [_Trigger(words_pattern(words), words)] if words else [_Trigger(p) for p in pats]
        self.trigger_tokens = frozenset(toks)
        self.vocab = vocab
        self.awaiting = True
        self._buf = bytearray()
        self._pos: list[tuple[int, int, int]] = []  # (token, start, end) in the buffer
        self._det = [t.initial for t in self.triggers]

    @property
    def awaiting_trigger(self) -> bool:
        """True until a trigger token or pattern has switched the grammar on."""
        return self.awaiting

    @property
    def steps(self) -> int:
        """Work done by the trigger automata so far (bytes fed plus automaton states visited)."""
        return sum(t.regex.steps for t in self.triggers if t.regex is not None)

    def allows(self, token: int) -> bool:
        """Every token while awaiting a trigger (llama.cpp's apply is a no-op), else the grammar's answer."""
        t = token_id(token, self.vocab.n_vocab)
        return True if self.awaiting else self.inner.allows(t)

    def mask(self, out: np.ndarray | None = None) -> np.ndarray:
        """All True while awaiting a trigger, else :meth:`GrammarMatcher.mask`."""
        if self.awaiting:
            n = self.vocab.n_vocab
            if out is None:
                return np.ones(n, bool)
            if not isinstance(out, np.ndarray) or out.dtype != np.bool_ or out.shape != (n,) or not out.flags.writeable:
                got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
                raise ParameterError(f"out must be a writeable bool array of shape ({n},), got {got}")
            out[:] = True
            return out
        return self.inner.mask(out)

    def fill_bitmask(self, out, row: int = 0) -> None:
        """Every token allowed while awaiting a trigger, else :meth:`GrammarMatcher.fill_bitmask`
        (int32 bitmask layout of XGrammar / llguidance, see :mod:`.bitmask`)."""
        if self.awaiting:
            n = self.vocab.n_vocab
            dst = check_bitmask_row(out, row, n)
            write_packed(dst, np.packbits(np.ones(n, bool), bitorder="little"))
            return
        self.inner.fill_bitmask(out, row)

    def is_complete(self) -> bool:
        """True while awaiting a trigger (EOG is allowed), else :meth:`GrammarMatcher.is_complete`."""
        return True if self.awaiting else self.inner.is_complete()

    def explain(self, token: int) -> str:
        """Why ``token`` is allowed or rejected here (see :meth:`GrammarMatcher.explain`)."""
        t = token_id(token, self.vocab.n_vocab)
        if self.awaiting:
            return f"token {t} is allowed: the lazy grammar is still waiting for a trigger"
        return self.inner.explain(t)

    def snapshot(self) -> LazySnapshot:
        """The whole state, for :meth:`restore` (O(buffer) bytes copy while awaiting a trigger)."""
        return LazySnapshot(self.awaiting, bytes(self._buf), tuple(self._pos), tuple(self._det), self.inner.snapshot())

    def check_snapshot(self, snap) -> None:
        """Raise :class:`~lmtail.errors.ParameterError` unless ``snap`` is a :class:`LazySnapshot`
        of this version consistent with this matcher: the buffer is exactly the pieces of its
        buffered tokens, one automaton state per trigger of this matcher, an inner snapshot valid
        for the inner matcher (its start state while awaiting), nothing buffered once triggered."""
        if not isinstance(snap, LazySnapshot) or len(snap) != 6:
            raise ParameterError(f"restore: expected a LazySnapshot from snapshot(), got {type(snap).__name__}")
        if type(snap.version) is not int or snap.version != SNAPSHOT_VERSION:
            raise ParameterError(f"restore: snapshot version {snap.version!r}, this lmtail reads {SNAPSHOT_VERSION}")
        if type(snap.awaiting) is not bool or type(snap.buffer) is not bytes or type(snap.positions) is not tuple:
            raise ParameterError("restore: corrupt snapshot (awaiting, buffer or positions of the wrong type)")
        self.inner.check_snapshot(snap.inner)
        if not snap.awaiting:
            if snap.buffer or snap.positions:
                raise ParameterError("restore: corrupt snapshot (a triggered matcher buffers nothing)")
        else:
            if snap.inner.state is not self.inner.grammar.program.initial or snap.inner.pending != NO_PARTIAL:
                raise ParameterError("restore: corrupt snapshot (the grammar moved before the trigger)")
            at = 0
            pieces = self.vocab.pieces
            for p in snap.positions:
                if type(p) is not tuple or len(p) != 3 or any(type(x) is not int for x in p):
                    raise ParameterError("restore: corrupt snapshot (a buffered position is not 3 ints)")
                tok, s, e = p
                if not 0 <= tok < self.vocab.n_vocab or s != at or snap.buffer[s:e] != pieces[tok] or e - s != len(pieces[tok]):
                    raise ParameterError("restore: corrupt snapshot (buffered tokens do not spell the buffer)")
                at = e
            if at != len(snap.buffer):
                raise ParameterError("restore: corrupt snapshot (buffered tokens do not spell the buffer)")
        det = snap.detection
        if type(det) is not tuple or len(det) != len(self.triggers):
            raise ParameterError("restore: corrupt snapshot (one automaton state per trigger expected)")
        for trig, d in zip(self.triggers, det):
            if trig.regex is None:
                if d is not None:
                    raise ParameterError("restore: corrupt snapshot (state for a literal trigger)")
            elif not trig.regex.check_state(d):
                raise ParameterError("restore: corrupt snapshot (not an automaton state of this trigger)")

    def restore(self, snap: LazySnapshot) -> None:
        """Return to a :meth:`snapshot`; a bad snapshot raises
        :class:`~lmtail.errors.ParameterError` and changes nothing (:meth:`check_snapshot`)."""
        self.check_snapshot(snap)
        self.inner.restore(snap.inner)
        self.awaiting = snap.awaiting
        self._buf = bytearray(snap.buffer)
        self._pos = list(snap.positions)
        self._det = list(snap.detection)

    def accept(self, token: int, *, check: bool = True) -> None:
        """Advance by ``token`` (llama.cpp's ``llama_grammar_accept_impl`` on a lazy grammar).

        While awaiting: a trigger token switches the grammar on and is fed to it; any other
        token is buffered and the triggers are looked for; when one fires, the buffered text from
        its start is replayed into the grammar.  If the grammar refuses that text,
        :class:`~lmtail.errors.GrammarError` is raised (llama.cpp throws) and nothing changes.
        Once triggered this is :meth:`GrammarMatcher.accept`.
        """
        t = token_id(token, self.vocab.n_vocab)
        if not self.awaiting:
            self.inner.accept(t, check=check)
            return
        piece = self.vocab.pieces[t]
        inner = self.inner
        inner_snap = inner.snapshot()
        if t in self.trigger_tokens:
            try:
                inner.accept_bytes(piece, t)
            except BaseException:
                inner._state, inner._partial = inner_snap.state, inner_snap.pending
                raise
            self.awaiting = False
            self._buf.clear()
            self._pos.clear()
            self._det = [tr.initial for tr in self.triggers]
            return
        buf = self._buf
        prev = len(buf)
        buf += piece
        self._pos.append((t, prev, prev + len(piece)))
        try:
            new_det = list(self._det)
            for i, trig in enumerate(self.triggers):
                start, new_det[i] = trig.find(buf, prev, self._det[i])
                if start is None:
                    continue
                for tok, s, e in self._pos:
                    if e > start:
                        inner.accept_bytes(bytes(buf[max(s, start) : e]), tok)
                self.awaiting = False
                buf.clear()
                self._pos.clear()
                self._det = [tr.initial for tr in self.triggers]
                return
            self._det = new_det
        except BaseException:
            del buf[prev:]
            self._pos.pop()
            inner._state, inner._partial = inner_snap.state, inner_snap.pending
            raise

    def accept_many(self, tokens) -> None:
        """:meth:`accept` each token in turn, all or nothing."""
        snap = self.snapshot()
        try:
            for t in tokens:
                self.accept(t)
        except BaseException:
            self.restore(snap)
            raise
