"""The read-back routes: topk_needed, exact sampling from top-k candidates (token and RNG state equal
to the whole-row route, and to llama.cpp), Head.row, the bytes each route reads back, and
speculative verification on top of them (sample-and-match, greedy)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lmtail
from lmtail.errors import ParameterError, ShapeError
from lmtail.sampling import (STDLIBS, Chain, TopKRows, batch_topk_needed, common_chain, common_spec,
                             sample_topk, topk_needed)
from lmtail.speculative import verify_greedy, verify_sample_and_match
from _util import q5k_matrix


def canonical_topk(row: np.ndarray, m: int):
    """The m largest logits in canonical order (value descending, id ascending)."""
    order = np.lexsort((np.arange(len(row)), -row.astype(np.float64)))[:m]
    return order.astype(np.uint32), row[order]


# ---- topk_needed ---------------------------------------------------------------------------------
def spec(**params):
    return common_spec(**params)[0]


def test_default_common_chain_needs_its_top_k():
    assert topk_needed(spec()) == 40
    assert topk_needed(common_chain(1000, seed=1)) == 40


def test_lowering_samplers_add_to_k():
    assert topk_needed(spec(logit_bias={5: -1.0, 9: float("-inf"), 5000: 0.0})) == 43
    assert topk_needed(spec(logit_bias={5: -1.0}), suppressed=[5, 6]) == 42  # union, not sum
    assert topk_needed(spec(top_k=20, penalty_repeat=1.1, penalty_last_n=64)) == 84  # the PR's 20 + 64
    assert topk_needed(spec(penalty_freq=0.5, penalty_present=0.2, penalty_last_n=16)) == 56
    assert topk_needed([("greedy",)]) == 1
    assert topk_needed([("logit_bias", [(3, -2.0)]), ("greedy",)]) == 2
    assert topk_needed([("top_k", 5), ("top_p", 0.9), ("temp", 0.7), ("dist",)]) == 5


WHOLE_ROW = {
    "n_probs": dict(n_probs=3),
    "mirostat": dict(mirostat=1),
    "mirostat_v2": dict(mirostat=2),
    "dry": dict(dry_multiplier=0.8, dry_sequence_breakers=()),
    "top_n_sigma": dict(top_n_sigma=1.5),
    "top_p_before_top_k": dict(samplers="pkmt"),
    "min_p_before_top_k": dict(samplers="mkt"),
    "typical_before_top_k": dict(samplers="ykt", typ_p=0.9),
    "xtc_before_top_k": dict(samplers="xkt", xtc_probability=0.5),
    "dynamic_temperature": dict(dynatemp_range=0.5),
    "positive_bias": dict(logit_bias={7: 0.5}),
    "negative_frequency": dict(penalty_freq=-0.5),
    "negative_presence": dict(penalty_present=-0.5),
    "repeat_below_one": dict(penalty_repeat=0.9),
    "no_top_k": dict(top_k=0),
}


@pytest.mark.parametrize("case", sorted(WHOLE_ROW))
def test_whole_distribution_chains_need_the_row(case):
    params = dict(WHOLE_ROW[case])
    n_probs = params.pop("n_probs", 0)
    assert topk_needed(spec(**params), n_probs=n_probs) == 0
    assert topk_needed(common_chain(1000, seed=1, n_probs=n_probs, **params)) == 0


def test_disabled_samplers_count_as_absent():
    k = topk_needed(spec(top_n_sigma=-1.0, typ_p=1.0, xtc_probability=0.0, dry_multiplier=0.0, min_p=0.0,
                         top_p=1.0, dynatemp_range=0.0, penalty_repeat=1.0, samplers="edskypmxt"))
    assert k == 40
    assert topk_needed(spec(samplers="pkmt", top_p=1.0, min_p=0.0)) == 40  # disabled top-p before top-k


def byte_vocab():
    from lmtail.grammar import Vocab

    # one token per printable byte, plus an EOG token with empty text
    return Vocab([bytes([c]) for c in range(32, 127)] + [b""], eog_ids=[95])


def test_grammar_interplay():
    from lmtail.grammar import Grammar, GrammarMatcher
    from lmtail.grammar.lazy import LazyGrammarMatcher

    vocab = byte_vocab()
    g = Grammar.parse('root ::= "x" "ab"')
    assert topk_needed(spec(), grammar=GrammarMatcher(g, vocab)) == 0  # constrains: whole row
    lazy = LazyGrammarMatcher(g, vocab, trigger_words=["x"])
    assert lazy.awaiting_trigger
    assert topk_needed(spec(), grammar=lazy) == 40  # waiting for its trigger: constrains nothing
    lazy.accept(ord("x") - 32)
    assert not lazy.awaiting_trigger
    assert topk_needed(spec(), grammar=lazy) == 0


def test_sample_and_match_stops_at_a_grammar_trigger_on_both_routes():
    from lmtail.grammar import Grammar
    from lmtail.grammar.lazy import LazyGrammarMatcher

    vocab = byte_vocab()
    V = vocab.n_vocab
    tok = {c: ord(c) - 32 for c in "abxy"}
    rows = np.full((5, V), -8.0, np.float32)
    for i, c in enumerate("yxaby"):
        rows[i, tok[c]] = 9.0  # the target says y, x, a, b, y
    draft = [tok[c] for c in "yxab"]
    g = Grammar.parse('root ::= "x" "ab"')
    results = []
    for route in ("rows", "topk"):
        chain = common_chain(V, seed=3, top_k=4)
        lazy = LazyGrammarMatcher(g, vocab, trigger_words=["x"])
        if route == "rows":
            d = verify_sample_and_match(chain, rows, draft, grammar=lazy)
        else:
            ids = np.stack([canonical_topk(r, 5)[0] for r in rows])
            vals = np.stack([canonical_topk(r, 5)[1] for r in rows])
            d = verify_sample_and_match(chain, TopKRows(ids, vals, lambda t: rows[t]), draft, grammar=lazy)
        assert d.tokens == (tok["y"], tok["x"]) and d.accepted == 2 and d.next_token is None
        assert not lazy.awaiting_trigger
        results.append((d, chain.snapshot()))
    assert results[0] == results[1]


def test_k_as_expensive_as_the_row_reads_the_row():
    assert topk_needed(spec(top_k=40), n_vocab=82) == 0
    assert topk_needed(spec(top_k=40), n_vocab=83) == 40


def test_batch_k():
    assert batch_topk_needed([40, 84, 1]) == 84
    assert batch_topk_needed([40, 0, 1]) == 0
    assert batch_topk_needed([]) == 0


def test_bad_specs():
    with pytest.raises(ParameterError):
        topk_needed([("top_k",)])
    with pytest.raises(ParameterError):
        topk_needed("top_k")
    with pytest.raises(ParameterError):
        topk_needed(spec(), n_probs=-1)


# ---- exactness of the top-k route ------------------------------------------------------------------
def gen_logits(kind: str, g, V: int) -> np.ndarray:
    if kind == "normal":
        return (g.standard_normal(V) * 3).astype(np.float32)
    if kind == "quantized":  # many ties everywhere
        return (np.round(g.standard_normal(V) * 4) / 2).astype(np.float32)
    if kind == "fewvals":
        return g.integers(-3, 4, V).astype(np.float32)
    if kind == "bf16":  # reduced-precision logits: ties sometimes inside the kept set, often not
        x = (g.standard_normal(V) * 3).astype(np.float32)
        return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    if kind == "tail_ties":  # distinct values at the top, a sea of ties below them
        x = np.round(g.standard_normal(V)).astype(np.float32)
        n_top = min(250, V // 2)
        top = g.choice(V, n_top, replace=False)
        x[top] = 3.0 + np.sort(g.random(n_top)).astype(np.float32) * 5
        return x
    if kind == "peaked":
        x = (g.standard_normal(V)).astype(np.float32)
        x[g.integers(V)] += 12
        return x
    raise AssertionError(kind)


CHAINS = {
    "default": dict(),
    "greedy_like": dict(temp=0.0),
    "top_k_5": dict(top_k=5, top_p=0.9),
    "penalised": dict(top_k=8, penalty_repeat=1.3, penalty_freq=0.2, penalty_present=0.1, penalty_last_n=6),
    "biased": dict(logit_bias={3: -2.0, 11: float("-inf"), 3 + 0: -0.5}),
    "big_k": dict(top_k=200, min_p=0.0, top_p=1.0),
    "adaptive": dict(samplers="kt", adaptive_target=0.3),
    "xtc_after": dict(top_k=20, xtc_probability=0.6, xtc_threshold=0.05, min_p=0.0),
}


def run_pair(ref, ours, kind, seed, V, steps, *, snapshots=True):
    """`ref` samples whole rows, `ours` the top-k route, for `steps` tokens; both accept each token."""
    k = topk_needed(ours)
    assert k > 0
    g = np.random.default_rng(seed)
    toks = []
    for _ in range(steps):
        row = gen_logits(kind, g, V)
        ids, vals = canonical_topk(row, k + 1)
        ta = ref.sample(row)
        tb = sample_topk(ours, ids, vals, lambda row=row: row)
        assert ta == tb
        ref.accept(ta)
        ours.accept(tb)
        if snapshots:
            assert ref.snapshot() == ours.snapshot()  # every RNG stream and history identical
        toks.append(ta)
    return toks


def run_both(params, kind, seed, V=600, steps=12, stdlib="libstdc++"):
    """Whole-row chain and top-k chain side by side for `steps` tokens."""
    a = common_chain(V, seed=seed, stdlib=stdlib, **params)
    b = common_chain(V, seed=seed, stdlib=stdlib, **params)
    return run_pair(a, b, kind, seed, V, steps)


@pytest.mark.parametrize("kind", ["normal", "quantized", "fewvals", "peaked", "bf16", "tail_ties"])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_topk_route_equals_whole_row(name, kind):
    for seed in range(4):
        run_both(CHAINS[name], kind, seed)


def test_both_paths_are_exercised():
    # The equality tests above mean something only if the candidates decide most rows of
    # tie-free logits and tie-heavy rows fall back.
    from lmtail.sampling import topk_route

    for kind, want in (("normal", "topk"), ("tail_ties", "topk"), ("fewvals", "fallback")):
        before = (topk_route.STATS.topk, topk_route.STATS.fallback)
        run_both(CHAINS["default"], kind, 1)
        d_topk = topk_route.STATS.topk - before[0]
        d_fb = topk_route.STATS.fallback - before[1]
        assert (d_topk if want == "topk" else d_fb) == 12, (kind, d_topk, d_fb)
    before = (topk_route.STATS.topk, topk_route.STATS.fallback)
    for seed in range(6):
        run_both(CHAINS["top_k_5"], "bf16", seed)
    assert topk_route.STATS.topk > before[0] and topk_route.STATS.fallback > before[1]


@pytest.mark.parametrize("stdlib", STDLIBS)
def test_topk_route_every_stdlib(stdlib):
    run_both(CHAINS["default"], "quantized", 3, stdlib=stdlib)


def test_fallback_is_taken_on_boundary_ties():
    from lmtail.sampling import topk_route

    V = 300
    chain = common_chain(V, seed=1, top_k=5)
    row = np.zeros(V, np.float32)
    row[:3] = [5, 4, 3]  # ties from the 4th place on: the set cannot be decided from 6 candidates
    ids, vals = canonical_topk(row, 6)
    before = topk_route.STATS.fallback
    calls = []
    tok = sample_topk(chain, ids, vals, lambda: calls.append(1) or row)
    assert calls and topk_route.STATS.fallback == before + 1
    assert tok == common_chain(V, seed=1, top_k=5).sample(row)


def test_no_fallback_without_ties():
    V = 300
    chain = common_chain(V, seed=1, top_k=5)
    row = np.linspace(-3, 3, V).astype(np.float32)
    ids, vals = canonical_topk(row, 6)
    tok = sample_topk(chain, ids, vals, None)  # no row: must not be needed
    assert tok == common_chain(V, seed=1, top_k=5).sample(row)


def test_too_few_candidates_fall_back():
    V = 300
    row = np.linspace(-3, 3, V).astype(np.float32)
    ids, vals = canonical_topk(row, 5)  # chain needs 40 + 1
    with pytest.raises(ParameterError, match="row"):
        sample_topk(common_chain(V, seed=1), ids, vals, None)
    assert sample_topk(common_chain(V, seed=1), ids, vals, lambda: row) == common_chain(V, seed=1).sample(row)


@st.composite
def chain_params(draw):
    p = {}
    p["top_k"] = draw(st.integers(1, 60))
    p["top_p"] = draw(st.sampled_from([1.0, 0.95, 0.5]))
    p["min_p"] = draw(st.sampled_from([0.0, 0.05, 0.3]))
    p["temp"] = draw(st.sampled_from([0.0, 0.5, 0.8, 1.5]))
    if draw(st.booleans()):
        p["penalty_last_n"] = draw(st.integers(1, 8))
        p["penalty_repeat"] = draw(st.sampled_from([1.0, 1.1, 2.0]))
        p["penalty_freq"] = draw(st.sampled_from([0.0, 0.3]))
        p["penalty_present"] = draw(st.sampled_from([0.0, 0.5]))
    if draw(st.booleans()):
        p["logit_bias"] = [(draw(st.integers(0, 99)), draw(st.sampled_from([-1.0, -0.25, 0.0, float("-inf")])))
                           for _ in range(draw(st.integers(1, 4)))]
    if draw(st.booleans()):
        p["xtc_probability"] = 0.5
        p["xtc_threshold"] = 0.1
    return p


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=chain_params(), kind=st.sampled_from(["normal", "quantized", "fewvals", "bf16", "tail_ties"]),
       seed=st.integers(0, 2 ** 32 - 2))
def test_property_random_chains_tie_heavy(params, kind, seed):
    a = common_chain(100, seed=seed, **params)
    if topk_needed(a) == 0:
        return
    run_both(params, kind, seed % 1000, V=100, steps=6)


# ---- against llama.cpp -----------------------------------------------------------------------------
@pytest.mark.oracle
@pytest.mark.parametrize("name", ["default", "top_k_5", "penalised", "biased", "big_k"])
def test_topk_route_equals_llama_cpp(name):
    from oracle import sampling as O

    O.require()
    V = 2000
    for seed in (1, 7):
        ref = O.OracleCommonChain(V, seed=seed, **CHAINS[name])
        ours = common_chain(V, seed=seed, **CHAINS[name])
        run_pair(ref, ours, "quantized" if seed == 7 else "normal", seed, V, 16, snapshots=False)


# ---- Head: row(t) and bytes read back ---------------------------------------------------------------
COLS = 256


@pytest.fixture(scope="module")
def head():
    q = q5k_matrix(3000, COLS, seed=5)
    g = np.random.default_rng(0).uniform(0.5, 1.5, COLS).astype(np.float32)
    return lmtail.Head(q, g, logit_scale=0.25, softcap=15.0)


def hidden(T, seed=0):
    return (np.random.default_rng(seed).standard_normal((T, COLS)) * 4).astype(np.float32)


@pytest.mark.parametrize("T", [1, 3, 8])
def test_bytes_read_back_per_route(head, T):
    h = hidden(T, T)
    head.greedy(h)
    assert head.last_bytes_read_back == 4 * T
    k = 40
    head.topk(h, k + 1)
    assert head.last_bytes_read_back == 8 * (k + 1) * T
    head.logits(h)
    assert head.last_bytes_read_back == 4 * head.rows * T
    before = head.bytes_read_back
    head.row(T - 1)
    assert head.last_bytes_read_back == 4 * head.rows
    assert head.bytes_read_back == before + 4 * head.rows


def test_row_is_the_last_compute_and_read_only(head):
    h = hidden(4, 1)
    full = head.logits(h).copy()
    head.topk(h, 5)
    for t in range(4):
        r = head.row(t)
        assert np.array_equal(r, full[t])
        assert not r.flags.writeable
    with pytest.raises(ParameterError):
        head.row(4)
    bad = h.copy()
    bad[0, 0] = np.nan
    with pytest.raises(lmtail.NonFiniteLogitsError):
        head.greedy(bad)  # refused before any compute: the last compute's rows stay valid
    assert np.array_equal(head.row(2), full[2])


def test_failed_compute_leaves_no_row():
    q = q5k_matrix(10, COLS, seed=9).copy()
    q[4, 0:2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)  # +inf block scale
    h = lmtail.Head(q, None, softcap=20.0)
    with pytest.raises(lmtail.NonFiniteLogitsError):
        h.topk(hidden(1), 3)
    with pytest.raises(ParameterError):
        h.row(0)


def test_head_topk_route_end_to_end(head):
    V = head.rows
    chains_a = [common_chain(V, seed=s, top_k=10, penalty_repeat=1.2, penalty_last_n=4) for s in range(3)]
    chains_b = [common_chain(V, seed=s, top_k=10, penalty_repeat=1.2, penalty_last_n=4) for s in range(3)]
    k = batch_topk_needed(topk_needed(c) for c in chains_b)
    assert k == 14
    for step in range(5):
        h = hidden(3, 10 + step)
        full = head.logits(h).copy()
        ids, vals = head.topk(h, k + 1)
        assert head.last_bytes_read_back == 8 * (k + 1) * 3
        src = TopKRows(ids, vals, head.row)
        for t in range(3):
            ta = chains_a[t].sample(full[t])
            tb = src.sample(chains_b[t], t)
            assert ta == tb
            chains_a[t].accept(ta)
            chains_b[t].accept(tb)


# ---- speculative verification on the routes --------------------------------------------------------
def llama_sample_and_accept_n(sample, accept, draft, eog=()):
    """common_sampler_sample_and_accept_n (llama.cpp 0.3.36, common/sampling.cpp) as a loop."""
    out = []
    i = 0
    while i < len(draft):
        t = sample(i)
        accept(t)
        out.append(t)
        if draft[i] != t or (t in eog and i + 1 < len(draft)):
            break
        i += 1
    if i == len(draft):
        t = sample(i)
        accept(t)
        out.append(t)
    return out


def target_rows(V, n, seed, kind="normal"):
    g = np.random.default_rng(seed)
    return np.stack([gen_logits(kind, g, V) for _ in range(n + 1)])


def test_sample_and_match_is_the_llama_loop():
    V = 500
    for seed in range(30):
        rows = target_rows(V, 4, seed, "peaked" if seed % 2 else "quantized")
        ref = common_chain(V, seed=seed, top_k=5)
        mine = common_chain(V, seed=seed, top_k=5)
        greedy_guess = [int(np.argmax(r)) for r in rows[:4]]
        want = llama_sample_and_accept_n(lambda i: ref.sample(rows[i]), ref.accept, greedy_guess)
        d = verify_sample_and_match(mine, rows, greedy_guess)
        assert list(d.tokens) == want
        assert d.accepted == sum(1 for a, b in zip(want, greedy_guess) if a == b) if len(want) <= 4 else 4
        assert mine.snapshot() == ref.snapshot()


def test_sample_and_match_eog_stop():
    V = 50
    rows = np.full((4, V), -5.0, np.float32)
    rows[:, 7] = 10.0  # token 7 certain at every position
    d = verify_sample_and_match(common_chain(V, seed=1), rows, [7, 7, 7], eog_ids=[7])
    assert d.tokens == (7,) and d.accepted == 1 and d.next_token is None
    d = verify_sample_and_match(common_chain(V, seed=1), rows[:2], [7], eog_ids=[7])
    assert d.tokens == (7, 7) and d.accepted == 1  # a trailing EOG draft is kept, the bonus follows


def test_sample_and_match_topk_route_equals_whole_rows(head):
    V = head.rows
    for seed in range(6):
        h = hidden(5, 100 + seed)
        full = head.logits(h).copy()
        draft = [int(np.argmax(full[i])) if (seed + i) % 3 else 7 for i in range(4)]
        a = common_chain(V, seed=seed, top_k=12)
        b = common_chain(V, seed=seed, top_k=12)
        da = verify_sample_and_match(a, full, draft)
        ids, vals = head.topk(h, topk_needed(b) + 1)
        db = verify_sample_and_match(b, TopKRows(ids, vals, head.row), draft)
        assert da == db
        assert a.snapshot() == b.snapshot()


def test_sample_and_match_logprobs_from_the_target():
    from lmtail.sampling import server_logprobs

    V = 300
    rows = target_rows(V, 3, 4, "peaked")
    draft = [int(np.argmax(r)) for r in rows[:3]]
    d = verify_sample_and_match(common_chain(V, seed=2), rows, draft, n_probs=1)
    for i, t in enumerate(d.tokens):
        p = server_logprobs(rows[i], 1, t).prob
        assert d.logprobs[i] == pytest.approx(np.log(p), rel=1e-12)
        assert d.logprobs[i] != 0.0


def test_sample_and_match_validation():
    V = 20
    rows = target_rows(V, 2, 0)
    with pytest.raises(ShapeError):
        verify_sample_and_match(common_chain(V, seed=1), rows[:2], [1, 2])
    with pytest.raises(ParameterError):
        verify_sample_and_match(common_chain(V, seed=1), rows, [1, 99])


def test_verify_greedy_reads_four_bytes_per_row(head):
    h = hidden(5, 3)
    best = head.greedy(h).tolist()
    for draft, acc in ((best[:4], 4), ([best[0], (best[1] + 1) % head.rows, best[2], best[3]], 1)):
        d = verify_greedy(head, h, draft)
        assert head.last_bytes_read_back == 4 * 5
        assert d.accepted == acc and d.next_token == best[acc]
        assert d.tokens == tuple(best[: acc + 1])
    with pytest.raises(ShapeError):
        verify_greedy(head, h[:3], best[:4])


@pytest.mark.oracle
def test_sample_and_match_equals_llama_cpp_samplers():
    # llama-server's loop driven by llama.cpp's own sampler chain (ctypes) against
    # verify_sample_and_match, on both routes: same tokens, and the streams stay aligned.
    from oracle import sampling as O

    O.require()
    V = 3000
    params = dict(top_k=20, penalty_repeat=1.2, penalty_last_n=8)
    for seed in (3, 11):
        ref = O.OracleCommonChain(V, seed=seed, **params)
        rows_chain = common_chain(V, seed=seed, **params)
        topk_chain = common_chain(V, seed=seed, **params)
        k = topk_needed(topk_chain)
        g = np.random.default_rng(seed)
        for step in range(6):
            rows = np.stack([gen_logits("peaked" if step % 2 else "normal", g, V) for _ in range(4)])
            draft = [int(np.argmax(r)) for r in rows[:3]]
            want = llama_sample_and_accept_n(lambda i: ref.sample(rows[i]), ref.accept, draft)
            d_rows = verify_sample_and_match(rows_chain, rows, draft)
            cand = [canonical_topk(r, k + 1) for r in rows]
            src = TopKRows(np.stack([c[0] for c in cand]), np.stack([c[1] for c in cand]), lambda t: rows[t])
            d_topk = verify_sample_and_match(topk_chain, src, draft)
            assert list(d_rows.tokens) == want == list(d_topk.tokens)
