"""lmtail.speculative.verify: exactness (statistical, with fixed seeds so pass/fail is
reproducible), the draw schedule, edge cases and validation.

The statistical harness uses chi-square goodness of fit at alpha = 1e-6 (critical values by the
Wilson-Hilferty approximation; cells with expected count < 5 pooled; a cell of probability 0 must
never be hit). The harness has teeth: the same checks must *fail* on known-wrong verifiers --
an argmax draft accepted with the p/q ratio (the llama.cpp example's bias), a replacement drawn
from p instead of the residual, a verifier that never accepts (passes the output-distribution test,
caught by the acceptance-rate test), and one uniform reused across positions (caught by the joint
two-token test).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmtail.errors import DTypeError, ParameterError, ShapeError
from lmtail.sampling import Mt19937
from lmtail.speculative import Decision, verify

Z_1E6 = 4.753424  # one-sided standard normal quantile at 1e-6


def chi2_crit(df: int) -> float:
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + Z_1E6 * math.sqrt(h)) ** 3


def chi2_ok(counts, probs) -> tuple[bool, str]:
    counts = np.asarray(counts, np.float64)
    probs = np.asarray(probs, np.float64)
    probs = probs / probs.sum()
    N = counts.sum()
    if N == 0:
        return False, "no samples"
    if np.any(counts[probs == 0] > 0):
        return False, f"hit a zero-probability cell {np.flatnonzero((probs == 0) & (counts > 0)).tolist()}"
    E = N * probs
    big = E >= 5
    o = list(counts[big]) + ([counts[~big & (probs > 0)].sum()] if np.any(~big & (probs > 0)) else [])
    e = list(E[big]) + ([E[~big & (probs > 0)].sum()] if np.any(~big & (probs > 0)) else [])
    o, e = np.array(o), np.array(e)
    if len(o) < 2:
        return True, "one cell"
    stat = float(((o - e) ** 2 / e).sum())
    crit = chi2_crit(len(o) - 1)
    return stat <= crit, f"chi2 {stat:.1f} vs {crit:.1f} (df {len(o) - 1}, N {int(N)})"


def skewed(rng, n, V):
    a = rng.random((n, V)) ** 3
    a /= a.sum(1, keepdims=True)
    return a.astype(np.float32)


def normalise(a):
    a = np.maximum(np.asarray(a, np.float64), 0)
    return a / a.sum()


# ---- known-wrong verifiers (teeth) ----------------------------------------------------------------
def _pick(w, u):
    c = np.cumsum(np.asarray(w, np.float64))
    return int(min(np.searchsorted(c, u * c[-1], side="left"), len(w) - 1))


def resample_from_p(draft, Q, P, orders, rng):
    for i, x in enumerate(draft):
        u = float(rng.uniform_float())
        if u < min(1.0, P[i][x] / Q[i][x]):
            continue
        y = _pick(P[i], rng.uniform_double())  # wrong: should be the residual max(p - q, 0)
        return Decision(i, y, tuple(draft[:i]) + (y,))
    y = _pick(P[len(draft)], rng.uniform_double())
    return Decision(len(draft), y, tuple(draft) + (y,))


def never_accept(draft, Q, P, orders, rng):
    y = _pick(P[0], rng.uniform_double())
    return Decision(0, y, (y,))


def reuse_uniform(draft, Q, P, orders, rng):
    u = float(rng.uniform_float())  # wrong: one uniform for every position
    for i, x in enumerate(draft):
        if u < min(1.0, P[i][x] / Q[i][x]):
            continue
        y = _pick(np.maximum(P[i] - Q[i], 0), rng.uniform_double())
        return Decision(i, y, tuple(draft[:i]) + (y,))
    y = _pick(P[len(draft)], rng.uniform_double())
    return Decision(len(draft), y, tuple(draft) + (y,))


# ---- the harness ------------------------------------------------------------------------------------
def run_fixed(verifier, P, Q, N, seed, *, draft="sample", pass_q=True):
    """N independent steps on fixed rows: drafts x_i ~ Q_i (or argmax Q_i)."""
    n = Q.shape[0]
    V = P.shape[1]
    g = np.random.default_rng(seed)
    if draft == "sample":
        xs = np.stack([g.choice(V, size=N, p=normalise(Q[i])) for i in range(n)], 1)
    else:
        xs = np.tile(Q.argmax(1), (N, 1))
    rng = Mt19937(seed)
    acc = np.zeros(N, np.int64)
    nxt = np.zeros(N, np.int64)
    first = np.zeros(N, np.int64)
    for j in range(N):
        d = verifier(xs[j].tolist(), Q if pass_q else None, P, None, rng)
        acc[j] = d.accepted
        nxt[j] = d.next_token
        first[j] = d.tokens[0]
    return acc, nxt, first


def check_fixed(P, Q, acc, nxt, first, *, one_hot_draft=None):
    """Every exactness law of one step on fixed rows; returns the failed checks."""
    n, V = Q.shape
    failures = []
    ok, msg = chi2_ok(np.bincount(first, minlength=V), P[0])
    if not ok:
        failures.append(f"first token != p0: {msg}")
    Qe = Q.astype(np.float64)
    if one_hot_draft is not None:  # the drafts are deterministic: q is one-hot at them
        Qe = np.zeros_like(Qe)
        Qe[np.arange(n), one_hot_draft] = 1.0
    a = [float(np.minimum(P[i].astype(np.float64), Qe[i]).sum()) for i in range(n)]
    law = [1 - a[0]]
    run = 1.0
    for i in range(n):
        run *= a[i]
        law.append(run * (1 - a[i + 1]) if i + 1 < n else run)
    ok, msg = chi2_ok(np.bincount(acc, minlength=n + 1), law)
    if not ok:
        failures.append(f"accepted count != closed form {np.round(law, 4).tolist()}: {msg}")
    for j in range(n + 1):
        sel = acc == j
        if sel.sum() < 50:
            continue
        want = normalise(P[j].astype(np.float64) - Qe[j]) if j < n else normalise(P[n])
        ok, msg = chi2_ok(np.bincount(nxt[sel], minlength=V), want)
        if not ok:
            failures.append(f"token after {j} accepted != {'residual' if j < n else 'bonus row'}: {msg}")
    return failures


N_STAT = 40000


@pytest.fixture(scope="module")
def rows16():
    g = np.random.default_rng(11)
    return skewed(g, 3, 16), skewed(g, 2, 16)


def test_exact_rule_passes_every_law(rows16):
    P, Q = rows16
    assert check_fixed(P, Q, *run_fixed(verify, P, Q, N_STAT, 1)) == []


def test_argmax_draft_with_one_hot_q_passes(rows16):
    P, Q = rows16
    res = run_fixed(verify, P, Q, N_STAT, 2, draft="argmax", pass_q=False)
    assert check_fixed(P, Q, *res, one_hot_draft=Q.argmax(1)) == []


def test_teeth_argmax_draft_with_ratio_fails(rows16):
    # The llama.cpp speculative example: draft = argmax q, accepted with min(1, p/q).
    P, Q = rows16
    acc, nxt, first = run_fixed(verify, P, Q, N_STAT, 3, draft="argmax", pass_q=True)
    ok, msg = chi2_ok(np.bincount(first, minlength=16), P[0])
    assert not ok, msg


def test_teeth_resample_from_p_fails(rows16):
    P, Q = rows16
    acc, nxt, first = run_fixed(resample_from_p, P, Q, N_STAT, 4)
    ok, msg = chi2_ok(np.bincount(first, minlength=16), P[0])
    assert not ok, msg


def test_teeth_never_accept_passes_distribution_but_fails_acceptance(rows16):
    P, Q = rows16
    acc, nxt, first = run_fixed(never_accept, P, Q, N_STAT // 4, 5)
    ok, _ = chi2_ok(np.bincount(first, minlength=16), P[0])
    assert ok  # a pure output-distribution test cannot see it ...
    fails = check_fixed(P, Q, acc, nxt, first)
    assert any("accepted count" in f for f in fails), fails  # ... the acceptance law does


def test_acceptance_rate_matches_sum_min(rows16):
    P, Q = rows16
    acc, _, _ = run_fixed(verify, P, Q, N_STAT, 6)
    a0 = float(np.minimum(P[0], Q[0]).astype(np.float64).sum())
    rate = float((acc >= 1).mean())
    sd = math.sqrt(a0 * (1 - a0) / N_STAT)
    assert abs(rate - a0) <= 6 * sd, (rate, a0)


# ---- joint two-token test: rows that depend on the prefix ------------------------------------------
def joint_run(verifier, N, seed, V=8):
    g = np.random.default_rng(100 + seed)
    P0, Q0 = skewed(g, 1, V)[0], skewed(g, 1, V)[0]
    P1, Q1 = skewed(g, V, V), skewed(g, V, V)  # row y0: the distribution after token y0
    P2 = skewed(g, 1, V)[0]
    rng = Mt19937(seed)
    counts = np.zeros((V, V), np.int64)
    cdf1 = np.cumsum(Q1.astype(np.float64), 1)
    cdf1 /= cdf1[:, -1:]
    x0s = g.choice(V, size=N, p=normalise(Q0))
    u1, u2 = g.random(N), g.random(N)  # inverse-CDF draws of the prefix-dependent drafts
    for j in range(N):
        x0 = int(x0s[j])
        x1 = int(np.searchsorted(cdf1[x0], u1[j], side="right"))
        d = verifier([x0, x1], np.stack([Q0, Q1[x0]]), np.stack([P0, P1[x0], P2]), None, rng)
        t = list(d.tokens)
        if len(t) < 2:  # one token emitted: the next step drafts again from the new prefix
            y0 = t[0]
            x1b = int(np.searchsorted(cdf1[y0], u2[j], side="right"))
            d2 = verifier([x1b], Q1[y0][None], np.stack([P1[y0], P2]), None, rng)
            t.append(d2.tokens[0])
        counts[t[0], t[1]] += 1
    want = P0.astype(np.float64)[:, None] * P1.astype(np.float64)
    return counts, want


def test_joint_two_token_law():
    counts, want = joint_run(verify, 30000, 7)
    ok, msg = chi2_ok(counts.ravel(), want.ravel())
    assert ok, msg


def test_teeth_reused_uniform_fails_joint_test():
    counts, want = joint_run(reuse_uniform, 30000, 8)
    ok, msg = chi2_ok(counts.ravel(), want.ravel())
    assert not ok, msg


# ---- the draw schedule -----------------------------------------------------------------------------
@pytest.mark.parametrize("stdlib", ["libstdc++", "libc++", "c++26"])
def test_engine_outputs_per_step(rows16, stdlib):
    P, Q = rows16
    g = np.random.default_rng(9)
    rng = Mt19937(123)
    seen = set()
    for _ in range(300):
        x = [int(g.integers(16)), int(g.integers(16))]
        before = rng.consumed
        d = verify(x, Q, P, None, rng, stdlib)
        used = rng.consumed - before
        assert d.draws == used
        assert used == (d.accepted + 3 if d.accepted < 2 else 2 + 2)
        seen.add(d.accepted)
    assert seen == {0, 1, 2}


def test_same_seed_same_bytes(rows16):
    P, Q = rows16
    a = [verify([1, 2], Q, P, None, r) for r in [Mt19937(5)] for _ in range(200)]
    b = [verify([1, 2], Q, P, None, r) for r in [Mt19937(5)] for _ in range(200)]
    assert a == b


def test_replays_by_hand():
    # One step replayed from the documented schedule: float draw per draft, double draw to select.
    P = np.array([[0.1, 0.6, 0.3], [0.2, 0.2, 0.6]], np.float32)
    Q = np.array([[0.5, 0.25, 0.25]], np.float32)
    for seed in range(50):
        r = Mt19937(seed)
        d = verify([0], Q, P, None, r)
        ref = Mt19937(seed)
        u = float(ref.uniform_float())
        if u < 0.1 / 0.5:
            y = _pick(P[1], ref.uniform_double())
            assert (d.accepted, d.next_token) == (1, y)
        else:
            y = _pick(np.maximum(P[0] - Q[0], 0), ref.uniform_double())
            assert (d.accepted, d.next_token) == (0, y)
        assert r == ref


# ---- edge cases ------------------------------------------------------------------------------------
def test_zero_probability_token_is_never_emitted():
    V = 8
    g = np.random.default_rng(3)
    P = skewed(g, 2, V)
    P[:, 5] = 0.0
    P = (P / P.sum(1, keepdims=True)).astype(np.float32)
    Q = np.full((1, V), 1.0 / V, np.float32)
    rng = Mt19937(1)
    for _ in range(3000):
        d = verify([5], Q, P, None, rng)
        assert d.accepted == 0 and d.next_token != 5
        assert math.isfinite(d.logprobs[0])


def test_minus_inf_logits_become_zero_mass():
    logits = np.array([2.0, -np.inf, 0.5, -np.inf, 1.0], np.float32)
    p = np.exp(logits - logits.max())
    p = (p / p.sum()).astype(np.float32)
    P = np.stack([p, p])
    Q = np.array([[0.2] * 5], np.float32)
    rng = Mt19937(2)
    for _ in range(2000):
        d = verify([int(np.random.default_rng(_).integers(5))], Q, P, None, rng)
        assert not set(d.tokens) & {1, 3} or d.accepted  # never emitted by a draw
        assert d.next_token not in (1, 3)


def test_q_zero_at_draft_accepts():
    P = np.array([[0.5, 0.5], [0.5, 0.5]], np.float32)
    Q = np.array([[1.0, 0.0]], np.float32)
    rng = Mt19937(0)
    for _ in range(200):
        assert verify([1], Q, P, None, rng).accepted == 1


def test_zero_residual_falls_back_to_p():
    # p <= q everywhere (p sums to 0.9995, inside the tolerance): a rejection leaves no residual.
    P = np.array([[0.4995, 0.5], [0.5, 0.5]], np.float32)
    Q = np.array([[0.5, 0.5]], np.float32)
    for seed in range(20000):
        probe = Mt19937(seed)
        if float(probe.uniform_float()) >= 0.4995 / 0.5:
            break
    else:
        pytest.fail("no rejecting seed found")
    r = Mt19937(seed)
    d = verify([0], Q, P, None, r)
    assert d.accepted == 0
    ref = Mt19937(seed)
    ref.uniform_float()
    assert d.next_token == _pick(P[0], ref.uniform_double())


def test_sparse_rows_equal_dense_rows(rows16):
    P, Q = rows16
    order = [np.argsort(-P[i], kind="stable").astype(np.int32) for i in range(3)]
    sparseP = [(order[i], P[i][order[i]]) for i in range(3)]
    sparseQ = [(np.arange(16), Q[i]) for i in range(2)]
    for seed in range(100):
        x = [seed % 16, (seed * 7) % 16]
        a = verify(x, Q, P, order, Mt19937(seed))
        b = verify(x, sparseQ, sparseP, None, Mt19937(seed), n_vocab=16)
        assert a == b


def test_one_hot_none_equals_explicit_one_hot(rows16):
    P, Q = rows16
    for seed in range(100):
        x = [seed % 16, (3 * seed) % 16]
        oh = np.zeros((2, 16), np.float32)
        oh[0, x[0]] = oh[1, x[1]] = 1.0
        assert verify(x, None, P, None, Mt19937(seed)) == verify(x, oh, P, None, Mt19937(seed))


def test_full_vocab_rows():
    V = 202048
    g = np.random.default_rng(0)
    logits = (g.standard_normal((3, V)) * 3).astype(np.float32)
    P = np.exp(logits - logits.max(1, keepdims=True))
    P = (P / P.sum(1, keepdims=True)).astype(np.float32)
    Q = np.roll(P[:2], 1, axis=1).copy()
    rng = Mt19937(4)
    for _ in range(10):
        d = verify([int(P[0].argmax()), int(P[1].argmax())], Q, P, None, rng)
        assert 0 <= d.next_token < V and len(d.tokens) == d.accepted + 1


# ---- validation ------------------------------------------------------------------------------------
@pytest.fixture()
def good():
    P = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], np.float32)
    Q = np.array([[0.3, 0.3, 0.4]], np.float32)
    return P, Q


def test_validation(good):
    P, Q = good
    r = Mt19937(1)
    with pytest.raises(ParameterError):
        verify([3], Q, P, None, r)  # token out of range
    with pytest.raises(ParameterError):
        verify([-1], Q, P, None, r)
    with pytest.raises(ShapeError):
        verify([0], Q, P[:1], None, r)  # n + 1 target rows
    with pytest.raises(ShapeError):
        verify([0, 1], Q, np.vstack([P, P[:1]]), None, r)  # n draft rows
    with pytest.raises(DTypeError):
        verify([0], Q.astype(np.float64), P, None, r)
    bad = P.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ParameterError, match="finite"):
        verify([0], Q, bad, None, r)
    with pytest.raises(ParameterError, match="sum to 1"):
        verify([0], Q, P * 2, None, r)
    neg = P.copy()
    neg[1] = [-0.1, 0.6, 0.5]
    with pytest.raises(ParameterError):
        verify([0], Q, neg, None, r)
    with pytest.raises(ParameterError, match="rng"):
        verify([0], Q, P, None, np.random.default_rng(0))
    with pytest.raises(ParameterError, match="stdlib"):
        verify([0], Q, P, None, r, "msvc")
    with pytest.raises(ShapeError):
        verify([0], Q, P, [np.arange(3)], r)  # n + 1 orders
    assert r.consumed == 0


def test_bad_order_leaves_the_stream_untouched(good):
    P, Q = good
    for seed in range(200):  # find a step that rejects, so the order is used
        if verify([2], Q, P, None, Mt19937(seed)).accepted == 0:
            break
    r = Mt19937(seed)
    snap = r.snapshot()
    with pytest.raises(ParameterError, match="cover"):
        verify([2], Q, P, [np.array([0], np.int32), np.arange(3)], r)  # misses token 1 of the residual
    with pytest.raises(ParameterError, match="twice"):
        verify([2], Q, P, [np.array([0, 1, 0], np.int32), np.arange(3)], r)
    with pytest.raises(ParameterError, match="outside"):
        verify([2], Q, P, [np.array([0, 1, 7], np.int32), np.arange(3)], r)
    assert r.snapshot() == snap


def test_request_state_stream_is_accepted(good):
    from lmtail.sampling import RequestSamplerState, common_chain

    P, Q = good
    chain = common_chain(3, seed=9)
    st = RequestSamplerState(chain)
    before = st.distribution_rng.consumed
    d = verify([0], Q, P, None, st)
    assert st.distribution_rng.consumed - before == d.draws


@pytest.mark.parametrize("stdlib", ["libstdc++", "libc++", "c++26"])
def test_fast_float_draw_equals_the_float32_draw(stdlib):
    a, b = Mt19937(77), Mt19937(77)
    for _ in range(20000):
        assert a.uniform_float_value(stdlib) == float(b.uniform_float(stdlib))
    assert a == b


def test_select_walk_matches_its_definition():
    # The blocked walk (csrc/cpu/speculative.cpp) against a direct transcription of its definition.
    from lmtail import _core

    def ref(w, u):
        B = 32
        blocks = []
        for lo in range(0, len(w), B):
            s = 0.0
            for v in w[lo:lo + B]:
                s += float(v)
            blocks.append(s)
        total = 0.0
        for s in blocks:
            total += s
        target = u * total
        run = 0.0
        for b, s in enumerate(blocks):
            if run + s >= target:
                r = run
                for i in range(b * B, min(b * B + B, len(w))):
                    r += float(w[i])
                    if r >= target and w[i] > 0:
                        return i
            run += s
        pos = np.flatnonzero(w > 0)
        return int(pos[-1]) if len(pos) else -1

    g = np.random.default_rng(0)
    for trial in range(300):
        n = int(g.integers(1, 300))
        w = (g.random(n) ** 4).astype(np.float32)
        w[g.random(n) < 0.3] = 0.0
        for u in (0.0, float(g.random()), 1.0 - 2 ** -53):
            assert _core.spec_select(w, n, u) == ref(w, u)
    assert _core.spec_select(np.zeros(5, np.float32), 5, 0.0) == -1


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_untrusted_inputs_never_crash(data):
    # Random geometry, orders with out-of-range and repeated ids, sparse rows with bad ids:
    # every call returns a Decision or raises a typed lmtail error.
    from lmtail.errors import LmtailError

    V = data.draw(st.integers(1, 40))
    n = data.draw(st.integers(0, 3))
    g = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    P = skewed(g, n + 1, V)
    Q = skewed(g, n, V) if data.draw(st.booleans()) else None
    toks = [data.draw(st.integers(-2, V + 1)) for _ in range(n)]
    orders = None
    if data.draw(st.booleans()):
        orders = [np.array(data.draw(st.lists(st.integers(-3, V + 2), max_size=V + 3)), np.int32)
                  for _ in range(n + 1)]
    if data.draw(st.booleans()) and n:
        ids = np.array(data.draw(st.lists(st.integers(-3, V + 2), min_size=1, max_size=V + 3)), np.int64)
        pr = np.full(len(ids), 1.0 / len(ids), np.float32)
        P = list(P)
        P[0] = (ids, pr)
    try:
        d = verify(toks, Q, P, orders, Mt19937(1), n_vocab=V)
    except LmtailError:
        return
    assert 0 <= d.accepted <= n and all(0 <= t < V for t in d.tokens)


def test_kernels_do_not_depend_on_threads_or_precomputed_blocks():
    from lmtail import _core

    V = 202048 + 77
    g = np.random.default_rng(5)
    p = (g.random(V) ** 3).astype(np.float32)
    q = (g.random(V) ** 3).astype(np.float32)
    outs = []
    for th in (1, 2, 3):
        w = np.empty(V, np.float32)
        b = np.empty(V // 32 + 1, np.float64)
        n = _core.spec_residual_weights(p, q, None, w, b, th)
        outs.append((n, w.tobytes(), b[: (V + 31) // 32].tobytes(), _core.spec_row_stats(p, th)))
    assert outs[0] == outs[1] == outs[2]
    w = np.frombuffer(outs[0][1], np.float32)
    b = np.frombuffer(outs[0][2], np.float64)
    for u in (0.0, 0.3, 0.999999):
        assert _core.spec_select(w, V, u, b) == _core.spec_select(w, V, u)


@pytest.mark.parametrize("stdlib", ["libstdc++", "libc++", "c++26"])
def test_replay_across_engine_twists(stdlib):
    # Many consecutive steps on one stream, so the engine's state index crosses its 624-word
    # twist repeatedly (the accept tests take a C++ fast path when no twist falls inside a step
    # and the Python loop otherwise): every step equals a replay from the documented schedule.
    g = np.random.default_rng(21)
    P = skewed(g, 4, 6)
    Q = skewed(g, 3, 6)
    r, ref = Mt19937(99), Mt19937(99)
    for step in range(900):
        x = [int(v) for v in g.integers(0, 6, 3)]
        d = verify(x, Q, P, None, r, stdlib)
        acc = 0
        for i in range(3):
            u = ref.uniform_float_value(stdlib)
            p, q = float(P[i][x[i]]), float(Q[i][x[i]])
            if p > 0 and (q <= 0 or p >= q or u < p / q):
                acc += 1
                continue
            break
        assert d.accepted == acc, step
        if acc < 3:
            y = _pick(np.maximum(P[acc] - Q[acc], 0), ref.uniform_double(stdlib))
        else:
            y = _pick(P[3], ref.uniform_double(stdlib))
        assert d.next_token == y, step
        assert r == ref and r.consumed == ref.consumed


def test_candidate_draft_rows_against_full_target_rows():
    # A draft model's top k against the target's full rows equals the same q spread densely,
    # including the residual draw and a given order (dense p, sparse q paths).
    V = 5000
    g = np.random.default_rng(8)
    P = skewed(g, 3, V)
    dense_q, sparse_q = [], []
    for i in range(2):
        ids = g.choice(V, 41, replace=False).astype(np.int32)
        q = (g.random(41) ** 2).astype(np.float32)
        q = (q / q.sum()).astype(np.float32)
        row = np.zeros(V, np.float32)
        row[ids] = q
        dense_q.append(row)
        sparse_q.append((ids, q))
    orders = [np.argsort(-P[i], kind="stable").astype(np.int32) for i in range(3)]
    seen = set()
    for seed in range(300):
        x = [int(sparse_q[0][0][seed % 41]), int(sparse_q[1][0][(7 * seed) % 41])]
        for order in (None, orders):
            a = verify(x, np.stack(dense_q), P, order, Mt19937(seed))
            b = verify(x, sparse_q, P, order, Mt19937(seed))
            assert a == b
            seen.add(a.accepted)
    assert seen == {0, 1, 2}
