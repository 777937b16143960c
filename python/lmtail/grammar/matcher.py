"""``Grammar`` and ``GrammarMatcher``: llama.cpp's grammar-sampler decisions on an Earley engine.

A token is allowed exactly when llama.cpp's ``llama_grammar_apply_impl`` leaves its logit finite:

* an end-of-generation token (``Vocab.eog_ids``) is allowed iff some parse has completed the root
  rule -- also while a partial code point is pending -- and is never matched as text;
* a token whose piece is empty or starts with a NUL byte is rejected;
* otherwise the piece is decoded leniently from the pending partial state (:mod:`.utf8`; a decoded
  0 ends the token) and the token is allowed iff some parse can consume its code points, where a
  ``<[id]>`` / ``!<[id]>`` element met with code points left decides by the token id alone (as in
  llama.cpp, also in the middle of a token), and at the end of the token nothing may be pending,
  or the pending bytes must be completable to a character of the set the parse waits on (a
  negated set passes only if no excluded character is completable -- conservative, per set).

``accept`` follows ``llama_grammar_accept_impl``: it feeds every decoded code point (a mid-token
0 included) to the parses waiting on characters, advances the parses waiting on a token by id,
and keeps the new pending state.  Where llama.cpp would abort (EOG with no complete parse) or
throw (no parse survives), ``accept`` raises :class:`~lmtail.errors.GrammarError` and leaves the
matcher unchanged.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ..errors import GrammarError, ParameterError
from .earley import Program, State
from .parser import DEFAULT_MAX_ELEMENTS, ParsedGrammar, parse_gbnf
from .bitmask import check_bitmask_row, write_packed
from .mask import TokenTable, compute_mask, end_ok, scalar_walk
from .utf8 import NO_PARTIAL, decode_piece
from .vocab import Vocab

__all__ = ["Grammar", "GrammarMatcher", "GrammarSnapshot", "token_id", "bytes_arg"]

MASK_CACHE = 1024  # packed masks kept per (grammar, vocabulary), least recently used dropped
SNAPSHOT_VERSION = 1
_INT32_MAX = (1 << 31) - 1


def token_id(token, n_vocab: int | None, what: str = "token") -> int:
    """``token`` as an int in ``[0, n_vocab)``: a Python or numpy integer, never a bool, float or
    string (those are :class:`~lmtail.errors.ParameterError`, not silently converted)."""
    if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
        raise ParameterError(f"{what} must be an integer token id, got {type(token).__name__} {token!r}")
    t = int(token)
    hi = n_vocab if n_vocab is not None else _INT32_MAX + 1
    if not 0 <= t < hi:
        where = f"the vocabulary [0, {n_vocab})" if n_vocab is not None else f"[0, {hi})"
        raise ParameterError(f"{what} {t} is outside {where}")
    return t


def bytes_arg(data, what: str = "piece") -> bytes:
    """A bytes-like argument (bytes, bytearray, memoryview) as bytes; anything else -- str, int,
    a list of ints -- is a :class:`~lmtail.errors.ParameterError`."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise ParameterError(f"{what} must be bytes-like (bytes, bytearray, memoryview), got {type(data).__name__}")


def _pending_ok(p) -> bool:
    """Is ``p`` a pending state :func:`~lmtail.grammar.utf8.decode_piece` can produce?"""
    if type(p) is not tuple or len(p) != 2 or any(type(x) is not int for x in p):
        return False
    value, n = p
    if n == -1:
        return value == 0
    if n == 0:  # the last decoded code point (lead nibble F gives at most 22 bits)
        return 0 <= value < 1 << 22
    if 1 <= n <= 3:  # lead bits (<= 4) plus 6 per continuation byte seen so far
        return 0 <= value < 1 << (4 + 6 * (3 - n))
    return False


class GrammarSnapshot(NamedTuple):
    """A :class:`GrammarMatcher`'s whole state: the interned Earley ``state`` and the ``pending``
    partial code point.  Immutable, O(1) to take; valid for any matcher of the same
    :class:`Grammar` object (it does not depend on the vocabulary)."""

    state: State
    pending: tuple[int, int]
    version: int = SNAPSHOT_VERSION


