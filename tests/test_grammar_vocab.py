"""``lmtail.grammar.Vocab``: token pieces and EOG ids identical to llama.cpp's.

For every vocabulary in ``../shared/vocab`` and in the ``models/`` folder of the llama-cpp-python
0.3.36 sdist (SentencePiece, byte-level BPE, BPE with ``▁`` and byte tokens (gemma-4), WordPiece,
Unigram), each token's bytes must equal ``llama_token_to_piece(vocab, t, buf, n, 0, true)`` -- the
piece llama.cpp's grammar sampler matches (its piece cache is built with ``special = true``) --
and the EOG set must equal ``llama_vocab_is_eog``.  Files that are absent skip visibly.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from lmtail.errors import ParameterError
from lmtail.grammar import Vocab
from lmtail.grammar.vocab import TOKEN_NORMAL

from oracle._lib import llama_sdist

SDIST_MODELS = llama_sdist() / "vendor" / "llama.cpp" / "models"
SHARED_VOCAB = Path(__file__).resolve().parents[2] / "shared" / "vocab"


def _vocab_files() -> list[Path]:
    seen: dict[str, Path] = {}
    for d in (SHARED_VOCAB, SDIST_MODELS):
        for p in sorted(d.glob("ggml-vocab-*.gguf")) if d.exists() else []:
            h = hashlib.sha1(p.read_bytes()[:1 << 20] + str(p.stat().st_size).encode()).hexdigest()
            seen.setdefault(h, p)  # the shared files are copies of the sdist's: test each once
    return sorted(seen.values(), key=lambda p: p.name)


FILES = _vocab_files()


def test_vocab_files_present():
    if not FILES:
        pytest.skip(f"no vocabularies found in {SHARED_VOCAB} or {SDIST_MODELS}")
    assert len(FILES) >= 4


@pytest.mark.parametrize("path", FILES, ids=[p.name.removeprefix("ggml-vocab-").removesuffix(".gguf") for p in FILES])
def test_pieces_and_eog_match_llama(path):
    from oracle import grammar as og
    from oracle import vocab as ov

    ov.require()
    ref_pieces, ref_eog = og.pieces_and_eog(path)
    v = Vocab.from_gguf(path)
    assert v.n_vocab == len(ref_pieces)
    bad = [i for i, (a, b) in enumerate(zip(v.pieces, ref_pieces)) if a != b]
    assert not bad, f"{len(bad)} pieces differ, e.g. {[(i, v.pieces[i], ref_pieces[i]) for i in bad[:5]]}"
    assert v.eog_ids == tuple(ref_eog)
    assert v.is_eog.sum() == len(ref_eog)


def test_custom_vocab():
    v = Vocab([b"a", b"", b"\0x", b"</s>"], eog_ids=[3])
    assert v.n_vocab == 4 and v.eog_ids == (3,) and bool(v.is_eog[3])
    assert (v.types == TOKEN_NORMAL).all()
    flat, offs, lens, fval, fnrem, bad, cont, valid = v.tables()
    assert bad.tolist() == [False, True, True, False]
    assert valid.tolist() == [0]
    with pytest.raises(ParameterError):
        Vocab([b"a"], eog_ids=[5])


def test_tables_decode_quirks():
    # continuation bytes unchecked, F8 as a 4-byte lead, a decoded 0 ends the token, partial tail
    v = Vocab([b"\xc3(", b"\xf8\x80\x80\x80", b"\xc0\x80ab", b"a\xe2\x80", b"\x80a"])
    flat, offs, lens, fval, fnrem, bad, cont, valid = v.tables()
    cps = [flat[offs[i] : offs[i] + lens[i]].tolist() for i in range(5)]
    assert cps[0] == [0xE8]
    assert cps[1] == [0x200000]  # F8 is a 4-byte lead; no range check
    assert cps[2] == []  # C0 80 decodes to 0, which ends the token in llama.cpp's mask
    assert cps[3] == [ord("a")] and (fval[3], fnrem[3]) == (0x2 << 6 | 0, 1)
    assert cps[4] == [] and fnrem[4] == -1 and cont.tolist() == [4]
    assert np.array_equal(valid, np.arange(5))
