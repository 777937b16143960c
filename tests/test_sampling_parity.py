"""lmtail.sampling against llama.cpp's own samplers (llama-cpp-python 0.3.36, ctypes).

Every check compares, after each apply, the whole candidate window bit for bit (ids, logits, p,
selected, sorted, and XTC's pointer shift) and the sampled token, on persistent chains that accept
the oracle's token every step (stream continuity). Logits: random normal plus adversarial
families — quantized values (ties), very few distinct values, half -inf, a single +inf, NaN,
huge ranges (x 1e4), one dominant token, all equal, values on the bucket-sort edges, a
"repetitive" family for penalties/DRY.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from oracle import sampling as O

pytestmark = pytest.mark.oracle


@pytest.fixture(autouse=True, scope="module")
def _oracle():
    O.require()
    O.lc()


from lmtail.sampling import Chain, common_chain  # noqa: E402


# ---- logits families ----------------------------------------------------------------------------
def g_normal(r, n):
    return (r.standard_normal(n) * 3).astype(np.float32)


def g_quant(r, n):  # quantized-looking: multiples of 1/4 -> many ties
    return (np.round(r.standard_normal(n) * 12) / 4).astype(np.float32)


def g_fewvals(r, n):  # 7 distinct values: heavy ties at every boundary
    return r.integers(-3, 4, n).astype(np.float32)


def g_bf16(r, n):  # bf16-rounded logits (what a reduced-precision head produces)
    x = (r.standard_normal(n) * 4).astype(np.float32)
    return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def g_masked(r, n):
    x = g_normal(r, n)
    x[r.random(n) < 0.5] = -np.inf
    return x


def g_huge(r, n):
    return (r.standard_normal(n) * 1e4).astype(np.float32)


def g_peaked(r, n):
    x = r.standard_normal(n).astype(np.float32)
    x[r.integers(0, n, 3)] += 40
    return x


def g_flat(r, n):
    return np.zeros(n, np.float32)


def g_repet(r, n):  # mass on 12 tokens: histories repeat (penalties, DRY)
    x = np.full(n, -5, np.float32)
    x[:12] = r.standard_normal(12).astype(np.float32)
    return x


def g_posinf(r, n):
    x = g_normal(r, n)
    x[r.integers(0, n)] = np.inf
    return x


def g_nan(r, n):
    x = g_normal(r, n)
    x[r.integers(0, n, 2)] = np.nan
    return x


def g_bucket_edges(r, n):  # values on (and next to) the bucket boundaries k/6.4 - 10
    x = (r.integers(-70, 70, n) / 6.4).astype(np.float32)
    return np.nextafter(x, np.float32(r.choice([-np.inf, np.inf])), dtype=np.float32) if r.random() < 0.5 else x


GENS = dict(normal=g_normal, quant=g_quant, fewvals=g_fewvals, bf16=g_bf16, masked=g_masked, huge=g_huge,
            peaked=g_peaked, flat=g_flat, repet=g_repet, posinf=g_posinf, nan=g_nan, edges=g_bucket_edges)


# ---- harness ------------------------------------------------------------------------------------
def same_window(a: dict, c) -> bool:
    v = c.view()
    return (len(a["ids"]) == c.size and np.array_equal(a["ids"], v["id"])
            and np.array_equal(a["logits"].view(np.uint32), v["logit"].view(np.uint32))
            and np.array_equal(a["p"].view(np.uint32), v["p"].view(np.uint32))
            and a["selected"] == c.selected and a["sorted"] == c.sorted)


def run_stream(spec, n_vocab, seed, gen, steps, vocab=None, oracle=None, chain=None, data_seed=None):
    """Persistent chains on both sides; returns (steps compared, tokens)."""
    rng = np.random.default_rng(seed if data_seed is None else data_seed)
    o = oracle or O.OracleChain(spec, n_vocab, seed, vocab=vocab)
    m = chain or Chain(spec, n_vocab, seed, vocab=vocab)
    tokens = []
    for step in range(steps):
        logits = gen(rng, n_vocab)
        a = o.apply(logits)
        c = m.apply(logits)
        assert same_window(a, c), (
            f"step {step}: {spec} differs: oracle size {len(a['ids'])} sel {a['selected']} sorted {a['sorted']}; "
            f"lmtail size {c.size} sel {c.selected} sorted {c.sorted}")
        sel = a["selected"]
        if 0 <= sel < len(a["ids"]):
            tok = int(a["ids"][sel])
            assert tok == c.token
            tokens.append(tok)
            o.accept(tok)
            m.accept(tok)
    return tokens


# Every sampler alone (terminal dist added where the sampler is not terminal) and in pairs.
SINGLE = {
    "greedy": [("greedy",)],
    "dist": [("dist",)],
    "temp0.7": [("temp", 0.7), ("dist",)],
    "temp0": [("temp", 0.0), ("dist",)],
    "temp-neg": [("temp", -1.0), ("greedy",)],
    "temp_ext": [("temp_ext", 0.9, 0.0, 1.0), ("dist",)],
    "temp_ext_dyn": [("temp_ext", 0.8, 0.5, 1.0), ("dist",)],
    "temp_ext_dyn0": [("temp_ext", 0.2, 0.5, 2.0), ("dist",)],
    "top_k1": [("top_k", 1), ("dist",)],
    "top_k40": [("top_k", 40), ("dist",)],
    "top_k128": [("top_k", 128), ("dist",)],
    "top_k129": [("top_k", 129), ("dist",)],
    "top_k1000": [("top_k", 1000), ("dist",)],
    "top_p0.9": [("top_p", 0.9), ("dist",)],
    "top_p0.99": [("top_p", 0.99, 3), ("dist",)],
    "top_p0": [("top_p", 0.0, 0), ("dist",)],
    "min_p": [("min_p", 0.05), ("dist",)],
    "min_p_keep": [("min_p", 0.5, 40), ("dist",)],
    "min_p>1": [("min_p", 1.5), ("dist",)],
    "typical": [("typical", 0.9), ("dist",)],
    "typical0.2": [("typical", 0.2, 5), ("dist",)],
    "xtc": [("xtc", 0.5, 0.1), ("dist",)],
    "xtc_always": [("xtc", 1.0, 0.01, 2), ("dist",)],
    "top_n_sigma": [("top_n_sigma", 1.0), ("dist",)],
    "top_n_sigma3": [("top_n_sigma", 3.0), ("dist",)],
    "mirostat": [("temp", 0.8), ("mirostat", 5.0, 0.1)],
    "mirostat_m3": [("mirostat", 3.0, 0.5, 3)],
    "mirostat_v2": [("temp", 0.8), ("mirostat_v2", 5.0, 0.1)],
    "mirostat_v2_tight": [("mirostat_v2", 1.0, 0.1)],
    "penalties": [("penalties", 64, 1.1, 0.1, 0.1), ("top_k", 40), ("dist",)],
    "penalties_short": [("penalties", 3, 1.5, 0.5, 0.0), ("dist",)],
    "penalties_neg_last_n": [("penalties", -1, 1.5, 0.5, 0.0), ("dist",)],
    "dry": [("dry", 0.8, 1.75, 2, 64), ("top_k", 10), ("dist",)],
    "dry_allowed0": [("dry", 2.0, 1.3, 0, 16), ("dist",)],
    "logit_bias": [("logit_bias", {5: 1.0, 7: -np.inf, 11: 2.5}), ("top_k", 40), ("dist",)],
    "logit_bias_dup_slow": [("top_k", 40), ("logit_bias", [(5, 1.0), (5, 2.0), (31999, -1.0), (3, 0.5)]),
                            ("dist",)],
    "logit_bias_dup_fast": [("logit_bias", [(5, 1.0), (5, 2.0), (0, -0.5)]), ("dist",)],
    "adaptive_p": [("adaptive_p", 0.5, 0.9)],
    "adaptive_p_topk": [("top_k", 50), ("adaptive_p", 0.3, 0.9)],
    "adaptive_p_off": [("min_p", 0.1), ("adaptive_p", -1.0, 0.9)],
    "adaptive_p_decay": [("adaptive_p", 0.2, 1.5)],
}
@pytest.mark.parametrize("gen", list(GENS))
@pytest.mark.parametrize("name", list(SINGLE))
def test_sampler_alone_matches_llama(name, gen):
    seed = zlib.crc32(f"{name}/{gen}".encode()) & 0xFFFF
    run_stream(SINGLE[name], 32000, seed, GENS[gen], steps=8 if gen not in ("normal", "repet") else 16)


REALISTIC = {
    "common_default": [("top_k", 40), ("top_p", 0.95), ("min_p", 0.05), ("temp_ext", 0.8, 0.0, 1.0), ("dist",)],
    "common_temp0": [("top_k", 40), ("top_p", 0.95), ("min_p", 0.05), ("temp_ext", 0.0, 0.0, 1.0), ("dist",)],
    "penalties_default": [("penalties", 64, 1.1, 0.05, 0.05), ("top_k", 40), ("top_p", 0.95), ("min_p", 0.05),
                          ("temp_ext", 0.8, 0.0, 1.0), ("dist",)],
    "min_p_temp": [("min_p", 0.05), ("temp", 0.8), ("dist",)],
    "typical_chain": [("top_k", 100), ("typical", 0.9), ("top_p", 0.9), ("temp", 0.7), ("dist",)],
    "xtc_chain": [("top_k", 40), ("min_p", 0.02), ("xtc", 0.5, 0.1, 1), ("temp", 1.0), ("dist",)],
    "dynatemp_chain": [("top_k", 60), ("top_p", 0.95), ("temp_ext", 1.0, 0.5, 1.0), ("dist",)],
    "sigma_chain": [("top_n_sigma", 1.5), ("top_k", 40), ("temp", 0.9), ("dist",)],
    "mirostat2_chain": [("temp", 0.9), ("mirostat_v2", 3.0, 0.1)],
    "mirostat1_chain": [("temp", 0.9), ("mirostat", 3.0, 0.1, 100)],
    "adaptive_chain": [("min_p", 0.05), ("temp", 1.0), ("adaptive_p", 0.4, 0.9)],
    "bias_chain": [("logit_bias", {1: 3.0, 2: -np.inf}), ("penalties", 16, 1.2, 0.0, 0.3), ("top_k", 20),
                   ("dist",)],
}


@pytest.mark.parametrize("seed", [0, 1, 42, 0xFFFFFFFE])
@pytest.mark.parametrize("name", list(REALISTIC))
def test_realistic_chain_64_steps(name, seed):
    """One persistent chain, 64 consecutive steps (stream continuity), four seeds."""
    run_stream(REALISTIC[name], 32000, seed, g_normal, steps=64, data_seed=seed ^ 0x5EED)


@pytest.mark.parametrize("name", ["common_default", "common_temp0", "min_p_temp", "typical_chain",
                                  "mirostat2_chain", "penalties_default"])
@pytest.mark.parametrize("gen", ["quant", "bf16", "fewvals"])
def test_realistic_chain_adversarial(name, gen):
    run_stream(REALISTIC[name], 32000, 7, GENS[gen], steps=16)


BIG = {
    "greedy": [("greedy",)],
    "temp_dist": [("temp", 0.8), ("dist",)],
    "common_default": REALISTIC["common_default"],
    "top_p_alone": [("top_p", 0.95), ("dist",)],
    "typical": [("typical", 0.9), ("dist",)],
    "xtc": [("xtc", 1.0, 0.1), ("dist",)],
}


@pytest.mark.parametrize("name", list(BIG))
def test_vocab_202048(name):
    n = 202048
    steps = 64 if name in ("greedy", "temp_dist", "common_default") else 12
    run_stream(BIG[name], n, 123, g_normal, steps=steps)
    run_stream(BIG[name], n, 321, g_bf16, steps=4)


@pytest.mark.parametrize("seed", [0, 1, 42, 0xFFFFFFFE])
def test_common_chain_202048_64_steps(seed):
    params = dict(seed=seed, penalty_last_n=64, penalty_repeat=1.05)
    o = O.OracleCommonChain(202048, **params)
    m = common_chain(202048, **params)
    run_stream(None, 202048, seed, g_normal, 64, oracle=o, chain=m)


def test_top_p_full_sort_fallback_202048():
    """Flat-ish logits: the 256-candidate guess fails and llama.cpp sorts the whole vocabulary."""
    def flatish(r, n):
        return (r.standard_normal(n) * 0.05).astype(np.float32)

    run_stream([("top_p", 0.9), ("dist",)], 202048, 5, flatish, steps=3)


def test_sample_equals_llama_sampler_sample_semantics():
    """sample() returns data[selected].id and does not accept (accept is separate)."""
    spec = [("penalties", 8, 2.0, 0.0, 0.0), ("greedy",)]
    o = O.OracleChain(spec, 1000, 1)
    m = Chain(spec, 1000, 1)
    logits = np.linspace(0, 1, 1000, dtype=np.float32)
    for _ in range(5):
        t = m.sample(logits)
        assert t == o.sample(logits) == 999  # not accepted -> no penalty -> same argmax
    m.accept(999)
    o.accept(999)
    assert m.sample(logits) == o.sample(logits) == 998


@pytest.mark.parametrize("seed", [0, 42])
def test_reset_mid_stream(seed):
    spec = [("top_k", 50), ("xtc", 0.7, 0.05), ("dist",)]
    o = O.OracleChain(spec, 32000, seed)
    m = Chain(spec, 32000, seed)
    run_stream(spec, 32000, seed, g_normal, 20, oracle=o, chain=m)
    o.reset()
    m.reset()
    run_stream(spec, 32000, seed, g_normal, 20, oracle=o, chain=m, data_seed=99)


def test_default_seed_is_random_and_reported():
    a = Chain([("dist",)], 100)
    b = Chain([("dist",)], 100)
    assert a.seed != 0xFFFFFFFF and a.seed != b.seed  # 2^-32 chance of a false failure
    assert Chain([("dist", 7)], 100).seed == 7
    o = O.OracleChain([("dist", 7)], 100)
    assert o.seed() == 7


# ---- common_sampler_init -------------------------------------------------------------------------
COMMON_CASES = {
    "defaults": {},
    "temp0": dict(temp=0.0),
    "temp_neg": dict(temp=-1.0, top_k=0),
    "mirostat1": dict(mirostat=1, temp=0.9),
    "mirostat2": dict(mirostat=2, mirostat_tau=3.0),
    "xtc": dict(xtc_probability=0.5, xtc_threshold=0.1, min_keep=2),
    "typical": dict(typ_p=0.9, top_k=0),
    "dynatemp": dict(dynatemp_range=0.5, dynatemp_exponent=1.5),
    "penalties": dict(penalty_last_n=32, penalty_repeat=1.1, penalty_freq=0.2, penalty_present=0.1),
    "sigma": dict(top_n_sigma=1.0),
    "order": dict(samplers=("temperature", "min_p", "top_k", "top_p")),
    "adaptive": dict(samplers=("min_p", "temperature", "adaptive_p"), adaptive_target=0.3),
    "bias": dict(logit_bias={3: 5.0, 4: -np.inf}),
    "no_topk": dict(top_k=0, top_p=1.0, min_p=0.0),
    "dry_token_free": dict(dry_multiplier=0.8, dry_sequence_breakers=()),
}


@pytest.mark.parametrize("case", list(COMMON_CASES))
def test_common_chain_matches_common_sampler_init(case):
    params = dict(COMMON_CASES[case])
    for seed in (42, 0xFFFFFFFE):
        params["seed"] = seed
        o = O.OracleCommonChain(32000, **params)
        m = common_chain(32000, **params)
        run_stream(None, 32000, seed, g_normal, 40, oracle=o, chain=m)
        run_stream(None, 32000, seed, g_quant, 8, oracle=o, chain=m, data_seed=3)


def test_common_chain_names():
    c = common_chain(32000, seed=1)
    assert c.names == ["?penalties", "?dry", "?top-n-sigma", "top-k", "?typical", "top-p", "min-p", "?xtc",
                       "temp-ext", "dist"]


# ---- samplers that need a vocabulary ------------------------------------------------------------
@pytest.fixture(scope="module")
def vocab():
    path = O.shared_vocab_path()
    if path is None:
        pytest.skip("../shared/vocab/ggml-vocab-llama-bpe.gguf not found")
    return O.OracleVocab(path)


def test_dry_string_breakers_with_vocab(vocab):
    n = vocab.n_tokens
    spec = [("dry", 0.8, 1.75, 2, 64, ("\n", ":", '"', "*", "ab")), ("dist",)]
    o = O.OracleChain(spec, n, 3, vocab=vocab)
    m = Chain(spec, n, 3, vocab=vocab)
    assert m.samplers[0].breakers  # breaker heads were found in the vocabulary

    def loop(r, nv):  # a looping text made of breaker and non-breaker tokens
        x = np.full(nv, -30, np.float32)
        toks = [2000, 2001, 2002, 2003, 25, 1]  # words, plus ':' and '"' (breakers) now and then
        x[toks] = np.array([0, 0, 0, 0, -1.5, -1.5], np.float32) + r.standard_normal(6).astype(np.float32) * 0.3
        return x

    changed = 0
    rng = np.random.default_rng(3)
    for step in range(48):
        logits = loop(rng, n)
        a = o.apply(logits)
        c = m.apply(logits)
        assert same_window(a, c), step
        changed += int(not np.array_equal(a["logits"], logits))
        t = int(a["ids"][a["selected"]])
        o.accept(t)
        m.accept(t)
    assert changed > 5  # DRY actually penalised something


def test_common_chain_with_dry_breakers(vocab):
    n = vocab.n_tokens
    params = dict(seed=11, dry_multiplier=1.0, dry_allowed_length=1, penalty_repeat=1.2, penalty_last_n=16)
    o = O.OracleCommonChain(n, vocab=vocab, **params)
    m = common_chain(n, vocab=vocab, **params)
    run_stream(None, n, 11, g_repet, 32, oracle=o, chain=m)


@pytest.mark.parametrize("gen", ["normal", "repet", "eog"])
def test_infill_with_vocab(vocab, gen):
    n = vocab.n_tokens
    eog = [t for t in (vocab.token_eot(), vocab.token_eos()) if t >= 0]

    def g_eog(r, nv):
        x = g_normal(r, nv) / 3
        x[eog] += 6
        return x

    g = {"normal": g_normal, "repet": g_repet, "eog": g_eog}[gen]
    run_stream([("top_k", 30), ("infill",), ("dist",)], n, 5, g, 16, vocab=vocab)


@pytest.mark.parametrize("k", [1, 40, 127, 128, 129, 256, 1000, 31999, 32000, 50000])
@pytest.mark.parametrize("gen", ["quant", "fewvals", "edges", "posinf", "nan", "masked"])
def test_top_k_sweep_ties_and_nonfinite(k, gen):
    """Both sort paths (partial_sort <= 128, buckets above), tie order at every boundary, where
    +inf / -inf / NaN land (x86: the lowest bucket, so k > 128 can drop a +inf)."""
    run_stream([("top_k", k), ("dist",)], 32000, k, GENS[gen], steps=3)


def test_plus_inf_dropped_by_bucket_top_k_like_llama():
    x = np.linspace(-1, 1, 1000).astype(np.float32)
    x[500] = np.inf
    for k, kept in ((40, True), (200, False)):
        c = Chain([("top_k", k)], 1000, 1).apply(x)
        a = O.OracleChain([("top_k", k)], 1000, 1).apply(x)
        assert np.array_equal(a["ids"], c.ids)
        assert (500 in c.ids.tolist()) == kept


@pytest.mark.parametrize("name", ["temp_dist", "top_p_alone", "typical"])
def test_threads_do_not_change_results(name):
    """set_threads(2) splits only independent work (expf passes, separate buckets)."""
    from lmtail.sampling import get_threads, set_threads

    old = get_threads()
    set_threads(2)
    try:
        run_stream(BIG[name], 202048, 77, g_quant, steps=3)
    finally:
        set_threads(old)


@pytest.mark.parametrize("n_probs", [1, 5, 40, 128])
@pytest.mark.parametrize("gen", ["normal", "quant"])
def test_server_logprobs_order_matches_llama_partial_sort(n_probs, gen):
    """llama-server's get_token_probabilities = std::partial_sort of the top n over the whole row
    (the same call llama.cpp's top-k makes for k <= 128) + a float softmax over the whole row in
    that order. The oracle's top-k leaves the full row in exactly that order in its buffer."""
    import lmtail._core as core
    from lmtail.sampling import server_logprobs

    x = GENS[gen](np.random.default_rng(n_probs), 32000)
    o = O.OracleChain([("top_k", n_probs)], 32000, 1)
    buf = o.fill(x)
    o.apply_raw(buf)  # buf now holds the whole row in std::partial_sort's order
    ref = buf.copy()
    core.sampling_softmax(ref, 0, len(ref), True)  # max = ref[0] (the partial sort's maximum)
    tok = int(ref["id"][n_probs + 3])
    lp = server_logprobs(x, n_probs, tok)
    assert [t for t, _ in lp.top] == ref["id"][:n_probs].tolist()
    assert np.array_equal(np.float32([p for _, p in lp.top]).view(np.uint32), ref["p"][:n_probs].view(np.uint32))
    assert lp.prob == float(ref["p"][n_probs + 3])


def test_bucket_sort_kernel_matches_llama_top_k():
    """lmtail._core.sampling_bucket_sort (top-p's 256-candidate guess) == llama.cpp's bucket path."""
    import lmtail._core as core
    from lmtail.sampling import TOKEN_DATA

    for gen in ("quant", "edges", "normal"):
        x = GENS[gen](np.random.default_rng(4), 32000)
        buf = np.empty(32000, TOKEN_DATA)
        core.sampling_fill(buf, x)
        out = core.sampling_bucket_sort(buf, 0, 32000, 256)
        assert len(out) >= 256
        a = O.OracleChain([("top_k", 256)], 32000, 1).apply(x)
        assert np.array_equal(out["id"][:256], a["ids"])
