"""GBNF exactly as llama.cpp parses it (``llama_grammar_parser`` in ``src/llama-grammar.cpp``).

The output is llama.cpp's own intermediate form, so the parser can be checked element by element
against llama.cpp's parser tests: every rule is a flat list of ``(type, value)`` elements, the
alternatives separated by ``ALT`` and the rule closed by ``END``; a character set is a ``CHAR`` /
``CHAR_NOT`` / ``CHAR_ANY`` element followed by ``CHAR_ALT`` / ``CHAR_RNG_UPPER`` modifiers;
groups and repetitions become synthesized rules named ``<rule>_<id>``.

Quirks reproduced on purpose (each one checked against llama.cpp):

* whitespace is space and tab; ``#`` comments run to the end of the line; a rule ends at a
  newline (``\\n``, ``\\r\\n``, ``\\r``) or the end of the text; newlines are free after ``::=``,
  after ``|`` and anywhere inside parentheses; the text ends at the first NUL byte;
* names are ``[A-Za-z0-9-]+`` (no underscore, a leading digit is fine); a later definition of a
  name replaces the earlier one;
* escapes: ``\\xHH`` (exactly 2 hex digits), ``\\uHHHH``, ``\\UHHHHHHHH``, ``\\t \\r \\n \\\\ \\" \\[ \\] \\-``;
  anything else is "unknown escape"; no range check on the value;
* non-ASCII grammar text is decoded leniently (continuation bytes unchecked, a stray continuation
  byte is a 1-byte character);
* ``""``, ``[]`` and ``[^]`` are the empty string; ``.`` matches any code point, newline included;
* ``S{m,n}`` with ``n > 2000`` is ``S{m,}``; ``m > 2000`` is an error, and so is a nesting whose
  product of repetition counts exceeds 2000;
* ``<[N]>`` / ``!<[N]>`` are token references; ``<text>`` needs a tokenizer (lmtail has none at
  parse time, so it is the error "no vocab to parse token", as in llama.cpp's own tests);
* after parsing, every referenced rule must be defined, the start symbol must exist, and
  llama.cpp's *syntactic* left-recursion check is applied (a rule reachable from itself through
  leftmost references, continuing past a reference only when that rule has a literally empty
  alternative), over every rule, reachable or not.  Left recursion that check misses (through
  rules that are only nullable by derivation) is accepted: the Earley matcher handles it, where
  llama.cpp may loop until it runs out of memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import GrammarError, ParameterError

__all__ = [
    "END", "ALT", "RULE_REF", "CHAR", "CHAR_NOT", "CHAR_RNG_UPPER", "CHAR_ALT", "CHAR_ANY",
    "TOKEN", "TOKEN_NOT", "TYPE_NAMES", "MAX_REPETITION_THRESHOLD", "DEFAULT_MAX_ELEMENTS", "ParsedGrammar", "parse_gbnf",
]  # fmt: skip

END, ALT, RULE_REF, CHAR, CHAR_NOT, CHAR_RNG_UPPER, CHAR_ALT, CHAR_ANY, TOKEN, TOKEN_NOT = range(10)
TYPE_NAMES = (
    "END", "ALT", "RULE_REF", "CHAR", "CHAR_NOT", "CHAR_RNG_UPPER", "CHAR_ALT", "CHAR_ANY", "TOKEN", "TOKEN_NOT",
)  # fmt: skip
MAX_REPETITION_THRESHOLD = 2000
DEFAULT_MAX_ELEMENTS = 1_000_000  # lmtail's bound on the expanded grammar (see parse_gbnf)
_UINT64_MAX = (1 << 64) - 1
_UINT32_MAX = (1 << 32) - 1

_LEAD = (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)  # parse-time decoder: 8..B -> 1 byte
_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_DIGIT = frozenset(b"0123456789")
_HEX = {c: int(chr(c), 16) for c in b"0123456789abcdefABCDEF"}
_SIMPLE_ESC = {ord("t"): 9, ord("r"): 13, ord("n"): 10, ord("\\"): 92, ord('"'): 34, ord("["): 91, ord("]"): 93, ord("-"): 45}


def _np_integer():
    import numpy as np

    return np.integer


class _Fail(Exception):
    def __init__(self, message: str, pos: int):
        self.message, self.pos = message, pos


@dataclass
class ParsedGrammar:
    """llama.cpp's parser output: ``symbol_ids`` (name -> id) and ``rules[id]`` element lists."""

    symbol_ids: dict[str, int]
    rules: list[list[tuple[int, int]]]


