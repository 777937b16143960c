"""JSON schema -> GBNF, with the text llama.cpp's converter writes.

:func:`json_schema_to_gbnf` returns, for every schema of llama.cpp's
``tests/test-json-schema-to-grammar.cpp``, the grammar its C++ ``json_schema_to_grammar``
(``common/json-schema-to-grammar.cpp`` + ``common/json-schema.cpp``, llama-cpp-python 0.3.36)
returns, byte for byte, and refuses (:class:`~lmtail.errors.JSONSchemaError`) where it throws.
The conversion runs in the same two passes:

1. the JSON document becomes a tree of typed nodes (``_Builder``); structural problems -- a
   non-object schema, an unknown ``type``, a ``$ref`` outside the document or not resolvable,
   bad ``minItems``/``format``/``enum`` values -- are refused here;
2. the nodes become rules (``_Converter``).  Rule names, their de-duplication suffixes and the
   final order (sorted by name) depend on the order rules are added, so the visit order is
   llama.cpp's.  A regular expression with no GBNF equivalent (lookaround, ``\\d``, unanchored,
   ...) degrades to "any string" with a :class:`JSONSchemaWarning`; an invalid one is refused.

Known divergences, all outside llama.cpp's test schemas (see docs/DESIGN.md):

* llama.cpp walks ``pattern`` byte by byte and can cut a multi-byte UTF-8 character in two
  between grammar literals (a non-ASCII character followed by a quantifier); lmtail walks code
  points and keeps the character whole, so its grammar means what the regex means;
* floats in ``const``/``enum`` are printed as nlohmann's ``dump`` prints them (shortest
  round-trip digits, exponent form from 1e15 on and below 1e-4); nlohmann's Grisu2 may pick other
  digits than the shortest-and-closest ones Python finds in rare cases;
* a schema holding a lone surrogate is refused (nlohmann can neither parse nor dump one).

``force_gbnf`` is accepted for signature parity and has no effect: lmtail behaves as a llama.cpp
built without llguidance (llama-cpp-python's default), which always writes GBNF.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from typing import Any, Callable, Union

from ..errors import JSONSchemaError

__all__ = ["json_schema_to_gbnf", "GBNFBuilder", "JSONSchemaWarning"]

JSONSchema = Union[dict[str, Any], str, bytes]

INT_MAX = 2**31 - 1  # llama.cpp's "unbounded" repetition count (std::numeric_limits<int>::max())
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1


class JSONSchemaWarning(UserWarning):
    """The schema was converted, but part of it was loosened (an unsupported ``pattern`` accepts
    any string), as llama.cpp's converter warns on stderr."""


class _Refused(Exception):
    """Internal: the message of a refusal, wrapped into JSONSchemaError at the API boundary."""


def _wrap64(v: int) -> int:
    # C++ int64 arithmetic (negation, +1) wraps on the x86/ARM targets llama.cpp runs on.
    return (v + 2**63) % 2**64 - 2**63


def _wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


# -- JSON values as nlohmann::ordered_json holds and dumps them ------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float))) and not isinstance(v, bool)


def _has_surrogate(s: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in s)


def _normalize(v: Any, where: str = "#") -> Any:
    """A JSON value as nlohmann would hold it: integers beyond int64/uint64 become doubles, dict
    keys must be strings, and no string may hold a surrogate (nlohmann has no UTF-8 for one)."""
    if v is None or isinstance(v, (bool, float)):
        return v
    if isinstance(v, int):
        return v if INT64_MIN <= v <= UINT64_MAX else float(v)
    if isinstance(v, str):
        if _has_surrogate(v):
            raise _Refused(f"invalid JSON at {where}: string holds a lone surrogate (not valid UTF-8)")
        return v
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise _Refused(f"invalid JSON at {where}: object key {k!r} is not a string")
            if _has_surrogate(k):
                raise _Refused(f"invalid JSON at {where}: object key holds a lone surrogate (not valid UTF-8)")
            out[k] = _normalize(x, f"{where}/{k}")
        return out
    if isinstance(v, (list, tuple)):
        return [_normalize(x, f"{where}/{i}") for i, x in enumerate(v)]
    raise _Refused(f"invalid JSON at {where}: {type(v).__name__} is not a JSON value")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _load(text: str | bytes) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise _Refused(f"invalid JSON: {e}") from None


_DUMP_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _dump_str(s: str) -> str:
    out = ['"']
    for ch in s:
        esc = _DUMP_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _dump_float(x: float) -> str:
    """nlohmann's double format: shortest round-trip digits, '.0' on integral values, plain
    notation for decimal exponents in (-4, 15], else d.ddde+XX with at least two exponent digits."""
    if math.isnan(x) or math.isinf(x):
        return "null"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    x = abs(x)
    if x == 0.0:
        return sign + "0.0"
    mant, _, exp = repr(x).partition("e")
    whole, _, frac = mant.partition(".")
    digits = (whole + frac).lstrip("0")
    point = len(whole) + (int(exp) if exp else 0) - (len(whole + frac) - len((whole + frac).lstrip("0")))
    digits = digits.rstrip("0")
    k, n = len(digits), point  # value = 0.DIGITS * 10^n
    if k <= n <= 15:
        return sign + digits + "0" * (n - k) + ".0"
    if 0 < n <= 15:
        return sign + digits[:n] + "." + digits[n:]
    if -4 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    e = n - 1
    body = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{body}e{'-' if e < 0 else '+'}{abs(e):02d}"


