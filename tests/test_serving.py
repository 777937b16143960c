"""lmtail.serving.Batch: B requests per call, each row exactly its own common_sample call.

* against llama.cpp (oracle): rows with different chains, seeds and grammars, joining and
  leaving, give the tokens llama.cpp's samplers driven with common_sampler_sample's discipline
  give for each request alone;
* against lmtail alone: a request's tokens do not depend on the other rows, their order, joins,
  leaves or the thread count; snapshot/restore per row; all-or-nothing sample and accept;
* the top-k route with per-row k and per-row whole-row fallback;
* strict inputs (shapes, dtypes, slots) and host array objects (DLPack, __array_interface__).
"""

from __future__ import annotations

import numpy as np
import pytest

from lmtail.common_sampling import common_sample
from lmtail.errors import DTypeError, GrammarError, ParameterError, ShapeError, UnsupportedError
from lmtail.sampling import Chain, SamplingError, common_chain
from lmtail.serving import Batch, SlotSnapshot

from oracle._lib import vocab_gguf as _path

GRAMMAR = 'root ::= "{" ws "\\"" [a-z]{1,8} "\\":" ws ( [0-9]+ | "true" | "\\"" [a-zA-Z ]* "\\"" ) ws "}"\nws ::= " "?'
SCALE = 3.0

_V: dict = {}


def _vocab():
    from lmtail.grammar import Vocab

    p = _path("gpt-2")
    if p is None:
        pytest.skip("ggml-vocab-gpt-2.gguf not found (tests/oracle/_lib.py: shared/vocab or the oracle sdist)")
    if "v" not in _V:
        _V["v"] = Vocab.from_gguf(p)
    return _V["v"]


def _matcher(v):
    from lmtail.grammar import Grammar, GrammarMatcher

    if "g" not in _V:
        _V["g"] = Grammar.parse(GRAMMAR)
    return GrammarMatcher(_V["g"], v)


class Stream:
    """One request's logits: seeded standard normals x SCALE, as tests/oracle/grammar.py draws them."""

    def __init__(self, seed: int, n_vocab: int):
        self.rng = np.random.default_rng(seed)
        self.n = n_vocab

    def next(self) -> np.ndarray:
        return (self.rng.standard_normal(self.n) * SCALE).astype(np.float32)


# ---- llama.cpp ---------------------------------------------------------------------------------

# name -> (spec for lmtail and OracleChain, or common_chain params; grammar?; logits seed; join step)
ORACLE_ROWS = [
    ("grammar-topk-temp", [("top_k", 40), ("temp", 0.8), ("dist", 1234)], True, 5, 0),
    ("common-default", dict(seed=11), False, 6, 0),
    ("penalties", dict(seed=12, penalty_last_n=16, penalty_repeat=1.3, penalty_freq=0.2, penalty_present=0.1), False, 8, 1),
    ("grammar-xtc", [("top_k", 50), ("xtc", 0.5, 0.1, 1, 77), ("temp", 1.2), ("dist", 7)], True, 7, 2),
    ("mirostat-v2", [("temp", 0.9), ("mirostat_v2", 5.0, 0.1, 99)], False, 9, 3),
    ("grammar-dist", [("dist", 42)], True, 10, 4),
    ("topk-greedy", [("top_k", 1), ("greedy",)], False, 11, 1),
]
N_PLAIN = 14  # steps of the rows without a grammar (grammar rows end at EOG or 30 steps)


def _oracle_tokens(v, name, spec, grammar, lseed):
    from oracle import grammar as og
    from oracle.sampling import OracleChain, OracleCommonChain

    if grammar:
        toks, _ = og.common_sample_run(_path("gpt-2"), GRAMMAR, spec, n_steps=30, logits_seed=lseed, scale=SCALE)
        return toks
    ch = OracleCommonChain(v.n_vocab, **spec) if isinstance(spec, dict) else OracleChain(spec, v.n_vocab)
    st = Stream(lseed, v.n_vocab)
    out = []
    for _ in range(N_PLAIN):
        t = ch.sample(st.next())
        ch.accept(t)
        out.append(t)
    return out


def _chain(v, spec):
    return common_chain(v.n_vocab, **spec) if isinstance(spec, dict) else Chain(spec, v.n_vocab)


