"""lmtail.common_sampling.common_sample_rows (the batched entry behind Batch.sample): every row
exactly its own common_sample call -- the same token, the same RNG streams (snapshots), the same
chain.last -- for chains the C++ rows run whole, in part (a Python tail) or not at all, with
grammar rows (first draw rejected or not), any thread count, rows joining and leaving.
"""

from __future__ import annotations

import numpy as np
import pytest

from lmtail.common_sampling import common_sample, common_sample_rows
from lmtail.errors import DTypeError, ParameterError, ShapeError
from lmtail.sampling import Chain, SamplingError, common_chain
from lmtail.serving import Batch

from oracle._lib import vocab_gguf as _path

V = 3000
PEN = dict(penalty_last_n=16, penalty_repeat=1.3, penalty_freq=0.2, penalty_present=0.1)

# name -> builder(V, seed): chains the C++ rows run whole, partly (then Python), or hand over
SPECS = {
    "default": lambda V, s: common_chain(V, seed=s),
    "penalties": lambda V, s: common_chain(V, seed=s, **PEN),
    "topk_temp": lambda V, s: Chain([("top_k", 40), ("temp", 0.8), ("dist", s)], V),
    "bias_pen": lambda V, s: common_chain(V, seed=s, logit_bias={3: 5.0, 7: -np.inf, V + 5: 1.0, 0: 2.5}, **PEN),
    "bias_twice": lambda V, s: Chain([("logit_bias", [(4, 1.5), (4, 2.0), (9, -1.0)]), ("top_k", 10), ("dist", s)], V),
    "topk_big": lambda V, s: Chain([("penalties", 8, 1.2, 0.0, 0.0), ("top_k", 300), ("top_p", 0.9), ("dist", s)], V),
    "topk_big_plain": lambda V, s: Chain([("top_k", 200), ("min_p", 0.1), ("dist", s)], V),
    "min_p_first": lambda V, s: Chain([("min_p", 0.05), ("temp", 0.7), ("dist", s)], V),
    "temp_first": lambda V, s: Chain([("temp", 0.5), ("top_k", 20), ("dist", s)], V),
    "top_p_first": lambda V, s: Chain([("top_p", 0.8), ("dist", s)], V),
    "typical": lambda V, s: Chain([("top_k", 60), ("typical", 0.9), ("dist", s)], V),
    "dynatemp": lambda V, s: common_chain(V, seed=s, dynatemp_range=0.5, top_n_sigma=1.5),
    "temp0": lambda V, s: common_chain(V, seed=s, temp=0.0),
    "greedy": lambda V, s: Chain([("greedy",)], V),
    "topk_greedy": lambda V, s: Chain([("top_k", 1), ("greedy",)], V),
    "xtc": lambda V, s: Chain([("top_k", 50), ("xtc", 0.5, 0.1, 1, s), ("temp", 1.2), ("dist", s)], V),
    "mirostat": lambda V, s: common_chain(V, seed=s, mirostat=2),
    "mirostat1": lambda V, s: common_chain(V, seed=s, mirostat=1),
    "adaptive": lambda V, s: common_chain(V, seed=s, samplers=["top_k", "adaptive_p"], adaptive_target=0.3),
    "dry": lambda V, s: Chain([("dry", 0.8, 1.75, 2, 32, [[5]]), ("top_k", 40), ("dist", s)], V),
    "two_dist": lambda V, s: Chain([("top_k", 30), ("dist", s), ("top_k", 5), ("dist", s + 1)], V),
}


def _logits(rng, B, n, step):
    x = (rng.standard_normal((B, n)) * 3).astype(np.float32)
    if step % 3 == 1:
        x = np.round(x)  # many ties: the heap's order among equal logits must match too
    if step % 4 == 2:
        x[:, 5] = np.inf
        x[:, 11] = -np.inf
        x[:, 13] = np.nan
    return x


def _state(c):
    last = None if c.last is None else (c.last.offset, c.last.size, c.last.selected, c.last.sorted,
                                        c.last.view().tobytes())
    return c.snapshot(), last