def _dump(v: Any) -> str:
    """``ordered_json::dump()``: compact, keys in insertion order, UTF-8 kept as is."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _dump_float(v)
    if isinstance(v, str):
        return _dump_str(v)
    if isinstance(v, list):
        return "[" + ",".join(_dump(x) for x in v) + "]"
    return "{" + ",".join(_dump_str(k) + ":" + _dump(x) for k, x in v.items()) + "}"


# -- typed schema nodes (llama.cpp's common_chat_schema) -------------------------------------------


class _Node:
    kind = ""


class _AnyNode(_Node):
    kind = "any"


class _RefNode(_Node):
    kind = "ref"

    def __init__(self, ref: str):
        self.ref = ref
        self.target: _Node | None = None


class _ChildrenNode(_Node):
    """A node that combines sub-schemas (anyOf / oneOf, allOf)."""

    def __init__(self, children: list[_Node]):
        self.children = children


class _AnyOfNode(_ChildrenNode):
    kind = "anyOf"


class _AllOfNode(_ChildrenNode):
    kind = "allOf"


class _ConstNode(_Node):
    kind = "const"

    def __init__(self, value: Any):
        self.value = value


class _EnumNode(_Node):
    kind = "enum"

    def __init__(self, values: list[Any]):
        self.values = values


class _PrimitiveNode(_Node):
    def __init__(self, kind: str):
        self.kind = kind  # "null", "boolean" or "number"


class _IntegerNode(_Node):
    kind = "integer"

    def __init__(self, minimum: int = INT64_MIN, maximum: int = INT64_MAX):
        self.minimum = minimum  # inclusive; INT64_MIN for none
        self.maximum = maximum  # inclusive; INT64_MAX for none


class _StringNode(_Node):
    kind = "string"

    def __init__(self, pattern: str, fmt: str, min_length: int, max_length: int):
        self.pattern = pattern  # "" for none
        self.fmt = fmt  # "", "uuid", "date", "time" or "date-time"
        self.min_length = min_length
        self.max_length = max_length  # -1 for none


class _ArrayNode(_Node):
    kind = "array"

    def __init__(self, items: _Node, min_items: int, max_items: int):
        self.items = items
        self.min_items = min_items
        self.max_items = max_items  # -1 for none


class _TupleNode(_Node):
    kind = "tuple"

    def __init__(self, items: list[_Node]):
        self.items = items


class _ObjectNode(_Node):
    kind = "object"

    def __init__(self, properties: list[tuple[str, _Node, bool]], additional: _Node | None):
        self.properties = properties  # (name, schema, required) in schema order
        self.additional = additional  # None when additional properties are not allowed


_LEADING_UNSIGNED = re.compile(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)")


def _array_index(sel: str, size: int) -> int:
    """``std::stoull(sel)`` as an index: leading space, a sign, a digit prefix; a minus wraps the
    value to a huge one; anything unparsable is out of range (``size``)."""
    m = _LEADING_UNSIGNED.match(sel)
    if m is None:
        return size
    v = int(m.group(2))
    if v > UINT64_MAX:
        return size
    if m.group(1) == "-":
        v = (-v) % 2**64
    return v


class _Builder:
    """JSON -> typed nodes, refusing what llama.cpp's ``common_chat_schema_from_json`` refuses."""

    def __init__(self, root: Any):
        self.root = root
        self.refs: dict[str, _Node | None] = {}
        self.pending: list[_RefNode] = []

    def link(self) -> None:
        for r in self.pending:
            r.target = self.refs[r.ref]

    @staticmethod
    def fail(path: str, msg: str) -> _Refused:
        return _Refused(f"JSON schema error at {path}: {msg}")

    def count(self, schema: dict[str, Any], key: str, path: str, default: int) -> int:
        if key not in schema:
            return default
        v = schema[key]
        # get<int>() truncates an int64 to its low 32 bits before the sign check
        if not _is_int(v) or _wrap32(v) < 0:
            raise self.fail(path, f"{key} must be a non-negative integer")
        return _wrap32(v)

    def bound(self, schema: dict[str, Any], key: str, path: str, round_up: bool) -> int:
        v = schema[key]
        if _is_int(v):
            return _wrap64(v)
        if not _is_number(v):
            raise self.fail(path, f"{key} must be a number")
        if math.isinf(v) or math.isnan(v):
            return INT64_MIN  # an out-of-range double -> int64 conversion gives INT64_MIN on x86-64
        r = math.ceil(v) if round_up else math.floor(v)
        return r if INT64_MIN <= r <= INT64_MAX else INT64_MIN

    def string_format(self, schema: dict[str, Any], path: str) -> str:
        if "format" not in schema:
            return ""
        f = schema["format"]
        if not isinstance(f, str):
            raise self.fail(path, "format must be a string")
        if f in ("date", "time", "date-time"):
            return f
        if f == "uuid" or (len(f) == 5 and f.startswith("uuid") and "1" <= f[4] <= "5"):
            return "uuid"
        return ""

    def resolve(self, ref: str, path: str) -> Any:
        target = self.root
        for sel in ref[1:].split("/")[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                idx = _array_index(sel, len(target))
                if idx >= len(target):
                    raise self.fail(path, f"cannot resolve $ref {ref}, {sel} is out of range")
                target = target[idx]
            else:
                raise self.fail(path, f"cannot resolve $ref {ref}, {sel} not found")
        return target

    def ref(self, value: Any, path: str) -> _Node:
        if not isinstance(value, str):
            raise self.fail(path, "$ref must be a string")
        if not value.startswith("#/"):
            raise self.fail(path, f"unsupported $ref {value}, only references into the same document are supported")
        if value not in self.refs:
            self.refs[value] = None  # a cycle back to this $ref stops here
            self.refs[value] = self.node(self.resolve(value, path), value)
        node = _RefNode(value)
        self.pending.append(node)
        return node

    def alternatives(self, alts: Any, path: str, make: Callable[[list[_Node]], _Node]) -> _Node:
        if not isinstance(alts, list):
            raise self.fail(path, "must be an array of schemas")
        if not alts:
            raise self.fail(path, "must not be empty")
        return make([self.node(a, f"{path}/{i}") for i, a in enumerate(alts)])

    def object(self, schema: dict[str, Any], path: str) -> _Node:
        required: set[str] = set()
        if isinstance(schema.get("required"), list):
            required = {n for n in schema["required"] if isinstance(n, str)}
        props: list[tuple[str, _Node, bool]] = []
        if "properties" in schema:
            properties = schema["properties"]
            if not isinstance(properties, dict):
                raise self.fail(path, "properties must be an object")
            for name, prop in properties.items():
                props.append((name, self.node(prop, f"{path}/properties/{name}"), name in required))
        additional: _Node | None = None
        if "additionalProperties" in schema:
            extra = schema["additionalProperties"]
            if isinstance(extra, bool):
                additional = _AnyNode() if extra else None
            elif isinstance(extra, dict):
                additional = self.node(extra, f"{path}/additionalProperties")
            else:
                raise self.fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            additional = _AnyNode()  # {"type": "object"} alone accepts any object
        return _ObjectNode(props, additional)

    def array(self, schema: dict[str, Any], path: str) -> _Node:
        if "items" in schema or "prefixItems" in schema:
            key = "items" if "items" in schema else "prefixItems"
            items = schema[key]
            if isinstance(items, list):
                return _TupleNode([self.node(x, f"{path}/{key}/{i}") for i, x in enumerate(items)])
            item = self.node(items, f"{path}/{key}")
        else:
            item = _AnyNode()
        lo = self.count(schema, "minItems", path, 0)
        hi = self.count(schema, "maxItems", path, -1)
        return _ArrayNode(item, lo, hi)

    def string(self, schema: dict[str, Any], path: str) -> _Node:
        pattern = ""
        if "pattern" in schema:
            if not isinstance(schema["pattern"], str):
                raise self.fail(path, "pattern must be a string")
            pattern = schema["pattern"]
        fmt = self.string_format(schema, path)
        lo = self.count(schema, "minLength", path, 0)
        hi = self.count(schema, "maxLength", path, -1)
        return _StringNode(pattern, fmt, lo, hi)

    def integer(self, schema: dict[str, Any], path: str) -> _Node:
        node = _IntegerNode()
        if "minimum" in schema:
            node.minimum = self.bound(schema, "minimum", path, True)
        elif "exclusiveMinimum" in schema:
            node.minimum = _wrap64(self.bound(schema, "exclusiveMinimum", path, False) + 1)
        if "maximum" in schema:
            node.maximum = self.bound(schema, "maximum", path, False)
        elif "exclusiveMaximum" in schema:
            node.maximum = _wrap64(self.bound(schema, "exclusiveMaximum", path, True) - 1)
        return node

    def node(self, schema: Any, path: str) -> _Node:
        if not isinstance(schema, dict):
            raise self.fail(path, "schema must be an object")
        if "$ref" in schema:
            return self.ref(schema["$ref"], path)  # siblings of $ref are ignored
        if "oneOf" in schema or "anyOf" in schema:
            key = "oneOf" if "oneOf" in schema else "anyOf"
            return self.alternatives(schema[key], f"{path}/{key}", _AnyOfNode)
        typ = schema.get("type")
        if isinstance(typ, list):
            # {"type": [a, b], ...} is {"anyOf": [{"type": a, ...}, {"type": b, ...}]}
            if not typ:
                raise self.fail(path, "type must not be empty")
            alts = []
            for i, t in enumerate(typ):
                alt = dict(schema)
                alt["type"] = t
                alts.append(self.node(alt, f"{path}/type/{i}"))
            return _AnyOfNode(alts)
        if "const" in schema:
            return _ConstNode(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise self.fail(path, "enum must be a non-empty array")
            return _EnumNode(list(values))
        if typ is not None and not isinstance(typ, str):
            raise self.fail(path, "type must be a string or an array of strings")
        extra = schema.get("additionalProperties", True)
        has_properties = "properties" in schema or ("additionalProperties" in schema and extra is not True)
        if not typ:
            # untyped: the structural keywords decide, in llama.cpp's order
            if has_properties:
                return self.object(schema, path)
            if "allOf" in schema:
                return self.alternatives(schema["allOf"], f"{path}/allOf", _AllOfNode)
            if "items" in schema or "prefixItems" in schema:
                return self.array(schema, path)
            if ("pattern" in schema or "minLength" in schema or "maxLength" in schema
                    or self.string_format(schema, path)):
                return self.string(schema, path)
            return _AnyNode()
        if typ == "object":
            if not has_properties and "allOf" in schema:
                return self.alternatives(schema["allOf"], f"{path}/allOf", _AllOfNode)
            return self.object(schema, path)
        if typ == "string":
            if "allOf" in schema:
                return self.alternatives(schema["allOf"], f"{path}/allOf", _AllOfNode)
            return self.string(schema, path)
        if typ == "array":
            return self.array(schema, path)
        if typ == "integer":
            return self.integer(schema, path)
        if typ in ("number", "boolean", "null"):
            return _PrimitiveNode(typ)
        raise self.fail(path, f"unrecognized type {typ}")


# -- rules --------------------------------------------------------------------------------------

SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'

# name -> (body, dependencies)
_PRIMITIVES: dict[str, tuple[str, tuple[str, ...]]] = {
    "boolean": ('("true" | "false")', ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "number": ('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
               ("integral-part", "decimal-part")),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": ("object | array | string | number | boolean | null",
              ("object", "array", "string", "number", "boolean", "null")),
    "object": ('"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
               ("string", "value")),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": ('"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} '
             '"-" [0-9a-fA-F]{12} "\\""', ()),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
}

_FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
             '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )', ()),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": ('"\\"" date "\\""', ("date",)),
    "time-string": ('"\\"" time "\\""', ("time",)),
    "date-time-string": ('"\\"" date-time "\\""', ("date-time",)),
}

_RESERVED = {"root", *_PRIMITIVES, *_FORMATS}

_BAD_NAME_CHARS = re.compile(r"[^a-zA-Z0-9-]+")
_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}

# characters that end a literal run in a pattern, and that a backslash makes literal again
_REGEX_SPECIAL = frozenset("|.()[]{}*+?^$")
_MAX_PATTERN_DEPTH = 100
_HEX = frozenset("0123456789abcdefABCDEF")
_GBNF_SIMPLE_ESCAPES = frozenset('trn\\"[]-')


def gbnf_literal(text: str) -> str:
    """A GBNF string literal matching ``text`` (llama.cpp's ``gbnf_format_literal``)."""
    return '"' + "".join(_LITERAL_ESCAPES.get(ch, ch) for ch in text) + '"'


def _gbnf_escape_length(s: str, pos: int) -> int:
    """Length of the GBNF escape at ``s[pos]`` if GBNF's parser reads it the same way, else 0."""
    if pos + 1 >= len(s) or s[pos] != "\\":
        return 0
    c = s[pos + 1]
    if c in _GBNF_SIMPLE_ESCAPES:
        return 2
    n_hex = {"x": 2, "u": 4, "U": 8}.get(c, 0)
    if n_hex == 0 or pos + 2 + n_hex > len(s):
        return 0
    if not all(h in _HEX for h in s[pos + 2: pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


def _repeat(item: str, lo: int, hi: int, sep: str = "") -> str:
    """``item`` lo..hi times (``hi == INT_MAX``: unbounded), ``sep`` between items."""
    bounded = hi != INT_MAX
    if hi == 0:
        return ""
    if lo == 0 and hi == 1:
        return item + "?"
    if not sep:
        if lo == 1 and not bounded:
            return item + "+"
        if lo == 0 and not bounded:
            return item + "*"
        return f"{item}{{{lo},{hi if bounded else ''}}}"
    tail = _repeat(f"({sep} {item})", 0 if lo == 0 else lo - 1, hi - 1 if bounded else hi)
    out = f"{item} {tail}"
    return f"({out})?" if lo == 0 else out


class _IntRange:
    """GBNF for the decimal integers in [lo, hi] (either side open), in llama.cpp's shape:
    digit-by-digit ranges, and at most 16 digits where a side is open."""

    def __init__(self) -> None:
        self.out: list[str] = []

    def text(self) -> str:
        return "".join(self.out)

    def digits_class(self, a: str, b: str) -> None:
        self.out.append(f"[{a}]" if a == b else f"[{a}-{b}]")

    def any_digits(self, lo: int, hi: int) -> None:
        self.out.append("[0-9]")
        if lo == hi == 1:
            return
        self.out.append("{" + str(lo))
        if hi != lo:
            self.out.append("," + (str(hi) if hi != INT_MAX else ""))
        self.out.append("}")

    def same_length(self, a: str, b: str) -> None:
        """Numbers from ``a`` to ``b``, written with ``len(a)`` digits (llama.cpp only looks at
        ``a``'s length below the first differing digit)."""
        common = 0
        while common < len(a) and common < len(b) and a[common] == b[common]:
            common += 1
        if common:
            self.out.append(f'"{a[:common]}"')
        if common >= len(a) or common >= len(b):
            return
        if common:
            self.out.append(" ")
        rest = len(a) - common - 1
        da, db = a[common], b[common]
        if rest <= 0:
            self.out.append(f"[{da}-{db}]")
            return
        a_tail, b_tail = a[common + 1:], b[common + 1:]
        zeros, nines = "0" * rest, "9" * rest
        reached_b = False
        self.out.append("(")
        if a_tail == zeros:
            self.digits_class(da, chr(ord(db) - 1))
            self.out.append(" ")
            self.any_digits(rest, rest)
        else:
            self.out.append(f"[{da}] (")
            self.same_length(a_tail, nines)
            self.out.append(")")
            if ord(da) < ord(db) - 1:
                self.out.append(" | ")
                if b_tail == nines:
                    self.digits_class(chr(ord(da) + 1), db)
                    reached_b = True
                else:
                    self.digits_class(chr(ord(da) + 1), chr(ord(db) - 1))
                self.out.append(" ")
                self.any_digits(rest, rest)
        if not reached_b:
            self.out.append(" | ")
            self.digits_class(db, db)
            self.out.append(" ")
            self.same_length(zeros, b_tail)
        self.out.append(")")

    def build(self, lo: int, hi: int, digits_left: int = 16, top: bool = True) -> None:
        has_lo, has_hi = lo != INT64_MIN, hi != INT64_MAX
        if has_lo and has_hi:
            if lo < 0 and hi < 0:
                self.out.append('"-" (')
                self.build(_wrap64(-hi), _wrap64(-lo), digits_left, True)
                self.out.append(")")
                return
            if lo < 0:
                self.out.append('"-" (')
                self.build(0, _wrap64(-lo), digits_left, True)
                self.out.append(") | ")
                lo = 0
            lo_s, hi_s = str(lo), str(hi)
            for width in range(len(lo_s), len(hi_s)):
                self.same_length(lo_s, "9" * width)
                lo_s = "1" + "0" * width
                self.out.append(" | ")
            self.same_length(lo_s, hi_s)
            return
        fewer = max(digits_left - 1, 1)
        if has_lo:
            if lo < 0:
                self.out.append('"-" (')
                self.build(INT64_MIN, _wrap64(-lo), digits_left, False)
                self.out.append(") | [0] | [1-9] ")
                self.any_digits(0, digits_left - 1)
            elif lo == 0:
                if top:
                    self.out.append("[0] | [1-9] ")
                    self.any_digits(0, fewer)
                else:
                    self.any_digits(1, digits_left)
            elif lo <= 9:
                d = chr(ord("0") + lo)
                first = "1" if top else "0"
                if d > first:
                    self.digits_class(first, chr(ord(d) - 1))
                    self.out.append(" ")
                    self.any_digits(1, fewer)
                    self.out.append(" | ")
                self.digits_class(d, "9")
                self.out.append(" ")
                self.any_digits(0, fewer)
            else:
                s = str(lo)
                d = s[0]
                if d > "1":
                    self.digits_class("1" if top else "0", chr(ord(d) - 1))
                    self.out.append(" ")
                    self.any_digits(len(s), fewer)
                    self.out.append(" | ")
                self.digits_class(d, d)
                self.out.append(" (")
                self.build(int(s[1:]), INT64_MAX, fewer, False)
                self.out.append(")")
                if d < "9":
                    self.out.append(" | ")
                    self.digits_class(chr(ord(d) + 1), "9")
                    self.out.append(" ")
                    self.any_digits(len(s) - 1, fewer)
            return
        if has_hi:
            if hi >= 0:
                if top:
                    self.out.append('"-" [1-9] ')
                    self.any_digits(0, fewer)
                    self.out.append(" | ")
                self.build(0, hi, digits_left, True)
            else:
                self.out.append('"-" (')
                self.build(_wrap64(-hi), INT64_MAX, digits_left, False)
                self.out.append(")")
            return
        raise _Refused("At least one of min_value or max_value must be set")


class _UnsupportedPattern(Exception):
    """A valid regex with no GBNF equivalent: the string is left unconstrained."""


class _InvalidPattern(Exception):
    """Not a regex at all: the schema is refused."""


def _stoi(s: str) -> int:
    m = _LEADING_UNSIGNED.match(s)
    if m is None:
        raise ValueError(s)
    v = int(m.group(1) + m.group(2))
    if not -(2**31) <= v <= INT_MAX:
        raise ValueError(s)
    return v


class _PatternTranslator:
    """One anchored regex -> one GBNF rule body, as llama.cpp translates it: literal runs become
    string literals, classes are copied, ``{m,n}`` on a non-literal gets its own rule."""

    def __init__(self, conv: "_Converter", name: str, body: str):
        self.conv = conv
        self.name = name
        self.s = body
        self.i = 0
        self.depth = 0
        self.sub_rules: dict[str, str] = {}

    @staticmethod
    def as_rule(item: tuple[str, bool]) -> str:
        text, is_literal = item
        return f'"{text}"' if is_literal else text

    def dot(self) -> str:
        body = "[\\U00000000-\\U0010FFFF]" if self.conv.dotall else "[^\\x0A\\x0D]"
        return self.conv.add_rule("dot", body)

    def join(self, seq: list[tuple[str, bool]]) -> tuple[str, bool]:
        parts: list[str] = []
        run = ""
        for text, is_literal in seq:
            if is_literal:
                run += text
                continue
            if run:
                parts.append(f'"{run}"')
                run = ""
            parts.append(text)
        if run:
            parts.append(f'"{run}"')
        return " ".join(parts), False

    def literal_run(self, first: str) -> tuple[str, bool]:
        s, n = self.s, len(self.s)
        lit = ""
        while self.i < n:
            c = s[self.i]
            if c == "\\":
                if self.i == n - 1:
                    raise _InvalidPattern("trailing backslash")
                nxt = s[self.i + 1]
                if nxt in _REGEX_SPECIAL:
                    lit += nxt
                    self.i += 2
                else:
                    k = _gbnf_escape_length(s, self.i)
                    if k == 0:
                        raise _UnsupportedPattern("unsupported escape: " + s[self.i:self.i + 2])
                    lit += s[self.i:self.i + k]
                    self.i += k
            elif c == '"':
                lit += '\\"'
                self.i += 1
            elif c not in _REGEX_SPECIAL and (
                    self.i == n - 1 or not lit or s[self.i + 1] == "." or s[self.i + 1] not in _REGEX_SPECIAL):
                # a character right before a quantifier starts its own literal, so that the
                # quantifier applies to it alone
                lit += c
                self.i += 1
            else:
                break
        if not lit:
            raise _UnsupportedPattern("unsupported character: " + first)
        return lit, True

    def braces(self, seq: list[tuple[str, bool]]) -> None:
        s, n = self.s, len(self.s)
        self.i += 1
        start = self.i
        while self.i < n and s[self.i] != "}":
            self.i += 1
        if self.i >= n:
            raise _UnsupportedPattern("unterminated curly brackets")
        nums = s[start:self.i].split(",")
        self.i += 1
        lo, hi = 0, INT_MAX
        if len(nums) not in (1, 2):
            raise _UnsupportedPattern("wrong number of values in curly brackets")
        try:
            if len(nums) == 1:
                lo = hi = _stoi(nums[0])
            else:
                if nums[0]:
                    lo = _stoi(nums[0])
                if nums[1]:
                    hi = _stoi(nums[1])
        except ValueError:
            raise _UnsupportedPattern("invalid number in curly brackets") from None
        if not seq:
            raise _InvalidPattern("nothing to repeat")
        text, is_literal = seq[-1]
        if not is_literal:
            # a repeated group or class is named once per pattern and referenced by name
            if text not in self.sub_rules:
                self.sub_rules[text] = ""
                self.sub_rules[text] = self.conv.add_rule(f"{self.name}-{len(self.sub_rules)}", text)
            text = self.sub_rules[text]
        seq[-1] = (_repeat(f'"{text}"' if is_literal else text, lo, hi), False)

    def sequence(self) -> tuple[str, bool]:
        s, n = self.s, len(self.s)
        seq: list[tuple[str, bool]] = []
        while self.i < n:
            c = s[self.i]
            if c == ".":
                seq.append((self.dot(), False))
                self.i += 1
            elif c == "(":
                self.i += 1
                if self.i < n and s[self.i] == "?":
                    if self.i + 1 < n and s[self.i + 1] == ":":
                        self.i += 2  # a non-capturing group is a group
                    else:
                        raise _UnsupportedPattern("unsupported group syntax")
                self.depth += 1
                if self.depth > _MAX_PATTERN_DEPTH:
                    raise _UnsupportedPattern("pattern nesting too deep")
                seq.append(("(" + self.as_rule(self.sequence()) + ")", False))
            elif c == ")":
                self.i += 1
                if self.depth == 0:
                    raise _InvalidPattern("unbalanced parentheses")
                self.depth -= 1
                return self.join(seq)
            elif c in "^$":
                raise _UnsupportedPattern("anchor inside the pattern")
            elif c == "[":
                cls = "["
                self.i += 1
                while self.i < n and s[self.i] != "]":
                    if s[self.i] == "\\":
                        k = _gbnf_escape_length(s, self.i)
                        if k == 0:
                            raise _UnsupportedPattern("unsupported escape in character class: " + s[self.i:self.i + 2])
                        cls += s[self.i:self.i + k]
                        self.i += k
                    else:
                        cls += s[self.i]
                        self.i += 1
                if self.i >= n:
                    raise _InvalidPattern("unterminated character class")
                self.i += 1
                seq.append((cls + "]", False))
            elif c == "|":
                seq.append(("|", False))
                self.i += 1
            elif c in "*+?":
                if not seq:
                    raise _InvalidPattern("nothing to repeat")
                seq[-1] = (self.as_rule(seq[-1]) + c, False)
                self.i += 1
            elif c == "{":
                self.braces(seq)
            else:
                seq.append(self.literal_run(c))
        return self.join(seq)

    def translate(self) -> str:
        rule = self.as_rule(self.sequence())
        if self.depth != 0:
            raise _InvalidPattern("unbalanced parentheses")
        return rule


class _Converter:
    """Typed nodes -> named GBNF rules (llama.cpp's ``common_chat_schema_converter``)."""

    def __init__(self, dotall: bool = False):
        self.dotall = dotall
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.resolving: set[str] = set()
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def add_rule(self, name: str, body: str) -> str:
        """Add ``name ::= body``; a taken name with another body gets the first free numeric
        suffix (or the suffix already holding this body)."""
        base = _BAD_NAME_CHARS.sub("-", name)
        if self.rules.get(base, body) == body:
            self.rules[base] = body
            return base
        i = 0
        while self.rules.get(f"{base}{i}", body) != body:
            i += 1
        key = f"{base}{i}"
        self.rules[key] = body
        return key

    def add_builtin(self, name: str, rule: tuple[str, tuple[str, ...]]) -> str:
        out = self.add_rule(name, rule[0])
        for dep in rule[1]:
            dep_rule = _PRIMITIVES.get(dep) or _FORMATS.get(dep)
            if dep_rule is None:
                self.errors.append(f"Rule {dep} not known")
                continue
            if dep not in self.rules:
                self.add_builtin(dep, dep_rule)
        return out

    def primitive(self, rule_name: str, typ: str) -> str:
        return self.add_builtin("root" if rule_name == "root" else typ, _PRIMITIVES[typ])

    def union(self, name: str, alts: list[_Node]) -> str:
        prefix = name + "-" if name else "alternative-"
        return " | ".join(self.visit(a, f"{prefix}{i}") for i, a in enumerate(alts))

    def pattern(self, pattern: str, name: str) -> str:
        saved = dict(self.rules)
        try:
            if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
                raise _UnsupportedPattern("not anchored with '^' and '$'")
            body = _PatternTranslator(self, name, pattern[1:-1]).translate()
            return self.add_rule(name, '"\\"" (' + body + ') "\\""')
        except _UnsupportedPattern as e:
            self.rules = saved  # rules of the abandoned translation must not leak
            self.warnings.append(f"pattern {pattern} is not supported ({e}), accepting any string")
            return self.add_rule(name, self.add_builtin("string", _PRIMITIVES["string"]))
        except _InvalidPattern as e:
            self.rules = saved
            self.errors.append(f"Invalid pattern {pattern}: {e}")
            return ""

    def not_strings(self, strings: list[str]) -> str:
        """A JSON string that is none of ``strings``, by walking their trie."""
        trie: dict[Any, Any] = {}
        for w in strings:
            node = trie
            for ch in w:
                node = node.setdefault(ch, {})
            node[None] = True  # a word ends here
        char = self.add_builtin("char", _PRIMITIVES["char"])
        out: list[str] = ['["] ( ']

        def walk(node: dict[Any, Any]) -> None:
            chars = sorted(k for k in node if k is not None)
            for j, ch in enumerate(chars):
                if j:
                    out.append(" | ")
                out.append(f"[{ch}]")
                child = node[ch]
                if any(k is not None for k in child):
                    out.append(" (")
                    walk(child)
                    out.append(")")
                else:
                    out.append(f" {char}+")
            if chars:
                out.append(f' | [^"{"".join(chars)}] {char}*')

        walk(trie)
        out.append(" )")
        if None not in trie:
            out.append("?")
        out.append(' ["]')
        return "".join(out)

    def resolve_ref(self, node: _RefNode) -> str:
        fragment = node.ref.split("#", 1)[1] if "#" in node.ref else node.ref
        ref_name = "ref" + _BAD_NAME_CHARS.sub("-", fragment)
        if ref_name not in self.rules and node.ref not in self.resolving:
            if node.target is None:
                self.errors.append(f"Unresolved $ref {node.ref}")
                return ""
            self.resolving.add(node.ref)
            ref_name = self.visit(node.target, ref_name)
            self.resolving.discard(node.ref)
        return ref_name

    def object_rule(self, properties: list[tuple[str, _Node]], required: set[str], name: str,
                    additional: _Node | None) -> str:
        prefix = name + "-" if name else ""
        kv: dict[str, str] = {}
        required_props: list[str] = []
        optional_props: list[str] = []
        names: list[str] = []
        for prop, schema in properties:
            value_rule = self.visit(schema, prefix + prop)
            key_literal = gbnf_literal(_dump_str(prop))
            kv[prop] = self.add_rule(f"{prefix}{prop}-kv", f'{key_literal} space ":" space {value_rule}')
            (required_props if prop in required else optional_props).append(prop)
            names.append(prop)
        if additional is not None:
            sub = prefix + "additional"
            if additional.kind != "any":
                value_rule = self.visit(additional, sub + "-value")
            else:
                value_rule = self.add_builtin("value", _PRIMITIVES["value"])
            if names:
                key_rule = self.add_rule(sub + "-k", self.not_strings(names))
            else:
                key_rule = self.add_builtin("string", _PRIMITIVES["string"])
            kv["*"] = self.add_rule(sub + "-kv", f'{key_rule} ":" space {value_rule}')
            optional_props.append("*")
        if not required_props and not optional_props:
            return '"{" space "}"'

        def chain(keys: list[str], first_optional: bool) -> str:
            # the optional properties from keys[0] on, in order, each at most once ("*": any number)
            if not keys:
                return ""
            k = keys[0]
            comma = f'( "," space {kv[k]} )'
            if first_optional:
                res = comma + ("*" if k == "*" else "?")
            else:
                res = kv[k] + (f" {comma}*" if k == "*" else "")
            if len(keys) > 1:
                res += " " + self.add_rule(f"{prefix}{k}-rest", chain(keys[1:], True))
            return res

        rule = '"{" space ' + ' "," space '.join(kv[p] for p in required_props)
        if optional_props:
            rule += " ("
            if required_props:
                rule += ' "," space ( '
            rule += " | ".join(chain(optional_props[i:], False) for i in range(len(optional_props)))
            if required_props:
                rule += " )"
            rule += " )?"
        return rule + ' space "}"'

    def all_of(self, node: _AllOfNode, name: str, rule_name: str) -> str:
        required: set[str] = set()
        properties: list[tuple[str, _Node]] = []
        enum_counts: dict[str, int] = {}

        def add(comp: _Node, is_required: bool) -> None:
            if isinstance(comp, _RefNode):
                if comp.target is not None:
                    add(comp.target, is_required)
            elif isinstance(comp, _ObjectNode):
                for prop, schema, _ in comp.properties:
                    properties.append((prop, schema))
                    if is_required:
                        required.add(prop)
            elif isinstance(comp, _EnumNode):
                for v in comp.values:
                    lit = gbnf_literal(_dump(v))
                    enum_counts[lit] = enum_counts.get(lit, 0) + 1

        for child in node.children:
            if isinstance(child, _AnyOfNode):
                for alt in child.children:
                    add(alt, False)
            else:
                add(child, True)
        # a value in every enum (counted per occurrence, as llama.cpp counts)
        common = [lit for lit in sorted(enum_counts) if enum_counts[lit] == len(node.children)]
        if common:
            return self.add_rule(rule_name, "(" + " | ".join(common) + ")")
        return self.add_rule(rule_name, self.object_rule(properties, required, name, None))

    def visit(self, node: _Node, name: str) -> str:
        rule_name = name + "-" if name in _RESERVED else (name or "root")
        sub = name + "-" if name else ""
        if isinstance(node, _RefNode):
            return self.add_rule(rule_name, self.resolve_ref(node))
        if isinstance(node, _AnyOfNode):
            return self.add_rule(rule_name, self.union(name, node.children))
        if isinstance(node, _AllOfNode):
            return self.all_of(node, name, rule_name)
        if isinstance(node, _ConstNode):
            return self.add_rule(rule_name, gbnf_literal(_dump(node.value)))
        if isinstance(node, _EnumNode):
            return self.add_rule(rule_name, "(" + " | ".join(gbnf_literal(_dump(v)) for v in node.values) + ")")
        if isinstance(node, _ObjectNode):
            if not node.properties and node.additional is not None and node.additional.kind == "any":
                return self.add_rule(rule_name, self.add_builtin("object", _PRIMITIVES["object"]))
            props = [(p, s) for p, s, _ in node.properties]
            required = {p for p, _, req in node.properties if req}
            return self.add_rule(rule_name, self.object_rule(props, required, name, node.additional))
        if isinstance(node, _TupleNode):
            items = ' "," space '.join(self.visit(x, f"{sub}tuple-{i}") for i, x in enumerate(node.items))
            return self.add_rule(rule_name, f'"[" space {items} space "]"')
        if isinstance(node, _ArrayNode):
            if node.items.kind == "any" and node.min_items == 0 and node.max_items < 0:
                return self.primitive(rule_name, "array")
            item = self.visit(node.items, sub + "item")
            hi = INT_MAX if node.max_items < 0 else node.max_items
            items = _repeat(item, node.min_items, hi, '"," space')
            return self.add_rule(rule_name, f'"[" space {items} space "]"')
        if isinstance(node, _StringNode):
            if node.pattern:
                return self.pattern(node.pattern, rule_name)
            if node.fmt == "uuid":
                return self.primitive(rule_name, "uuid")
            if node.fmt:
                prim = node.fmt + "-string"
                return self.add_rule(rule_name, self.add_builtin(prim, _FORMATS[prim]))
            if node.min_length > 0 or node.max_length >= 0:
                char = self.add_builtin("char", _PRIMITIVES["char"])
                hi = INT_MAX if node.max_length < 0 else node.max_length
                return self.add_rule(rule_name, f'"\\"" {_repeat(char, node.min_length, hi)} "\\""')
            return self.primitive(rule_name, "string")
        if isinstance(node, _IntegerNode):
            if node.minimum == INT64_MIN and node.maximum == INT64_MAX:
                return self.primitive(rule_name, "integer")
            r = _IntRange()
            r.build(node.minimum, node.maximum)
            return self.add_rule(rule_name, "(" + r.text() + ")")
        if isinstance(node, _PrimitiveNode):
            return self.primitive(rule_name, node.kind)
        return self.add_rule(rule_name, self.add_builtin("value", _PRIMITIVES["value"]))

    def grammar(self) -> str:
        if self.errors:
            raise _Refused("\n".join(self.errors))
        if self.warnings:
            warnings.warn("JSON schema conversion was incomplete: " + "; ".join(self.warnings),
                          JSONSchemaWarning, stacklevel=3)
        return "".join(f"{k} ::= {v}\n" for k, v in sorted(self.rules.items()))


def _document(schema: JSONSchema) -> Any:
    if isinstance(schema, (str, bytes)):
        return _normalize(_load(schema))
    return _normalize(schema)


def _refusal(e: _Refused) -> JSONSchemaError:
    return JSONSchemaError("JSON schema conversion failed:\n" + str(e))


def json_schema_to_gbnf(schema: JSONSchema, *, force_gbnf: bool = False, dotall: bool = False) -> str:
    """The GBNF grammar llama.cpp's ``json_schema_to_grammar(schema, force_gbnf)`` returns.

    ``schema`` is a JSON text or the already-parsed value (dicts keep their key order, which
    decides the order of properties).  ``dotall=True`` lets ``.`` in a ``pattern`` match line
    breaks (llama.cpp's ``common_grammar_options::dotall``, used by its ``build_grammar``).
    ``force_gbnf`` is accepted and ignored: lmtail has no llguidance backend.

    Raises :class:`~lmtail.errors.JSONSchemaError` where llama.cpp throws; warns
    (:class:`JSONSchemaWarning`) where it degrades an unsupported ``pattern`` to any string.
    """
    del force_gbnf  # always GBNF, as in a llama.cpp built without LLAMA_USE_LLGUIDANCE
    try:
        doc = _document(schema)
        builder = _Builder(doc)
        root = builder.node(doc, "#")
        builder.link()
        conv = _Converter(dotall)
        conv.visit(root, "")
        return conv.grammar()
    except _Refused as e:
        raise _refusal(e) from None
    except RecursionError:
        # llama.cpp recurses as deeply and overflows its stack; here that is a refusal
        raise _refusal(_Refused("schema nested too deeply")) from None


class GBNFBuilder:
    """Several schemas and hand-written rules in one grammar (llama.cpp's ``build_grammar``).

    ``add_schema(name, schema, document=...)`` converts ``schema`` under the rule ``name``
    (``"root"`` for the start rule), resolving its ``$ref``\\ s against ``document`` (default:
    the schema itself); ``add_rule(name, body)`` adds a raw GBNF rule and returns the name it
    got; ``grammar()`` returns the text or raises :class:`~lmtail.errors.JSONSchemaError`.
    """

    def __init__(self, *, dotall: bool = False):
        self._conv = _Converter(dotall)

    def add_rule(self, name: str, body: str) -> str:
        """Add the raw GBNF rule ``name ::= body``; returns the name it got (a taken name with
        another body gets the first free numeric suffix, as llama.cpp's ``_add_rule``)."""
        return self._conv.add_rule(name, body)

    def add_schema(self, name: str, schema: JSONSchema, *, document: JSONSchema | None = None) -> str:
        """Convert ``schema`` under the rule ``name`` (``"root"`` for the start rule), resolving
        its ``$ref``\\ s against ``document`` (default: the schema itself); returns the rule name."""
        try:
            node_json = _document(schema)
            builder = _Builder(node_json if document is None else _document(document))
            node = builder.node(node_json, "#")
            builder.link()
            return self._conv.visit(node, "" if name == "root" else name)
        except _Refused as e:
            raise _refusal(e) from None
        except RecursionError:
            raise _refusal(_Refused("schema nested too deeply")) from None

    def grammar(self) -> str:
        """The GBNF text of everything added, llama.cpp's bytes; raises
        :class:`~lmtail.errors.JSONSchemaError` if a schema was refused."""
        try:
            return self._conv.grammar()
        except _Refused as e:
            raise _refusal(e) from None
