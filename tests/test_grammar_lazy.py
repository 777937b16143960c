"""Lazy grammars (trigger tokens, words, patterns) against llama.cpp's lazy grammar sampler:
full masks at every step along a token stream that fires the trigger mid-text; the linear-time
trigger automaton (:mod:`lmtail.grammar.regex`) against Python's ``re`` on random patterns; typed
errors, validated snapshots.  Only the oracle comparison needs a GGUF vocabulary; every other
test builds the small vocabulary it needs."""

from __future__ import annotations


import numpy as np
import pytest

from lmtail.errors import GrammarError, ParameterError
from lmtail.grammar import Grammar, Vocab
from lmtail.grammar.lazy import LazyGrammarMatcher, LazySnapshot, words_pattern
from lmtail.grammar.regex import TriggerRegex

from oracle._lib import vocab_gguf as _path

GRAMMAR = 'root ::= "<tool>" [a-z ]+ "</tool>" [ \\n]*'
TEXT = "Hello there, I will call it. <tool>call me maybe</tool>\n"




_V: dict = {}


def _vocab(name="gpt-2") -> Vocab:
    path = _path(name)
    if path is None:
        pytest.skip(f"ggml-vocab-{name}.gguf not found (../shared/vocab or the llama-cpp-python sdist)")
    if name not in _V:
        _V[name] = Vocab.from_gguf(path)
    return _V[name]


PIECES = [b"<", b"Hello", b"abc", b" the", b"a", b"c", b"x", b">", b"tool", b"<tool>", b" ", b"\n", b"aa",
          "é".encode(), b"\xc3", b"call", b"</tool>", b"</s>"]  # fmt: skip
VOCAB = Vocab(PIECES, eog_ids=[len(PIECES) - 1])


