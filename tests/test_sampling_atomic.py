"""All-or-nothing policy calls (issue 18 items 10, 11) and llama.cpp's sampler names (issue 19 item 6).

Every failure path of a multi-step state change -- a grammar that rejects, a bad row midway, a
failing sampler -- leaves the chain (RNG streams, histories), and the grammar, exactly as before the
call: the same snapshot, and the same draws afterwards as an untouched twin.
"""

from __future__ import annotations

import numpy as np
import pytest

from lmtail.errors import GrammarError, LmtailError, ParameterError
from lmtail.sampling import (Chain, Sampler, SamplingError, TopKRows, common_chain, common_sampler_names,
                             sample_topk, sampler_names)
from lmtail.sampling import samplers as S
from lmtail.speculative import verify_sample_and_match


def byte_vocab():
    from lmtail.grammar import Vocab

    return Vocab([bytes([c]) for c in range(32, 127)] + [b""], eog_ids=[95])


def tok(c: str) -> int:
    return ord(c) - 32


def canonical_topk(row, m):
    order = np.lexsort((np.arange(len(row)), -row.astype(np.float64)))[:m]
    return order.astype(np.uint32), row[order]


def rows_saying(text: str, V: int, low: float = -8.0) -> np.ndarray:
    rows = np.full((len(text), V), low, np.float32)
    for i, c in enumerate(text):
        rows[i, tok(c)] = 9.0
    rows += np.linspace(0, 0.5, V, dtype=np.float32)  # no ties
    return rows


SPEC = [("penalties", 16, 1.3, 0.1, 0.0), ("top_k", 8), ("xtc", 0.5, 0.05), ("temp", 0.8), ("dist",)]


def pair(V, spec=SPEC, seed=11):
    return Chain(spec, V, seed=seed), Chain(spec, V, seed=seed)


def assert_same_future(a: Chain, b: Chain, V: int, steps: int = 6) -> None:
    rng = np.random.default_rng(5)
    for _ in range(steps):
        r = (rng.standard_normal(V) * 2).astype(np.float32)
        ta, tb = a.sample(r), b.sample(r)
        assert ta == tb
        a.accept(ta)
        b.accept(tb)
    assert a.snapshot() == b.snapshot()


# ---- verify_sample_and_match -------------------------------------------------------------------
def test_sample_and_match_rolls_back_a_grammar_rejection():
    from lmtail.grammar import Grammar, GrammarMatcher

    vocab = byte_vocab()
    V = vocab.n_vocab
    g = GrammarMatcher(Grammar.parse('root ::= "ab" "c"'), vocab)
    chain, twin = pair(V)
    rows = rows_saying("abcz", V)
    rows[2, tok("c")] = -np.inf  # the grammar's only allowed token is impossible at position 2
    before, gbefore = chain.snapshot(), g.snapshot()
    with pytest.raises(GrammarError):
        verify_sample_and_match(chain, rows, [tok("a"), tok("b"), tok("c")], grammar=g)
    # Before the fix the chain kept "a", "b" and the rejected token (penalty history, dist draws).
    assert chain.snapshot() == before
    assert g.snapshot() == gbefore
    assert_same_future(chain, twin, V)


class FlakyGrammar:
    """A real matcher whose accept fails on the k-th call (after the chain accepted)."""

    def __init__(self, inner, fail_at):
        self.inner, self.fail_at, self.calls = inner, fail_at, 0

    def allows(self, t):
        return self.inner.allows(t)

    def mask(self, out=None):
        return self.inner.mask(out)

    def accept(self, t):
        self.calls += 1
        if self.calls == self.fail_at:
            raise GrammarError("injected")
        self.inner.accept(t)

    def snapshot(self):
        return self.inner.snapshot()

    def restore(self, s):
        self.inner.restore(s)


@pytest.mark.parametrize("fail_at", [1, 2, 4])
@pytest.mark.parametrize("route", ["rows", "topk"])
def test_sample_and_match_rolls_back_any_failing_step(fail_at, route):
    from lmtail.grammar import Grammar, GrammarMatcher

    vocab = byte_vocab()
    V = vocab.n_vocab
    inner = GrammarMatcher(Grammar.parse('root ::= [a-z]+'), vocab)
    inner.accept(tok("q"))
    g = FlakyGrammar(inner, fail_at)
    chain, twin = pair(V)
    rows = rows_saying("abcd", V)
    target = rows
    if route == "topk":
        ids, vals = zip(*(canonical_topk(r, 20) for r in rows))
        target = TopKRows(np.stack(ids), np.stack(vals), lambda t: rows[t])
    before, gbefore = chain.snapshot(), inner.snapshot()
    with pytest.raises(GrammarError, match="injected"):
        verify_sample_and_match(chain, target, [tok("a"), tok("b"), tok("c")], grammar=g)
    assert chain.snapshot() == before and inner.snapshot() == gbefore
    assert_same_future(chain, twin, V)