class _Parser:
    def __init__(self, src: bytes, max_elements: int = 1_000_000):
        nul = src.find(b"\0")
        if nul >= 0:
            src = src[:nul]
        self.text = src
        self.s = src + b"\0\0\0\0\0\0\0\0\0\0"
        self.symbol_ids: dict[str, int] = {}
        self.rules: list[list[tuple[int, int]] | None] = []
        self.first_ref: dict[int, int] = {}
        # Element accounting for the max_elements guard: elements in finished rules plus the
        # rule lists still being built (one per open group), so the size a repetition would
        # reach is known before it allocates anything.
        self.max_elements = max_elements
        self.n_done = 0
        self.open: list[list[tuple[int, int]]] = []

    # -- lexical helpers ---------------------------------------------------------------------

    def rest(self, pos: int) -> str:
        r = self.text[pos:].decode("utf-8", "replace")
        return r if len(r) <= 40 else r[:40] + "..."

    def space(self, pos: int, newline_ok: bool) -> int:
        s = self.s
        while True:
            c = s[pos]
            if c == 32 or c == 9:
                pos += 1
            elif c == 35:  # '#'
                while s[pos] and s[pos] != 13 and s[pos] != 10:
                    pos += 1
            elif newline_ok and (c == 13 or c == 10):
                pos += 1
            else:
                return pos

    def _span(self, pos: int, chars, what: str) -> int:
        """End of the non-empty run of ``chars`` at pos (llama.cpp's parse_name / parse_int)."""
        s, start = self.s, pos
        while s[pos] in chars:
            pos += 1
        if pos == start:
            raise _Fail(f"expecting {what} at {self.rest(start)!r}", start)
        return pos

    def name(self, pos: int) -> int:
        return self._span(pos, _WORD, "name")

    def integer(self, pos: int) -> int:
        return self._span(pos, _DIGIT, "integer")

    def hex(self, pos: int, size: int) -> tuple[int, int]:
        s, start, value = self.s, pos, 0
        end = pos + size
        while pos < end and s[pos]:
            d = _HEX.get(s[pos])
            if d is None:
                break
            value = (value << 4) + d
            pos += 1
        if pos != end:
            raise _Fail(f"expecting {size} hex chars at {self.rest(start)!r}", start)
        return value, pos

    def char(self, pos: int) -> tuple[int, int]:
        s = self.s
        c = s[pos]
        if c == 92:  # backslash
            e = s[pos + 1]
            if e == ord("x"):
                return self.hex(pos + 2, 2)
            if e == ord("u"):
                return self.hex(pos + 2, 4)
            if e == ord("U"):
                return self.hex(pos + 2, 8)
            if e in _SIMPLE_ESC:
                return _SIMPLE_ESC[e], pos + 2
            raise _Fail(f"unknown escape at {self.rest(pos)!r}", pos)
        if c:
            n = _LEAD[c >> 4]
            value = c & ((1 << (8 - n)) - 1)
            end, p = pos + n, pos + 1
            while p < end and s[p]:
                value = (value << 6) + (s[p] & 0x3F)
                p += 1
            return value, p
        raise _Fail("unexpected end of input", pos)

    def token(self, pos: int) -> tuple[int, int]:
        s, src = self.s, pos
        if s[pos] != 60:  # '<'
            raise _Fail(f"expecting '<' at {self.rest(pos)!r}", pos)
        pos += 1
        if s[pos] == 91:  # '['
            pos += 1
            end = self.integer(pos)
            tid = int(s[pos:end])
            if tid > _UINT32_MAX:
                raise _Fail(f"parsed token id is too big at {self.rest(pos)!r}", pos)
            pos = end
            if s[pos] != 93:
                raise _Fail(f"expecting ']' at {self.rest(pos)!r}", pos)
            pos += 1
            if s[pos] != 62:
                raise _Fail(f"expecting '>' at {self.rest(pos)!r}", pos)
            return tid, pos + 1
        raise _Fail(
            f"no vocab to parse token at {self.rest(src)!r} (lmtail parses grammars without a tokenizer; "
            "use <[id]> token references)",
            src,
        )

    # -- symbols -----------------------------------------------------------------------------

    def symbol(self, name: str) -> int:
        return self.symbol_ids.setdefault(name, len(self.symbol_ids))

    def generate(self, base: str) -> int:
        nid = len(self.symbol_ids)
        self.symbol_ids[f"{base}_{nid}"] = nid
        return nid

    def add_rule(self, rid: int, rule: list[tuple[int, int]]) -> None:
        if len(self.rules) <= rid:
            self.rules.extend([None] * (rid + 1 - len(self.rules)))
        old = self.rules[rid]
        self.n_done += len(rule) - (len(old) if old is not None else 0)
        self.rules[rid] = rule

    def n_elements(self) -> int:
        return self.n_done + sum(len(r) for r in self.open)

    # -- grammar -----------------------------------------------------------------------------

    def alternates(self, pos: int, rule_name: str, rule_id: int, nested: bool) -> int:
        rule: list[tuple[int, int]] = []
        self.open.append(rule)
        pos = self.sequence(pos, rule_name, rule, nested)
        while self.s[pos] == 124:  # '|'
            rule.append((ALT, 0))
            pos = self.space(pos + 1, True)
            pos = self.sequence(pos, rule_name, rule, nested)
        rule.append((END, 0))
        self.open.pop()
        self.add_rule(rule_id, rule)
        return pos

    def sequence(self, pos: int, rule_name: str, rule: list[tuple[int, int]], nested: bool) -> int:
        s = self.s
        last_sym_start = len(rule)
        n_prev_rules = 1

        def repeat(min_times: int, max_times: int, at: int) -> None:
            nonlocal n_prev_rules
            no_max = max_times == _UINT64_MAX
            if last_sym_start == len(rule):
                raise _Fail(f"expecting preceding item to */+/?/{{ at {self.rest(at)!r}", at)
            prev = rule[last_sym_start:]
            total = 1
            if not no_max and max_times > 0:
                total = max_times
            elif min_times > 0:
                total = min_times
            if n_prev_rules * total > MAX_REPETITION_THRESHOLD:
                raise _Fail(
                    "number of rules that are going to be repeated multiplied by the new repetition exceeds "
                    "sane defaults, please reduce the number of repetitions or rule complexity",
                    at,
                )
            # lmtail's deviation: refuse, before allocating, an expansion past max_elements
            # (llama.cpp expands "<5 KB literal>"{2000} into 10 million elements, or runs out of memory)
            n_prev = len(prev)
            n_opt = 1 if no_max else max_times - min_times
            grow = -n_prev if min_times == 0 else (min_times - 1) * n_prev
            if n_opt > 0:
                grow += n_opt * (n_prev + 2) + (n_opt if no_max else n_opt - 1) + 1
            total = self.n_elements() + grow
            if total > self.max_elements:
                raise _Fail(
                    f"this repetition expands the grammar to {total} elements, over the limit of "
                    f"{self.max_elements} (lmtail refuses what llama.cpp would expand; raise it with "
                    "Grammar.parse(..., max_elements=N))",
                    at,
                )
            if min_times == 0:
                del rule[last_sym_start:]
            else:
                for _ in range(1, min_times):
                    rule.extend(prev)
            last_rec = 0
            for i in range(n_opt):
                rec = list(prev)
                rec_id = self.generate(rule_name)
                if i > 0 or no_max:
                    rec.append((RULE_REF, rec_id if no_max else last_rec))
                rec.append((ALT, 0))
                rec.append((END, 0))
                self.add_rule(rec_id, rec)
                last_rec = rec_id
            if n_opt > 0:
                rule.append((RULE_REF, last_rec))
            n_prev_rules *= total

        while s[pos]:
            c = s[pos]
            if c == 34:  # '"'
                pos += 1
                last_sym_start = len(rule)
                n_prev_rules = 1
                while s[pos] != 34:
                    if not s[pos]:
                        raise _Fail("unexpected end of input", pos)
                    v, pos = self.char(pos)
                    rule.append((CHAR, v))
                pos = self.space(pos + 1, nested)
            elif c == 91:  # '['
                pos += 1
                start_type = CHAR
                if s[pos] == 94:  # '^'
                    pos += 1
                    start_type = CHAR_NOT
                last_sym_start = len(rule)
                n_prev_rules = 1
                while s[pos] != 93:
                    if not s[pos]:
                        raise _Fail("unexpected end of input", pos)
                    v, pos = self.char(pos)
                    rule.append((CHAR_ALT if last_sym_start < len(rule) else start_type, v))
                    if s[pos] == 45 and s[pos + 1] != 93:  # '-' not before ']'
                        if not s[pos + 1]:
                            raise _Fail("unexpected end of input", pos + 1)
                        v, pos = self.char(pos + 1)
                        rule.append((CHAR_RNG_UPPER, v))
                pos = self.space(pos + 1, nested)
            elif c == 60 or c == 33:  # '<' or '!'
                typ = TOKEN
                if c == 33:
                    typ = TOKEN_NOT
                    pos += 1
                tid, end = self.token(pos)
                last_sym_start = len(rule)
                n_prev_rules = 1
                rule.append((typ, tid))
                pos = self.space(end, nested)
            elif c in _WORD:
                end = self.name(pos)
                rid = self.symbol(s[pos:end].decode("ascii"))
                self.first_ref.setdefault(rid, pos)
                pos = self.space(end, nested)
                last_sym_start = len(rule)
                n_prev_rules = 1
                rule.append((RULE_REF, rid))
            elif c == 40:  # '('
                open_pos = pos
                pos = self.space(pos + 1, True)
                n_before = len(self.symbol_ids)
                sub = self.generate(rule_name)
                pos = self.alternates(pos, rule_name, sub, True)
                n_prev_rules = max(1, (len(self.symbol_ids) - n_before) & _UINT32_MAX)
                last_sym_start = len(rule)
                rule.append((RULE_REF, sub))
                if s[pos] != 41:
                    raise _Fail(f"expecting ')' at {self.rest(pos)!r} (group opened at offset {open_pos})", pos)
                pos = self.space(pos + 1, nested)
            elif c == 46:  # '.'
                last_sym_start = len(rule)
                n_prev_rules = 1
                rule.append((CHAR_ANY, 0))
                pos = self.space(pos + 1, nested)
            elif c == 42:  # '*'
                at = pos
                pos = self.space(pos + 1, nested)
                repeat(0, _UINT64_MAX, at)
            elif c == 43:  # '+'
                at = pos
                pos = self.space(pos + 1, nested)
                repeat(1, _UINT64_MAX, at)
            elif c == 63:  # '?'
                at = pos
                pos = self.space(pos + 1, nested)
                repeat(0, 1, at)
            elif c == 123:  # '{'
                at = pos
                pos = self.space(pos + 1, nested)
                if s[pos] not in _DIGIT:
                    raise _Fail(f"expecting an int at {self.rest(pos)!r}", pos)
                end = self.integer(pos)
                min_times = int(s[pos:end])
                if min_times > _UINT64_MAX:
                    raise _Fail(f"stoull: out of range at {self.rest(pos)!r}", pos)
                pos = self.space(end, nested)
                max_times = _UINT64_MAX
                if s[pos] == 125:  # '}'
                    max_times = min_times
                    pos = self.space(pos + 1, nested)
                elif s[pos] == 44:  # ','
                    pos = self.space(pos + 1, nested)
                    if s[pos] in _DIGIT:
                        end = self.integer(pos)
                        max_times = int(s[pos:end])
                        if max_times > _UINT64_MAX:
                            raise _Fail(f"stoull: out of range at {self.rest(pos)!r}", pos)
                        pos = self.space(end, nested)
                    if s[pos] != 125:
                        raise _Fail(f"expecting '}}' at {self.rest(pos)!r}", pos)
                    pos = self.space(pos + 1, nested)
                else:
                    raise _Fail(f"expecting ',' at {self.rest(pos)!r}", pos)
                if min_times > MAX_REPETITION_THRESHOLD:
                    raise _Fail(
                        "number of repetitions exceeds sane defaults, please reduce the number of repetitions "
                        f"(minimum {min_times} > {MAX_REPETITION_THRESHOLD})",
                        at,
                    )
                if max_times != _UINT64_MAX and max_times > MAX_REPETITION_THRESHOLD:
                    max_times = _UINT64_MAX  # llama.cpp: a bound above 2000 silently means unbounded
                if max_times != _UINT64_MAX and max_times < min_times:
                    # llama.cpp computes max - min in uint64 here and loops (practically) forever
                    raise _Fail(f"repetition {{{min_times},{max_times}}}: maximum below minimum", at)
                repeat(min_times, max_times, at)
            else:
                break
        return pos

    def rule(self, pos: int) -> int:
        s = self.s
        end = self.name(pos)
        name = s[pos:end].decode("ascii")
        rid = self.symbol(name)
        pos = self.space(end, False)
        if not (s[pos] == 58 and s[pos + 1] == 58 and s[pos + 2] == 61):
            raise _Fail(f"expecting ::= at {self.rest(pos)!r}", pos)
        pos = self.space(pos + 3, True)
        pos = self.alternates(pos, name, rid, False)
        if s[pos] == 13:
            pos += 2 if s[pos + 1] == 10 else 1
        elif s[pos] == 10:
            pos += 1
        elif s[pos]:
            raise _Fail(f"expecting newline or end at {self.rest(pos)!r}", pos)
        return self.space(pos, True)

    def parse(self) -> None:
        pos = self.space(0, True)
        while self.s[pos]:
            pos = self.rule(pos)
            if self.n_done > self.max_elements:  # a huge text with no repetition to blame
                raise _Fail(
                    f"the grammar has {self.n_done} elements, over the limit of {self.max_elements} "
                    "(raise it with Grammar.parse(..., max_elements=N))",
                    pos,
                )
        names = {v: k for k, v in self.symbol_ids.items()}
        n = len(self.rules)
        for rule in self.rules:
            if rule is None:
                raise _Fail("Undefined rule", len(self.text))
            for typ, val in rule:
                if typ == RULE_REF and (val >= n or self.rules[val] is None):
                    if val in names:
                        raise _Fail(f"Undefined rule identifier '{names[val]}'", self.first_ref.get(val, 0))


