"""lmtail.sampling API: typed errors, clamps, snapshot/restore, RequestSamplerState, logprobs, and
the candidate-level expectations of llama.cpp's tests/test-sampling.cpp (no oracle needed)."""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from lmtail.errors import DTypeError, ParameterError, ShapeError
from lmtail.sampling import (Candidates, Chain, Mt19937, RequestSamplerState, SamplingError, common_chain,
                             post_sampling_logprobs, server_logprobs)
from lmtail.sampling import samplers as S


def logits_of(n, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


# ---- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, match", [
    ([("nucleus_x", 0.9)], "unknown sampler"),
    ([("top_k", 4.5)], "top_k.k: expected an integer"),
    ([("top_k", True)], "expected an integer"),
    ([("top_p", "0.9")], "expected a real number"),
    ([("top_p",)], r"expected \(p, \[min_keep\]\)"),
    ([("temp", 0.5, 1)], "found 2 argument"),
    ([("dist", -1)], r"seed: expected an integer in \[0, 2\*\*32 - 1\]"),
    ([("dist", 2 ** 32)], "seed"),
    ([("top_p", 0.9, -1)], "min_keep"),
    ([("logit_bias", [(1, 2, 3)])], r"\(token, bias\) pairs"),
    ([("dry", 1.0, 1.75, 2, 64, ("\n",))], "need a vocabulary"),
    ([("dry", 1.0, 1.75, 2, 64, "\n")], "single string"),
    ([("infill",)], "needs a vocabulary"),
    ([42], "expected a string"),
    ("top_k", "expected a list"),
])
def test_bad_specs_raise_parameter_error(spec, match):
    with pytest.raises(ParameterError, match=match):
        Chain(spec, 100, seed=1)


def test_bad_chain_arguments():
    with pytest.raises(ParameterError, match="n_vocab"):
        Chain([("greedy",)], 0)
    with pytest.raises(ParameterError, match="stdlib"):
        Chain([("greedy",)], 10, stdlib="msvc")
    with pytest.raises(ParameterError, match="unknown parameter"):
        common_chain(10, temperature=0.5)
    with pytest.raises(ParameterError, match="penalty_repeat must be finite and greater than 0"):
        common_chain(10, penalty_repeat=0.0)
    with pytest.raises(ParameterError, match="penalty_freq must be finite"):
        common_chain(10, penalty_freq=float("inf"))
    with pytest.raises(ParameterError, match="mirostat"):
        common_chain(10, mirostat=3)
    with pytest.raises(ParameterError, match="unknown sampler name"):
        common_chain(10, samplers=["top_k", "tfs_z"])
    with pytest.raises(ParameterError, match="unknown sampler char"):
        common_chain(10, samplers="kpq")


def test_bad_logits_and_tokens():
    c = Chain([("top_k", 5), ("dist",)], 100, seed=1)
    with pytest.raises(ShapeError, match=r"expected shape \(100,\)"):
        c.sample(np.zeros(99, np.float32))
    with pytest.raises(ShapeError):
        c.sample(np.zeros((1, 100), np.float32))
    with pytest.raises(DTypeError, match="float32"):
        c.sample(np.zeros(100, np.float64))
    with pytest.raises(DTypeError):
        c.sample([0.0] * 100)
    with pytest.raises(ParameterError, match=r"token id in \[0, 100\)"):
        c.accept(100)
    with pytest.raises(ParameterError):
        c.accept(-1)
    with pytest.raises(ParameterError):
        c.accept(3.0)
    with pytest.raises(ParameterError, match="restore"):
        c.restore(b"garbage")
    other = Chain([("dist",)], 100, seed=1)
    with pytest.raises(ParameterError, match="does not fit"):
        c.restore(other.snapshot())
    with pytest.raises(ParameterError):
        Mt19937(1).restore(b"\x00" * 10)


def test_chain_without_terminal_sampler_raises():
    c = Chain([("top_k", 5)], 100, seed=1)
    with pytest.raises(SamplingError, match="selected no token"):
        c.sample(logits_of(100))
    cands = c.apply(logits_of(100))
    assert cands.size == 5 and cands.sorted