def _run_batch(v, rows, lengths, threads, order=None):
    """Drive a Batch: row i joins at its step, leaves after lengths[i] tokens; returns tokens per row."""
    b = Batch(threads=threads)
    live: dict = {}  # slot -> (row index, stream)
    got = {i: [] for i in range(len(rows))}
    order = list(range(len(rows))) if order is None else order
    step = 0
    while True:
        for i in order:
            name, spec, grammar, lseed, join = rows[i]
            if join == step:
                s = b.add(_chain(v, spec), _matcher(v) if grammar else None)
                live[s] = (i, Stream(lseed, v.n_vocab))
        if not live and step > max(r[4] for r in rows):
            return got
        slots = b.slots
        assert set(slots) == set(live)
        if slots:
            logits = np.stack([live[s][1].next() for s in slots])
            toks = b.sample(logits)
            assert toks.dtype == np.int32 and toks.shape == (len(slots),)
            b.accept(toks)
            for s, t in zip(slots, toks.tolist()):
                i = live[s][0]
                got[i].append(t)
                if len(got[i]) == lengths[i]:
                    b.remove(s)
                    del live[s]
        step += 1


def test_batch_matches_llama_per_row():
    from oracle import vocab as ov

    ov.require()
    v = _vocab()
    want = [_oracle_tokens(v, name, spec, g, lseed) for name, spec, g, lseed, _ in ORACLE_ROWS]
    lengths = [len(w) for w in want]
    got = _run_batch(v, ORACLE_ROWS, lengths, threads=2)
    for (name, *_), w in zip(ORACLE_ROWS, want):
        i = [r[0] for r in ORACLE_ROWS].index(name)
        assert got[i] == w, name
    assert len(set(lengths)) > 1  # rows left at different steps


# ---- independence from the other rows and the thread count -----------------------------------

def _solo(v, spec, grammar, lseed, n):
    ch = _chain(v, spec)
    m = _matcher(v) if grammar else None
    st = Stream(lseed, v.n_vocab)
    out = []
    for _ in range(n):
        t = common_sample(ch, st.next(), m)
        if m is not None:
            m.accept(t)
        ch.accept(t)
        out.append(t)
        if m is not None and v.is_eog[t]:
            break
    return out


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_request_tokens_do_not_depend_on_the_batch(threads):
    v = _vocab()
    rows = ORACLE_ROWS
    solo = [_solo(v, spec, g, lseed, 30 if g else N_PLAIN) for _, spec, g, lseed, _ in rows]
    lengths = [len(s) for s in solo]
    for order in (None, [6, 5, 4, 3, 2, 1, 0]):
        got = _run_batch(v, rows, lengths, threads=threads, order=order)
        assert [got[i] for i in range(len(rows))] == solo, (threads, order)
    # all rows from step 0, and one row alone
    same_start = [(n, s, g, ls, 0) for n, s, g, ls, _ in rows]
    got = _run_batch(v, same_start, lengths, threads=threads)
    assert [got[i] for i in range(len(rows))] == solo
    one = _run_batch(v, same_start[3:4], lengths[3:4], threads=threads)
    assert one[0] == solo[3]


def test_slots_keep_row_order_and_refuse_sharing():
    V = 64
    b = Batch()
    chains = [common_chain(V, seed=i) for i in range(4)]
    s = [b.add(c) for c in chains]
    assert b.slots == s and len(b) == 4
    b.remove(s[1])
    assert b.slots == [s[0], s[2], s[3]] and b.row(s[3]) == 2
    s4 = b.add(common_chain(V, seed=9))
    assert b.slots == [s[0], s[2], s[3], s4]
    with pytest.raises(ParameterError, match="live Slot"):
        b.remove(s[1])
    with pytest.raises(ParameterError, match="already in the batch"):
        b.add(chains[0])
    with pytest.raises(ShapeError, match="n_vocab"):
        b.add(common_chain(V + 1, seed=1))
    with pytest.raises(ParameterError, match="Chain"):
        b.add("top_k")
    with pytest.raises(ParameterError, match="grammar"):
        b.add(common_chain(V, seed=3), grammar=object())
    with pytest.raises(ParameterError, match="live Slot"):
        Batch().remove(s[0])
    with pytest.raises(ParameterError, match="no slots"):
        Batch().sample(np.zeros((1, V), np.float32))


def test_bad_logits_are_typed_errors_and_change_nothing():
    V = 100
    b = Batch(threads=2)
    for i in range(3):
        b.add(common_chain(V, seed=i))
    ref = Batch(threads=1)
    for i in range(3):
        ref.add(common_chain(V, seed=i))
    x = np.random.default_rng(1).standard_normal((3, V)).astype(np.float32)
    with pytest.raises(DTypeError):
        b.sample(x.astype(np.float64))
    with pytest.raises(ShapeError):
        b.sample(x[:2])
    with pytest.raises(ShapeError):
        b.sample(x[:, :-1])
    with pytest.raises(ShapeError):
        b.sample(x[0])
    with pytest.raises(DTypeError):
        b.sample(x.tolist())
    assert b.sample(x).tolist() == ref.sample(x).tolist()


