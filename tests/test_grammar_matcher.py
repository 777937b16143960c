"""GrammarMatcher without llama.cpp: its integration test cases, a second model of its algorithm
on vocabularies built here, and the documented quirks.

* ``test_llama_integration_case``: the 14 ``test_grammar`` cases of
  ``tests/test-grammar-integration.cpp`` (139 strings), replayed with that harness's semantics
  (each code point is its own piece with token id 0, ``token(N)`` is id N with piece ``<[N]>``);
* ``test_against_stack_model``: full masks along random token streams on a built vocabulary
  (multi-byte, partial UTF-8, control-looking, empty and NUL pieces, EOG), compared token by token
  with ``_grammar_ref.RefGrammar``, a direct model of llama.cpp's pushdown stacks.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from _grammar_ref import RefGrammar, TooBig
from lmtail.errors import GrammarError, ParameterError
from lmtail.grammar import Grammar, GrammarMatcher, Vocab

DATA = Path(__file__).parent / "data"
from oracle._lib import llama_sdist

GRAMMARS = llama_sdist() / "vendor" / "llama.cpp" / "grammars"

_INTEG = json.loads((DATA / "grammar_integration_cases.json").read_text(encoding="utf-8"))["cases"]
_GCASES = [c for c in _INTEG if c["kind"] == "grammar"]


def _harness_pieces(s):
    segs = [{"text": s}] if isinstance(s, str) else s
    for seg in segs:
        if "token" in seg:
            yield seg["token"], f"<[{seg['token']}]>".encode()
        else:
            for ch in seg["text"]:
                if 0xD800 <= ord(ch) < 0xE000:  # invalid UTF-8 in the C++ literal: U+FFFD
                    ch = "\ufffd"
                yield 0, ch.encode("utf-8")


def _harness_match(g: Grammar, s) -> bool:
    m = GrammarMatcher(g, None)
    for tid, piece in _harness_pieces(s):
        try:
            m.accept_bytes(piece, tid)
        except GrammarError:
            return False
    return m.is_complete()


@pytest.mark.parametrize("case", _GCASES, ids=[c["desc"][:40] for c in _GCASES])
def test_llama_integration_case(case):
    g = Grammar.parse(case["grammar"])
    for s in case["passing"]:
        assert _harness_match(g, s), f"should match: {s!r}"
    for s in case["failing"]:
        assert not _harness_match(g, s), f"should not match: {s!r}"


def test_integration_counts():
    assert len(_INTEG) == 47 and len(_GCASES) == 14
    assert sum(len(c["passing"]) + len(c["failing"]) for c in _GCASES) == 139


# -- a vocabulary built here ----------------------------------------------------------------------


def built_vocab() -> Vocab:
    pieces: list[bytes] = [bytes([c]) for c in range(0x20, 0x7F)] + [b"\n", b"\t", b"\r"]
    words = [
        b'{"', b'":', b'": ', b'",', b'"}', b"true", b"null", b"false", b" {", b"[\n", b"],", b"1.", b"-0", b"e+",
        b"\\u", b"\\n", b"12", b"007", b" + ", b"(", b"))", b"- ", b"\n- ", b"1. ", b"e4", b" e5", b"Nf3", b"O-O",
        b"int", b" main", b"() {", b"return", b";\n", b"  ", b"\n\n", b"ab", b"abc", b"hello", b" world",
        "é".encode(), "日本".encode(), "語".encode(), "こんにちは".encode(), "ア".encode(), "—".encode(),
        "\u2028".encode(), "😀".encode(), b"\xe3", b"\x81", b"\xe3\x81", b"\x82", b"\x93", b"\xf0\x9f", b"\x98\x80",
        b" \xe2\x80", b"\x94", b"\xc3", b"\xa9", b"\xc0", b"\xc1\x81", b"\xf8\x88\x80\x80", b"\xc3(", b"\x80a",
        b"a\xe3", b"<|im_start|>", b"<[5]>", b"", b"\0a", b"a\0b", b"\xc0\x80",
    ]  # fmt: skip
    pieces += words
    pieces.append(b"</s>")
    return Vocab(pieces, eog_ids=[len(pieces) - 1], name="built")


VOCAB = built_vocab()

STACK_GRAMMARS = {
    "arithmetic": None,
    "json": None,
    "chess": None,
    "list": None,
    "japanese": None,
    "c": None,
    "english": None,
    "tokens": 'root ::= "a" <[5]> !<[7]> "b"* | <[3]> [^x]+ "\\n"',
    "negated-partial": 'root ::= [^é] "!" | [^è] "?" | " " | " \\u2014"',
    "nested": 'root ::= ( "(" root ")" | [a-c]+ | "" ) ("," root)?',
    "repeat": 'root ::= ("ab"{1,3} [0-9]{2,} | "é"{2})+ "."?',
    "mid-token-id": 'root ::= "a" !<[11]> "c" | "h" <[40]>',
    "any": "root ::= . . [^\\n]* \"\\n\"?",
}


def _grammar_text(name: str) -> str | None:
    src = STACK_GRAMMARS[name]
    if src is not None:
        return src
    p = GRAMMARS / f"{name}.gbnf"
    return p.read_text(encoding="utf-8") if p.exists() else None


@pytest.mark.parametrize("name", list(STACK_GRAMMARS))
def test_against_stack_model(name):
    src = _grammar_text(name)
    if src is None:
        pytest.skip(f"{name}.gbnf not found in {GRAMMARS}")
    g = Grammar.parse(src)
    rng = np.random.default_rng(len(name))
    ids = np.arange(VOCAB.n_vocab)
    n_checked = 0
    for stream in range(3):
        m = GrammarMatcher(g, VOCAB)
        ref = RefGrammar(g.parsed)
        for step in range(25):
            mine = m.mask()
            try:
                want = np.array([ref.allowed(t, VOCAB.pieces[t], bool(VOCAB.is_eog[t])) for t in ids])
            except TooBig:
                pytest.skip("the stack model blew up (as llama.cpp would)")
            bad = np.flatnonzero(mine != want)
            assert not bad.size, f"step {step}: {[(int(t), VOCAB.pieces[t], bool(want[t])) for t in bad[:6]]}"
            assert m.is_complete() == ref.complete()
            n_checked += 1
            cand = np.flatnonzero(mine & ~VOCAB.is_eog)
            if cand.size == 0:
                break
            t = int(rng.choice(cand))
            ok = ref.accept(t, VOCAB.pieces[t])
            if not ok:  # llama.cpp's mask/accept mismatch (TOKEN after a char mid-token): lmtail raises
                with pytest.raises(GrammarError):
                    m.accept(t)
                break
            m.accept(t)
            for t2 in ids[:: max(1, VOCAB.n_vocab // 40)]:  # allows() agrees with mask()
                assert m.allows(int(t2)) == bool(m.mask()[t2])
    assert n_checked >= 3


# -- documented behaviours ------------------------------------------------------------------------


def tid(piece: bytes) -> int:
    return VOCAB.pieces.index(piece)


def test_eog_only_at_complete_root_even_with_pending_bytes():
    g = Grammar.parse('root ::= " " | " \\u2014"')
    m = GrammarMatcher(g, VOCAB)
    eos = VOCAB.eog_ids[0]
    assert not m.allows(eos)
    assert m.allows(tid(b" \xe2\x80"))  # ends inside U+2014: a partial that can complete
    m.accept(tid(b" \xe2\x80"))
    assert m.pending == (0x2 << 6 | 0x0, 1)
    assert m.is_complete() and m.allows(eos)  # llama.cpp: " " completed the root; bytes dangle
    assert m.allows(tid(b"\x94")) and not m.allows(tid(b"a"))
    m.accept(eos)  # allowed EOG: no change
    assert m.is_complete()


def test_negated_set_partial_is_conservative():
    g = Grammar.parse('root ::= [^é] "!"')
    m = GrammarMatcher(g, VOCAB)
    assert not m.allows(tid(b"\xc3"))  # è would be fine, but C3 could also become é
    assert m.allows(tid(b"\xe3"))
    g = Grammar.parse('root ::= [^é] | [^è]')
    assert not GrammarMatcher(g, VOCAB).allows(tid(b"\xc3"))  # per set, not on the merged set


def test_empty_and_nul_pieces_rejected():
    g = Grammar.parse("root ::= .*")
    m = GrammarMatcher(g, VOCAB)
    assert not m.allows(tid(b"")) and not m.allows(tid(b"\0a"))
    assert m.allows(tid(b"a\0b"))  # decoding stops at the NUL: "a"
    assert m.allows(tid(b"\xc0\x80"))  # decodes to 0, which ends the token: nothing to match


def test_control_tokens_match_as_text():
    g = Grammar.parse('root ::= "<|im_start|>" [a-z]+')
    m = GrammarMatcher(g, VOCAB)
    assert m.allows(tid(b"<|im_start|>")) and m.allows(tid(b"<"))
    m.accept(tid(b"<|im_start|>"))
    assert m.allows(tid(b"hello"))


def test_token_reference_by_id_only():
    t5 = tid(b"<[5]>")
    g = Grammar.parse(f"root ::= <[{t5}]> \"x\"")
    m = GrammarMatcher(g, VOCAB)
    assert m.allows(t5) and not m.allows(tid(b"<")) and not m.allows(tid(b"x"))
    m.accept(t5)
    assert m.allows(tid(b"x"))
    # !<[id]>: any other token, whatever its text
    g = Grammar.parse(f"root ::= !<[{t5}]>")
    m = GrammarMatcher(g, VOCAB)
    assert not m.allows(t5) and m.allows(tid(b"hello")) and m.allows(tid(b"a\xe3"))
    # ... but a token with no complete code point and bytes pending is rejected (as llama.cpp)
    assert not m.allows(tid(b"\xe3"))


def test_mid_token_id_check_then_accept_raises():
    # llama.cpp's mask checks only the id once a TOKEN element is reached mid-token; its accept
    # then finds no parse (it throws). lmtail reproduces the mask and raises on accept.
    other = tid(b"ab")
    g = Grammar.parse(f'root ::= "a" !<[{other + 1}]>')
    m = GrammarMatcher(g, VOCAB)
    assert m.allows(other)
    snap = m.snapshot()
    with pytest.raises(GrammarError):
        m.accept(other)
    assert m.snapshot() == snap


def test_accept_rejects_and_leaves_state():
    g = Grammar.parse('root ::= "ab" "c"')
    m = GrammarMatcher(g, VOCAB)
    m.accept(tid(b"a"))
    snap = m.snapshot()
    with pytest.raises(GrammarError, match="rejected at code point 0"):
        m.accept(tid(b"x"))
    with pytest.raises(GrammarError, match="root rule is not complete"):
        m.accept(VOCAB.eog_ids[0])
    assert m.snapshot() == snap
    m.accept(tid(b"b"))
    m.restore(snap)
    assert m.allows(tid(b"b")) and not m.allows(tid(b"c"))
    with pytest.raises(ParameterError):
        m.allows(VOCAB.n_vocab)


def test_explain_mentions_expected():
    g = Grammar.parse('root ::= "a" [0-9]+')
    m = GrammarMatcher(g, VOCAB)
    s = m.explain(tid(b"ab"))
    assert "code point 1" in s and "[0-9]" in s
    assert "allowed" in m.explain(tid(b"a"))
    assert "empty" in m.explain(tid(b""))
    assert m.expected() == ['"a"']


def test_mask_out_reuse_and_cache():
    g = Grammar.parse(_grammar_text("json") or 'root ::= "{" [a-z]* "}"')
    m = GrammarMatcher(g, VOCAB)
    out = np.zeros(VOCAB.n_vocab, bool)
    r = m.mask(out)
    assert r is out and out.sum() > 0
    again = m.mask()
    assert np.array_equal(again, out) and again is not out
    with pytest.raises(ParameterError):
        m.mask(np.zeros(3, bool))


def test_hidden_left_recursion_works():
    # llama.cpp's check misses this (b is nullable only by derivation) and then grows its stacks
    # until it runs out of memory; Earley simply handles it.
    g = Grammar.parse('root ::= a "e"\na ::= b a "y" | "z"\nb ::= "q"?')
    m = GrammarMatcher(g, None)
    for ch in b"qqzyye":
        m.accept_bytes(bytes([ch]))
    assert m.is_complete()
    m2 = GrammarMatcher(g, None)
    m2.accept_bytes(b"zyye")
    assert m2.is_complete()


def test_ambiguous_grammar_is_not_exponential():
    g = Grammar.parse("root ::= " + ' "x"?' * 40 + ' "x"*')
    m = GrammarMatcher(g, VOCAB)
    t = time.perf_counter()
    for _ in range(60):
        m.accept(tid(b"x"))
        m.mask()
    assert m.is_complete()
    assert time.perf_counter() - t < 20


def test_states_repeat_inside_repetition():
    # tail calls keep the Earley state constant inside a repetition: the mask is cached
    g = Grammar.parse('root ::= "\\"" [a-z ]* "\\""')
    m = GrammarMatcher(g, VOCAB)
    m.accept(tid(b'"'))
    m.accept(tid(b"a"))
    s1 = m.snapshot()
    for w in (b"hello", b" world", b"ab", b"  "):
        m.accept(tid(w))
    assert m.snapshot()[0] is s1[0]


def test_text_only_matcher():
    g = Grammar.parse('root ::= "a" [b-d]+')
    m = GrammarMatcher(g, None)
    m.accept_bytes(b"ab")
    assert m.is_complete()
    with pytest.raises(ParameterError):
        m.mask()


def test_accept_unchecked_invalid_piece_is_a_noop():
    # llama.cpp's accept does not re-check the mask: a piece that is invalid after the pending
    # bytes decodes to nothing, leaves the parses waiting on characters as they were, and resets
    # the pending state to "invalid" (which the next piece ignores).
    g = Grammar.parse('root ::= "é" "x" | "a" "b"')
    m = GrammarMatcher(g, VOCAB)
    ref = RefGrammar(g.parsed)
    for piece in (b"\xc3", b"a"):
        t = tid(piece)
        m.accept(t, check=False)
        assert ref.accept(t, piece)
    assert m.pending == ref.partial == (0, -1)
    want = np.array([ref.allowed(t, VOCAB.pieces[t], bool(VOCAB.is_eog[t])) for t in range(VOCAB.n_vocab)])
    assert np.array_equal(m.mask(), want)
    assert m.allows(tid("é".encode())) and m.allows(tid(b"ab"))


# ---- strict arguments, validated restore, all-or-nothing (issue 18 items 4 and 7) ---------------

BAD_IDS = ["0", 0.5, 1.0, True, False, np.bool_(True), None, b"\x00", np.float32(1), [0]]


@pytest.mark.parametrize("bad", BAD_IDS, ids=[repr(b) for b in BAD_IDS])
def test_token_ids_are_not_converted(bad):
    # "0", 0.5 and True used to become tokens 0, 0 and 1
    g = Grammar.parse('root ::= [a-z]+')
    m = GrammarMatcher(g, VOCAB)
    snap = m.snapshot()
    for call in (m.allows, m.accept, m.explain, lambda t: m.accept_many([tid(b"a"), t])):
        with pytest.raises(ParameterError):
            call(bad)
        assert m.snapshot() == snap
    with pytest.raises(ParameterError):
        m.accept_bytes(b"a", bad)
    assert m.snapshot() == snap


def test_numpy_integer_ids_are_accepted():
    g = Grammar.parse('root ::= [a-z]+')
    m = GrammarMatcher(g, VOCAB)
    a = tid(b"a")
    for t in (np.int64(a), np.int32(a), np.uint16(a), np.intp(a)):
        assert m.allows(t)
    m.accept(np.int32(a))
    m.accept_many(np.array([a, a], dtype=np.int64))
    m.accept_bytes(b"b", np.int64(a))
    for bad in (-1, VOCAB.n_vocab, np.int64(-2), 2**40):
        with pytest.raises(ParameterError):
            m.allows(bad)


@pytest.mark.parametrize("bad", ["a", 97, [97], None, (97,), np.array([97], np.uint8)], ids=repr)
def test_accept_bytes_takes_only_bytes(bad):
    m = GrammarMatcher(Grammar.parse('root ::= [a-z]+'), None)
    with pytest.raises(ParameterError):
        m.accept_bytes(bad)
    assert m.snapshot() == GrammarMatcher(m.grammar, None).snapshot()
    m.accept_bytes(bytearray(b"a"))
    m.accept_bytes(memoryview(b"bc"))
    assert m.is_complete()


def test_mask_out_must_be_an_array():
    m = GrammarMatcher(Grammar.parse('root ::= "a"'), VOCAB)
    for bad in ([False] * VOCAB.n_vocab, np.zeros(VOCAB.n_vocab, np.uint8)):
        with pytest.raises(ParameterError):
            m.mask(bad)
    ro = np.zeros(VOCAB.n_vocab, bool)
    ro.flags.writeable = False
    with pytest.raises(ParameterError):
        m.mask(ro)


def _corrupt_snapshots(m, other):
    from lmtail.grammar.matcher import GrammarSnapshot

    st, pend, ver = m.snapshot()
    return {
        "plain tuple": (st, pend),
        "not a snapshot": "garbage",
        "None": None,
        "version": GrammarSnapshot(st, pend, 2),
        "bool version": GrammarSnapshot(st, pend, True),
        "pending too long": GrammarSnapshot(st, (0, 5)),
        "pending negative": GrammarSnapshot(st, (-1, 1)),
        "pending value": GrammarSnapshot(st, (1 << 20, 1)),
        "pending invalid value": GrammarSnapshot(st, (7, -1)),
        "pending bool": GrammarSnapshot(st, (True, 1)),
        "pending shape": GrammarSnapshot(st, (0, 0, 0)),
        "pending float": GrammarSnapshot(st, (0.0, 0)),
        "state of another grammar": GrammarSnapshot(other.snapshot().state, pend),
        "state not a state": GrammarSnapshot("state", pend),
    }


def test_restore_validates_everything_first():
    g = Grammar.parse('root ::= "é" [a-z]* "x"')
    m = GrammarMatcher(g, VOCAB)
    other = GrammarMatcher(Grammar.parse('root ::= "é" [a-z]* "x"'), VOCAB)  # equal text, other object
    m.accept(tid(b"\xc3"))  # a pending partial code point
    before, mask = m.snapshot(), m.mask().copy()
    for name, snap in _corrupt_snapshots(m, other).items():
        with pytest.raises(ParameterError):
            m.restore(snap)
        assert m.snapshot() == before, name
        assert np.array_equal(m.mask(), mask), name
    # a good snapshot from another matcher of the same Grammar object (any vocabulary) restores
    m2 = GrammarMatcher(g, None)
    m2.accept_bytes("éab".encode())
    m.restore(m2.snapshot())
    assert m.allows(tid(b"x")) and m.pending == (ord("b"), 0)


def test_accept_many_is_all_or_nothing():
    g = Grammar.parse('root ::= "ab" "c"')
    m = GrammarMatcher(g, VOCAB)
    snap = m.snapshot()
    with pytest.raises(GrammarError):
        m.accept_many([tid(b"a"), tid(b"b"), tid(b"x")])
    assert m.snapshot() == snap
    m.accept_many([tid(b"a"), tid(b"b")])
    assert m.allows(tid(b"c"))


def test_failed_multibyte_accept_changes_nothing():
    # a token whose first code points match and whose last does not: nothing is applied
    g = Grammar.parse('root ::= "日本" "x"')
    m = GrammarMatcher(g, None)
    m.accept_bytes("日".encode()[:2])
    snap = m.snapshot()
    with pytest.raises(GrammarError):
        m.accept_bytes("日本y".encode()[2:])
    assert m.snapshot() == snap
    m.accept_bytes("日本x".encode()[2:])
    assert m.is_complete()