def test_errors_are_lmtail_errors():
    assert issubclass(SamplingError, lmtail.LmtailError)


def test_clamps_match_llama_cpp():
    # penalties / dry: negative last_n clamps to 0 -> disabled (the no-op sampler)
    assert Chain([("penalties", -1, 1.5, 0.0, 0.0)], 10).names == ["?penalties"]
    assert Chain([("dry", 1.0, 1.75, 2, -5)], 10).names == ["?dry"]
    # adaptive-p: decay clamped to [0, 0.99]
    a = Chain([("adaptive_p", 0.5, 5.0, 1)], 10).samplers[0]
    assert a.decay == np.float32(0.99)
    a = Chain([("adaptive_p", 0.5, -1.0, 1)], 10).samplers[0]
    assert a.decay == 0.0
    # disabled samplers, as llama.cpp's init_* returns them
    names = Chain([("top_k", 0), ("top_p", 1.0), ("min_p", 0.0), ("typical", 1.0), ("temp", 1.0),
                   ("temp_ext", 1.0, 0.0, 1.0), ("xtc", 0.0, 0.1), ("xtc", 0.5, 0.6), ("top_n_sigma", -1.0),
                   ("logit_bias", {}), ("dry", 0.0, 1.75, 2, 64), ("dry", 1.0, 0.5, 2, 64)], 10).names
    assert names == ["?top-k", "?top-p", "?min-p", "?typical", "?temp", "?temp-ext", "?xtc", "?xtc",
                     "?top-n-sigma", "?logit-bias", "?dry", "?dry"]


def test_kebab_names_accepted():
    assert Chain([("top-k", 3), ("min-p", 0.1), ("mirostat-v2", 5.0, 0.1)], 10, seed=1).names == \
        ["top-k", "min-p", "mirostat-v2"]


# ---- snapshot / restore / RequestSamplerState ---------------------------------------------------------
STATEFUL = [("penalties", 16, 1.2, 0.1, 0.1), ("dry", 0.8, 1.75, 2, 32), ("top_k", 60), ("xtc", 0.5, 0.05),
            ("temp", 0.9), ("dist",)]


@pytest.mark.parametrize("spec", [STATEFUL, [("temp", 0.9), ("mirostat", 4.0, 0.2)],
                                  [("temp", 0.9), ("mirostat_v2", 4.0, 0.2)], [("min_p", 0.05), ("adaptive_p", 0.4, 0.9)]])
@pytest.mark.parametrize("stdlib", ["libstdc++", "libc++", "c++26"])
def test_snapshot_restore_resumes_mid_stream(spec, stdlib):
    n = 2000
    rows = [logits_of(n, s, 2.0) for s in range(60)]
    rows = [np.where(np.arange(n) < 20, r + 4, r).astype(np.float32) for r in rows]  # repeats happen
    c = Chain(spec, n, seed=9, stdlib=stdlib)
    for r in rows[:25]:
        c.accept(c.sample(r))
    snap = c.snapshot()
    tail = []
    for r in rows[25:]:
        t = c.sample(r)
        c.accept(t)
        tail.append(t)
    fresh = Chain(spec, n, seed=12345, stdlib=stdlib)  # a different seed: restore must win
    fresh.restore(snap)
    again = []
    for r in rows[25:]:
        t = fresh.sample(r)
        fresh.accept(t)
        again.append(t)
    assert again == tail
    c.restore(snap)  # and back into the original chain
    assert [c.sample(rows[25])] == tail[:1]


def test_request_sampler_state_streams_are_separate():
    c = common_chain(1000, seed=5, xtc_probability=0.5, xtc_threshold=0.1)
    st = RequestSamplerState(c)
    assert st.distribution_rng is not None and st.xtc_rng is not None
    assert st.mirostat_rng is None and st.adaptive is None
    assert st.distribution_rng is not st.xtc_rng
    assert st.distribution_rng == st.xtc_rng  # same seed, same starting state (as llama.cpp)
    for s in range(10):
        c.accept(c.sample(logits_of(1000, s)))
    d = st.draws
    assert d["distribution_rng"] == 20  # one double draw (2 words) per token
    assert 0 < d["xtc_rng"] <= 10  # one float draw per apply on >= 2 candidates
    blob = st.snapshot()
    nxt = c.sample(logits_of(1000, 99))
    st.restore(blob)
    assert st.draws == d and c.sample(logits_of(1000, 99)) == nxt

    m = common_chain(1000, seed=5, mirostat=2)
    sm = RequestSamplerState(m)
    assert sm.mirostat_mu == pytest.approx(10.0)
    m.sample(logits_of(1000, 1))
    assert sm.mirostat_mu != pytest.approx(10.0)  # mu moves inside apply, before accept
    assert "mirostat_rng" in sm.draws


