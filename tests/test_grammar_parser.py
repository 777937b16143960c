"""GBNF parsing: llama.cpp's own parser test cases, its build checks, quirks, and the live oracle.

* ``test_llama_parser_case``: the 23 cases of ``tests/test-grammar-parser.cpp`` (data in
  ``tests/data/grammar_parser_cases.json``): 6 must fail, 17 must produce exactly llama.cpp's
  symbol table and element arrays;
* ``test_llama_build_checks``: the build checks of ``tests/test-grammar-integration.cpp``;
* ``test_quirk_against_oracle``: edge cases accepted/rejected exactly as
  ``llama_sampler_init_grammar`` does (NULL = rejected), checked live against llama.cpp.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lmtail.errors import GrammarError, LmtailError
from lmtail.grammar import Grammar
from lmtail.grammar.parser import CHAR, CHAR_ANY, CHAR_NOT, RULE_REF, TOKEN, TOKEN_NOT, parse_gbnf

DATA = Path(__file__).parent / "data"
from oracle._lib import llama_sdist

SDIST = llama_sdist() / "vendor" / "llama.cpp"
SHARED_VOCAB = Path(__file__).resolve().parents[2] / "shared" / "vocab"

_PARSER_CASES = json.loads((DATA / "grammar_parser_cases.json").read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("case", _PARSER_CASES, ids=[f"{c['kind']}-{i}" for i, c in enumerate(_PARSER_CASES)])
def test_llama_parser_case(case):
    if case["kind"] == "failure":
        with pytest.raises(GrammarError):
            parse_gbnf(case["grammar"], check_root=False)
        return
    p = parse_gbnf(case["grammar"], check_root=False)
    assert p.symbol_ids == case["symbol_ids"]
    flat = [[t, v] for rule in p.rules for t, v in rule]
    assert flat == case["elements"]


def test_parser_case_counts():
    assert len(_PARSER_CASES) == 23
    assert sum(c["kind"] == "failure" for c in _PARSER_CASES) == 6


def test_llama_build_checks():
    # test_failure_missing_root: parses, but there is no 'root'
    g = 'rot ::= expr\nexpr ::= term ("+" term)*\nterm ::= number\nnumber ::= [0-9]+'
    assert "root" not in parse_gbnf(g, check_root=False).symbol_ids
    with pytest.raises(GrammarError, match="does not contain a 'root' symbol"):
        Grammar.parse(g)
    # test_failure_missing_reference
    with pytest.raises(GrammarError, match="Undefined rule identifier 'numero'"):
        parse_gbnf('root ::= expr\nexpr ::= term ("+" term)*\nterm ::= numero\nnumber ::= [0-9]+', check_root=False)
    # test_failure_left_recursion (four grammars)
    for g in [
        'root ::= "a" | root "a"',
        'root ::= asdf\nasdf ::= "a" | asdf "a"\n',
        'root ::= asdf\nasdf ::= "a" | foo "b"\nfoo ::= "c" | asdf "d" | "e"',
        'root ::= asdf\nasdf ::= "a" | foo "b"\nfoo ::= "c" | empty asdf "d" | "e"\nempty ::= "blah" | ',
    ]:
        with pytest.raises(GrammarError, match="left recursion"):
            Grammar.parse(g)
    # test_failure_missing_root_symbol / test_custom_root_symbol_check
    with pytest.raises(GrammarError, match="'nonexistent'"):
        Grammar.parse('root ::= "foobar"', root="nonexistent")
    with pytest.raises(GrammarError):
        Grammar.parse('foobar ::= "foobar"')
    assert Grammar.parse('foobar ::= "foobar"', root="foobar").root == "foobar"


def test_error_type_and_location():
    with pytest.raises(GrammarError) as ei:
        Grammar.parse('root ::= "a"\nfoo ::= "\\q"\n')
    e = ei.value
    assert isinstance(e, LmtailError) and isinstance(e, ValueError)
    assert (e.line, e.column) == (2, 10)  # the backslash
    assert "unknown escape" in e.message and "line 2, column 10" in str(e)
    with pytest.raises(GrammarError) as ei:
        Grammar.parse('root ::= "é" x\n')
    assert (ei.value.line, ei.value.column) == (1, 14)  # columns count code points
    with pytest.raises(GrammarError) as ei:
        Grammar.parse('root ::= ( "a" \n  "b" \n')
    assert ei.value.line == 3 and "expecting ')'" in ei.value.message


def test_element_shapes():
    p = parse_gbnf('root ::= [^a-c\\]x] . <[7]> !<[8]> "\\x41\\u00e9\\U0001F600"')
    r = p.rules[0]
    assert r[0] == (CHAR_NOT, ord("a")) and r[1] == (5, ord("c")) and r[2] == (6, ord("]")) and r[3] == (6, ord("x"))
    assert r[4] == (CHAR_ANY, 0) and r[5] == (TOKEN, 7) and r[6] == (TOKEN_NOT, 8)
    assert r[7:10] == [(CHAR, 0x41), (CHAR, 0xE9), (CHAR, 0x1F600)]
    # lenient parse-time UTF-8: a stray continuation byte is a 1-byte character (value & 0x7F)
    p = parse_gbnf(b'root ::= "\x80"')
    assert p.rules[0][0] == (CHAR, 0)
    # the text ends at the first NUL
    assert parse_gbnf(b'root ::= "a"\0 garbage').rules[0] == [(CHAR, 97), (0, 0)]
    # a later definition replaces an earlier one
    assert parse_gbnf('root ::= "a"\nroot ::= "b"').rules[0] == [(CHAR, 98), (0, 0)]
    # names may start with a digit; the synthesized names never collide (no '_' in user names)
    p = parse_gbnf('root ::= 9x ("y")*\n9x ::= "x"')
    assert set(p.symbol_ids) == {"root", "9x", "root_2", "root_3"}
    assert p.rules[0][0] == (RULE_REF, 1)


# (grammar, accepted by llama.cpp?) -- each verified live against llama_sampler_init_grammar below
QUIRKS: list[tuple[str | bytes, bool]] = [
    ('root::="a"', True),
    ('root ::= "a" # comment\n# another\n', True),
    ('root ::= "a" |\n  "b"', True),
    ('root ::= (\n "a"\n | "b"\n )', True),
    ('root ::= "a"\n| "b"', False),  # a newline before '|' ends the rule
    ('root\n::= "a"', False),
    ('9x ::= "a"\nroot ::= 9x', True),
    ("root ::= x_y", False),  # no underscore in names
    ('root ::= "a"\nroot ::= "b"', True),
    ("root ::= []", True),
    ("root ::= [^]", True),
    ('root ::= ""', True),
    ("root ::= ()", True),
    ("root ::= ()*", False),  # left recursion via the empty group
    ('root ::= "a"**', False),
    ('root ::= ("a"*)*', True),
    ('root ::= "a"{0,5000}', True),
    ('root ::= "a"{3,5000}', True),
    ('root ::= "a"{2000}', True),
    ('root ::= "a"{2001}', False),
    ('root ::= "a"{ 2 , 3 }', True),
    ('root ::= "a"{,3}', False),
    ('root ::= "a"{2', False),
    ('root ::= "a"{2,3', False),
    ("root ::= (((((([^x]*){0,9}){0,9}){0,9}){0,9}))", True),
    ("root ::= (((([^x]*){0,99}){0,99}){0,99})", False),
    ("root ::= ((([^x]*){0,9}){0,9})", True),
    ("root ::= *", False),
    ('root ::= ""*', False),
    ('root ::= "\\x41\\u00e9\\U0001F600\\t\\r\\n\\\\\\"\\[\\]\\-"', True),
    ('root ::= "\\x4"', False),
    ('root ::= "\\u00e"', False),
    ('root ::= "\\/"', False),
    ('root ::= "\\0"', False),
    ('root ::= [\\^]', False),
    ("root ::= [z-a]", True),
    ("root ::= [-a] [a-] [\\]] [a\\-z]", True),
    ('root ::= "a', False),
    ("root ::= [a", False),
    ('root ::= "a" )', False),
    ('root ::= ("a"', False),
    ("root ::= <[123]>", True),
    ('root ::= !<[5]> "a"', True),
    ("root ::= <[4294967296]>", False),
    ("root ::= <[12]", False),
    ('root ::= !"a"', False),
    ('root ::= "é" [α-ω]+ "日本"', True),
    ('root ::= "a\nb"', True),  # a raw newline inside a literal is a character
    ("root ::= foo", False),
    ('root ::= "a"\nx ::= x "b"', False),  # unreachable left recursion still fails
    ('root ::= b root | "x"\nb ::= "q"?', True),  # hidden, tail position: llama.cpp copes
    ("   ", False),
    ("# only a comment\n", False),
    ('root ::= "a"\r\nb ::= "c"\rc ::= "d"', True),
    ('root ::= "\\UFFFFFFFF"', True),
    ("root ::= .", True),
]


def test_quirks_without_oracle():
    for g, ok in QUIRKS:
        try:
            Grammar.parse(g)
            got = True
        except GrammarError:
            got = False
        assert got == ok, g


def _oracle_vocab() -> Path:
    for p in (SHARED_VOCAB / "ggml-vocab-llama-spm.gguf", SDIST / "models" / "ggml-vocab-llama-spm.gguf"):
        if p.exists():
            return p
    pytest.skip("no llama-spm vocabulary (../shared/vocab or the llama-cpp-python sdist) for the oracle")


def test_quirks_against_oracle():
    from oracle import grammar as og
    from oracle import vocab as ov

    ov.require()
    path = _oracle_vocab()
    got = og.parse_ok_many(path, [g for g, _ in QUIRKS])
    for (g, ok), o in zip(QUIRKS, got):
        assert o == ok, f"llama.cpp says {o} for {g!r}"


def test_shipped_grammars_parse():
    gdir = SDIST / "grammars"
    if not gdir.exists():
        pytest.skip(f"llama.cpp grammars not found at {gdir}")
    names = sorted(p.name for p in gdir.glob("*.gbnf"))
    assert len(names) >= 8
    for n in names:
        Grammar.parse((gdir / n).read_text(encoding="utf-8"))


def test_empty_grammar_is_an_error_here():
    # llama.cpp reads "" as "no grammar"; lmtail asks for an explicit choice
    with pytest.raises(GrammarError, match="empty grammar"):
        Grammar.parse("")


def test_max_below_min_rejected():
    # llama.cpp computes max - min in uint64 and practically loops forever; lmtail refuses
    with pytest.raises(GrammarError, match="maximum below minimum"):
        Grammar.parse('root ::= "a"{5,3}')


def test_no_vocab_token_text():
    with pytest.raises(GrammarError, match="no vocab to parse token"):
        Grammar.parse("root ::= <think>")


def test_deep_nesting_is_an_error_not_a_crash():
    g = "root ::= " + "(" * 5000 + '"a"' + ")" * 5000
    try:
        Grammar.parse(g)
    except GrammarError:
        pass


def test_huge_repetition_refused_before_allocating():
    # llama.cpp expands this 5 KB grammar into 10 million elements (1.5 GB, ~7 s); lmtail refuses
    # it at the repetition, before building anything (issue 18 item 5)
    import tracemalloc

    g = 'root ::= "' + "a" * 5000 + '"{2000}'
    tracemalloc.start()
    try:
        with pytest.raises(GrammarError, match="10000000 elements, over the limit of 1000000") as ei:
            Grammar.parse(g)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (ei.value.line, ei.value.column) == (1, g.index("{") + 1)
    assert peak < 20 << 20
    # the same repetition nested in a later rule is located there
    g2 = 'root ::= x\nx ::= ( "c"? "' + "b" * 3000 + '"{1000,2000} )'
    with pytest.raises(GrammarError, match="over the limit") as ei:
        Grammar.parse(g2)
    assert (ei.value.line, ei.value.column) == (2, g2.split("\n")[1].index("{") + 1)


def _n_elements(text: str) -> int:
    return sum(len(r) for r in parse_gbnf(text, check_root=False).rules)


def _boundary_grammars():
    out = [c["grammar"] for c in _PARSER_CASES if c["kind"] != "failure"]
    out += ['root ::= "ab"{3,7} ("x" | y+)* [a-z]?\ny ::= "q"{2,}', 'root ::= ("a" ("b"{0,5})){1,9} "c"*',
            'root ::= "x"{2000}', 'root ::= ("ab" | "c"){0,1000} "d"{3,}']
    gdir = SDIST / "grammars"
    if gdir.exists():
        out += [p.read_text(encoding="utf-8") for p in sorted(gdir.glob("*.gbnf"))]
    return out


def test_max_elements_boundary_is_exact():
    # the limit counts exactly the elements llama.cpp builds: a grammar of N elements parses with
    # max_elements=N (identically to the default) and is refused with N - 1
    for g in _boundary_grammars():
        n = _n_elements(g)
        assert parse_gbnf(g, check_root=False, max_elements=n) == parse_gbnf(g, check_root=False)
        with pytest.raises(GrammarError, match="over the limit"):
            parse_gbnf(g, check_root=False, max_elements=n - 1)


def test_max_elements_can_be_raised():
    g = 'root ::= "' + "a" * 600 + '"{2000}'
    with pytest.raises(GrammarError, match="over the limit"):
        Grammar.parse(g)
    gr = Grammar.parse(g, max_elements=1_300_000)
    assert sum(len(r) for r in gr.rules) == 2000 * 600 + 1  # the 2000 copies and END


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True, None])
def test_max_elements_and_text_types(bad):
    from lmtail.errors import ParameterError

    with pytest.raises(ParameterError):
        Grammar.parse('root ::= "a"', max_elements=bad)
    if not isinstance(bad, str):
        with pytest.raises(ParameterError):
            Grammar.parse(bad if bad is not None else 12)
    with pytest.raises(ParameterError):
        Grammar.parse('root ::= "a"', root=5)


if os.environ.get("LMTAIL_GRAMMAR_PRINT"):  # pragma: no cover - debugging aid
    print(len(QUIRKS))