def test_sample_and_match_rolls_back_a_bad_row_midway():
    V = 200
    chain, twin = pair(V)
    rng = np.random.default_rng(1)
    rows = (rng.standard_normal((4, V)) * 3).astype(np.float32)
    winners = [7, 50, 99, 120]
    for t, w in enumerate(winners):
        rows[t, w] = 40.0  # certain samples: the draft matches up to row 2
    ids, vals = zip(*(canonical_topk(r, 30) for r in rows))
    ids, vals = np.stack(ids).astype(np.int64), np.stack(vals)
    # A tie at the top-k boundary of row 2 forces the whole-row fetch there, which fails.
    vals[2, 8] = vals[2, 7]
    ids[2, 7:9] = np.sort(ids[2, 7:9])

    def row(t):
        return rows[t][:-1] if t == 2 else rows[t]  # a wrong-length row, fetched midway

    before = chain.snapshot()
    with pytest.raises(LmtailError):
        verify_sample_and_match(chain, TopKRows(ids, vals, row), winners[:3])
    assert chain.snapshot() == before
    assert_same_future(chain, twin, V)


def test_sample_and_match_needs_a_restorable_grammar_and_checks_its_arguments():
    V = 50
    chain = Chain(SPEC, V, seed=1)
    rows = np.zeros((2, V), np.float32)

    class NoSnapshot:
        def allows(self, t):
            return True

        def mask(self, out=None):
            return np.ones(V, bool)

        def accept(self, t):
            pass

    before = chain.snapshot()
    for kw in (dict(grammar=NoSnapshot()), dict(eog_ids=5), dict(eog_ids=[-1]), dict(eog_ids=["1"]),
               dict(n_probs=-1)):
        with pytest.raises(ParameterError):
            verify_sample_and_match(chain, rows, [3], **kw)
    with pytest.raises(ParameterError):
        verify_sample_and_match(object(), rows, [3])
    assert chain.snapshot() == before


# ---- Chain calls ---------------------------------------------------------------------------------
class Boom(Sampler):
    name = "boom"

    def __init__(self, on=("apply",)):
        self.on = on

    def apply(self, c):
        if "apply" in self.on:
            raise RuntimeError("boom")

    def accept(self, token):
        if "accept" in self.on:
            raise RuntimeError("boom")


def test_chain_sample_is_all_or_nothing():
    V = 300
    spec = [("penalties", 8, 1.2, 0.0, 0.0), ("xtc", 1.0, 0.0), ("temp", 0.9), ("dist",)]
    a, twin = pair(V, spec)
    a.samplers.append(Boom())  # after xtc and dist have drawn
    twin.samplers.append(S.Empty("?boom"))
    before = a.snapshot()
    with pytest.raises(RuntimeError):
        a.sample(np.zeros(V, np.float32) + np.linspace(0, 1, V, dtype=np.float32))
    assert a.snapshot() == before
    a.samplers[-1] = S.Empty("?boom")
    assert_same_future(a, twin, V)


def test_chain_sample_rolls_back_when_nothing_is_selected():
    V = 100
    c = Chain([("xtc", 1.0, 0.0), ("top_k", 5)], V, seed=3)  # no terminal sampler
    before = c.snapshot()
    with pytest.raises(SamplingError):
        c.sample(np.linspace(0, 1, V, dtype=np.float32))
    assert c.snapshot() == before  # xtc's draw is undone


def test_chain_accept_is_all_or_nothing():
    V = 100
    c = Chain([("penalties", 8, 1.2, 0.0, 0.0), ("dry", 0.8, 1.75, 2, 16), ("dist",)], V, seed=3)
    c.samplers.append(Boom(on=("accept",)))
    before = c.snapshot()
    with pytest.raises(RuntimeError):
        c.accept(5)
    assert c.snapshot() == before


def test_chain_atomic_context():
    V = 100
    c, twin = pair(V)
    before = c.snapshot()
    with pytest.raises(KeyError):
        with c.atomic():
            c.accept(c.sample(np.linspace(0, 1, V, dtype=np.float32)))
            raise KeyError("later step failed")
    assert c.snapshot() == before
    assert_same_future(c, twin, V)


def test_apply_candidates_rolls_back():
    from lmtail.sampling import Candidates

    V = 50
    c = Chain([("xtc", 1.0, 0.0), ("dist",)], V, seed=2)
    c.samplers.append(Boom())
    before = c.snapshot()
    with pytest.raises(RuntimeError):
        c.apply_candidates(Candidates.from_logits(np.linspace(0, 1, V, dtype=np.float32)))
    assert c.snapshot() == before
    with pytest.raises(ParameterError):
        c.apply_candidates(np.zeros(V, np.float32))


