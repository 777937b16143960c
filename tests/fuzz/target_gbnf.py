"""Fuzz target: the GBNF parser, the Earley matcher built on it, and lazy-grammar triggers.

Each input is parsed as a grammar (bytes as they are: the parser decodes leniently, as llama.cpp
does) with a small ``max_elements`` so a blow-up is a refused input, not a slow one.  When it
parses, a matcher over a small in-process vocabulary (multi-byte, partial UTF-8, empty, NUL and
EOG pieces) takes masks and a few tokens chosen by the input's bytes, with snapshot/restore,
``explain`` and ``expected`` on the way; a text-only matcher is fed the input's own bytes; and the
input's first line is tried as a lazy-grammar trigger pattern.  Anything but an
``lmtail.errors.LmtailError`` is a finding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmtail.errors import GrammarError, LmtailError
from lmtail.grammar import Grammar, GrammarMatcher, LazyGrammarMatcher, Vocab

NAME = "gbnf"
CORPUS = Path(__file__).resolve().parent / "corpus" / "gbnf"
MAX_LEN = 4096
DICTIONARY = [
    b"root ::= ", b"::=", b"|", b"(", b")", b"[", b"]", b"[^", b"*", b"+", b"?", b"{", b"}", b"{0,", b"{2000}",
    b",", b"\"", b"\\x", b"\\u", b"\\U", b"\\n", b"\\\\", b".", b"<[", b"]>", b"!<[", b"#", b"\n", b"\r\n",
    b"-", "é".encode(), b"\xe6\x97\xa5", b"\xff", b"\x00", b"ws", b"value", b"root", b"(?:", b"\\b", b"$", b"^",
]  # fmt: skip
MAX_ELEMENTS = 5_000

_PIECES = [b"a", b"b", b"c", b" ", b"\n", b"{", b"}", b"\"", b"0", b"1", b"-", b"ab", b"true", "é".encode(),
           "日".encode(), b"\xc3", b"\xa9", b"\xe6", b"\x97\xa5", b"\xff", b"\x80", b"", b"\x00x", b"<[3]>",
           b"x", b"[", b"]", b",", b":", b"</s>"]  # fmt: skip
VOCAB = Vocab(_PIECES, eog_ids=[len(_PIECES) - 1])


def _drive(m: GrammarMatcher, data: bytes) -> None:
    for k in range(4):
        mask = m.mask()
        m.is_complete()
        m.expected()
        cand = np.flatnonzero(mask & ~VOCAB.is_eog)
        if cand.size == 0:
            return
        t = int(cand[(data[k % len(data)] if data else 0) % cand.size])
        assert m.allows(t)
        m.explain(t)
        snap = m.snapshot()
        m.accept(t)
        if k == 1:  # a restore must give back the exact state
            after = m.snapshot()
            m.restore(snap)
            m.accept(t)
            assert m.snapshot() == after
    rejected = np.flatnonzero(~m.mask())
    if rejected.size:
        snap = m.snapshot()
        try:
            m.accept(int(rejected[0]))
        except GrammarError:
            pass
        else:
            raise AssertionError("accepted a token the mask rejects")
        assert m.snapshot() == snap


def one_input(data: bytes) -> None:
    try:
        g = Grammar.parse(data, max_elements=MAX_ELEMENTS)
    except GrammarError:
        g = None
    if g is not None:
        _drive(GrammarMatcher(g, VOCAB), data)
        text = GrammarMatcher(g, None)
        # Earley recognition is cubic in the text on highly ambiguous grammars (a mutant of the
        # grammar that hung the stack-model reference takes ~0.1 s per byte at 60 bytes): keep
        # the text short so one input stays well under the harness's time limit
        for i in range(0, min(len(data), 21), 7):
            try:
                text.accept_bytes(data[i : i + 7], i)
            except GrammarError:
                break
        text.is_complete()
    pattern = data.split(b"\n", 1)[0][:64]
    try:
        lazy = LazyGrammarMatcher(g or Grammar.parse('root ::= [a-z]+'), VOCAB, trigger_patterns=[pattern])
    except GrammarError:
        return
    for b in data[:24]:
        try:
            lazy.accept(b % (len(_PIECES) - 1))
        except GrammarError:
            return
        lazy.mask()


__all__ = ["NAME", "CORPUS", "MAX_LEN", "DICTIONARY", "one_input", "LmtailError"]