def _line_col(text: bytes, pos: int) -> tuple[int, int]:
    before = text[:pos]
    line = before.count(b"\n") + 1
    start = before.rfind(b"\n") + 1
    return line, len(before[start:].decode("utf-8", "replace")) + 1


def _left_recursive_rule(rules: list[list[tuple[int, int]]]) -> int | None:
    """llama.cpp's syntactic left-recursion check; returns the index llama.cpp reports, or None.

    Edges go from a rule to the rule references at the start of each alternative, continuing past
    a reference only while the referenced rule has a literally empty alternative.
    """
    n = len(rules)
    may_be_empty = [False] * n
    for i, rule in enumerate(rules):
        at_start = True
        for typ, _ in rule:
            if typ in (END, ALT):
                if at_start:
                    may_be_empty[i] = True
                    break
                at_start = True
            else:
                at_start = False
    edges: list[list[int]] = []
    for rule in rules:
        out: list[int] = []
        recurse = True
        for typ, val in rule:
            if typ == RULE_REF and recurse:
                out.append(val)
                if not may_be_empty[val]:
                    recurse = False
            elif typ in (END, ALT):
                recurse = True
            else:
                recurse = False
        edges.append(out)
    color = [0] * n  # 0 new, 1 on the path, 2 done (no cycle reachable)
    for root in range(n):
        if color[root]:
            continue
        stack = [(root, 0)]
        color[root] = 1
        while stack:
            node, k = stack[-1]
            if k < len(edges[node]):
                stack[-1] = (node, k + 1)
                nxt = edges[node][k]
                if color[nxt] == 1:
                    return root
                if color[nxt] == 0:
                    color[nxt] = 1
                    stack.append((nxt, 0))
            else:
                color[node] = 2
                stack.pop()
    return None