def test_a_failing_row_advances_no_row():
    V = 200
    b = Batch(threads=2)
    good = [common_chain(V, seed=i) for i in range(3)]
    for c in good[:2]:
        b.add(c)
    bad = b.add(Chain([("top_k", 5)], V))  # no terminal sampler: selects nothing
    b.add(good[2])
    ref = [common_chain(V, seed=i) for i in range(3)]
    x = np.random.default_rng(2).standard_normal((4, V)).astype(np.float32)
    with pytest.raises(SamplingError) as e:
        b.sample(x)
    if hasattr(e.value, "__notes__"):
        assert "row 2" in e.value.__notes__[0]
    b.remove(bad)
    x3 = x[[0, 1, 3]]
    assert b.sample(x3).tolist() == [common_sample(c, x3[i]) for i, c in enumerate(ref)]


def test_accept_is_all_or_nothing():
    v = _vocab()
    b = Batch()
    s0 = b.add(common_chain(v.n_vocab, seed=1, penalty_last_n=8, penalty_repeat=1.5))
    s1 = b.add(Chain([("top_k", 10), ("dist", 3)], v.n_vocab), _matcher(v))
    snaps = [b.snapshot(s) for s in (s0, s1)]
    bad_tok = next(t for t in range(v.n_vocab) if v.pieces[t] == b"x")  # the grammar starts with "{"
    with pytest.raises(GrammarError) as e:
        b.accept([bad_tok, bad_tok])
    if hasattr(e.value, "__notes__"):
        assert "row 1" in e.value.__notes__[0]
    assert [b.snapshot(s) for s in (s0, s1)] == snaps
    with pytest.raises(ParameterError):
        b.accept([0])
    with pytest.raises(ParameterError):
        b.accept([0, v.n_vocab])
    with pytest.raises(ParameterError):
        b.accept([0.0, 1.0])
    assert [b.snapshot(s) for s in (s0, s1)] == snaps


def test_snapshot_restore_one_row_leaves_the_others():
    v = _vocab()
    rows = [(common_chain(v.n_vocab, seed=5, penalty_last_n=8, penalty_repeat=1.2), None),
            (Chain([("top_k", 40), ("temp", 0.8), ("dist", 9)], v.n_vocab), _matcher(v)),
            (Chain([("temp", 0.9), ("mirostat_v2", 5.0, 0.1, 4)], v.n_vocab), None)]
    b = Batch(threads=2)
    slots = [b.add(c, g) for c, g in rows]
    streams = [Stream(20 + i, v.n_vocab) for i in range(3)]
    for _ in range(3):
        b.accept(b.sample(np.stack([s.next() for s in streams])))
    snap = b.snapshot(slots[1])
    assert isinstance(snap, SlotSnapshot) and snap.grammar is not None
    fixed = [np.stack([s.next() for s in streams]) for _ in range(3)]
    first = []
    for x in fixed:
        t = b.sample(x)
        b.accept(t)
        first.append(t.tolist())
    b.restore(slots[1], snap)  # row 1 rewinds; rows 0 and 2 carry on
    for k, x in enumerate(fixed):
        t = b.sample(x).tolist()
        b.accept(t)
        assert t[1] == first[k][1]
    with pytest.raises(ParameterError):
        b.restore(slots[0], snap)  # grammar part does not fit a slot without a grammar
    with pytest.raises(ParameterError):
        b.restore(slots[1], SlotSnapshot(b"junk", snap.grammar))
    with pytest.raises(ParameterError):
        b.restore(slots[1], "snap")


# ---- the top-k route ----------------------------------------------------------------------------

def _topm(x: np.ndarray, m: int):
    # canonical order: value descending, id ascending among equal values
    order = np.lexsort((np.arange(x.shape[1])[None, :].repeat(len(x), 0), -x), axis=1)[:, :m]
    return order.astype(np.int32), np.take_along_axis(x, order, 1)


