"""llama.cpp's lenient UTF-8 decoding of token pieces, and its partial-code-point test.

Mirrors ``decode_utf8(const std::string &, llama_partial_utf8)`` and
``llama_grammar_match_partial_char`` in ``src/llama-grammar.cpp`` (llama-cpp-python 0.3.36).
These are deliberately *not* a standard UTF-8 decoder:

* the lead byte's high nibble alone gives the length (``0x0-0x7`` -> 1, ``0x8-0xB`` -> invalid,
  ``0xC-0xD`` -> 2, ``0xE`` -> 3, ``0xF`` -> 4, so ``F8..FF`` are 4-byte leads);
* continuation bytes inside a piece are not checked, only their low 6 bits are used;
* a pending sequence (from the previous token) must be continued by ``10xxxxxx`` bytes, else the
  whole piece decodes to nothing with the state "invalid" (``n_remain == -1``);
* a bad lead byte anywhere makes the whole piece "no code points, invalid";
* decoding stops at the first NUL byte (C-string semantics).

A state is a pair ``(value, n_remain)``: ``n_remain`` bytes still expected (0: nothing pending,
-1: invalid).
"""

from __future__ import annotations

__all__ = ["decode_piece", "match_partial", "NO_PARTIAL", "lead_length"]

NO_PARTIAL = (0, 0)

# high nibble -> sequence length (0 = invalid lead)
_LOOKUP = (1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4)


def lead_length(b: int) -> int:
    """Sequence length llama.cpp reads from a lead byte's high nibble (0: not a lead byte)."""
    return _LOOKUP[b >> 4]


def decode_piece(piece: bytes, partial: tuple[int, int] = NO_PARTIAL) -> tuple[list[int], tuple[int, int]]:
    """Decode ``piece`` continuing ``partial``; returns ``(code_points, new_partial)``.

    ``code_points`` excludes llama.cpp's terminating 0 but may contain 0 values produced by
    overlong sequences (``C0 80``); an invalid piece returns ``([], (0, -1))``.
    """
    nul = piece.find(b"\0")
    if nul >= 0:
        piece = piece[:nul]
    n = len(piece)
    pos = 0
    value, n_remain = partial
    cps: list[int] = []
    while pos < n and n_remain > 0:
        b = piece[pos]
        if (b >> 6) != 2:
            return [], (0, -1)
        value = (value << 6) + (b & 0x3F)
        pos += 1
        n_remain -= 1
    if partial[1] > 0 and n_remain == 0:
        cps.append(value)
    while pos < n:
        b = piece[pos]
        n_remain = _LOOKUP[b >> 4] - 1
        if n_remain < 0:
            return [], (0, n_remain)
        value = b & ((1 << (7 - n_remain)) - 1)
        pos += 1
        while pos < n and n_remain > 0:
            value = (value << 6) + (piece[pos] & 0x3F)
            pos += 1
            n_remain -= 1
        if n_remain == 0:
            cps.append(value)
    return cps, (value, n_remain)


def match_partial(ranges: tuple[tuple[int, int], ...], negated: bool, any_char: bool, partial: tuple[int, int]) -> bool:
    """Could some completion of ``partial`` satisfy the character set?

    ``ranges`` are the set's inclusive ``(lo, hi)`` items in grammar order (a single char is
    ``(c, c)``).  Like llama.cpp, a negated set passes only when *no* excluded item intersects the
    interval of possible completions (conservative), and ``C0``/``C1`` leads never pass.
    """
    value, n_remain = partial
    if n_remain < 0 or (n_remain == 1 and value < 2):
        return False
    low = (value << (n_remain * 6)) & 0xFFFFFFFF
    high = (low | ((1 << (n_remain * 6)) - 1)) & 0xFFFFFFFF
    if low == 0:
        if n_remain == 2:
            low = 1 << 11
        elif n_remain == 3:
            low = 1 << 16
    if any_char:
        return True
    for lo, hi in ranges:
        if lo <= high and low <= hi:
            return not negated
    return negated