# ---- the top-k route -----------------------------------------------------------------------------
def test_sample_topk_rolls_back_a_failing_terminal(monkeypatch):
    V = 400
    chain, twin = pair(V, [("top_k", 10), ("temp", 0.9), ("dist",)])
    row = np.linspace(0, 3, V, dtype=np.float32)
    ids, vals = canonical_topk(row, 11)
    orig = S.Dist.apply

    def draw_then_fail(self, c):
        orig(self, c)  # the engine advanced
        raise RuntimeError("injected after the draw")

    monkeypatch.setattr(S.Dist, "apply", draw_then_fail)
    before = chain.snapshot()
    with pytest.raises(RuntimeError):
        sample_topk(chain, ids, vals, lambda: row)
    assert chain.snapshot() == before
    monkeypatch.setattr(S.Dist, "apply", orig)
    assert sample_topk(chain, ids, vals, lambda: row) == twin.sample(row)


def adversarial():
    """A row and non-canonical candidates from which the route returned a token the whole row
    never gives (the order put a lower logit first)."""
    V = 300
    rng = np.random.default_rng(4)
    row = (rng.standard_normal(V) * 2).astype(np.float32)
    ids, vals = canonical_topk(row, 6)
    return V, row, ids, vals


@pytest.mark.parametrize("corrupt", ["swap_values", "reverse", "tie_ids_descending", "duplicate_id", "nan",
                                     "inf", "negative_id", "id_out_of_range", "float_ids"])
def test_sample_topk_refuses_non_canonical_candidates(corrupt):
    V, row, ids, vals = adversarial()
    ids, vals = ids.astype(np.int64), vals.copy()
    if corrupt == "swap_values":
        ids[[0, 3]] = ids[[3, 0]]
        vals[[0, 3]] = vals[[3, 0]]
    elif corrupt == "reverse":
        ids, vals = ids[::-1].copy(), vals[::-1].copy()
    elif corrupt == "tie_ids_descending":
        vals[1] = vals[2]
        ids[1], ids[2] = max(ids[1], ids[2]), min(ids[1], ids[2])
    elif corrupt == "duplicate_id":
        ids[4] = ids[1]
    elif corrupt == "nan":
        vals[5] = np.nan
    elif corrupt == "inf":
        vals[0] = np.inf
    elif corrupt == "negative_id":
        ids[2] = -1
    elif corrupt == "id_out_of_range":
        ids[2] = V
    elif corrupt == "float_ids":
        ids = ids.astype(np.float64)
    chain = Chain([("top_k", 3), ("dist",)], V, seed=5)
    before = chain.snapshot()
    with pytest.raises(ParameterError):
        sample_topk(chain, ids, vals, lambda: row)
    assert chain.snapshot() == before
    if corrupt != "id_out_of_range":  # TopKRows does not know n_vocab yet
        with pytest.raises(ParameterError):
            TopKRows(ids[None, :], vals[None, :], lambda t: row)


def test_non_canonical_candidates_gave_a_wrong_token_before():
    # With the greedy chain: candidates listing a lower logit first would pick it.
    V, row, ids, vals = adversarial()
    chain = Chain([("top_k", 1), ("greedy",)], V)
    want = chain.sample(row)
    bad_ids, bad_vals = ids[::-1].copy(), vals[::-1].copy()
    with pytest.raises(ParameterError, match="canonical order"):
        sample_topk(chain, bad_ids, bad_vals)
    assert sample_topk(chain, ids, vals) == want


def test_fallback_checks_that_the_candidates_are_the_rows_top_m():
    V = 300
    row = np.linspace(0, 3, V, dtype=np.float32)
    row[[10, 20]] = 5.0  # a tie at the top: top_k 1 cannot be decided, the route reads the row
    row[[50, 51]] = row[290]  # a tie group {50, 51, 290} at the 12th largest value
    ids, vals = canonical_topk(row, 12)
    assert list(ids[:2]) == [10, 20] and ids[-1] == 50
    ids = ids.astype(np.int64)
    chain = Chain([("top_k", 1), ("dist",)], V, seed=1)
    before = chain.snapshot()
    cases = {}
    i, v = ids.copy(), vals.copy()
    v[-1] = np.float32(v[-1] - np.float32(0.001))  # not the row's logit at that id
    cases["values"] = (i, v)
    i, v = ids.copy(), vals.copy()
    i[2:-1], v[2:-1] = ids[3:], vals[3:]  # the true 3rd largest dropped, a smaller one appended
    i[-1], v[-1] = 5, row[5]
    cases["missing"] = (i, v)
    i = ids.copy()
    i[-1] = 290  # the tie at the smallest value resolved to a higher id
    cases["tie"] = (i, vals)
    for label, (i, v) in cases.items():
        with pytest.raises(ParameterError, match="candidates"):
            sample_topk(chain, i, v, lambda: row)
        assert chain.snapshot() == before, label
    twin = Chain([("top_k", 1), ("dist",)], V, seed=1)
    assert sample_topk(chain, ids, vals, lambda: row) == twin.sample(row)


