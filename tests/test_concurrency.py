"""Concurrency: one Head, one Chain per thread, one shared Grammar, N threads at once.

Every result a thread gets is checked against a reference computed single-threaded before the
threads start. Thread switches are forced often (``sys.setswitchinterval``) so that a returned
view another thread can refill, or shared scratch state, shows up as a wrong result.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import lmtail
from lmtail.grammar import Grammar, GrammarMatcher, Vocab
from lmtail.sampling import common_chain

N_THREADS = 4
ROWS, COLS = 3000, 512


@pytest.fixture(autouse=True)
def _fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _run_threads(fn, n=N_THREADS):
    """Run fn(i) on n threads released together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i):
        try:
            barrier.wait()
            fn(i)
        except BaseException as e:  # noqa: BLE001 - reported below with its thread
            errors.append(e)

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


@pytest.fixture(scope="module")
def head():
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((ROWS, COLS)) * 0.05).astype(np.float32)
    gamma = (1 + 0.1 * rng.standard_normal(COLS)).astype(np.float32)
    return lmtail.Head(lmtail.quantize_q5_k(w), gamma, logit_scale=0.7, softcap=15.0, threads=2)


def _hidden(i: int, j: int, T: int = 1) -> np.ndarray:
    return np.random.default_rng(1000 * i + j).standard_normal((T, COLS)).astype(np.float32)


ITERS = 60


def test_shared_head_every_route(head):
    # References, single-threaded: logits, greedy, top-k and row(t) of every input.
    ref = {}
    for i in range(N_THREADS):
        for j in range(ITERS):
            h = _hidden(i, j, T=1 + (i + j) % 3)
            ref[i, j] = (np.array(head.logits(h)), head.greedy(h).copy(), [a.copy() for a in head.topk(h, 5)])

    def work(i):
        for j in range(ITERS):
            h = _hidden(i, j, T=1 + (i + j) % 3)
            logits, greedy, (ids, vals) = ref[i, j]
            kind = j % 4
            if kind == 0:
                got = head.logits(h)
                threading.Event().wait(0)  # let another thread compute before reading
                np.testing.assert_array_equal(got, logits, err_msg=f"logits, thread {i} call {j}")
            elif kind == 1:
                np.testing.assert_array_equal(head.greedy(h), greedy, err_msg=f"greedy, thread {i} call {j}")
            elif kind == 2:
                gi, gv = head.topk(h, 5)
                np.testing.assert_array_equal(gi, ids, err_msg=f"topk ids, thread {i} call {j}")
                np.testing.assert_array_equal(gv, vals, err_msg=f"topk values, thread {i} call {j}")
            else:
                head.topk(h, 5)
                t = logits.shape[0] - 1
                row = head.row(t)  # the calling thread's own last compute
                threading.Event().wait(0)
                np.testing.assert_array_equal(row, logits[t], err_msg=f"row({t}), thread {i} call {j}")

    _run_threads(work)


def test_one_chain_per_thread_shared_logits(head):
    n_steps = 40
    hs = [_hidden(99, j) for j in range(n_steps)]
    logits = [np.array(head.logits(h)[0]) for h in hs]

    def sequence(seed):
        chain = common_chain(ROWS, seed=seed, temp=0.9, top_k=50, penalty_last_n=16, penalty_repeat=1.2)
        out = []
        for lg in logits:
            tok = chain.sample(lg)
            chain.accept(tok)
            out.append(tok)
        return out, chain.snapshot()

    ref = {i: sequence(100 + i) for i in range(N_THREADS)}
    got: dict[int, tuple] = {}

    def work(i):
        got[i] = sequence(100 + i)

    _run_threads(work)
    for i in range(N_THREADS):
        assert got[i][0] == ref[i][0], f"thread {i}: token sequence differs"
        assert got[i][1] == ref[i][1], f"thread {i}: chain state differs"


def _vocab() -> Vocab:
    pieces = [bytes([c]) for c in range(0x20, 0x7F)] + [b'{"', b'":', b"true", b"false", b"null", b", ", b"12"]
    return Vocab(pieces + [b"</s>"], eog_ids=[len(pieces)], name="concurrency")


def test_shared_grammar_one_matcher_per_thread():
    vocab = _vocab()
    grammar = Grammar.parse('root ::= "{" pair ("," " "? pair)* "}"\npair ::= "\\"" [a-z]+ "\\":" ("true" | "false" | [0-9]+)\n')
    streams = []
    for i in range(N_THREADS):
        rng = np.random.default_rng(i)
        streams.append([int(t) for t in rng.integers(0, len(vocab.pieces), 60)])

    def run(stream):
        m = GrammarMatcher(grammar, vocab)
        masks, accepted = [], []
        for tok in stream:
            masks.append(m.mask().copy())
            if m.allows(tok):
                m.accept(tok)
                accepted.append(tok)
        return masks, accepted

    ref = [run(s) for s in streams]
    got: dict[int, tuple] = {}

    def work(i):
        got[i] = run(streams[i])

    _run_threads(work)
    for i in range(N_THREADS):
        assert got[i][1] == ref[i][1], f"thread {i}: accepted tokens differ"
        for k, (a, b) in enumerate(zip(got[i][0], ref[i][0])):
            np.testing.assert_array_equal(a, b, err_msg=f"thread {i}: mask {k} differs")
