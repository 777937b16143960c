#!/usr/bin/env python3
"""Extract llama.cpp's JSON-schema-to-GBNF test cases as data: tests/data/json_schema_cases.json.

Reads ``tests/test-json-schema-to-grammar.cpp`` of the llama-cpp-python 0.3.36 sdist (argument, or
LMTAIL_LLAMA_SDIST / .oracle-src / /tmp/oracle as tests/oracle/_lib.py finds it) and writes, per
``test({STATUS, name, schema, expected})`` call: name, status (SUCCESS / FAILURE), the schema
text, and the expected grammar as the converter returns it -- the C++ test compares after
``trim()`` (leading whitespace of every line and the whole text stripped); the converter's own
output is that text plus one final newline, which is what ``expected`` holds.  The one case run
through ``build_grammar`` (``sub-schema $ref``: a property's sub-schema converted as the root)
is extracted too, with ``"sub_schema"`` pointing at it inside ``schema``.

    python tools/extract_json_schema_cases.py [path/to/test-json-schema-to-grammar.cpp]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "json_schema_cases.json"
REL = Path("vendor") / "llama.cpp" / "tests" / "test-json-schema-to-grammar.cpp"

_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}


def _default_source() -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from oracle._lib import llama_sdist  # noqa: E402  (the one place that locates the sdist)

    return llama_sdist() / REL


def _trim(text: str) -> str:
    """The C++ test's trim(): strip the text, then leading blanks of every line."""
    text = text.strip(" \n\r\t")
    return re.sub(r"(^|\n)[ \t]+", r"\1", text)


class _Lexer:
    """Just enough C++ lexing for the test({...}) initialisers: identifiers, string literals
    (ordinary with simple escapes, and R"delim(...)delim" raw ones), punctuation, comments."""

    def __init__(self, src: str, pos: int):
        self.src = src
        self.pos = pos

    def skip(self) -> None:
        s = self.src
        while self.pos < len(s):
            if s[self.pos].isspace():
                self.pos += 1
            elif s.startswith("//", self.pos):
                self.pos = s.index("\n", self.pos)
            elif s.startswith("/*", self.pos):
                self.pos = s.index("*/", self.pos) + 2
            else:
                return

    def token(self) -> tuple[str, str]:
        self.skip()
        s, p = self.src, self.pos
        m = re.compile(r'R"([^(\s]*)\(').match(s, p)
        if m:
            end = s.index(")" + m.group(1) + '"', m.end())
            self.pos = end + len(m.group(1)) + 2
            return "str", s[m.end():end]
        if s[p] == '"':
            out, p = [], p + 1
            while s[p] != '"':
                if s[p] == "\\":
                    out.append(_SIMPLE_ESCAPES[s[p + 1]])
                    p += 2
                else:
                    out.append(s[p])
                    p += 1
            self.pos = p + 1
            return "str", "".join(out)
        m = re.compile(r"[A-Za-z_][A-Za-z_0-9]*").match(s, p)
        if m:
            self.pos = m.end()
            return "id", m.group(0)
        self.pos = p + 1
        return "punct", s[p]

    def strings(self) -> str:
        """One argument made of adjacent string literals."""
        kind, text = self.token()
        assert kind == "str", (kind, text, self.src[self.pos - 40:self.pos])
        while True:
            save = self.pos
            kind2, more = self.token()
            if kind2 != "str":
                self.pos = save
                return text
            text += more

    def expect(self, punct: str) -> None:
        kind, text = self.token()
        assert (kind, text) == ("punct", punct), (kind, text, self.src[self.pos - 40:self.pos])


def extract(src: str) -> list[dict]:
    cases = []
    for m in re.finditer(r"\btest\(\{", src):
        lx = _Lexer(src, m.end())
        kind, status = lx.token()
        assert kind == "id" and status in ("SUCCESS", "FAILURE"), status
        lx.expect(",")
        name = lx.strings()
        lx.expect(",")
        schema = lx.strings()
        lx.expect(",")
        expected = lx.strings()
        lx.expect("}")
        lx.expect(")")
        case = {"name": name, "status": status, "schema": schema}
        if status == "SUCCESS":
            case["expected"] = _trim(expected) + "\n"
        cases.append(case)

    # the build_grammar case: a property's sub-schema of `parameters` added as the root rule
    m = re.search(r'"- sub-schema \$ref\\n"', src)
    assert m, "the sub-schema $ref case is gone"
    lx = _Lexer(src, src.index("common_json::parse(", m.end()) + len("common_json::parse("))
    parameters = lx.strings()
    tc = re.compile(r"TestCase tc \{").search(src, lx.pos)
    assert tc
    lx = _Lexer(src, tc.end())
    kind, status = lx.token()
    lx.expect(",")
    name = lx.strings()
    lx.expect(",")
    lx.strings()  # the (empty) schema text of the TestCase
    lx.expect(",")
    expected = lx.strings()
    assert "properties.at(0)" in src[lx.pos:lx.pos + 600], "the sub-schema is no longer the first property"
    first_prop = next(iter(json.loads(parameters)["properties"]))
    cases.append({
        "name": name, "status": status, "schema": parameters,
        "sub_schema": f"#/properties/{first_prop}", "expected": _trim(expected) + "\n",
    })
    return cases


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else _default_source()
    src = path.read_text(encoding="utf-8")
    cases = extract(src)
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "duplicate case names"
    data = {
        "source": "llama.cpp tests/test-json-schema-to-grammar.cpp (llama-cpp-python 0.3.36), extracted by "
                  "tools/extract_json_schema_cases.py. 'expected' is the converter's exact output: the "
                  "test's trim() of the expected grammar plus one final newline.",
        "cases": cases,
    }
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    n_ok = sum(c["status"] == "SUCCESS" for c in cases)
    print(f"{len(cases)} cases ({n_ok} SUCCESS, {len(cases) - n_ok} FAILURE) -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
