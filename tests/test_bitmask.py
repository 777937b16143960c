"""Grammar masks in the int32 bitmask layout of XGrammar / llguidance, and apply_bitmask.

Layout (xgrammar's ``allocate_token_bitmask`` / ``apply_token_bitmask_inplace``): (B, ceil(V/32))
int32, token i allowed iff bit i % 32 of word i // 32 is set.  The masks themselves are checked
against llama.cpp in tests/test_grammar_oracle.py and tests/test_grammar_lazy.py (fill_bitmask on
every oracle step); here: the layout by hand, apply_bitmask, and every bad input.
"""

from __future__ import annotations

import numpy as np
import pytest

from lmtail.errors import DTypeError, ParameterError, ShapeError, UnsupportedError
from lmtail.grammar import (Grammar, GrammarMatcher, LazyGrammarMatcher, Vocab, allocate_bitmask, apply_bitmask,
                            bitmask_words, fill_bitmasks)


def _bits(words: np.ndarray, V: int) -> np.ndarray:
    """Reference decoding, one bit at a time: bit (i % 32) of word (i // 32)."""
    w = words.astype(np.int64) & 0xFFFFFFFF
    return np.array([(int(w[..., i // 32]) >> (i % 32)) & 1 for i in range(V)], bool)


def _pack(allowed: np.ndarray) -> np.ndarray:
    """Reference packing of one row, one bit at a time."""
    out = [0] * bitmask_words(allowed.shape[0])
    for i in np.flatnonzero(allowed):
        out[i // 32] |= 1 << (i % 32)
    return np.array(out, np.uint32).view(np.int32)


def _tiny_vocab(n: int = 70):
    pieces = [b"a", b"b", b"{", b"}", b"ab"] + [bytes([0x61 + (i % 26)]) * (2 + i % 3) for i in range(n - 6)] + [b""]
    return Vocab(pieces, eog_ids=(n - 1,))


def test_bitmask_layout_by_hand():
    v = _tiny_vocab()
    g = Grammar.parse('root ::= "a" [b]*')
    m = GrammarMatcher(g, v)
    want = m.mask()
    bm = allocate_bitmask(3, v.n_vocab)
    assert bm.shape == (3, 3) and bm.dtype == np.int32
    bm[:] = -1
    m.fill_bitmask(bm, 2)
    assert np.array_equal(_bits(bm[2], v.n_vocab), want)
    assert (bm[:2] == -1).all()
    assert not _bits(bm[2], 32 * bm.shape[1])[v.n_vocab:].any()  # bits past V are written 0
    one = np.zeros(3, np.int32)
    m.fill_bitmask(one)
    assert np.array_equal(one, bm[2]) and np.array_equal(one, _pack(want))
    m.accept(0)  # "a"
    m.fill_bitmask(bm, -1)  # negative rows index from the end, as numpy
    assert np.array_equal(_bits(bm[2], v.n_vocab), m.mask()) and m.mask()[1] and not m.mask()[0]


def test_lazy_fill_bitmask_allows_everything_until_the_trigger():
    v = _tiny_vocab()
    lz = LazyGrammarMatcher(Grammar.parse('root ::= "{" [ab]* "}"'), v, trigger_tokens=[2])
    bm = np.zeros(bitmask_words(v.n_vocab), np.int32)
    lz.fill_bitmask(bm)
    assert _bits(bm, v.n_vocab).all() and np.array_equal(_bits(bm, v.n_vocab), lz.mask())
    lz.accept(2)
    lz.fill_bitmask(bm)
    assert np.array_equal(_bits(bm, v.n_vocab), lz.mask()) and not lz.mask().all()


def test_fill_bitmasks_one_row_per_matcher():
    v = _tiny_vocab()
    g = Grammar.parse('root ::= "a" [b]*')
    ms = [GrammarMatcher(g, v), None, GrammarMatcher(g, v)]
    ms[2].accept(0)
    out = fill_bitmasks(ms, allocate_bitmask(3, v.n_vocab))
    assert np.array_equal(_bits(out[0], v.n_vocab), ms[0].mask())
    assert _bits(out[1], v.n_vocab).all()
    assert np.array_equal(_bits(out[2], v.n_vocab), ms[2].mask())
    with pytest.raises(ShapeError):
        fill_bitmasks(ms, allocate_bitmask(2, v.n_vocab))


def test_fill_bitmask_bad_outputs():
    v = _tiny_vocab()
    m = GrammarMatcher(Grammar.parse('root ::= "a"'), v)
    W = bitmask_words(v.n_vocab)
    with pytest.raises(DTypeError):
        m.fill_bitmask(np.zeros(W, np.uint32))
    with pytest.raises(DTypeError):
        m.fill_bitmask(np.zeros(W, np.int64))
    with pytest.raises(DTypeError):
        m.fill_bitmask(np.zeros(W, ">i4"))
    with pytest.raises(ShapeError):
        m.fill_bitmask(np.zeros(W + 1, np.int32))
    with pytest.raises(ShapeError):
        m.fill_bitmask(np.zeros((2, W, 1), np.int32))
    with pytest.raises(ShapeError):
        m.fill_bitmask(np.zeros((2, 2 * W), np.int32)[:, ::2])
    ro = np.zeros(W, np.int32)
    ro.flags.writeable = False
    with pytest.raises(ParameterError, match="read-only"):
        m.fill_bitmask(ro)
    for row in (2, -3, 1.0, True):
        with pytest.raises(ParameterError):
            m.fill_bitmask(np.zeros((2, W), np.int32), row)
    with pytest.raises(DTypeError):
        m.fill_bitmask([0] * W)


@pytest.mark.parametrize("V", [1, 31, 32, 33, 1000, 4096])
def test_apply_bitmask_matches_the_bool_mask(V):
    rng = np.random.default_rng(V)
    B = 3
    allowed = rng.random((B, V)) < 0.3
    bm = np.packbits(allowed, axis=1, bitorder="little")
    words = np.zeros((B, bitmask_words(V) * 4), np.uint8)
    words[:, : bm.shape[1]] = bm
    words = words.view("<i4").astype(np.int32)
    # bits past V are ignored: set them all
    if V % 32:
        words[:, -1] |= np.int32(np.uint32((0xFFFFFFFF << (V % 32)) & 0xFFFFFFFF).view(np.int32))
    x = rng.standard_normal((B, V)).astype(np.float32)
    want = np.where(allowed, x, np.float32(-np.inf))
    y = x.copy()
    apply_bitmask(y, words)
    assert np.array_equal(y, want)
    # 1-D row with a 1-D or (1, W) mask, and a strided (non-contiguous) row written in place
    for mask in (words[1], words[1:2]):
        r = x[1].copy()
        apply_bitmask(r, mask)
        assert np.array_equal(r, want[1])
    wide = np.zeros((B, 2 * V), np.float32)
    wide[:, ::2] = x
    apply_bitmask(wide[:, ::2], words)
    assert np.array_equal(wide[:, ::2], want)
    # a DLPack producer's memory is written through
    z = x.copy()
    apply_bitmask(np.from_dlpack(z), words)
    assert np.array_equal(z, want)


def test_apply_bitmask_bad_inputs():
    V = 100
    W = bitmask_words(V)
    x = np.zeros((2, V), np.float32)
    m = np.zeros((2, W), np.int32)
    with pytest.raises(DTypeError):
        apply_bitmask(x.astype(np.float64), m)
    with pytest.raises(DTypeError):
        apply_bitmask(x, m.astype(np.uint32))
    with pytest.raises(DTypeError):
        apply_bitmask(x, m.astype(np.int64))
    with pytest.raises(ShapeError, match="ceil"):
        apply_bitmask(x, np.zeros((2, W + 1), np.int32))
    with pytest.raises(ShapeError):
        apply_bitmask(x, np.zeros((3, W), np.int32))
    with pytest.raises(ShapeError):
        apply_bitmask(x[0], np.zeros((2, W), np.int32))
    with pytest.raises(ShapeError):
        apply_bitmask(np.zeros((2, 2, V), np.float32), m)
    ro = x.copy()
    ro.flags.writeable = False
    with pytest.raises(ParameterError, match="read-only"):
        apply_bitmask(ro, m)
    with pytest.raises(DTypeError):
        apply_bitmask(x.tolist(), m)

    class Cuda:
        def __dlpack__(self, **kw):  # pragma: no cover - the device is checked first
            raise AssertionError

        def __dlpack_device__(self):
            return (2, 1)

    with pytest.raises(UnsupportedError, match="cuda:1"):
        apply_bitmask(Cuda(), m)
    x[:] = 1.0
    apply_bitmask(x, m)  # an all-zero mask disallows everything
    assert np.isneginf(x).all()