def _pairs(names, seeds, n=V):
    return ([SPECS[k](n, s) for k, s in zip(names, seeds)], [SPECS[k](n, s) for k, s in zip(names, seeds)])


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("B", [1, 3, 64])
def test_rows_equal_separate_common_sample(threads, B):
    names = [list(SPECS)[(i * 7 + B) % len(SPECS)] for i in range(B)]
    seeds = [100 + 3 * i for i in range(B)]
    rows, solo = _pairs(names, seeds)
    rng = np.random.default_rng(B * 10 + threads)
    for step in range(6):
        x = _logits(rng, B, V, step)
        got = common_sample_rows(rows, x, threads=threads)
        want = [common_sample(c, x[r]) for r, c in enumerate(solo)]
        assert got.dtype == np.int32 and got.tolist() == want, (step, names)
        for r in range(B):
            assert _state(rows[r]) == _state(solo[r]), (step, names[r])
            rows[r].accept(int(got[r]))
            solo[r].accept(int(got[r]))


def test_every_spec_alone_and_thread_count_does_not_matter():
    names = list(SPECS)
    seeds = list(range(7, 7 + len(names)))
    results = []
    for threads in (1, 2, 4):
        rows, solo = _pairs(names, seeds)
        rng = np.random.default_rng(5)
        toks = []
        for step in range(8):
            x = _logits(rng, len(names), V, step)
            got = common_sample_rows(rows, x, threads=threads)
            for r, c in enumerate(solo):
                assert got[r] == common_sample(c, x[r]), (names[r], step)
                rows[r].accept(int(got[r]))
                c.accept(int(got[r]))
            toks.append(got.tolist())
        results.append(toks)
    assert results[0] == results[1] == results[2]


def test_large_vocab_rows():
    n = 128256
    names = ["default", "penalties", "topk_temp", "bias_pen"] * 4
    rows, solo = _pairs(names, range(len(names)), n)
    rng = np.random.default_rng(11)
    for step in range(3):
        x = _logits(rng, len(names), n, step)
        got = common_sample_rows(rows, x, threads=2)
        for r, c in enumerate(solo):
            assert got[r] == common_sample(c, x[r]) and _state(rows[r]) == _state(c)
            rows[r].accept(int(got[r]))
            c.accept(int(got[r]))


def _gpt2():
    from lmtail.grammar import Grammar, GrammarMatcher, Vocab

    p = _path("gpt-2")
    if p is None:
        pytest.skip("ggml-vocab-gpt-2.gguf not found")
    v = Vocab.from_gguf(p)
    g = Grammar.parse('root ::= "{" ws "\\"" [a-z]{1,8} "\\":" ws ( [0-9]+ | "true" ) ws "}"\nws ::= " "?')
    return v, (lambda: GrammarMatcher(g, v))


@pytest.mark.parametrize("threads", [1, 2])
def test_grammar_rows(threads):
    v, matcher = _gpt2()
    n = v.n_vocab
    names = ["default", "topk_temp", "penalties", "xtc", "greedy", "mirostat", "min_p_first", "default", "bias_pen",
             "topk_big", "temp_first"]
    has_g = [True, True, False, True, True, True, True, False, True, True, True]
    rows, solo = _pairs(names, range(20, 20 + len(names)), n)
    gr = [matcher() if h else None for h in has_g]
    gs = [matcher() if h else None for h in has_g]
    rng = np.random.default_rng(3)
    brace = next(t for t in range(n) if v.pieces[t] == b"{")
    for step in range(10):
        x = _logits(rng, len(names), n, 0)
        if step == 0:
            x[1, brace] = 40.0  # row 1's first draw is allowed; the others are rejected and resampled
        got = common_sample_rows(rows, x, gr, threads=threads)
        for r in range(len(names)):
            want = common_sample(solo[r], x[r], gs[r])
            assert got[r] == want, (names[r], step)
            assert _state(rows[r]) == _state(solo[r]), (names[r], step)
            t = int(got[r])
            for g in (gr[r], gs[r]):
                if g is not None:
                    g.accept(t)
            rows[r].accept(t)
            solo[r].accept(t)
        if any(g is not None and v.is_eog[int(got[r])] for r, g in enumerate(gr)):
            break