def tid(piece: bytes) -> int:
    return PIECES.index(piece)


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
        bm = np.zeros((v.n_vocab + 31) // 32, np.int32)  # the engines' int32 layout: the same set
        m.fill_bitmask(bm)
        assert np.array_equal(np.unpackbits(bm.view(np.uint8), bitorder="little")[: v.n_vocab].astype(bool), want)
        if i < len(toks):
            m.accept(toks[i], check=False)
            if fired is None and not m.awaiting_trigger:
                fired = i
    assert fired is not None and 0 < fired < len(toks) - 2


def test_trigger_token():
    v = VOCAB
    tok = tid(b"<")
    g = Grammar.parse('root ::= "<" [a-z]+ ">"')
    m = LazyGrammarMatcher(g, v, trigger_tokens=[tok])
    assert m.awaiting_trigger and m.allows(v.eog_ids[0]) and m.mask().all()
    m.accept(tid(b"Hello"))
    assert m.awaiting_trigger
    m.accept(tok)
    assert not m.awaiting_trigger
    assert m.allows(tid(b"abc")) and not m.allows(tid(b"<"))


def test_words_pattern_and_errors():
    assert words_pattern(["a.b", "(x)"]) == b"[\\s\\S]*?(a\\.b|\\(x\\))[\\s\\S]*"
    v = VOCAB
    g = Grammar.parse('root ::= "x"')
    with pytest.raises(ParameterError):
        LazyGrammarMatcher(g, v, trigger_patterns=["a"], trigger_words=["b"])
    # a trigger whose replayed text the grammar refuses: llama.cpp throws; lmtail raises, unchanged
    for kw in (dict(trigger_patterns=["Hello"]), dict(trigger_patterns=["H[a-z]+o"]), dict(trigger_words=["ell"])):
        m = LazyGrammarMatcher(g, v, **kw)
        m.accept(tid(b"abc"))
        snap = m.snapshot()
        with pytest.raises(GrammarError):
            m.accept(tid(b"Hello"))
        assert m.snapshot() == snap, kw
        m.accept(tid(b"abc"))
        assert m.awaiting_trigger


def test_incremental_literal_is_linear():
    import time

    m = LazyGrammarMatcher(Grammar.parse('root ::= "x"'), VOCAB, trigger_words=["<never>"])
    t = tid(b" the")
    t0 = time.perf_counter()
    for _ in range(20000):
        m.accept(t)
    assert m.awaiting_trigger and time.perf_counter() - t0 < 5.0


def test_backtracking_pattern_is_linear():
    # std::regex backtracks exponentially on (a+)+c over a run of a's (llama.cpp: 28.7 s at 28
    # tokens, doubling per token); the automaton does a bounded amount of work per byte
    g = Grammar.parse('root ::= "a"* "c"')
    m = LazyGrammarMatcher(g, VOCAB, trigger_patterns=["(a+)+c"])
    a = tid(b"a")
    for n in range(1, 1001):
        m.accept(a)
        assert m.awaiting_trigger
        assert m.steps <= 40 * n, (n, m.steps)
    m.accept(tid(b"c"))  # fires: group 1 starts at 0, so all 1001 bytes are replayed
    assert not m.awaiting_trigger and m.is_complete()
    assert m.steps <= 40 * 1001 + 20 * 1001  # plus one linear capture pass


@pytest.mark.parametrize("pattern", [
    "(", "a)", "[a", "*a", "a**", "a{2,1}", "+", "a{", "x{99999}", "\\", "\\q", "\\u00e9", "\\x4",
    "\\1", "(a)\\1", "(?<=a)b", "(?<!a)b", "(?P<n>a)", "^*", "[z-a]", "[\\d-z]", "\\cé",
    # lookahead bodies must be literal (fixed-length alternatives of bytes/classes), unquantified
    "(?=a+)", "(?!a*)b", "(?!(a))b", "(?=(?:ab))", "(?!a(?!b))", "(?=^a)", "(?!a$)", "(?!a)*", "a(?=b)+", "(?!ab",
])  # fmt: skip
def test_bad_trigger_patterns_are_grammar_errors(pattern):
    with pytest.raises(GrammarError):
        LazyGrammarMatcher(Grammar.parse('root ::= "x"'), VOCAB, trigger_patterns=[pattern])


@pytest.mark.parametrize("kw", [
    dict(trigger_tokens=[len(PIECES)]), dict(trigger_tokens=[-1]), dict(trigger_tokens=["1"]),
    dict(trigger_tokens=[True]), dict(trigger_tokens=[0.5]), dict(trigger_tokens=5),
    dict(trigger_patterns="abc"), dict(trigger_patterns=[5]), dict(trigger_words=[None]), dict(trigger_words=b"ab"),
], ids=repr)  # fmt: skip
def test_bad_trigger_arguments_are_parameter_errors(kw):
    with pytest.raises(ParameterError):
        LazyGrammarMatcher(Grammar.parse('root ::= "x"'), VOCAB, **kw)


def test_lazy_matcher_arguments_are_strict():
    g = Grammar.parse('root ::= "x"')
    with pytest.raises(ParameterError):
        LazyGrammarMatcher(g, None, trigger_words=["x"])
    m = LazyGrammarMatcher(g, VOCAB, trigger_words=["<tool>"])
    snap = m.snapshot()
    for bad in ("0", 0.5, True, np.bool_(False), None, -1, len(PIECES)):
        for call in (m.accept, m.allows, m.explain, lambda t: m.accept_many([tid(b"a"), t])):
            with pytest.raises(ParameterError):
                call(bad)
        assert m.snapshot() == snap
    m.accept(np.int64(tid(b"a")))
    with pytest.raises(ParameterError):
        m.mask([True] * len(PIECES))


def test_lazy_restore_validates_everything_first():
    from lmtail.grammar.matcher import GrammarSnapshot

    g = Grammar.parse('root ::= "<tool>" [a-z]+')
    m = LazyGrammarMatcher(g, VOCAB, trigger_patterns=["<to+l>"])
    other = LazyGrammarMatcher(g, VOCAB, trigger_patterns=["<to+l>"])
    m.accept(tid(b"Hello"))
    m.accept(tid(b"<"))
    good = m.snapshot()
    a, buf, pos, det, inner, ver = good
    fired = LazyGrammarMatcher(g, VOCAB, trigger_patterns=["<to+l>"])
    fired.accept(tid(b"<tool>"))
    bad = {
        "tuple": tuple(good),
        "version": good._replace(version=2),
        "awaiting int": good._replace(awaiting=1),
        "buffer short": good._replace(buffer=buf[:-1]),
        "buffer other": good._replace(buffer=b"Hellp<"),
        "position token": good._replace(positions=((tid(b"abc"), 0, 5),) + pos[1:]),
        "position gap": good._replace(positions=pos[:1]),
        "position float": good._replace(positions=((pos[0][0], 0.0, 5),) + pos[1:]),
        "detection count": good._replace(detection=det + det),
        "detection of another matcher": good._replace(detection=other.snapshot().detection),
        "detection garbage": good._replace(detection=("x",)),
        "inner moved while awaiting": good._replace(inner=fired.snapshot().inner),
        "inner pending": good._replace(inner=GrammarSnapshot(inner.state, (0, 7))),
        "triggered with a buffer": good._replace(awaiting=False),
    }
    mask = m.mask().copy()
    for name, snap in bad.items():
        with pytest.raises(ParameterError):
            m.restore(snap)
        assert m.snapshot() == good, name
        assert np.array_equal(m.mask(), mask)
    m.accept(tid(b"tool"))
    m.accept(tid(b">"))
    assert not m.awaiting_trigger and m.allows(tid(b"abc"))
    m.restore(good)
    assert m.awaiting_trigger
    m.accept(tid(b"tool"))
    assert m.awaiting_trigger  # "Hello<tool": no match of <to+l> yet
    m.accept(tid(b">"))
    assert not m.awaiting_trigger and m.allows(tid(b"abc"))


def _python_find(pat: bytes, buf: bytes):
    """llama.cpp's find with Python's re, '.' and '$' spelled as ECMAScript has them."""
    import re

    rx = re.compile(pat.replace(b".", b"[^\n\r]").replace(b"$", b"\\Z"))
    m = rx.fullmatch(buf) if pat[:1] == b"^" and pat[-1:] == b"$" else None
    if m is None:
        m = rx.search(buf)
    if m is None:
        return None
    for i in range(1, rx.groups + 1):
        s, e = m.span(i)
        if s >= 0 and e > s:
            return s
    return m.start()


_ATOMS = ["a", "b", "c", "[ab]", "[^a]", "\\w", "\\s", " ", "x", "."]


def _solid(r, d):  # a pattern that never matches the empty string
    k = r.random()
    if d > 2 or k < 0.5:
        return r.choice(_ATOMS)
    if k < 0.7:
        return _solid(r, d + 1) + _rpat(r, d + 1)
    if k < 0.85:
        return "(" + _solid(r, d + 1) + "|" + _solid(r, d + 1) + ")"
    return "(?:" + _solid(r, d + 1) + ")" + r.choice(["+", "{1,2}", "{2}", "+?"])


def _rpat(r, d=0):
    # repeated groups have bodies that cannot match empty: there Python's re, ECMAScript and
    # libstdc++ each treat empty iterations differently (see lmtail.grammar.regex)
    k = r.random()
    if d > 2 or k < 0.3:
        return r.choice(_ATOMS)
    if k < 0.45:
        return _rpat(r, d + 1) + _rpat(r, d + 1)
    if k < 0.55:
        return "(" + _rpat(r, d + 1) + "|" + _rpat(r, d + 1) + ")"
    if k < 0.65:
        return "(?:" + _solid(r, d + 1) + ")" + r.choice(["*", "+", "?", "*?", "+?", "{1,2}", "{2}", "??"])
    if k < 0.8:
        return "(" + _solid(r, d + 1) + ")" + r.choice(["*", "+", "?", "*?", "{0,2}"])
    if k < 0.85:
        return r.choice(["^", "$", "\\b", "\\B"]) + _rpat(r, d + 1)
    return r.choice(_ATOMS) + r.choice(["*", "+", "?", "+?"])


@pytest.mark.parametrize("seed", range(4))
def test_automaton_agrees_with_backtracking(seed):
    # fed chunk by chunk as tokens arrive: the trigger fires at the same chunk, at the same start,
    # as a backtracking search over the whole buffer (Python's re, ECMAScript's '.' and '$')
    import random

    r = random.Random(seed)
    n_fired = 0
    for _ in range(400):
        pat = _rpat(r)
        if r.random() < 0.15:
            pat = "^" + pat + "$"
        rx = TriggerRegex(pat.encode())
        text = "".join(r.choice("abcx \n\r") for _ in range(r.randint(0, 12))).encode()
        st, buf, i = rx.initial, b"", 0
        while True:
            n = r.randint(0, 3)
            chunk = text[i : i + n]
            i += n
            buf += chunk
            st, seen = rx.feed(st, chunk)
            found = seen or rx.at_end(st)
            if not buf and "\\B" in pat:
                break  # Python's \B never matches an empty string; ECMAScript's does
            want = _python_find(pat.encode(), buf)
            assert found == (want is not None), (pat, buf)
            if found:
                assert rx.trigger_start(buf) == want, (pat, buf)
                n_fired += 1
            if found or i >= len(text):
                break
    assert n_fired > 100


def test_trigger_start_semantics():
    # the first non-empty capture group, else the match start; ^...$ tries the full match first
    cases = [
        (b"<tool>", b"xx<tool>y", 2),
        (b"[\\s\\S]*?(<tool>)[\\s\\S]*", b"ab <tool> c", 3),
        (b"^[\\s\\S]*?(<tool>)[\\s\\S]*$", b"ab <tool> c", 3),
        (b"^\\s*(<tool>)$", b"  <tool>", 2),
        (b"(x?)(<t)", b"a<t", 1),  # group 1 empty: group 2
        (b"(x?)<t", b"a<t", 1),  # every group empty: the match start
        (b"ab|b", b"xab", 1),
        (b"a\\b", b"bab a", 4),
        (b"\\bcall", b"xcall call", 6),
        (b"", b"abc", 0),
        (b"\\x3c\\u0074", b"a<t", 1),
        (b"[^\\n]+?\\n", b"ab\n", 0),
    ]
    for pat, buf, want in cases:
        assert TriggerRegex(pat).trigger_start(buf) == want, pat


def test_word_triggers_with_an_empty_word_fire_at_once():
    # words_pattern(["", "x"]) matches the empty string at 0 (as std::regex does)
    g = Grammar.parse('root ::= [a-z]+')
    m = LazyGrammarMatcher(g, VOCAB, trigger_words=["", "x"])
    m.accept(tid(b"abc"))
    assert not m.awaiting_trigger and m.is_complete()


# -- lookahead over literals (llama.cpp's own chat parsers use it in trigger patterns) ---------

FUNCTIONARY = ">>>(?!all)"  # common/parsers/functionary-v3-2.cpp
MUSE = ("(?:^|<\\|start\\|>assistant)( to=(?!self<\\|message\\|>)(?!user<\\|message\\|>)[^<]*?"
        "<\\|message\\|>)")  # common/parsers/muse-glimmer.cpp
LOOK_CASES = {
    "functionary": (FUNCTIONARY, 'root ::= ">>>" [a-z_]* "\\n" [ -~\\n]*', "hi >>>all\nsure >>>get_time\n{}"),
    "muse": (MUSE, 'root ::= " to=" [a-z.]+ "<|message|>" [ -~]*',
             "<|start|>assistant to=self<|message|>hi<|end|><|start|>assistant to=user<|message|>yo<|end|>"
             "<|start|>assistant to=functions.f<|message|>{\"a\":1}"),
    # the lookahead literal inside one token (" ball") or split across two ("b" + "all")
    "negative": ("b(?!all)", 'root ::= "b" [a-z ]*', "a ball, ball and bus"),
    "positive": ("b(?=all)", 'root ::= "b" [a-z ]*', "a bat, bus and ball"),
}


def _lazy_fire(path, grammar: bytes, pattern: bytes, text: bytes):
    """In the oracle's child: for each split point k, llama.cpp's tokens of text[:k] then of
    text[k:]; accept them into a lazy grammar sampler until its mask stops allowing everything.
    Returns (tokens, fired after this many tokens or None, that mask packed)."""
    import ctypes

    from oracle import grammar as og
    from oracle.vocab import Vocab as OVocab

    out = []
    with OVocab(path) as v:
        lc = v._lc
        pats = (ctypes.c_char_p * 1)(pattern)
        toks0 = (ctypes.c_int * 1)()
        for k in range(1, len(text)):
            toks = og._tokenize_inproc(v, text[:k]) + og._tokenize_inproc(v, text[k:])
            smpl = lc.llama_sampler_init_grammar_lazy_patterns(v._vocab, grammar, b"root", pats, 1, toks0, 0)
            assert smpl
            s = og._Sampler.__new__(og._Sampler)
            s.lc, s.v, s.smpl, s.n = lc, v, smpl, v.n_tokens
            s.arr = np.zeros(s.n, dtype=og._TD)
            s.ids = np.arange(s.n, dtype=np.int32)
            fired = None
            for i in range(len(toks) + 1):
                m = s.mask()
                if not m.all():
                    fired = (i, np.packbits(m))
                    break
                if i < len(toks):
                    s.accept(toks[i])
            s.free()
            out.append((toks, None if fired is None else fired[0], None if fired is None else fired[1]))
    return out


@pytest.mark.parametrize("case", list(LOOK_CASES))
def test_lookahead_triggers_match_llama(case):
    # every split of the text into two tokenized halves (inside ">>>", inside the lookahead
    # literal, ...): the trigger fires after the same token as llama.cpp's, with the same mask
    # there (the grammar replayed from the same start)
    import os

    from oracle import _lib
    from oracle.grammar import _with_alarm
    from oracle.vocab import _isolated

    _lib.require()
    path = _path("gpt-2")
    if path is None:
        pytest.skip("ggml-vocab-gpt-2.gguf not found")
    pattern, grammar, text = LOOK_CASES[case]
    runs = _isolated(_with_alarm, 300, _lazy_fire, os.fspath(path), grammar.encode(), pattern.encode(), text.encode())
    v = _vocab()
    g = Grammar.parse(grammar)
    n_fired = 0
    for toks, fired, packed in runs:
        m = LazyGrammarMatcher(g, v, trigger_patterns=[pattern])
        got = None
        for i, t in enumerate(toks):
            m.accept(t, check=False)
            if not m.awaiting_trigger:
                got = i + 1
                break
        assert got == fired, (toks, got, fired)
        if fired is not None:
            n_fired += 1
            assert np.array_equal(m.mask(), np.unpackbits(packed)[: v.n_vocab].astype(bool)), toks
    assert n_fired > len(runs) // 2


def test_lookahead_at_the_end_of_the_buffer():
    # std::regex tests the lookahead on the buffer as it stands: (?!all) holds before "all" is
    # complete (">>>", ">>>al"), so the trigger fires at once unless the whole literal arrives
    # in the same token; (?=all) fails until the literal is complete
    def fire(pattern, chunks):
        rx = TriggerRegex(pattern)
        st, buf = rx.initial, b""
        for i, c in enumerate(chunks):
            buf += c
            st, seen = rx.feed(st, c)
            if seen or rx.at_end(st):
                return i, rx.trigger_start(buf)
        return None

    assert fire(b">>>(?!all)", [b"x>>", b">"]) == (1, 1)
    assert fire(b">>>(?!all)", [b"x>>", b">al"]) == (1, 1)
    assert fire(b">>>(?!all)", [b"x>>", b">all", b"!"]) is None
    assert fire(b">>>(?!all)", [b">>>all>", b">>f"]) == (1, 6)
    assert fire(b"a(?=bc)", [b"xa", b"b", b"c"]) == (2, 1)
    assert fire(b"a(?=b|cd)", [b"xac", b"d"]) == (1, 1)
    assert fire(b"a(?![bc]d|e)x?$", [b"xab", b"d"]) is None
    assert fire(b"(?!)|z", [b"ab", b"z"]) == (1, 2)  # an empty negative body never holds
    assert fire(b"q(?=)", [b"ab", b"q"]) == (1, 2)


_LOOKS = ["(?!ab)", "(?=a)", "(?!a|bc)", "(?=[ab]c|x)", "(?!b)", "(?=\\s)", "(?!c )", "(?!abc)", "(?=ab|ba)",
          "(?!a[bc]a)", "(?=bca)"]  # fmt: skip


def _rlook(r, d=0):
    # patterns with lookaheads: the random patterns above, lookaheads spliced in
    k = r.random()
    if d > 2 or k < 0.3:
        return r.choice(_LOOKS) + _rpat(r, 2)
    if k < 0.6:
        return _rlook(r, d + 1) + r.choice(_LOOKS) + _rpat(r, d + 1)
    if k < 0.75:
        return "(" + _rlook(r, d + 1) + "|" + _rpat(r, d + 1) + ")"
    if k < 0.85:
        return "(?:" + _solid(r, d + 1) + r.choice(_LOOKS) + ")" + r.choice(["*", "+", "{1,2}", "+?"])
    return _solid(r, d + 1) + r.choice(_LOOKS) + _rlook(r, d + 1)


@pytest.mark.parametrize("seed", range(3))
def test_lookahead_automaton_agrees_with_backtracking(seed):
    # streams split into random tokens: the trigger fires at the first token where Python's re
    # finds a match in the buffer as it stands, at the same start
    import random

    r = random.Random(1000 + seed)
    n_fired = n_pending = 0
    for _ in range(300):
        pat = _rlook(r)
        if r.random() < 0.15:
            pat = "^" + pat + "$"
        rx = TriggerRegex(pat.encode())
        text = "".join(r.choice("aabbcx \n") for _ in range(r.randint(0, 14))).encode()
        st, buf, i = rx.initial, b"", 0
        while True:
            # a lookahead still undecided where a token ends
            n_pending += any(th[1] for d in st if d is not None for th in d.heads)
            n = r.randint(0, 3)
            chunk = text[i : i + n]
            i += n
            buf += chunk
            st, seen = rx.feed(st, chunk)
            found = seen or rx.at_end(st)
            if not buf and "\\B" in pat:
                break
            want = _python_find(pat.encode(), buf)
            assert found == (want is not None), (pat, buf)
            if found:
                assert rx.trigger_start(buf) == want, (pat, buf)
                n_fired += 1
            if found or i >= len(text):
                break
    assert n_fired > 80 and n_pending > 30


def test_lookahead_is_linear():
    # a pending lookahead per position (every "a" starts one): bounded work per byte
    g = Grammar.parse('root ::= "a"* "c"')
    m = LazyGrammarMatcher(g, VOCAB, trigger_patterns=["(a+)(?!aaaa)(?=a)c|a(?!a)c"])
    a = tid(b"a")
    for n in range(1, 1001):
        m.accept(a)
        assert m.awaiting_trigger
        assert m.steps <= 60 * n, (n, m.steps)
    m.accept(tid(b"c"))
    assert not m.awaiting_trigger


def test_lookahead_snapshot_round_trip():
    # a detection state with a pending constraint survives snapshot/restore and is validated
    g = Grammar.parse('root ::= "<" [a-z]+')
    m = LazyGrammarMatcher(g, VOCAB, trigger_patterns=["c(?!all)x|<"])
    m.accept(tid(b"c"))
    m.accept(tid(b"a"))
    good = m.snapshot()
    other = LazyGrammarMatcher(g, VOCAB, trigger_patterns=["c(?!all)x|<"])
    with pytest.raises(ParameterError):
        m.restore(good._replace(detection=other.snapshot().detection))
    m.restore(good)
    assert m.awaiting_trigger
    m.accept(tid(b"<"))
    assert not m.awaiting_trigger