class Grammar:
    """A GBNF grammar parsed exactly as llama.cpp parses it.  Immutable; share it freely."""

    def __init__(self, parsed: ParsedGrammar, root: str, text: str | bytes):
        self.parsed = parsed
        self.root = root
        self.text = text
        self.program = Program(parsed, root)

    @classmethod
    def parse(cls, text: str | bytes, root: str = "root", *, max_elements: int = DEFAULT_MAX_ELEMENTS) -> "Grammar":
        """Parse GBNF; raises :class:`~lmtail.errors.GrammarError` (with line and column) wherever
        ``llama_sampler_init_grammar`` returns NULL.  An empty text is an error here (llama.cpp
        reads an empty grammar string as "no grammar").

        ``max_elements`` bounds the expanded grammar (default 1,000,000 elements): a repetition
        that would expand past it is a GrammarError at the repetition, raised before allocating
        -- a deliberate deviation, llama.cpp expands such grammars in full (see
        :func:`~lmtail.grammar.parser.parse_gbnf`).  A text that is not str/bytes, or a bad
        ``root``/``max_elements``, is a :class:`~lmtail.errors.ParameterError`.
        """
        if isinstance(text, (str, bytes)) and len(text) == 0:
            raise GrammarError("empty grammar (llama.cpp treats an empty grammar string as no grammar at all)", 1, 1)
        parsed = parse_gbnf(text, root, max_elements=max_elements)
        return cls(parsed, root, text)

    @property
    def rules(self) -> list[list[tuple[int, int]]]:
        """llama.cpp's element lists, one per rule id (see :mod:`.parser`)."""
        return self.parsed.rules

    @property
    def symbol_ids(self) -> dict[str, int]:
        """Rule name -> rule id, generated ``<rule>_<n>`` names included."""
        return self.parsed.symbol_ids

    def __repr__(self) -> str:
        return f"Grammar(root={self.root!r}, rules={len(self.parsed.rules)})"


