#!/usr/bin/env python3
"""GBNF grammar engine: lmtail vs llama.cpp's grammar sampler, timed in the same run.

A JSON document (an object holding a list of similar records, as a model would produce) is
tokenized by llama.cpp for each vocabulary; both engines walk the same token stream with
``grammars/json.gbnf``.  Reported per vocabulary:

* compile: ``Grammar.parse(json.gbnf)`` vs ``llama_sampler_init_grammar`` (median);
* check: is the sampled token allowed?  lmtail ``GrammarMatcher.allows(t)`` in a fresh grammar
  (every parser state visited for the first time: nothing memoised yet) vs ``llama_sampler_apply``
  on a one-element candidate array (llama-server's check of the sampled token);
* full mask (what a rejection costs): lmtail ``mask()`` along the stream with a fresh grammar and
  its per-state mask cache (states that repeat in the document hit the cache; first visits
  compute), and with the per-state cache cleared before every step (the split trees -- numpy
  work cached per set signature -- still fill up along the stream, as they would in a server),
  plus the very first mask of a fresh grammar; vs ``llama_sampler_apply`` over the vocabulary.

Goals (issue 5): check <= 20 us median; full mask <= 1 ms median at 128k and <= 2 ms at 152k;
compiling json.gbnf <= 5 ms.

    python bench/bench_grammar.py                 # gpt-2, llama-bpe, qwen2 (where present)
    python bench/bench_grammar.py --vocab qwen2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from oracle._lib import llama_sdist  # noqa: E402
from oracle._lib import vocab_gguf as _path  # noqa: E402

SDIST = llama_sdist() / "vendor" / "llama.cpp"

RECORDS = [
    {"id": i, "name": n, "score": s, "tags": t, "active": a, "note": None}
    for i, (n, s, t, a) in enumerate([
        ("alpha", 0.5, ["x", "y"], True), ("beta", 12.25, [], False), ("gamma", -3, ["long tag"], True),
        ("delta", 1e3, ["a", "b", "c"], False), ("epsilon", 7, ["é"], True), ("zeta", 0, ["日本"], True),
        ("eta", 42.5, ["q"], False), ("theta", -0.125, ["r", "s"], True),
    ])
]  # fmt: skip
DOC = json.dumps({"results": RECORDS, "count": len(RECORDS), "ok": True}, ensure_ascii=False, indent=1)




def _stats(xs, scale=1e3):
    a = np.asarray(xs) * scale
    return {"median": float(np.median(a)), "mean": float(a.mean()), "p90": float(np.percentile(a, 90)), "max": float(a.max()), "n": int(a.size)}


def bench(name: str, grammar_src: str) -> dict:
    from oracle import grammar as og

    from lmtail.grammar import Grammar, GrammarMatcher, Vocab

    path = _path(name)
    toks, l_init, l_check, l_full = og.time_stream(path, grammar_src, DOC)
    t0 = time.perf_counter()
    v = Vocab.from_gguf(path)
    t_vocab = time.perf_counter() - t0
    comp = []
    for _ in range(50):
        t0 = time.perf_counter()
        Grammar.parse(grammar_src)
        comp.append(time.perf_counter() - t0)
    GrammarMatcher(Grammar.parse(grammar_src), v)  # builds the vocabulary's token table once
    # check (fresh grammar: every state is new)
    g = Grammar.parse(grammar_src)
    m = GrammarMatcher(g, v)
    check = []
    for t in toks:
        t0 = time.perf_counter()
        ok = m.allows(t)
        check.append(time.perf_counter() - t0)
        assert ok
        m.accept(t)
    # full mask with the per-state cache (fresh grammar), and cold (cache cleared every step)
    g = Grammar.parse(grammar_src)
    m = GrammarMatcher(g, v)
    out = np.empty(v.n_vocab, bool)
    full = []
    for t in toks:
        t0 = time.perf_counter()
        m.mask(out)
        full.append(time.perf_counter() - t0)
        m.accept(t)
    g = Grammar.parse(grammar_src)
    m = GrammarMatcher(g, v)
    t0 = time.perf_counter()
    m.mask(out)
    ttfm = time.perf_counter() - t0
    m._masks.clear()
    cold = []
    for t in toks:
        m._masks.clear()
        t0 = time.perf_counter()
        m.mask(out)
        cold.append(time.perf_counter() - t0)
        m.accept(t)
    return {
        "vocab": name, "n_vocab": v.n_vocab, "tokens": len(toks), "lmtail_vocab_load_s": t_vocab,
        "compile_ms": {"lmtail": _stats(comp), "llama.cpp": _stats(l_init)},
        "check_us": {"lmtail": _stats(check, 1e6), "llama.cpp": _stats(l_check, 1e6)},
        "full_mask_ms": {"lmtail": _stats(full), "lmtail_no_state_cache": _stats(cold), "llama.cpp": _stats(l_full)},
        "states": g.program.n_states, "first_mask_ms": ttfm * 1e3,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", action="append", help="gpt-2, llama-bpe, qwen2, ... (repeatable)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    src = (SDIST / "grammars" / "json.gbnf").read_text(encoding="utf-8")
    names = args.vocab or ["gpt-2", "llama-bpe", "qwen2"]
    results = []
    for n in names:
        if _path(n) is None:
            print(f"skip {n}: ggml-vocab-{n}.gguf not found")
            continue
        r = bench(n, src)
        results.append(r)
        c, k, f = r["compile_ms"], r["check_us"], r["full_mask_ms"]
        print(f"{n} (n_vocab {r['n_vocab']}, {r['tokens']} tokens, {r['states']} parser states)")
        print(f"  compile json.gbnf   lmtail {c['lmtail']['median']:.2f} ms   llama.cpp {c['llama.cpp']['median']:.3f} ms")
        print(f"  check sampled token lmtail median {k['lmtail']['median']:.1f} us (mean {k['lmtail']['mean']:.1f}, p90 "
              f"{k['lmtail']['p90']:.1f})   llama.cpp median {k['llama.cpp']['median']:.1f} us")
        print(f"  full mask           lmtail median {f['lmtail']['median']:.2f} ms (mean {f['lmtail']['mean']:.2f}, p90 "
              f"{f['lmtail']['p90']:.2f}, max {f['lmtail']['max']:.1f})   no state cache: median "
              f"{f['lmtail_no_state_cache']['median']:.2f} ms (mean {f['lmtail_no_state_cache']['mean']:.2f}, "
              f"max {f['lmtail_no_state_cache']['max']:.1f})   first mask of a fresh grammar {r['first_mask_ms']:.1f} ms"
              f"   llama.cpp median {f['llama.cpp']['median']:.2f} ms (mean "
              f"{f['llama.cpp']['mean']:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
