"""Differential tests against llama.cpp's grammar sampler: full masks at every step.

For the grammars llama.cpp ships (``grammars/*.gbnf``) on real vocabularies (gpt-2, llama-spm,
llama-bpe, qwen2), llama.cpp (llama-cpp-python 0.3.36 through ctypes, in a forked child) walks
token streams -- a sample document tokenized by llama.cpp and forced while the grammar allows it,
then random allowed tokens (short ones for structure, long ones for multi-code-point and partial
UTF-8 tails) -- recording its full mask (``llama_sampler_apply`` over the whole vocabulary)
before every token.  lmtail replays the same tokens and must produce identical masks and agree
on every sampled token.  The big vocabularies get a sample of the grammars to bound the runtime;
``LMTAIL_GRAMMAR_ALL_VOCABS=1`` adds gemma-4 (BPE with ``▁`` and byte tokens), command-r,
nomic-bert-moe (Unigram), bert-bge (WordPiece), phi-3, deepseek-llm, qwen35 and falcon.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

from lmtail.grammar import Grammar, GrammarMatcher, Vocab

from oracle._lib import SHARED_VOCAB, llama_sdist
from oracle._lib import vocab_gguf as _path

SDIST = llama_sdist() / "vendor" / "llama.cpp"

DOCS = {
    "json": '{"name": "lmtail", "tags": ["a", "b\\u00e9\\n"], "n": -12.5e+3, "ok": true, "x": null, '
            '"nested": {"k": [1, 2, {}]}, "jp": "日本語"}',
    "json_arr": '[\n{"a": 1, "b": [true, false]},\n"x y",\n-0.5\n]',
    "arithmetic": "(1 + 2) * 3 - 4 / (5 - 6) * x\n",
    "c": "int main(int argc) {\n  int x = 3;\n  return x * 2 + argc;\n}\n",
    "chess": "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n",
    "japanese": "こんにちは、世界。日本語のテキストです。",
    "list": "- apple\n- banana é\n- cherry 🍒\n",
    "english": "Hello, world! This is a test.\nNew line with 123 digits.",
}  # fmt: skip

# grammars written here: token references (gpt-2 ids: 262 " the", 13 ".", 11 ","), negated classes,
# partial-UTF-8-sensitive sets, nullable rules
CUSTOM = {
    "tokref": 'root ::= ( [a-zA-Z ]+ <[262]> | !<[13]> [a-z]* ) ( "," | <[11]> ) [^.]* "."',
    "utf8-sets": 'root ::= ( [^é日] | "é" [a-z] | [\u3040-\u30ff]+ | "日本" )* "\n"',
    "nullable": 'root ::= a b? c "!"\na ::= "x"+ | "y"*\nb ::= "" | "b"\nc ::= [0-9]* | ""',
}
DOCS.update({"tokref": "Hello the world, and more.", "utf8-sets": "aébこんにちは日本x\n", "nullable": "xyy!"})

PLAN = {  # vocabulary -> (grammars, random steps per stream, seeds)
    "gpt-2": (list(DOCS), 12, (1, 2)),
    "llama-spm": (list(DOCS), 10, (3,)),  # its "tokref" ids mean other tokens: still a valid grammar
    "llama-bpe": (["json", "c", "japanese", "list"], 8, (4,)),
    "qwen2": (["json", "arithmetic", "chess", "english"], 8, (5,)),
}


if os.environ.get("LMTAIL_GRAMMAR_ALL_VOCABS"):  # every other vocabulary type in the sdist (~2 min more)
    for _n in ("gemma-4", "command-r", "nomic-bert-moe", "bert-bge", "phi-3", "deepseek-llm", "qwen35", "falcon"):
        PLAN[_n] = (["json", "japanese", "list", "c"], 6, (9,))




def _grammar(name: str) -> str | None:
    if name in CUSTOM:
        return CUSTOM[name]
    p = SDIST / "grammars" / f"{name}.gbnf"
    return p.read_text(encoding="utf-8") if p.exists() else None


@functools.lru_cache(maxsize=None)
def _vocab(name: str) -> Vocab:
    return Vocab.from_gguf(_path(name))


@functools.lru_cache(maxsize=None)
def _oracle_runs(name: str):
    from oracle import grammar as og

    grammars, n_random, seeds = PLAN[name]
    jobs = []
    for g in grammars:
        src = _grammar(g)
        if src is not None:
            jobs.append((src, "root", [(DOCS[g], n_random, s) for s in seeds]))
    runs = og.mask_streams(_path(name), jobs)
    names = [g for g in grammars if _grammar(g) is not None]
    return dict(zip(names, runs))


CASES = [(v, g) for v, (gs, _, _) in PLAN.items() for g in gs]


@pytest.mark.parametrize("vocab,grammar", CASES, ids=[f"{v}-{g}" for v, g in CASES])
def test_masks_match_llama(vocab, grammar):
    from oracle import vocab as ov

    ov.require()
    if _path(vocab) is None:
        pytest.skip(f"ggml-vocab-{vocab}.gguf not found in {SHARED_VOCAB} or {SDIST / 'models'}")
    if _grammar(grammar) is None:
        pytest.skip(f"{grammar}.gbnf not found in {SDIST / 'grammars'}")
    v = _vocab(vocab)
    runs = _oracle_runs(vocab)[grammar]
    g = Grammar.parse(_grammar(grammar))
    n_masks = 0
    for toks, masks in runs:
        m = GrammarMatcher(g, v)
        out = np.empty(v.n_vocab, bool)
        for i, packed in enumerate(masks):
            want = np.unpackbits(packed)[: v.n_vocab].astype(bool)
            got = m.mask(out)
            bad = np.flatnonzero(got != want)
            assert not bad.size, (
                f"step {i} after {[v.pieces[t] for t in toks[:i]]!r}: {bad.size} tokens differ, e.g. "
                f"{[(int(t), v.pieces[t], bool(want[t])) for t in bad[:6]]}"
            )
            # the int32 bitmask engines use (XGrammar / llguidance layout) holds the same set
            bm = np.full((2, (v.n_vocab + 31) // 32), 0x5A5A5A5A, np.int32)
            m.fill_bitmask(bm, 1)
            assert (bm[0] == 0x5A5A5A5A).all()
            word_bits = (bm[1][:, None] >> np.arange(32)) & 1  # bit i % 32 of word i // 32
            assert np.array_equal(word_bits.ravel()[: v.n_vocab].astype(bool), want), f"bitmask at step {i}"
            assert not word_bits.ravel()[v.n_vocab:].any()
            n_masks += 1
            if i < len(toks):
                assert m.allows(toks[i])
                m.accept(toks[i])
        assert len(toks) >= 3
    assert n_masks >= 4