class GrammarMatcher:
    """Incremental matcher of a :class:`Grammar` over a :class:`Vocab`'s tokens.

    ``allows(t)`` / ``mask()`` reproduce llama.cpp's grammar sampler bit for bit; ``accept(t)``
    advances; ``snapshot()`` / ``restore()`` are O(1) (states are immutable and interned).

    Arguments are strict: a token id is a Python or numpy integer in ``[0, n_vocab)`` (a bool,
    float or string is refused, not converted) and raw text is bytes-like; anything else is a
    :class:`~lmtail.errors.ParameterError`.  A token the grammar rejects is a
    :class:`~lmtail.errors.GrammarError`.  Every state change is all or nothing: a call that
    raises leaves the matcher exactly as it was.
    """

    def __init__(self, grammar: Grammar, vocab: Vocab | None):
        if not isinstance(grammar, Grammar):
            raise ParameterError(f"grammar must be an lmtail.grammar.Grammar, got {type(grammar).__name__}")
        self.grammar = grammar
        self.vocab = vocab
        if vocab is None:  # text-only matching (accept_bytes, is_complete, expected)
            self._view = None
        else:
            if not isinstance(vocab, Vocab):
                raise ParameterError(f"vocab must be an lmtail.grammar.Vocab, got {type(vocab).__name__}")
            tab = vocab.__dict__.get("_token_table")
            if tab is None:
                tab = vocab.__dict__["_token_table"] = TokenTable(vocab)
            masks = grammar.__dict__.setdefault("_masks", {})
            if id(vocab) not in masks or masks[id(vocab)][0] is not vocab:
                masks[id(vocab)] = (vocab, OrderedDict())
            self._view = tab
            self._masks = masks[id(vocab)][1]
        self._state: State = grammar.program.initial
        self._partial: tuple[int, int] = NO_PARTIAL
        if not self._state.alive:  # pragma: no cover - a parsed grammar always has a start item
            raise GrammarError("the grammar matches nothing")

    # -- state -------------------------------------------------------------------------------

    def is_complete(self) -> bool:
        """True when some parse has completed the root rule (an EOG token is allowed now)."""
        return self._state.complete

    def snapshot(self) -> GrammarSnapshot:
        """The matcher's state, for :meth:`restore` (O(1): states are immutable and interned)."""
        return GrammarSnapshot(self._state, self._partial)

    def check_snapshot(self, snap) -> None:
        """Raise :class:`~lmtail.errors.ParameterError` unless ``snap`` is a
        :class:`GrammarSnapshot` of this version whose state belongs to this matcher's grammar
        (interned by its program) and whose pending bytes are a state UTF-8 decoding can reach."""
        if not isinstance(snap, GrammarSnapshot) or len(snap) != 3:
            raise ParameterError(f"restore: expected a GrammarSnapshot from snapshot(), got {type(snap).__name__}")
        if type(snap.version) is not int or snap.version != SNAPSHOT_VERSION:
            raise ParameterError(f"restore: snapshot version {snap.version!r}, this lmtail reads {SNAPSHOT_VERSION}")
        st = snap.state
        prog = self.grammar.program
        if not isinstance(st, State) or st.prog is not prog or prog._states.get(st.kernel) is not st:
            raise ParameterError("restore: the snapshot's state does not belong to this matcher's grammar")
        if not st.alive:
            raise ParameterError("restore: the snapshot's state has no live parse")
        if not _pending_ok(snap.pending):
            raise ParameterError(f"restore: the snapshot's pending UTF-8 state {snap.pending!r} is not a reachable one")

    def restore(self, snap: GrammarSnapshot) -> None:
        """Return to a :meth:`snapshot`.  The snapshot is checked in full first
        (:meth:`check_snapshot`); a bad one raises :class:`~lmtail.errors.ParameterError` and
        leaves the matcher exactly as it was."""
        self.check_snapshot(snap)
        self._state, self._partial = snap.state, snap.pending

    def reset(self) -> None:
        """Back to the start of the grammar (nothing accepted, nothing pending)."""
        self._state, self._partial = self.grammar.program.initial, NO_PARTIAL

    @property
    def pending(self) -> tuple[int, int]:
        """llama.cpp's ``partial_utf8``: (value so far, bytes still expected; -1 = invalid)."""
        return self._partial

    # -- checking ----------------------------------------------------------------------------

    def _check_token(self, token: int) -> int:
        if self.vocab is None:
            raise ParameterError("this matcher has no vocabulary (GrammarMatcher(grammar, None)); use accept_bytes")
        return token_id(token, self.vocab.n_vocab)

    def _decode(self, token: int) -> tuple[tuple[int, ...], tuple[int, int]]:
        if self._partial[1] <= 0:
            return self._view.decoded(token)
        cps, fin = decode_piece(self.vocab.pieces[token], self._partial)
        if 0 in cps:
            cps = cps[: cps.index(0)]
        return tuple(cps), fin

    def allows(self, token: int) -> bool:
        """Would llama.cpp's grammar sampler keep ``token`` (finite logit) in this state?"""
        t = self._check_token(token)
        st = self._state
        if self.vocab.is_eog[t]:
            return st.complete
        piece = self.vocab.pieces[t]
        if not piece or piece[0] == 0:
            return False
        cache = st.cache
        key = (t, self._partial) if self._partial[1] > 0 else t
        r = cache.get(key)
        if r is None:
            r = cache[key] = scalar_walk(st, t, *self._decode(t))
        return r

    def mask(self, out: np.ndarray | None = None) -> np.ndarray:
        """Boolean array (n_vocab): True where llama.cpp's grammar sampler keeps the token."""
        if self.vocab is None:
            raise ParameterError("this matcher has no vocabulary (GrammarMatcher(grammar, None))")
        n = self.vocab.n_vocab
        if out is None:
            out = np.empty(n, dtype=bool)
        elif not isinstance(out, np.ndarray) or out.dtype != np.bool_ or out.shape != (n,) or not out.flags.writeable:
            got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
            raise ParameterError(f"out must be a writeable bool array of shape ({n},), got {got}")
        packed, m = self._packed()
        if m is not None:
            np.copyto(out, m)
        else:
            np.copyto(out, np.unpackbits(packed, count=n, bitorder="little").view(np.bool_))
        return out

    def fill_bitmask(self, out, row: int = 0) -> None:
        """Write the mask into row ``row`` of ``out`` in the int32 bitmask layout of XGrammar /
        llguidance: ``out`` is (B, ceil(n_vocab / 32)) or (ceil(n_vocab / 32),) int32, and bit
        ``i % 32`` of word ``i // 32`` is set iff token i is allowed (bits past n_vocab are 0).
        The same allowed set as :meth:`mask` (see :mod:`.bitmask`)."""
        if self.vocab is None:
            raise ParameterError("this matcher has no vocabulary (GrammarMatcher(grammar, None))")
        dst = check_bitmask_row(out, row, self.vocab.n_vocab)
        write_packed(dst, self._packed()[0])

    def _packed(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(the mask packed 1 bit per token, little bit order; the bool mask when it was just
        computed, else None), through the per-(grammar, vocabulary) LRU cache."""
        n = self.vocab.n_vocab
        key = (self._state, self._partial if self._partial[1] > 0 else NO_PARTIAL)
        cache = self._masks
        packed = cache.get(key)
        if packed is not None:
            cache.move_to_end(key)
            return packed, None
        m = np.zeros(n, dtype=bool)
        st = self._state
        if self._partial[1] > 0:
            # only pieces that start with a continuation byte can continue a pending code point
            for t in self._view.cont.tolist():
                if not self.vocab.is_eog[t]:
                    cps, fin = self._decode(t)
                    if scalar_walk(st, t, cps, fin):
                        m[t] = True
        else:
            compute_mask(self._view, st, m)
        m[self.vocab.is_eog] = st.complete
        packed = cache[key] = np.packbits(m, bitorder="little")  # 1 bit per token: 16 KiB at 128k
        if len(cache) > MASK_CACHE:
            cache.popitem(last=False)
        return packed, m

    # -- advancing ---------------------------------------------------------------------------

    def accept(self, token: int, *, check: bool = True) -> None:
        """Advance by ``token`` (llama.cpp's ``llama_grammar_accept_impl``).

        With ``check`` (default) a token :meth:`allows` rejects raises
        :class:`~lmtail.errors.GrammarError` (with :meth:`explain`'s text) and nothing changes.
        ``check=False`` reproduces llama.cpp's accept exactly, which does not re-check the mask
        (e.g. a piece that is invalid UTF-8 is a no-op that resets the pending bytes); it still
        raises, leaving the matcher unchanged, where llama.cpp would abort or throw.
        """
        t = self._check_token(token)
        st = self._state
        if self.vocab.is_eog[t]:
            if st.complete:
                return
            raise GrammarError(self.explain(t))
        if check and not self.allows(t):
            raise GrammarError(self.explain(t))
        self.accept_bytes(self.vocab.pieces[t], t)

    def accept_bytes(self, piece: bytes, token: int = -1) -> None:
        """Feed raw bytes as one token's piece (llama.cpp's ``llama_grammar_accept_token``).

        ``token`` is the id that ``<[id]>`` / ``!<[id]>`` elements see (-1: none).  No mask check,
        no EOG handling; raises :class:`~lmtail.errors.GrammarError` (matcher unchanged) when no
        parse survives.  Useful for prefilling text that was not produced by this vocabulary.
        ``piece`` must be bytes-like and ``token`` an integer (-1, or an id in the vocabulary when
        the matcher has one): anything else is a :class:`~lmtail.errors.ParameterError`.
        """
        piece = bytes_arg(piece)
        if not (type(token) is int and token == -1):
            token = token_id(token, self.vocab.n_vocab if self.vocab is not None else None)
        t = int(token)
        st = self._state
        cps, fin = decode_piece(piece, self._partial)
        k_tok = st.token_step(t) if st.toks else frozenset()
        if cps:
            s: State | None = st
            for cp in cps:
                s = s.step(cp)
                if s is None:
                    break
            if not k_tok:
                new = s
            else:
                new = st.prog.state(k_tok | (s.kernel if s is not None else frozenset()))
        else:
            kc = st.char_kernel()
            new = st.prog.state(k_tok | kc) if (k_tok or kc) else None
        if new is None or not new.alive:
            raise GrammarError(
                f"token {t} ({bytes(piece)!r}) leaves no parse alive (llama.cpp: Unexpected empty grammar stack "
                "after accepting piece)"
            )
        self._state = new
        self._partial = fin

    def accept_many(self, tokens) -> None:
        """:meth:`accept` each token in turn, all or nothing: if one is rejected (or is not a
        valid id), the matcher is back where it was before the first and the error is raised."""
        before = (self._state, self._partial)
        try:
            for t in tokens:
                self.accept(t)
        except BaseException:
            self._state, self._partial = before
            raise

    # -- diagnostics -------------------------------------------------------------------------

    def expected(self) -> list[str]:
        """What the grammar can take next: character sets, token references, end of generation."""
        st = self._state
        sets = st.prog.sets
        out = [sets[s].describe() for s in st.sets]
        from .parser import TOKEN

        for (typ, val), _q, _c in st.toks:
            out.append(f"<[{val}]>" if typ == TOKEN else f"!<[{val}]>")
        if st.complete:
            out.append("<end of generation>")
        return out

    def explain(self, token: int) -> str:
        """Why ``token`` is allowed or rejected here: where in its piece the grammar stops, and
        what it expected at that point."""
        t = self._check_token(token)
        st = self._state
        piece = self.vocab.pieces[t]
        head = f"token {t} {piece!r}"
        if self.vocab.is_eog[t]:
            if st.complete:
                return f"{head} is allowed: end of generation, and the root rule is complete"
            return (f"{head} is rejected: it ends the generation but the root rule is not complete here; "
                    f"the grammar expects {_fmt(self.expected())}")
        if not piece or piece[0] == 0:
            return f"{head} is rejected: its piece is empty or starts with a NUL byte (llama.cpp rejects those)"
        cps, fin = self._decode(t)
        if fin[1] < 0 and not cps:
            return (f"{head} is rejected: its bytes are not valid (lenient) UTF-8"
                    + (f" after the pending partial code point {self._partial}" if self._partial[1] > 0 else ""))
        s: State = st
        for i, cp in enumerate(cps):
            if s.toks and s.token_matches(t):
                return f"{head} is allowed: after {i} code point(s) a token reference matches its id"
            nxt = s.step(cp)
            if nxt is None:
                sets = s.prog.sets
                exp = [sets[x].describe() for x in s.sets]
                exp += [f"<[{v}]>" if ty == 8 else f"!<[{v}]>" for (ty, v), _q, _c in s.toks]
                if s.complete:
                    exp.append("<end of generation>")
                done = "".join(chr(c) for c in cps[:i] if c < 0x110000)
                return (f"{head} is rejected at code point {i} ({_cp(cp)}) after {done!r}: "
                        f"the grammar expects {_fmt(exp)}")
            s = nxt
        if end_ok(s, fin):
            return f"{head} is allowed"
        sets = s.prog.sets
        return (f"{head} is rejected: it ends inside a code point (pending {fin}) that cannot complete to any of "
                f"{_fmt([sets[x].describe() for x in s.sets])}")


def _cp(cp: int) -> str:
    c = chr(cp) if cp < 0x110000 and not 0xD800 <= cp < 0xE000 else "?"
    return f"{c!r} U+{cp:04X}"


def _fmt(items: list[str]) -> str:
    if not items:
        return "nothing (no parse can continue)"
    if len(items) > 12:
        items = items[:12] + [f"... ({len(items) - 12} more)"]
    return ", ".join(items)