def test_batch_rows_join_and_leave_match_solo():
    rng = np.random.default_rng(9)
    b = Batch(threads=2)
    live = {}  # slot -> solo chain
    names = list(SPECS)
    k = 0
    for step in range(12):
        for _ in range(int(rng.integers(0, 4))):  # join
            nm = names[k % len(names)]
            s = b.add(SPECS[nm](V, 500 + k))
            live[s] = SPECS[nm](V, 500 + k)
            k += 1
        if live and rng.random() < 0.5:  # leave
            s = list(live)[int(rng.integers(len(live)))]
            b.remove(s)
            del live[s]
        if not live:
            continue
        x = _logits(rng, len(b), V, step)
        t = b.sample(x)
        for r, s in enumerate(b.slots):
            assert t[r] == common_sample(live[s], x[r])
            live[s].accept(int(t[r]))
        b.accept(t)


def test_errors_are_typed_and_advance_nothing():
    c1, c2 = common_chain(V, seed=1), Chain([("top_k", 5)], V)  # c2 selects nothing
    x = np.zeros((2, V), np.float32)
    snaps = [c1.snapshot(), c2.snapshot()]
    with pytest.raises(SamplingError):
        common_sample_rows([c1, c2], x)
    assert [c1.snapshot(), c2.snapshot()] == snaps
    with pytest.raises(ParameterError):
        common_sample_rows([c1, c1], x)
    with pytest.raises(ParameterError):
        common_sample_rows(c1, x)
    with pytest.raises(ParameterError):
        common_sample_rows([], x)
    with pytest.raises(ParameterError):
        common_sample_rows([c1, "x"], x)
    with pytest.raises(ShapeError):
        common_sample_rows([c1, common_chain(V + 1, seed=2)], x)
    with pytest.raises(ShapeError):
        common_sample_rows([c1], x)
    with pytest.raises(ShapeError):
        common_sample_rows([c1, c2], x[:, :-1])
    with pytest.raises(DTypeError):
        common_sample_rows([c1, c2], x.astype(np.float64))
    with pytest.raises(ShapeError):
        common_sample_rows([c1, c2], x, [None])
    g = object()
    with pytest.raises(ParameterError):
        common_sample_rows([c1, c2], x, [g, g])
    with pytest.raises(ParameterError):
        common_sample_rows([c1], x[:1], threads=0)
    assert [c1.snapshot(), c2.snapshot()] == snaps
    # a strided (non-contiguous) view is read correctly
    y = np.random.default_rng(1).standard_normal((2, 2 * V)).astype(np.float32)[:, ::2]
    a, b = common_chain(V, seed=4), common_chain(V, seed=4)
    assert common_sample_rows([a], y[:1])[0] == common_sample(b, np.ascontiguousarray(y[0]))


def _boom_chain(seed, n):
    """top-k 20 -> a sampler defined outside lmtail (a Python tail) raising on its n-th apply -> dist."""
    from lmtail.sampling import samplers as S

    class Boom(S.Sampler):
        name = "boom"
        calls = 0

        def apply(self, c):
            Boom.calls += 1
            if Boom.calls == n:
                raise RuntimeError("boom")

    ch = Chain([("top_k", 20), ("dist", seed)], V)
    return Chain(ch.spec, V, _samplers=ch.samplers[:1] + [Boom()] + ch.samplers[1:])


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_a_python_tail_that_raises_midway_advances_no_row(threads):
    B = 16
    rows = [common_chain(V, seed=i, **PEN) for i in range(B)]
    rows[9] = _boom_chain(3, 1)
    x = np.random.default_rng(2).standard_normal((B, V)).astype(np.float32)
    snaps = [c.snapshot() for c in rows]
    with pytest.raises(RuntimeError, match="boom"):
        common_sample_rows(rows, x, threads=threads)
    assert [c.snapshot() for c in rows] == snaps
    ref = [common_chain(V, seed=i, **PEN) for i in range(B)]
    got = common_sample_rows(rows[:9], x[:9], threads=threads)  # the same rows again: as if never run
    assert got.tolist() == [common_sample(c, x[r]) for r, c in enumerate(ref[:9])]