# ---- sampler names ----------------------------------------------------------------------------------
# common_sampler_types_from_names (llama.cpp common/sampling.cpp): canonical names, kebab-case and
# no-dash forms of the names with "_", and three misc aliases.
LLAMA_NAMES = {
    "dry": "dry", "top_k": "top_k", "top_p": "top_p", "top_n_sigma": "top_n_sigma", "typ_p": "typ_p",
    "min_p": "min_p", "temperature": "temperature", "xtc": "xtc", "infill": "infill",
    "penalties": "penalties", "adaptive_p": "adaptive_p",
    "top-k": "top_k", "topk": "top_k", "top-p": "top_p", "topp": "top_p", "top-n-sigma": "top_n_sigma",
    "topnsigma": "top_n_sigma", "typ-p": "typ_p", "typp": "typ_p", "min-p": "min_p", "minp": "min_p",
    "adaptive-p": "adaptive_p", "adaptivep": "adaptive_p", "nucleus": "top_p", "temp": "temperature",
    "typ": "typ_p",
}
LLAMA_CHARS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
               "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p"}


def test_common_accepts_every_llama_cpp_name_and_char():
    for name, want in LLAMA_NAMES.items():
        assert common_sampler_names([name, name.upper()]) == [want, want]
    for ch, want in LLAMA_CHARS.items():
        assert common_sampler_names(ch) == [want]
    assert common_sampler_names(["typical", "temp_ext", "Temp-Ext"]) == ["typ_p", "temperature", "temperature"]


def test_chain_specs_accept_llama_cpp_names():
    V = 500
    row = np.random.default_rng(3).standard_normal(V).astype(np.float32)
    for name in LLAMA_NAMES:
        assert name.replace("-", "_").lower() in sampler_names() or name in sampler_names()
    same = [
        ([("temperature", 0.7), ("dist",)], [("temp", 0.7), ("dist",)]),
        ([("temperature", 0.7, 0.5, 1.0), ("dist",)], [("temp_ext", 0.7, 0.5, 1.0), ("dist",)]),
        ([("TOPK", 20), ("Nucleus", 0.9), ("typ", 0.8), ("minp", 0.05), ("dist",)],
         [("top_k", 20), ("top_p", 0.9), ("typical", 0.8), ("min_p", 0.05), ("dist",)]),
        ([("typ_p", 0.7), ("top-n-sigma", 1.0), ("dist",)], [("typical", 0.7), ("top_n_sigma", 1.0), ("dist",)]),
        ([("adaptive-p", 0.5, 0.9)], [("adaptive_p", 0.5, 0.9)]),
    ]
    for a, b in same:
        ca, cb = Chain(a, V, seed=4), Chain(b, V, seed=4)
        for _ in range(5):
            assert ca.sample(row) == cb.sample(row)
    # the llama.cpp-side names in the common chain and the Chain-side ones give one chain
    c1 = common_chain(V, seed=2, samplers=["top-k", "typical", "TEMP"])
    c2 = common_chain(V, seed=2, samplers=["top_k", "typ_p", "temperature"])
    assert c1.names == c2.names


def test_unknown_sampler_names_list_the_valid_ones():
    with pytest.raises(ParameterError, match="temperature") as e:
        Chain([("tempature", 0.7)], 10)
    assert "top_k" in str(e.value) and "nucleus" in str(e.value)
    with pytest.raises(ParameterError, match="typ_p"):
        common_chain(10, samplers=["greedy"])
    with pytest.raises(ParameterError, match="k=top_k"):
        common_chain(10, samplers="kz")
    with pytest.raises(ParameterError):
        common_chain(10, samplers=[3])


def test_common_sample_resample_is_all_or_nothing():
    # The first draw is rejected by the grammar, then the mask for the resample fails: the chain must
    # be as before the call (llama.cpp's double draw happens only when the call completes).
    from lmtail.common_sampling import common_sample

    V = 96
    row = rows_saying("a", V)[0]

    class FailingResample:
        def allows(self, t):
            return False

        def mask(self):
            raise GrammarError("mask failed")

    a, b = pair(V)
    with pytest.raises(GrammarError):
        common_sample(a, row, FailingResample())
    assert a.snapshot() == b.snapshot()
    assert_same_future(a, b, V)