def test_sample_topk_per_row_k_and_fallback():
    V = 3000
    specs = [[("top_k", 40), ("temp", 0.7), ("dist", 1)],   # k = 40
             [("top_k", 5), ("dist", 2)],                    # k = 5
             dict(seed=3),                                   # common default: top_k 40 first
             [("top_p", 0.9), ("dist", 4)],                  # needs the whole row
             [("greedy",)]]                                  # k = 1
    mk = (lambda s: common_chain(V, **s) if isinstance(s, dict) else Chain(s, V))
    b, ref = Batch(threads=2), Batch(threads=1)
    for s in specs:
        b.add(mk(s))
        ref.add(mk(s))
    needs = b.topk_needed()
    assert needs[3] == 0 and needs[4] == 1 and needs[1] == 5
    k = b.batch_topk_needed()
    assert k == max(n for n in needs if n)
    rng = np.random.default_rng(7)
    for step in range(6):
        x = (rng.standard_normal((len(specs), V)) * 2).astype(np.float32)
        if step == 2:
            x[1, :7] = 9.0  # a tie across row 1's top-k boundary: that row falls back to its whole row
        ids, vals = _topm(x, k + 1)
        fetched = []  # list.append is atomic: rows may run on two threads
        t = b.sample_topk(ids, vals, row=lambda r, x=x: fetched.append(r) or x[r])
        assert t.tolist() == ref.sample(x).tolist()
        # only the top-p row (always) and the tied row (step 2) read their whole row
        assert sorted(fetched) == ([1, 3] if step == 2 else [3]), step
        b.accept(t)
        ref.accept(t)
    with pytest.raises(ShapeError):
        b.sample_topk(ids[:2], vals[:2])


# ---- host array objects -------------------------------------------------------------------------

class _Iface:
    """A minimal __array_interface__ producer (no numpy subclass)."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class _CudaLike:
    """A DLPack producer that says its memory is on CUDA device 0."""

    def __dlpack__(self, **kw):  # pragma: no cover - never called: the device is checked first
        raise AssertionError("read a device tensor")

    def __dlpack_device__(self):
        return (2, 0)


def test_batch_takes_dlpack_and_array_interface():
    V = 500
    x = np.random.default_rng(3).standard_normal((2, V)).astype(np.float32)
    ro = x.copy()
    ro.flags.writeable = False

    def fresh():
        b = Batch()
        b.add(common_chain(V, seed=1))
        b.add(Chain([("top_k", 3), ("dist", 5)], V))
        return b

    want = fresh().sample(x).tolist()
    assert fresh().sample(np.from_dlpack(x)).tolist() == want
    assert fresh().sample(_Iface(x)).tolist() == want
    assert fresh().sample(ro).tolist() == want

    class Dl:  # numpy's own __dlpack__, through an object that is not an ndarray
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    assert fresh().sample(Dl(ro)).tolist() == want
    with pytest.raises(UnsupportedError, match="cuda:0"):
        fresh().sample(_CudaLike())
    with pytest.raises(DTypeError):
        fresh().sample(_Iface(x.astype(np.float64)))


def test_batch_with_torch_cpu_tensor():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional: CPU tensors via DLPack)")
    V = 300
    x = np.random.default_rng(4).standard_normal((2, V)).astype(np.float32)
    b1, b2 = Batch(), Batch()
    for b in (b1, b2):
        b.add(common_chain(V, seed=1))
        b.add(common_chain(V, seed=2))
    assert b1.sample(torch.from_numpy(x)).tolist() == b2.sample(x).tolist()
    with pytest.raises(DTypeError):
        b1.sample(torch.from_numpy(x.astype(np.float64)))


def test_lazy_grammar_row_matches_its_solo_run():
    from lmtail.grammar import LazyGrammarMatcher

    v = _vocab()
    _matcher(v)  # parses the shared grammar
    brace = next(t for t in range(v.n_vocab) if v.pieces[t] == b"{")

    def logits_for(st, step):
        x = st.next()
        if step == 3:
            x[brace] = 50.0  # the trigger token wins at step 3: the grammar constrains from then on
        return x

    def lazy():
        return LazyGrammarMatcher(_V["g"], v, trigger_tokens=[brace])

    # solo
    ch, m, st = Chain([("top_k", 40), ("temp", 0.8), ("dist", 5)], v.n_vocab), lazy(), Stream(31, v.n_vocab)
    solo = []
    for step in range(12):
        t = common_sample(ch, logits_for(st, step), m)
        m.accept(t)
        ch.accept(t)
        solo.append(t)
    assert not m.awaiting_trigger and solo[3] == brace
    # the same request as row 1 of a batch, beside two other rows
    b = Batch(threads=2)
    b.add(common_chain(v.n_vocab, seed=1))
    row = b.add(Chain([("top_k", 40), ("temp", 0.8), ("dist", 5)], v.n_vocab), lazy())
    b.add(common_chain(v.n_vocab, seed=2), _matcher(v))
    streams = [Stream(40, v.n_vocab), Stream(31, v.n_vocab), Stream(41, v.n_vocab)]
    got = []
    for step in range(12):
        x = np.stack([streams[0].next(), logits_for(streams[1], step), streams[2].next()])
        t = b.sample(x)
        b.accept(t)
        got.append(int(t[b.row(row)]))
    assert got == solo