def parse_gbnf(
    text: str | bytes, root: str = "root", *, check_root: bool = True, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> ParsedGrammar:
    """Parse GBNF exactly as llama.cpp does; raise :class:`GrammarError` where llama.cpp fails.

    ``check_root=False`` stops after the parser proper (llama.cpp's ``llama_grammar_parser::parse``),
    which is what its parser tests exercise; the default also applies the checks of
    ``llama_grammar_init_impl`` (start symbol present, no syntactic left recursion).

    ``max_elements`` (default 1,000,000) bounds the expanded grammar: a repetition that would
    grow the element arrays past it is a :class:`GrammarError` at the repetition's line and
    column, raised before anything is allocated.  This is lmtail's one deviation from llama.cpp,
    which expands such grammars in full (``"<5 KB literal>"{2000}`` is 10 million elements,
    1.5 GB here) or runs out of memory; below the limit the result is llama.cpp's exactly.
    """
    if isinstance(text, str):
        src = text.encode("utf-8", "surrogateescape")
    elif isinstance(text, (bytes, bytearray, memoryview)):
        src = bytes(text)
    else:
        raise ParameterError(f"grammar text must be str or bytes, got {type(text).__name__}")
    if not isinstance(root, str):
        raise ParameterError(f"root must be a str, got {type(root).__name__}")
    if type(max_elements) is not int and not isinstance(max_elements, _np_integer()):
        raise ParameterError(f"max_elements must be an integer, got {type(max_elements).__name__}")
    if max_elements < 1:
        raise ParameterError(f"max_elements must be at least 1, got {max_elements}")
    p = _Parser(src, int(max_elements))
    try:
        p.parse()
    except _Fail as e:
        line, col = _line_col(p.text, e.pos)
        raise GrammarError(e.message, line, col) from None
    except RecursionError:
        raise GrammarError("grammar nested too deeply", *_line_col(p.text, len(p.text))) from None
    rules = [r for r in p.rules if r is not None]
    if len(rules) != len(p.rules):  # unreachable: parse() rejects holes
        raise GrammarError("Undefined rule")
    out = ParsedGrammar(dict(p.symbol_ids), rules)
    if not check_root:
        return out
    if not rules:
        raise GrammarError("the grammar defines no rules (llama.cpp: failed to parse grammar)", 1, 1)
    if root not in p.symbol_ids:
        raise GrammarError(f"grammar does not contain a '{root}' symbol", 1, 1)
    bad = _left_recursive_rule(rules)
    if bad is not None:
        names = {v: k for k, v in p.symbol_ids.items()}
        name = names.get(bad, str(bad))
        line, col = 1, 1
        needle = (name + " ").encode() if "_" not in name else None
        if needle is not None:
            idx = p.text.find(name.encode())
            if idx >= 0:
                line, col = _line_col(p.text, idx)
        raise GrammarError(
            f"unsupported grammar, left recursion detected for nonterminal at index {bad} ({name!r})", line, col
        )
    return out
