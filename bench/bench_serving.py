"""lmtail.serving.Batch: per-row cost at B = 64 vs llama.cpp's llama_sampler_apply, and the batch's
wall time vs (B x per-row cost) / threads x 1.2; plus the int32 bitmask fill vs the bool mask.

Per configuration (vocab V, chain, batch B), all in one run:

* ``ll_apply``: llama.cpp (llama-cpp-python 0.3.36 through ctypes, tests/oracle) on one row:
  ``llama_sampler_apply`` of the chain alone (its candidate fill, numpy, not counted; the row
  was just written, so it is read from cache). For the grammar row: llama-server's discipline
  on a rejected first draw, as llama.cpp runs it: chain apply + grammar apply on the winner +
  grammar apply on the whole row + chain apply (the grammar at its start, where nearly every
  token is rejected: the worst case). **The goal's anchor** (issue 16: per-row cost at B = 64
  <= llama.cpp's apply).
* ``ll_fill``: the same, plus the candidate fill that ``llama_sampler_sample`` does before the
  apply ({id = i, logit = logits[i], p = 0}, by lmtail's C loop of the same shape), each step
  from a different row of the same (64, V) arrays lmtail samples: what a llama.cpp engine pays
  per row of a batch (the grammar row: both fills). Reported beside the anchor, not instead.
* ``row``: lmtail's per-row cost, ``Batch(threads=1).sample`` of B rows / B (fill included);
* ``wall``: ``Batch(threads=T).sample`` of B rows; goal ``wall <= B * row / T * 1.2``.

Median over --iters steps; tokens are accepted between steps (outside the timing) except on the
grammar row (kept at its start). The grammar row needs a vocabulary of V tokens: llama-bpe's
(128256) from shared/vocab; other V skip it.

    python bench/bench_serving.py [--vocab 128256 202048] [--batch 1 8 64] [--iters 20] [--threads 2]
    python bench/bench_serving.py --bitmask [--iters 50]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from lmtail.sampling import Chain, common_chain  # noqa: E402
from lmtail.serving import Batch  # noqa: E402

GRAMMAR = ('root ::= "{" ws "\\"" [a-z]{1,8} "\\":" ws ( [0-9]+ | "true" | "\\"" [a-zA-Z ]* "\\"" ) ws "}"\n'
           'ws ::= " "?')
PEN = dict(penalty_last_n=64, penalty_repeat=1.1, penalty_freq=0.1, penalty_present=0.1)
CHAINS = {
    "default": lambda V, s: common_chain(V, seed=s),
    "topk_temp": lambda V, s: Chain([("top_k", 40), ("temp", 0.8), ("dist", s)], V),
    "penalties": lambda V, s: common_chain(V, seed=s, **PEN),
    "grammar": lambda V, s: common_chain(V, seed=s),
}


def _med(ts):
    return statistics.median(ts)


def _oracle_chain(O, name, V, seed):
    if name in ("default", "grammar"):
        return O.OracleCommonChain(V, seed=seed)
    if name == "penalties":
        return O.OracleCommonChain(V, seed=seed, **PEN)
    return O.OracleChain([("top_k", 40), ("temp", 0.8), ("dist", seed)], V)


def llama_apply_time(O, name, V, rows, iters, grammar_sampler=None, with_fill=False) -> float:
    """Median seconds of llama.cpp's llama_sampler_apply for one row of this chain; with_fill:
    plus the candidate fill from the row (rows: a list of rows, each step the next one)."""
    from lmtail import _core

    o = _oracle_chain(O, name, V, 1234)
    buf = o.buf
    ids = np.arange(V, dtype=np.int32)
    ts = []

    def fill(x) -> float:
        if not with_fill:
            buf["id"], buf["logit"], buf["p"] = ids, x, 0.0
            return 0.0
        t0 = time.perf_counter()
        _core.sampling_fill(buf, x)
        return time.perf_counter() - t0

    for it in range(iters + 3):
        x = rows[it % len(rows)]
        dt = fill(x)
        t0 = time.perf_counter()
        off, size, sel, _ = o.apply_raw(buf)
        dt += time.perf_counter() - t0
        tok = int(buf["id"][off + sel])
        if grammar_sampler is not None:
            dt += grammar_sampler.check(tok)
            dt += fill(x)
            dt += grammar_sampler.apply_full(buf)
            t0 = time.perf_counter()
            off, size, sel, _ = o.apply_raw(buf)
            dt += time.perf_counter() - t0
            tok = int(buf["id"][off + sel])
        else:
            o.accept(tok)
        if it >= 3:
            ts.append(dt)
    return _med(ts)


class _LlamaGrammar:
    """llama.cpp's grammar sampler on a vocab-only model (tests/oracle/grammar.py's objects)."""

    def __init__(self, path):
        from oracle.vocab import Vocab as OV

        self.v = OV(os.fspath(path)).__enter__()
        lc = self.lc = self.v._lc
        self.smpl = lc.llama_sampler_init_grammar(self.v._vocab, GRAMMAR.encode(), b"root")
        self.one = np.zeros(1, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])

    def _apply(self, arr) -> float:
        lc = self.lc
        cur = lc.llama_token_data_array(arr.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)), len(arr), -1, False)
        t0 = time.perf_counter()
        lc.llama_sampler_apply(self.smpl, ctypes.byref(cur))
        return time.perf_counter() - t0

    def check(self, tok) -> float:
        self.one["id"], self.one["logit"], self.one["p"] = tok, 1.0, 0.0
        return self._apply(self.one)

    def apply_full(self, buf) -> float:
        return self._apply(buf)


def batch_time(name, V, B, threads, rows, iters, matcher=None) -> float:
    b = Batch(threads=threads)
    for r in range(B):
        b.add(CHAINS[name](V, 1000 + r), matcher() if matcher else None)
    ts = []
    for it in range(iters + 2):
        x = rows[it % len(rows)][:B]
        t0 = time.perf_counter()
        tok = b.sample(x)
        dt = time.perf_counter() - t0
        if matcher is None:
            b.accept(tok)
        if it >= 2:
            ts.append(dt)
    b.close()
    return _med(ts)


def cpu_scaling(threads: int) -> float:
    """Speed-up of T threads over one on C++-only rows (8 in-cache rows, no Python between them):
    how much parallel CPU the machine gives right now (on a shared machine, often far below T)."""
    from lmtail import _core

    try:
        from lmtail.common_sampling import _plan
    except ImportError:  # an lmtail before the batched rows
        return float("nan")
    V = 32768
    x = (np.random.default_rng(0).standard_normal((8 * threads, V)) * 3).astype(np.float32)
    chains = [common_chain(V, seed=i) for i in range(len(x))]
    items = [(r, c._buf, _plan(c)[0], None) for r, c in enumerate(chains)]
    ts: dict = {1: [], threads: []}
    for _ in range(60):
        for t in ts:
            t0 = time.perf_counter()
            _core.sampling_run_rows(x, items, t)
            ts[t].append(time.perf_counter() - t0)
    return _med(ts[1]) / _med(ts[threads])


def serving(a) -> None:
    from oracle import sampling as O
    from oracle._lib import vocab_gguf

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; Batch threads T = {a.threads}; "
          f"median of {a.iters} steps; times in us")
    if a.threads > 1:
        print(f"C++ rows alone, {a.threads} threads vs 1: {cpu_scaling(a.threads):.2f}x (the machine's parallel CPU now)")
    print(f"{'V':>7s} {'chain':10s} {'B':>3s} {'ll_apply':>9s} {'ll_fill':>8s} {'row':>8s} {'row/ll':>7s} "
          f"{'row/llf':>7s} {'wall':>9s} {'goal':>9s} {'wall/goal':>9s}", flush=True)
    bpe = vocab_gguf("llama-bpe")
    for V in a.vocab:
        rng = np.random.default_rng(V)
        Bmax = max(a.batch)
        rows = [(rng.standard_normal((Bmax, V)) * 3).astype(np.float32) for _ in range(3)]
        for name in a.chains:
            matcher = None
            gs = None
            if name == "grammar":
                if bpe is None or V != 128256:
                    print(f"{V:7d} {name:10s}   -  skipped: no {V}-token vocabulary (llama-bpe has 128256)")
                    continue
                from lmtail.grammar import Grammar, GrammarMatcher, Vocab

                voc = Vocab.from_gguf(bpe)
                g = Grammar.parse(GRAMMAR)
                matcher = lambda: GrammarMatcher(g, voc)  # noqa: E731
                gs = _LlamaGrammar(bpe)
            ll = llama_apply_time(O, name, V, [r[0] for r in rows], a.iters, gs)
            # every step a different row of the (Bmax, V) arrays: read from memory, as in a batch
            llf = llama_apply_time(O, name, V, [r[i] for i in range(Bmax) for r in rows], a.iters, gs,
                                   with_fill=True)
            per_row = batch_time(name, V, max(a.batch), 1, rows, a.iters, matcher) / max(a.batch)
            for B in a.batch:
                wall = batch_time(name, V, B, a.threads, rows, a.iters, matcher)
                goal = B * per_row / min(a.threads, B) * 1.2
                print(f"{V:7d} {name:10s} {B:3d} {ll * 1e6:9.0f} {llf * 1e6:8.0f} {per_row * 1e6:8.0f} "
                      f"{per_row / ll:7.2f} {per_row / llf:7.2f} {wall * 1e6:9.0f} {goal * 1e6:9.0f} "
                      f"{wall / goal:9.2f}", flush=True)


def bitmask(a) -> None:
    """fill_bitmask vs mask (bool), cached (the state's mask in the LRU) and computed."""
    from oracle._lib import vocab_gguf

    from lmtail.grammar import Grammar, GrammarMatcher, Vocab, apply_bitmask, bitmask_words

    bpe = vocab_gguf("llama-bpe")
    if bpe is None:
        print("skipped: ggml-vocab-llama-bpe.gguf not found")
        return
    base = Vocab.from_gguf(bpe)
    vocabs = {128256: base}
    # 262144 tokens: llama-bpe's pieces repeated (real pieces, a real mask workload), EOG kept
    p = list(base.pieces)
    vocabs[262144] = Vocab((p * 3)[:262144], eog_ids=base.eog_ids)
    g = Grammar.parse(GRAMMAR)
    doc = b'{ "abc": "Hello World" }'
    print(f"median of {a.iters}; times in us per mask")
    print(f"{'V':>7s} {'state':>14s} {'bool':>8s} {'bitmask':>8s} {'ratio':>6s} {'bool_new':>9s} {'bits_new':>9s} "
          f"{'ratio':>6s} {'apply_B1':>8s}")
    for V, v in vocabs.items():
        m = GrammarMatcher(g, v)
        # positions: the start, inside the key, inside a string value
        prefixes = [b"", b'{"ab', b'{"abc": "Hello']
        toks_for = {}
        for pre in prefixes:
            mm = GrammarMatcher(g, v)
            for ch in pre:
                mm.accept_bytes(bytes([ch]))
            toks_for[pre] = mm.snapshot()
        out_b = np.empty(V, bool)
        out_w = np.zeros((1, bitmask_words(V)), np.int32)
        x = np.random.default_rng(0).standard_normal(V).astype(np.float32)
        for pre in prefixes:
            m.restore(toks_for[pre])
            m.mask(out_b)  # warm the cache
            tb, tw, nb, nw, ta = [], [], [], [], []
            for _ in range(a.iters):
                t0 = time.perf_counter(); m.mask(out_b); tb.append(time.perf_counter() - t0)  # noqa: E702
                t0 = time.perf_counter(); m.fill_bitmask(out_w, 0); tw.append(time.perf_counter() - t0)  # noqa: E702
                y = x.copy()
                t0 = time.perf_counter(); apply_bitmask(y, out_w[0]); ta.append(time.perf_counter() - t0)  # noqa: E702
            for _ in range(max(3, a.iters // 10)):
                m._masks.clear()
                t0 = time.perf_counter(); m.mask(out_b); nb.append(time.perf_counter() - t0)  # noqa: E702
                m._masks.clear()
                t0 = time.perf_counter(); m.fill_bitmask(out_w, 0); nw.append(time.perf_counter() - t0)  # noqa: E702
            b, w, b2, w2 = (_med(t) * 1e6 for t in (tb, tw, nb, nw))
            print(f"{V:7d} {pre.decode()[:14]!s:>14s} {b:8.1f} {w:8.1f} {w / b:6.2f} {b2:9.0f} {w2:9.0f} {w2 / b2:6.2f} "
                  f"{_med(ta) * 1e6:8.1f}", flush=True)
    del doc
    # apply_bitmask at B = 64
    for V in (128256, 262144):
        x = np.random.default_rng(1).standard_normal((64, V)).astype(np.float32)
        w = np.random.default_rng(2).integers(-2 ** 31, 2 ** 31, (64, bitmask_words(V)), dtype=np.int64).astype(np.int32)
        for T in (1, a.threads):
            ts = []
            for _ in range(a.iters):
                y = x.copy()
                t0 = time.perf_counter(); apply_bitmask(y, w, threads=T); ts.append(time.perf_counter() - t0)  # noqa: E702
            print(f"apply_bitmask B=64 V={V} threads={T}: {_med(ts) * 1e6:.0f} us ({_med(ts) * 1e6 / 64:.1f} us/row)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, nargs="*", default=[128256, 202048])
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8, 64])
    ap.add_argument("--chains", nargs="*", default=list(CHAINS))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--bitmask", action="store_true", help="the bitmask fill / apply bench instead")
    a = ap.parse_args(argv)
    if a.bitmask:
        bitmask(a)
    else:
        serving(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