def test_rows_job_misuse_is_a_typed_error():
    from lmtail import _core
    from lmtail.errors import LmtailError

    x = np.zeros((2, V), np.float32)
    c = common_chain(V, seed=1)
    job = _core.SamplingRows(x, 2, 2)
    with pytest.raises(LmtailError):
        job.result(0)  # not added
    job.add((0, c._buf, [(3, 5), (11, 0.5)], None))
    with pytest.raises(LmtailError):
        job.add((5, c._buf, [], None))  # row index out of range
    assert job.result(0)[1] == 5
    job.close()
    with pytest.raises(LmtailError):
        job.add((1, c._buf, [], None))
    with pytest.raises(LmtailError):
        _core.SamplingRows(x, 0, 2)
    with pytest.raises(LmtailError):
        _core.sampling_run_rows(x, [(0, c._buf, [(99,)], None)], 1)
    with pytest.raises(LmtailError):
        _core.sampling_run_rows(x, [(0, c._buf, [(3, 5), (2, [1], [1.0])], None)], 1)  # bias after top-k
    with pytest.raises(LmtailError):
        _core.sampling_run_rows(x, [(0, c._buf, [], np.ones(V - 1, bool))], 1)


def test_mt19937_vectorised_twist_is_the_recurrence():
    from lmtail.sampling.rng import Mt19937

    e = Mt19937()  # default seed 5489: the standard's 10000th output
    for _ in range(9999):
        e()
    assert e() == 4123659995
    for seed in (0, 1, 0xFFFFFFFF, 987654321):
        a = Mt19937(seed)
        mt = list(a._mt)
        for _ in range(3):  # the word-by-word recurrence of the standard
            for i in range(624):
                y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
                mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            a._twist()
            assert a._mt == mt, seed
    b, ref = Mt19937(7), Mt19937(8)
    b(), ref()  # both twisted once, outputs cached
    b._mt, b._idx = ref._mt, ref._idx  # words assigned directly (as lmtail.speculative does)
    assert [b() for _ in range(700)] == [ref() for _ in range(700)]


class _MaskGrammar:
    """The grammar protocol over a fixed random mask (allows(t) = mask[t]): the resample path
    with masks of any density, without a parser."""

    def __init__(self, n, density, seed):
        rng = np.random.default_rng(seed)
        self.m = rng.random(n) < density
        self.m[int(rng.integers(n))] = True  # never empty

    def allows(self, t):
        return bool(self.m[t])

    def mask(self):
        return self.m.copy()


@pytest.mark.parametrize("threads", [1, 2])
def test_masked_resample_any_density(threads):
    n = 20000
    names = ["default", "penalties", "bias_pen", "topk_big", "min_p_first", "temp_first", "typical", "greedy"] * 2
    rows, solo = _pairs(names, range(len(names)), n)
    dens = [0.5, 0.01, 0.999, 0.0001, 0.3, 0.05, 0.9, 0.002] * 2
    gs = [_MaskGrammar(n, d, i) for i, d in enumerate(dens)]
    rng = np.random.default_rng(4)
    for step in range(5):
        x = _logits(rng, len(names), n, step)
        got = common_sample_rows(rows, x, gs, threads=threads)
        for r, c in enumerate(solo):
            assert got[r] == common_sample(c, x[r], gs[r]), (names[r], dens[r], step)
            assert _state(rows[r]) == _state(c)
            assert gs[r].m[got[r]]
            rows[r].accept(int(got[r]))
            c.accept(int(got[r]))
