"""Lazy grammars (trigger tokens, words, patterns) against llama.cpp's lazy grammar sampler:
full masks at every step along a token stream that fires the trigger mid-text."""

from __future__ import annotations


import numpy as np
import pytest

from lmtail.errors import GrammarError, ParameterError
from lmtail.grammar import Grammar, Vocab
from lmtail.grammar.lazy import LazyGrammarMatcher, words_pattern

from oracle._lib import vocab_gguf as _path

GRAMMAR = 'root ::= "<tool>" [a-z ]+ "</tool>" [ \\n]*'
TEXT = "Hello there, I will call it. <tool>call me maybe</tool>\n"




_V: dict = {}


def _vocab(name="gpt-2") -> Vocab:
    if name not in _V:
        _V[name] = Vocab.from_gguf(_path(name))
    return _V[name]


CASES = {
    "literal-pattern": dict(patterns=["<tool>"]),
    "regex-pattern": dict(patterns=["[\\s\\S]*?(<tool>)[\\s\\S]*"]),
    "full-pattern": dict(patterns=["^[\\s\\S]*?(<tool>)[\\s\\S]*$"]),
    "words": dict(words=["<tool>", "<function"]),
    "two-patterns": dict(patterns=["never here", "<to+l>"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lazy_masks_match_llama(case):
    from oracle import grammar as og
    from oracle import vocab as ov

    ov.require()
    if _path("gpt-2") is None:
        pytest.skip("ggml-vocab-gpt-2.gguf not found")
    kw = CASES[case]
    toks, masks = og.lazy_mask_stream(_path("gpt-2"), GRAMMAR, TEXT, patterns=kw.get("patterns", ()),
                                      words=kw.get("words"))
    v = _vocab()
    m = LazyGrammarMatcher(Grammar.parse(GRAMMAR), v, trigger_patterns=kw.get("patterns", ()),
                           trigger_words=kw.get("words", ()))
    fired = None
    for i, packed in enumerate(masks):
        want = np.unpackbits(packed)[: v.n_vocab].astype(bool)
        got = m.mask()
        assert np.array_equal(got, want), f"step {i}: {np.flatnonzero(got != want)[:8]}"
        if i < len(toks):
            m.accept(toks[i], check=False)
            if fired is None and not m.awaiting_trigger:
                fired = i
    assert fired is not None and 0 < fired < len(toks) - 2


def test_trigger_token():
    v = _vocab()
    tok = v.pieces.index(b"<")
    g = Grammar.parse('root ::= "<" [a-z]+ ">"')
    m = LazyGrammarMatcher(g, v, trigger_tokens=[tok])
    assert m.awaiting_trigger and m.allows(v.eog_ids[0]) and m.mask().all()
    m.accept(v.pieces.index(b"Hello"))
    assert m.awaiting_trigger
    m.accept(tok)
    assert not m.awaiting_trigger
    assert m.allows(v.pieces.index(b"abc")) and not m.allows(v.pieces.index(b"<"))


def test_words_pattern_and_errors():
    assert words_pattern(["a.b", "(x)"]) == b"[\\s\\S]*?(a\\.b|\\(x\\))[\\s\\S]*"
    v = _vocab()
    g = Grammar.parse('root ::= "x"')
    with pytest.raises(ParameterError):
        LazyGrammarMatcher(g, v, trigger_patterns=["a"], trigger_words=["b"])
    # a trigger whose replayed text the grammar refuses: llama.cpp throws; lmtail raises, unchanged
    m = LazyGrammarMatcher(g, v, trigger_patterns=["Hello"])
    snap = m.snapshot()
    with pytest.raises(GrammarError):
        m.accept(v.pieces.index(b"Hello"))
    assert m.snapshot() == snap


def test_incremental_literal_is_linear():
    import time

    v = _vocab()
    m = LazyGrammarMatcher(Grammar.parse('root ::= "x"'), v, trigger_words=["<never>"])
    t = v.pieces.index(b" the")
    t0 = time.perf_counter()
    for _ in range(20000):
        m.accept(t)
    assert m.awaiting_trigger and time.perf_counter() - t0 < 5.0