def test_reset_reseeds_explicit_seed_identically():
    c = Chain([("top_k", 50), ("dist",)], 500, seed=77)
    rows = [logits_of(500, s) for s in range(12)]
    a = [c.sample(r) for r in rows]
    c.reset()
    assert [c.sample(r) for r in rows] == a


# ---- test-sampling.cpp expectations (candidate level) ------------------------------------------------
def cands(probs):
    p = np.asarray(probs, np.float32)
    with np.errstate(divide="ignore"):
        return Candidates.from_arrays(np.arange(len(p)), np.log(p).astype(np.float32))


def run_on(spec, probs, *, then_dist=True, history=()):
    c = cands(probs)
    ch = Chain(list(spec) + ([("dist", 0)] if then_dist else []), len(probs), seed=0)
    for t in history:
        ch.accept(t)
    ch.apply_candidates(c)
    return c


@pytest.mark.parametrize("k, expected", [(1, [1.0]), (3, [0.44444, 0.33333, 0.22222]), (4, [0.4, 0.3, 0.2, 0.1]),
                                         (0, [0.1, 0.2, 0.3, 0.4])])
def test_top_k_expectations(k, expected):
    c = run_on([("top_k", k)], [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(c.probs, expected, atol=1e-5)


@pytest.mark.parametrize("p, expected", [(0.0, [1.0]), (0.7, [0.571429, 0.428571]), (0.8, [0.44444, 0.33333, 0.22222]),
                                         (1.0, [0.1, 0.2, 0.3, 0.4])])
def test_top_p_expectations(p, expected):
    c = run_on([("top_p", p, 0)], [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(np.sort(c.probs)[::-1] if p == 1.0 else c.probs,
                               expected if p != 1.0 else expected[::-1], atol=1e-5)


@pytest.mark.parametrize("p, expected", [(0.0, [0.1, 0.2, 0.3, 0.4]), (0.26, [0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]),
                                         (0.51, [0.3 / 0.7, 0.4 / 0.7]), (0.76, [1.0]), (1.05, [1.0])])
def test_min_p_expectations(p, expected):
    c = run_on([("min_p", p, 0)], [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(np.sort(c.probs), expected, atol=1e-5)


def test_typical_and_xtc_and_sigma_expectations():
    c = run_on([("typical", 0.5, 0)], [0.97, 0.01, 0.01, 0.01])
    np.testing.assert_allclose(c.probs, [1.0], atol=1e-5)
    c = run_on([("typical", 0.5, 0)], [0.4, 0.2, 0.2, 0.2])
    np.testing.assert_allclose(c.probs, [1 / 3] * 3, atol=1e-5)
    for t, exp in [(0.09, [1.0]), (0.19, [2 / 3, 1 / 3]), (0.39, [0.4, 0.3, 0.2, 0.1])]:
        c = Candidates.from_arrays(np.arange(4), np.log(np.float32([0.4, 0.3, 0.2, 0.1])))
        ch = Chain([("xtc", 0.99, t, 1, 0)], 4, seed=0)
        ch.apply_candidates(c)
        S.softmax(c, False)
        np.testing.assert_allclose(np.sort(c.probs)[::-1], exp, atol=1e-5)
    c = run_on([("top_n_sigma", 1.0)], [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(c.probs, [0, 0, 0.428571, 0.571429], atol=1e-5)


def test_penalties_expectations():
    c = run_on([("penalties", 5, 50.0, 0.0, 0.0)], [0.2] * 5, history=[0, 1, 2])
    np.testing.assert_allclose(c.probs, [0, 0, 0, 0.5, 0.5], atol=1e-5)
    c = run_on([("penalties", 5, 1.0, 5.0, 5.0)], [0.2] * 5, history=[0, 1, 2, 0, 0])
    np.testing.assert_allclose(c.probs, [0, 0.000023, 0.000023, 0.499977, 0.499977], atol=1e-5)


def test_dry_expectations_with_token_breakers():
    c = run_on([("dry", 1.0, 1.1, 2, 5)], [0.25] * 4, history=[0, 1, 2, 0, 1])
    np.testing.assert_allclose(c.probs, [0.296923, 0.296923, 0.109232, 0.296923], atol=1e-5)
    c = run_on([("dry", 1.0, 1.1, 2, 6, [[3]])], [0.2] * 5, history=[0, 1, 3, 4, 0, 1])
    np.testing.assert_allclose(c.probs, [0.2] * 5, atol=1e-5)  # the breaker {3} cuts the repeat
    c = run_on([("dry", 1.0, 1.1, 2, 6)], [0.2] * 5, history=[0, 1, 3, 4, 0, 1])
    assert c.probs[3] < 0.2  # without it, 3 would extend "0 1"
    c = run_on([("dry", 2.0, 1.1, 2, 5)], [0.2] * 5, history=[0, 1, 2, 0, 1])
    np.testing.assert_allclose(c.probs, [0.241818, 0.241818, 0.032727, 0.241818, 0.241818], atol=1e-5)
    c = run_on([("dry", 1.0, 1.1, 4, 7)], [0.2] * 5, history=[0, 1, 2, 3, 4, 0, 1])
    np.testing.assert_allclose(c.probs, [0.2] * 5, atol=1e-5)
    c = run_on([("dry", 1.0, 1.1, 2, 4)], [0.25] * 4, history=[0, 1])
    np.testing.assert_allclose(c.probs, [0.25] * 4, atol=1e-5)


def test_dist_singleton_consumes_a_draw():
    one = Chain([("dist", 4242)], 1)
    two = Chain([("dist", 4242)], 2)
    one.sample(np.zeros(1, np.float32))
    two.sample(np.zeros(2, np.float32))
    assert RequestSamplerState(one).draws == RequestSamplerState(two).draws == {"distribution_rng": 2}


# ---- logprobs -------------------------------------------------------------------------------------
def test_server_logprobs_matches_softmax():
    x = logits_of(5000, 3)
    lp = server_logprobs(x, 5, token=int(np.argsort(-x)[7]))
    ref = np.exp(x.astype(np.float64) - x.max())
    ref /= ref.sum()
    order = np.argsort(-x)[:5]
    assert [t for t, _ in lp.top] == order.tolist()
    np.testing.assert_allclose([p for _, p in lp.top], ref[order], rtol=1e-5)
    assert lp.prob == pytest.approx(ref[np.argsort(-x)[7]], rel=1e-5)
    assert lp.logprob == pytest.approx(np.log(lp.prob))


def test_post_sampling_logprobs():
    ch = Chain([("top_k", 10), ("typical", 0.9), ("dist",)], 3000, seed=3)
    c = ch.apply(logits_of(3000, 4))
    tok = c.token
    lp = post_sampling_logprobs(c, 4)
    assert lp.token == tok and c.token == tok  # selection follows the re-sort
    ps = [p for _, p in lp.top]
    assert ps == sorted(ps, reverse=True) and len(ps) <= 4 and all(p > 0 for p in ps)
    with pytest.raises(ParameterError):
        post_sampling_logprobs(c, -1)


def test_register_sampler_extends_specs():
    from lmtail.sampling import Sampler, register_sampler

    class Ban(Sampler):
        name = "ban"

        def __init__(self, token):
            self.token = token

        def apply(self, c):
            c.logits[c.ids == self.token] = -np.inf

    register_sampler("ban_test", lambda args, **kw: Ban(*args))
    c = Chain([("ban_test", 7), ("greedy",)], 10, seed=1)
    x = np.zeros(10, np.float32)
    x[7] = 5
    assert c.sample(x) == 0
    with pytest.raises(ParameterError):
        register_sampler("top_k", lambda args, **kw: None)
