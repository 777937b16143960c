"""JSON schema -> GBNF (:func:`lmtail.grammar.json_schema_to_gbnf`) against llama.cpp.

* ``test_llama_case``: every case of llama.cpp's ``tests/test-json-schema-to-grammar.cpp``
  (extracted by ``tools/extract_json_schema_cases.py`` into ``data/json_schema_cases.json``):
  byte-identical text for SUCCESS, :class:`JSONSchemaError` for FAILURE, and every grammar parses;
* ``test_llama_integration_schema``: the 33 schema cases of ``tests/test-grammar-integration.cpp``
  (strings a converted schema must / must not match), with that harness's semantics;
* matcher end to end on a one-token-per-byte vocabulary: valid instances walk through the masks
  to EOG, invalid ones are cut off;
* refusals and degradations beyond the test file, nlohmann's number/string printing, and
  hypothesis (random schemas never crash; integer ranges mean what they say);
* ``@pytest.mark.oracle``: llama-cpp-python's Python converter (``llama_cpp.llama_grammar``, an
  older port: other whitespace and number rules, so its text never equals llama.cpp's C++ output)
  must accept and reject the same compact JSON instances on schemas where both ports agree.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from lmtail.errors import GrammarError, JSONSchemaError
from lmtail.grammar import GBNFBuilder, Grammar, GrammarMatcher, JSONSchemaWarning, Vocab, json_schema_to_gbnf

DATA = Path(__file__).parent / "data"
_FILE = json.loads((DATA / "json_schema_cases.json").read_text(encoding="utf-8"))
CASES = _FILE["cases"]
_INTEG = json.loads((DATA / "grammar_integration_cases.json").read_text(encoding="utf-8"))["cases"]
SCHEMA_INTEG = [c for c in _INTEG if c["kind"] == "schema"]

SPACE = 'space ::= | " " | "\\n"{1,2} [ \\t]{0,20}\n'


def _trim(text: str) -> str:
    # the C++ test compares trim(actual) with trim(expected)
    import re

    return re.sub(r"(^|\n)[ \t]+", r"\1", text.strip(" \n\r\t"))


def _convert(case) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JSONSchemaWarning)
        if "sub_schema" in case:
            doc = json.loads(case["schema"])
            node = doc
            for sel in case["sub_schema"].split("/")[1:]:
                node = node[sel]
            b = GBNFBuilder()
            b.add_schema("root", node, document=doc)
            return b.grammar()
        return json_schema_to_gbnf(case["schema"], force_gbnf=True)


def test_case_file_counts():
    assert len(CASES) == 82
    assert sum(c["status"] == "FAILURE" for c in CASES) == 3
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"][:50] for c in CASES])
def test_llama_case(case):
    if case["status"] == "FAILURE":
        with pytest.raises(JSONSchemaError) as ei:
            _convert(case)
        assert ei.value.message.startswith("JSON schema conversion failed:\n")
        assert isinstance(ei.value, GrammarError)
        return
    out = _convert(case)
    assert out == case["expected"]
    assert _trim(out) == _trim(case["expected"])
    g = Grammar.parse(out)
    assert "root" in g.symbol_ids


@pytest.mark.parametrize("case", CASES, ids=[c["name"][:50] for c in CASES])
def test_dict_input_equals_text_input(case):
    # a parsed dict keeps its key order, so it converts exactly as the JSON text does
    if case["status"] == "SUCCESS" and "sub_schema" not in case:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JSONSchemaWarning)
            assert json_schema_to_gbnf(json.loads(case["schema"])) == case["expected"]


# -- strings a converted schema must and must not match (test-grammar-integration.cpp) ----------


def _full_match(g: Grammar, s: str) -> bool:
    m = GrammarMatcher(g, None)
    for ch in s:
        try:
            m.accept_bytes(ch.encode("utf-8"), 0)
        except GrammarError:
            return False
    return m.is_complete()


@pytest.mark.parametrize("case", SCHEMA_INTEG, ids=[c["desc"][:50] for c in SCHEMA_INTEG])
def test_llama_integration_schema(case):
    g = Grammar.parse(json_schema_to_gbnf(case["schema"], force_gbnf=True))
    for s in case["passing"]:
        assert _full_match(g, s), f"should match: {s!r}"
    for s in case["failing"]:
        assert not _full_match(g, s), f"should not match: {s!r}"


def test_integration_schema_counts():
    assert len(SCHEMA_INTEG) == 33
    assert sum(len(c["passing"]) + len(c["failing"]) for c in SCHEMA_INTEG) == 248


# -- a matcher on a vocabulary built here ------------------------------------------------------


def _byte_vocab() -> Vocab:
    # one token per byte 0x01..0xFF, a few multi-byte tokens, EOG last
    pieces = [bytes([b]) for b in range(1, 256)] + [b'{"', b'":', b"true", b"null", b'",', b"12"]
    pieces.append(b"</s>")
    return Vocab(pieces, eog_ids=[len(pieces) - 1], name="bytes")


VOCAB = _byte_vocab()
EOG = VOCAB.n_vocab - 1


def _walk(g: Grammar, text: str) -> bool:
    """Feed ``text`` byte by byte through the masks, then EOG; False as soon as a mask says no."""
    m = GrammarMatcher(g, VOCAB)
    out = np.empty(VOCAB.n_vocab, dtype=bool)
    for b in text.encode("utf-8"):
        tok = b - 1
        m.mask(out)
        assert out[tok] == m.allows(tok)
        if not out[tok]:
            with pytest.raises(GrammarError):
                m.accept(tok)
            return False
        m.accept(tok)
    m.mask(out)
    assert out[EOG] == m.is_complete()
    return bool(out[EOG])


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 2},
        "born": {"type": "string", "format": "date"},
        "kind": {"const": "person"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}

E2E = [
    (PERSON,
     ['{"name":"Al","age":42}', '{"name": "Al", "age": 0, "tags": ["a", 3]}',
      '{"name":"Al","age":150,"born":"2024-02-29","kind":"person"}', '{"name":"\\u00e9t\\u00e9","age":7}',
      '{"name":"日本","age":1,"email":"x@y"}'],
     ['{"age":42,"name":"Al"}', '{"name":"","age":1}', '{"name":"Al","age":151}', '{"name":"Al"}',
      '{"name":"Al","age":-1}', '{"name":"Al","age":1,"tags":["a","b","a"]}', '{"name":"Al","age":1,"x":1}',
      '{"name":"Al","age":1,"born":"2024-13-01"}', '{"name":"Al","age":01}', '{"name":"Al","age":1,"kind":"dog"}']),
    ({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}},
                         "required": ["v"], "additionalProperties": False}},
      "$ref": "#/$defs/node"},
     ['{"v":1}', '{"v":1,"next":{"v":2,"next":{"v":-3}}}'],
     ['{"next":{"v":1}}', '{"v":1,"next":{}}', '{"v":1.5}']),
    ({"type": "array", "prefixItems": [{"type": "string", "format": "uuid"}, {"type": ["number", "null"]}]},
     ['["123e4567-e89b-12d3-a456-426614174000",null]', '["123e4567-e89b-12d3-a456-426614174000", -1.5e3]'],
     ['["123e4567",1]', '["123e4567-e89b-12d3-a456-426614174000"]']),
    ({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,}(x|yz)?$"},
     ['"AB-123"', '"ZZ-0000yz"', '"QQ-999x"'],
     ['"AB-12"', '"ab-123"', '"AB-123xy"', "AB-123"]),
    ({"oneOf": [{"type": "boolean"}, {"type": "object", "additionalProperties": {"type": "integer"}}]},
     ["true", '{"a":1,"b":2}', "{}"],
     ['{"a":"x"}', "null"]),
]


@pytest.mark.parametrize("schema,valid,invalid", E2E, ids=[f"e2e{i}" for i in range(len(E2E))])
def test_matcher_end_to_end(schema, valid, invalid):
    g = Grammar.parse(json_schema_to_gbnf(schema))
    for s in valid:
        assert _walk(g, s), f"should be accepted: {s}"
    for s in invalid:
        assert not _walk(g, s), f"should be rejected: {s}"


# -- refusals, degradations and printing beyond the test file --------------------------------


@pytest.mark.parametrize("schema,fragment", [
    ('{"$ref": "https://example.com/schema.json"}', "only references into the same document"),
    ('{"$ref": "#"}', "only references into the same document"),
    ('{"$ref": "#/$defs/missing", "$defs": {}}', "missing not found"),
    ('{"$ref": "#/items/3", "items": [{}]}', "out of range"),
    ('{"$ref": 5}', "$ref must be a string"),
    ("[]", "schema must be an object"),
    ("true", "schema must be an object"),
    ('{"type": []}', "type must not be empty"),
    ('{"anyOf": []}', "must not be empty"),
    ('{"oneOf": {}}', "must be an array of schemas"),
    ('{"enum": []}', "enum must be a non-empty array"),
    ('{"type": "array", "minItems": -1}', "minItems must be a non-negative integer"),
    ('{"type": "array", "maxItems": 2.0}', "maxItems must be a non-negative integer"),
    ('{"type": "string", "minLength": "3"}', "minLength must be a non-negative integer"),
    ('{"type": "string", "format": 7}', "format must be a string"),
    ('{"format": 7}', "format must be a string"),
    ('{"type": "string", "pattern": 7}', "pattern must be a string"),
    ('{"type": "integer", "minimum": "0"}', "minimum must be a number"),
    ('{"type": "object", "properties": []}', "properties must be an object"),
    ('{"type": "object", "additionalProperties": 1}', "additionalProperties must be a boolean or a schema"),
    ('{"type": "array", "items": true}', "schema must be an object"),
    ('{"type": "string", "pattern": "^a)$"}', "unbalanced parentheses"),
    ('{"type": "string", "pattern": "^[a-z$"}', "unterminated character class"),
    ('{"type": "string", "pattern": "^*a$"}', "nothing to repeat"),
    ('{"type": "string", "pattern": "^a\\\\$"}', "trailing backslash"),
    ('{"type": "integer", "maximum": -9223372036854775808}', "At least one of min_value or max_value"),
    ("{", "invalid JSON"),
    ('{"const": NaN}', "invalid JSON"),
    ('{"const": "\\ud800"}', "lone surrogate"),
])
def test_refusals(schema, fragment):
    with pytest.raises(JSONSchemaError) as ei:
        json_schema_to_gbnf(schema)
    assert fragment in str(ei.value)
    assert ei.value.line is None


def test_too_deep_a_schema_is_refused_not_a_crash():
    deep: dict = {}
    for _ in range(5000):
        deep = {"anyOf": [deep]}
    with pytest.raises(JSONSchemaError, match="nested too deeply"):
        json_schema_to_gbnf(deep)
    with pytest.raises(JSONSchemaError):
        json_schema_to_gbnf('{"items":' * 100000 + "{}" + "}" * 100000)


def test_refusal_inside_a_ref_target_names_its_path():
    with pytest.raises(JSONSchemaError, match=r"at #/\$defs/a: unrecognized type nope"):
        json_schema_to_gbnf({"$ref": "#/$defs/a", "$defs": {"a": {"type": "nope"}}})


def test_errors_from_two_patterns_are_all_reported():
    with pytest.raises(JSONSchemaError) as ei:
        json_schema_to_gbnf({"type": "array", "prefixItems": [{"pattern": "^(a$"}, {"pattern": "^b)$"}]})
    assert ei.value.message.count("Invalid pattern") == 2


@pytest.mark.parametrize("pattern", ["^\\d+$", "^(?=a)a$", "^(?<n>a)$", "a+", "^a$b$", "^a{x}$", "^a{1,2,3}$",
                                     "^[\\w]$", "^a{1$", "^]$"])
def test_unsupported_patterns_accept_any_string_with_a_warning(pattern):
    with pytest.warns(JSONSchemaWarning, match="accepting any string"):
        out = json_schema_to_gbnf({"type": "string", "pattern": pattern})
    assert 'root ::= string\n' in out and "string ::= " in out and "dot" not in out


def test_no_warning_for_supported_patterns():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        json_schema_to_gbnf({"type": "string", "pattern": "^a.b$"})


def test_dotall_and_force_gbnf():
    schema = {"type": "string", "pattern": "^a.$"}
    assert 'dot ::= [^\\x0A\\x0D]\n' in json_schema_to_gbnf(schema)
    assert 'dot ::= [\\U00000000-\\U0010FFFF]\n' in json_schema_to_gbnf(schema, dotall=True)
    # no llguidance in lmtail: GBNF either way, as in a llama.cpp built without it
    assert json_schema_to_gbnf(schema, force_gbnf=False) == json_schema_to_gbnf(schema, force_gbnf=True)


@pytest.mark.parametrize("value,text", [
    (1.0, "1.0"), (100.0, "100.0"), (0.1, "0.1"), (1e15, "1e+15"), (123456789012345.0, "123456789012345.0"),
    (1e16, "1e+16"), (0.0001, "0.0001"), (1e-05, "1e-05"), (1.5e-07, "1.5e-07"), (-0.0, "-0.0"), (2.5e300, "2.5e+300"),
    (-12.75, "-12.75"), (1.7976931348623157e308, "1.7976931348623157e+308"), (5e-324, "5e-324"),
    (18446744073709551615, "18446744073709551615"), (18446744073709551616, "1.8446744073709552e+19"),
    (-9223372036854775809, "-9.223372036854776e+18"), (True, "true"), (None, "null"),
    ("a\u0001\u007f\"\\\b\f\n\r\té", '"a\\u0001\u007f\\"\\\\\\b\\f\\n\\r\\té"'),
    ({"b": [1, {}], "a": []}, '{"b":[1,{}],"a":[]}'),
])
def test_const_printed_as_nlohmann_dumps(value, text):
    # the rule is the GBNF literal of nlohmann's dump(): only '"' and '\\' need escaping again
    literal = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    assert json_schema_to_gbnf({"const": value}) == f"root ::= {literal}\n{SPACE}"


def test_large_json_integers_become_doubles_as_in_nlohmann():
    assert json_schema_to_gbnf('{"const": 100000000000000000000}') == f'root ::= "1e+20"\n{SPACE}'


def test_integer_bounds_rounding_and_exclusive():
    def body(schema):
        return json_schema_to_gbnf({"type": "integer", **schema}).splitlines()[0]

    assert body({"minimum": 2.5, "maximum": 7.5}) == body({"minimum": 3, "maximum": 7})
    assert body({"exclusiveMinimum": 2, "exclusiveMaximum": 8}) == body({"minimum": 3, "maximum": 7})
    assert body({"exclusiveMinimum": 2.5, "exclusiveMaximum": 7.5}) == body({"minimum": 3, "maximum": 7})
    # minimum wins over exclusiveMinimum when both are given
    assert body({"minimum": 3, "exclusiveMinimum": 5}) == body({"minimum": 3})


def test_builder_adds_rules_and_several_schemas():
    b = GBNFBuilder()
    assert b.add_schema("root", {"type": "boolean"}) == "root"
    assert b.add_schema("item", {"type": "integer", "minimum": 1, "maximum": 3}) == "item"
    assert b.add_rule("root", "x") == "root0"
    g = b.grammar()
    assert g == 'item ::= ([1-3])\nroot ::= ("true" | "false")\nroot0 ::= x\n' + SPACE
    b2 = GBNFBuilder()
    b2.add_schema("root", {"type": "string", "pattern": "^(a$"})
    with pytest.raises(JSONSchemaError):
        b2.grammar()


def test_property_names_are_escaped():
    out = json_schema_to_gbnf({"properties": {'a"b\\c\nd': {"type": "null"}, "é x": {"const": 1}}})
    assert 'a-b-c-d-kv ::= "\\"a\\\\\\"b\\\\\\\\c\\\\nd\\"" space ":" space null\n' in out
    assert '-x-kv ::= "\\"é x\\"" space ":" space -x\n' in out
    Grammar.parse(out)


# -- hypothesis ----------------------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_KEYS = st.sampled_from(["a", "b", "ab", "", "type", "root", "number", "x y", "é", "$ref", "*", "a]", "q\"r"])
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["string", "integer", "object", "array", "number", "null", "boolean", "kaboom", "#/a", "#/$defs/a",
                     "^a+$", "^(a|b)*c{2,3}[x-z]$", "^\\d$", "uuid", "date", "time", "date-time", "^(a$", "^.\"$"]),
)
_KEYWORDS = ["type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
             "minLength", "maxLength", "pattern", "format", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
             "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "definitions", "a"]


def _json_values():
    return st.recursive(
        _LEAVES,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.one_of(st.sampled_from(_KEYWORDS), _KEYS), inner, max_size=4),
        ),
        max_leaves=12,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_json_values())
def test_random_schemas_never_crash(schema):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JSONSchemaWarning)
        try:
            out = json_schema_to_gbnf(schema)
        except JSONSchemaError:
            return
    assert isinstance(out, str) and out.endswith("\n")
    assert "root ::= " in out


_SAFE_KEYS = st.sampled_from(["a", "b", "ab", "", "root", "number", "x y", "é"])


@st.composite
def _schemas(draw, depth=0):
    kinds = ["int", "str", "enum", "const", "bool", "null", "num", "any"]
    if depth < 2:
        kinds += ["obj", "arr", "tuple", "anyof", "allof", "nullable"]
    k = draw(st.sampled_from(kinds))
    if k == "int":
        s: dict = {"type": "integer"}
        bounds = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]
        for key in draw(st.lists(st.sampled_from(bounds), max_size=2, unique=True)):
            s[key] = draw(st.integers(-1000, 1000))
        return s
    if k == "str":
        s = {"type": "string"}
        if draw(st.booleans()):
            s["minLength"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            # max < min makes llama.cpp write {m,n} with n < m, which GBNF parsers refuse
            s["maxLength"] = draw(st.integers(s.get("minLength", 0), 5))
        if draw(st.booleans()):
            s["format"] = draw(st.sampled_from(["date", "uuid", "time", "date-time", "email"]))
        if draw(st.booleans()):
            s["pattern"] = draw(st.sampled_from(["^a+b?$", "^[0-9]{2,4}(x|y)*$", "^(?:ab)+.c$", "^\\w$", "^\"é\\\\$"]))
        return s
    if k == "enum":
        item = st.one_of(st.integers(-5, 5), st.sampled_from(["a", "b", "é\"", None, True]))
        return {"enum": draw(st.lists(item, min_size=1, max_size=3))}
    if k == "const":
        finite = st.floats(allow_nan=False, allow_infinity=False)
        return {"const": draw(st.one_of(st.integers(), st.text(max_size=4), finite))}
    if k in ("bool", "null", "num"):
        return {"type": {"bool": "boolean", "null": "null", "num": "number"}[k]}
    if k == "any":
        return {}
    if k == "obj":
        props = draw(st.dictionaries(_SAFE_KEYS, _schemas(depth + 1), max_size=3))
        s = {"type": "object", "properties": props}
        if props:
            s["required"] = draw(st.lists(st.sampled_from(sorted(props)), max_size=len(props), unique=True))
        add = draw(st.sampled_from([None, True, False, "schema"]))
        if add == "schema":
            s["additionalProperties"] = draw(_schemas(depth + 1))
        elif add is not None:
            s["additionalProperties"] = add
        return s
    if k == "arr":
        s = {"type": "array", "items": draw(_schemas(depth + 1))}
        if draw(st.booleans()):
            s["minItems"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            s["maxItems"] = draw(st.integers(s.get("minItems", 0), 4))
        return s
    if k == "tuple":
        return {"prefixItems": draw(st.lists(_schemas(depth + 1), min_size=1, max_size=3))}
    if k in ("anyof", "allof"):
        key = "anyOf" if k == "anyof" else "allOf"
        return {key: draw(st.lists(_schemas(depth + 1), min_size=1, max_size=3))}
    return {"type": [draw(st.sampled_from(["string", "integer", "object", "array"])), "null"]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas())
def test_random_supported_schemas_give_parseable_grammars(schema):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JSONSchemaWarning)
        out = json_schema_to_gbnf(schema)
    Grammar.parse(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lo=st.one_of(st.none(), st.integers(-1200, 1200)), hi=st.one_of(st.none(), st.integers(-1200, 1200)),
       values=st.lists(st.integers(-3000, 3000), min_size=1, max_size=12))
def test_integer_ranges_mean_what_they_say(lo, hi, values):
    # an empty range (minimum > maximum) gives llama.cpp's construction no meaning; not checked
    assume(lo is None or hi is None or lo <= hi)
    schema: dict = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    g = Grammar.parse(json_schema_to_gbnf(schema))
    for v in values + [x for x in (lo, hi) if x is not None]:
        want = (lo is None or v >= lo) and (hi is None or v <= hi)
        assert _full_match(g, str(v)) == want, (schema, v)
    for s in ("01", "+1", "1.0", "1 "):
        assert not _full_match(g, s), (schema, s)


# -- llama-cpp-python's Python port, where both ports agree --------------------------------

ORACLE_SCHEMAS = [
    ({
        "type": "object",
        "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"}, "n": {"type": "number"}},
        "required": ["name"],
        "additionalProperties": False,
    }, ['{"name":"a"}', '{"name":"","ok":true,"n":-1.5e3}', '{"name":"x","n":0}', '{"name":"a","ok":false}',
        '{"ok":true}', '{"name":1}', '{"name":"a","x":1}', '{"n":1,"name":"a"}', '{"name":"a","n":01}']),
    ({"enum": ["red", "green", 42, None, [1]]}, ['"red"', '"green"', "42", "null", "[1]", '"blue"', "43", "[]"]),
    # not here: a structured const (the Python port prints it with json.dumps' ", " and ": ") and a
    # string const with a quote or backslash (it does not escape backslashes: its GBNF is invalid)
    ({"const": "hello"}, ['"hello"', '"hell"', '"hello "']),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
     ["[1]", "[1,2,3]", "[]", "[1,2,3,4]", "[1.5]", '["1"]', "[-0]", "[10]"]),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}]},
     ['["a",null]', '["a"]', '["a",null,1]', '[null,"a"]']),
    ({"anyOf": [{"type": "string"}, {"$ref": "#/definitions/pt"}],
      "definitions": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                             "required": ["x", "y"], "additionalProperties": False}}},
     ['"s"', '{"x":1,"y":2}', '{"x":1}', '{"y":2,"x":1}', "[]"]),
    ({"type": "string", "format": "date"}, ['"2024-01-31"', '"2024-1-31"', '"2024-13-01"', '"2024-00-10"']),
    ({"type": "string", "format": "uuid"},
     ['"123e4567-e89b-12d3-a456-426614174000"', '"123e4567-e89b-12d3-a456-42661417400"', '"x"']),
    ({"type": "string", "pattern": "^(ab|c)+d?[0-9]{2}$"}, ['"ab12"', '"cab00"', '"abd99"', '"d12"', '"ab1"', '"ab123"']),
    ({"type": ["integer", "null"]}, ["1", "null", "-12", '"1"', "1.5"]),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, ["{}", '{"a":1,"b":2}', '{"a":"x"}']),
]


@pytest.fixture(scope="module")
def llama_port():
    try:
        from llama_cpp import llama_grammar
    except Exception as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"llama-cpp-python (the oracle) is not importable: {e!r}; pip install '.[test]'")
    return llama_grammar.json_schema_to_gbnf


@pytest.mark.oracle
@pytest.mark.parametrize("schema,instances", ORACLE_SCHEMAS, ids=[f"port{i}" for i in range(len(ORACLE_SCHEMAS))])
def test_agrees_with_llama_cpp_python_port(llama_port, schema, instances):
    mine = Grammar.parse(json_schema_to_gbnf(schema))
    theirs = Grammar.parse(llama_port(json.dumps(schema)))
    verdicts = [(s, _full_match(mine, s), _full_match(theirs, s)) for s in instances]
    assert all(a == b for _, a, b in verdicts), [v for v in verdicts if v[1] != v[2]]
    assert any(a for _, a, _ in verdicts) and not all(a for _, a, _ in verdicts)


# -- llama.cpp's C++ converter itself, built from the sdist's sources ------------------------
#
# libllama does not export json_schema_to_grammar, so the converter's own sources (common/
# json-schema-to-grammar.cpp, json-schema.cpp, json.cpp, trie.cpp, unicode.cpp and vendored
# nlohmann/json) are compiled here into a small filter: schemas in, grammars (or the exception
# text) out.  The three string helpers and ggml_abort it links against come from the harness.

_CPP_SHIM = r"""
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
std::string string_join(const std::vector<std::string> & v, const std::string & sep) {
    std::string r;
    for (size_t i = 0; i < v.size(); i++) { if (i) r += sep; r += v[i]; }
    return r;
}
std::vector<std::string> string_split(const std::string & s, const std::string & d) {
    std::vector<std::string> parts;
    size_t start = 0, end = s.find(d);
    while (end != std::string::npos) {
        parts.push_back(s.substr(start, end - start));
        start = end + d.size();
        end = s.find(d, start);
    }
    parts.push_back(s.substr(start));
    return parts;
}
std::string string_repeat(const std::string & s, size_t n) { std::string r; while (n--) r += s; return r; }
extern "C" void ggml_abort(const char * file, int line, const char *, ...) {
    fprintf(stderr, "abort %s:%d\n", file, line);
    abort();
}
"""

_CPP_MAIN = r"""
#include "json-schema-to-grammar.h"
#include <iostream>
#include <iterator>
// schemas separated by \x1e in, grammars (or "ERROR: " + what()) separated by \x1e out
int main() {
    std::string all((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    size_t pos = 0;
    while (pos < all.size()) {
        size_t end = all.find('\x1e', pos);
        if (end == std::string::npos) end = all.size();
        std::string schema = all.substr(pos, end - pos);
        pos = end + 1;
        try {
            std::cout << json_schema_to_grammar(common_json::parse(schema), true);
        } catch (const std::exception & e) {
            std::cout << "ERROR: " << e.what();
        }
        std::cout << '\x1e';
    }
}
"""


@pytest.fixture(scope="module")
def cpp_converter(tmp_path_factory):
    import shutil
    import subprocess

    from oracle._lib import llama_sdist

    src = llama_sdist() / "vendor" / "llama.cpp"
    if not (src / "common" / "json-schema-to-grammar.cpp").is_file():
        pytest.skip(f"llama.cpp sources not found at {src} (unpack the llama-cpp-python 0.3.36 sdist)")
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler to build llama.cpp's converter")
    out = tmp_path_factory.mktemp("jsg")
    (out / "shim.cpp").write_text(_CPP_SHIM)
    (out / "main.cpp").write_text(_CPP_MAIN)
    files = ("json-schema-to-grammar.cpp", "json-schema.cpp", "json.cpp", "trie.cpp", "unicode.cpp")
    sources = [str(src / "common" / f) for f in files]
    inc = [f"-I{src / d}" for d in ("common", "include", "ggml/include", "vendor")]
    cmd = [cxx, "-std=c++17", "-O0", "-w", *inc, *sources, str(out / "shim.cpp"), str(out / "main.cpp"),
           "-o", str(out / "jsg")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"could not build llama.cpp's converter: {r.stderr[-500:]}")

    def run(texts: list[str]) -> list[bytes]:
        res = subprocess.run([str(out / "jsg")], input="\x1e".join(texts).encode(), capture_output=True, check=True)
        return res.stdout.split(b"\x1e")[: len(texts)]

    return run


def _mine(text: str) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JSONSchemaWarning)
        try:
            return json_schema_to_gbnf(text).encode()
        except JSONSchemaError as e:
            return ("ERROR: " + e.message).encode()


def _random_schemas(seed: int, n: int) -> list[str]:
    """Schemas mixing every keyword the converter reads with wrong types, bad $refs, odd names,
    numbers at int64/uint64/double edges and patterns it translates, degrades or refuses."""
    import random

    rnd = random.Random(seed)
    kws = ["type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
           "minLength", "maxLength", "pattern", "format", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
           "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "definitions"]
    types = ["string", "integer", "object", "array", "number", "null", "boolean", "kaboom", ""]
    # (no non-ASCII character before a quantifier: the documented byte-vs-code-point divergence)
    pats = ["^a+b?$", "^[0-9]{2,4}(x|y)*$", "^(?:ab)+.c$", "^\\w$", "^\"é\\\\$", "^(a$", "^a{,3}$", "^a{2,}b{3}$",
            "^[a-z\\-]+\\.[\\x41-\\u005A]$", "^(a|b|)c*$", "^a{ 2 }$", "^x{-1}$", "^((a)b{2})*$", "^a\\\"b$", "^[^\"]+$",
            "^.*$", "^(a(b(c)))$", "^a|b$", "^\\$\\^$", "^a\\u00e9b$", "^a{1,2}{3}$", "^(ab){2}(ab){3}$", "a", "^]$"]
    names = ["a", "b", "ab", "aa", "", "root", "number", "string", "x y", "é", "*", "space", "date", "dot", "a-kv",
             'q"r', "\\", "\n", "value"]
    refs = ["#/$defs/a", "#/$defs/b", "#/definitions/a", "#/properties/a", "#/items/0", "#/anyOf/1", "#/x", "#",
            "http://x/y", "#/$defs/a/properties/a", "#/items/ 0", "#/items/-1"]

    def num():
        return rnd.choice([rnd.randint(-30, 30), rnd.randint(-10**6, 10**6), rnd.uniform(-1e3, 1e3), 2**63, -2**63,
                           2**64, 2**31, 1e20, 0.5, -0.0, 1e-7, 123456789012345678, 2**63 - 1, rnd.randint(-10**17, 10**17)])

    def value(d=0):
        k = rnd.random()
        if d > 2 or k < 0.5:
            return rnd.choice([None, True, False, num(), rnd.choice(names), "\u0001x", "é\t"])
        if k < 0.75:
            return [value(d + 1) for _ in range(rnd.randint(0, 3))]
        return {rnd.choice(names): value(d + 1) for _ in range(rnd.randint(0, 3))}

    def schema(d=0):
        s: dict = {}
        for _ in range(rnd.randint(0, 4)):
            k = rnd.choice(kws)
            deeper = d < 3
            if k == "type":
                s[k] = rnd.choice(types) if rnd.random() < 0.85 else [rnd.choice(types) for _ in range(rnd.randint(0, 3))]
            elif k in ("properties", "$defs", "definitions"):
                s[k] = {rnd.choice(names): schema(d + 1) for _ in range(rnd.randint(0, 3))} if deeper else {}
            elif k == "required":
                s[k] = [rnd.choice(names) for _ in range(rnd.randint(0, 3))]
            elif k == "additionalProperties":
                s[k] = rnd.choice([True, False, schema(d + 1) if deeper else {}])
            elif k == "items":
                s[k] = (schema(d + 1) if rnd.random() < 0.7 else [schema(d + 1) for _ in range(rnd.randint(0, 2))]) if deeper else {}
            elif k in ("prefixItems", "anyOf", "oneOf", "allOf"):
                s[k] = [schema(d + 1) for _ in range(rnd.randint(0, 3))] if deeper else []
            elif k in ("minItems", "maxItems", "minLength", "maxLength"):
                s[k] = rnd.choice([0, 1, 2, 3, 5, -1, 1.0, 2**32 + 1])
            elif k == "pattern":
                s[k] = rnd.choice(pats)
            elif k == "format":
                s[k] = rnd.choice(["date", "time", "date-time", "uuid", "uuid3", "uuid6", "email", 3])
            elif k == "enum":
                s[k] = [value() for _ in range(rnd.randint(0, 4))]
            elif k == "const":
                s[k] = value()
            elif k == "$ref":
                s[k] = rnd.choice(refs)
            else:
                s[k] = num()
        return s

    return [json.dumps(schema(), ensure_ascii=False) for _ in range(n)]


@pytest.mark.oracle
def test_byte_identical_to_llama_cpp_cpp_converter_on_its_cases(cpp_converter):
    plain = [c for c in CASES if "sub_schema" not in c]
    got = cpp_converter([c["schema"] for c in plain])
    for case, theirs in zip(plain, got):
        assert _mine(case["schema"]) == theirs, case["name"]


@pytest.mark.oracle
@pytest.mark.parametrize("seed", [0, 1])
def test_byte_identical_to_llama_cpp_cpp_converter_on_random_schemas(cpp_converter, seed):
    texts = _random_schemas(seed, 1500)
    got = cpp_converter(texts)
    diffs = [(t, g, _mine(t)) for t, g in zip(texts, got) if _mine(t) != g]
    assert not diffs, diffs[:3]
    assert sum(g.startswith(b"ERROR") for g in got) > 100  # refusals are exercised, and match too


@pytest.mark.oracle
def test_byte_identical_to_llama_cpp_cpp_converter_on_integer_ranges(cpp_converter):
    import random

    rnd = random.Random(3)

    def bound():
        v = rnd.randint(-10 ** rnd.choice([1, 2, 3, 5, 10, 17, 19, 20]), 10 ** rnd.choice([1, 2, 3, 5, 10, 17, 19, 20]))
        return rnd.choice([v, v, v + rnd.choice([0.5, -0.25]), 2**63 - 1, -2**63, 2**63, 2**64 - 1, 0, 9, 10, 99, 100,
                           -1, -9, -10, 1e300])

    texts = []
    for _ in range(1500):
        s: dict = {"type": "integer"}
        for k in rnd.sample(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"], rnd.randint(1, 3)):
            s[k] = bound()
        texts.append(json.dumps(s))
    got = cpp_converter(texts)
    diffs = [(t, g) for t, g in zip(texts, got) if _mine(t) != g]
    assert not diffs, diffs[:3]


@pytest.mark.oracle
def test_known_divergence_multibyte_character_before_a_quantifier(cpp_converter):
    # llama.cpp walks the pattern byte by byte: "é+" becomes "\xc3" "\xa9"+ (a grammar that means
    # something else); lmtail walks code points and repeats the whole character
    (theirs,) = cpp_converter(['{"type": "string", "pattern": "^é+$"}'])
    assert b'("\xc3" "\xa9"+)' in theirs
    assert '("é"+)' in json_schema_to_gbnf({"type": "string", "pattern": "^é+$"})
