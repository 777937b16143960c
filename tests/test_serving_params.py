"""lmtail.serving.from_openai / from_vllm / openai_logprobs / batch_logprobs.

* the mapping of every OpenAI / llama-server name onto common_params_sampling, both kinds of
  defaults, unknown names (with "did you mean"), non-sampling fields and bad values;
* against llama.cpp (oracle): for several requests, the chain from_openai builds samples the
  tokens (and leaves the candidates) of the chain llama-server builds from the same request —
  common_sampler_init over the fields written out here by hand from server-schema.cpp, the
  prompt accepted first as server_slot::init_sampler does — over a seeded loop with accept;
  from_vllm's chain equals the same llama.cpp samplers composed in vLLM's order; the logprobs
  in the OpenAI shape carry llama.cpp's probabilities.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from lmtail.errors import ParameterError
from lmtail.sampling import DEFAULT_SEED, TokenLogprobs, common_chain, post_sampling_logprobs, server_logprobs
from lmtail.serving import OPENAI_PARAMS, Batch, batch_logprobs, from_openai, from_vllm, openai_logprobs

N = 32000


def fields(chain, *names):
    return {k: chain.params[k] for k in names}


# ---- mapping -------------------------------------------------------------------------------------
@pytest.mark.parametrize("request_, want", [
    (dict(temperature=0.3), dict(temp=0.3)),
    (dict(temperature=0), dict(temp=0.0)),
    (dict(top_p=0.5), dict(top_p=0.5)),
    (dict(top_k=7), dict(top_k=7)),
    (dict(top_k=-1), dict(top_k=0)),
    (dict(min_p=0.2), dict(min_p=0.2)),
    (dict(frequency_penalty=0.5), dict(penalty_freq=0.5)),
    (dict(presence_penalty=-0.5), dict(penalty_present=-0.5)),
    (dict(repetition_penalty=1.2), dict(penalty_repeat=1.2)),
    (dict(repeat_penalty=1.3), dict(penalty_repeat=1.3)),
    (dict(repeat_last_n=16), dict(penalty_last_n=16)),
    (dict(seed=7), dict(seed=7)),
    (dict(seed=-1), dict(seed=DEFAULT_SEED)),
    (dict(seed=None), dict(seed=DEFAULT_SEED)),
    (dict(seed=2**32 - 1), dict(seed=DEFAULT_SEED)),
    (dict(logprobs=True), dict(n_probs=20, logprobs=True)),
    (dict(logprobs=True, top_logprobs=3), dict(n_probs=3, logprobs=True)),
    (dict(logprobs=True, top_logprobs=0), dict(n_probs=0, logprobs=False)),  # llama-server: nothing reported
    (dict(logprobs=False), dict(n_probs=0, logprobs=False)),
    (dict(logprobs=5), dict(n_probs=5, logprobs=True)),
    (dict(n_probs=4), dict(n_probs=4, logprobs=True)),
    (dict(post_sampling_probs=True, n_probs=2), dict(post_sampling_probs=True, n_probs=2)),
    (dict(typical_p=0.9), dict(typ_p=0.9)),
    (dict(min_keep=3), dict(min_keep=3)),
    (dict(top_n_sigma=1.5), dict(top_n_sigma=1.5)),
    (dict(xtc_probability=0.5, xtc_threshold=0.2), dict(xtc_probability=0.5, xtc_threshold=0.2)),
    (dict(dynatemp_range=0.5, dynatemp_exponent=2.0), dict(dynatemp_range=0.5, dynatemp_exponent=2.0)),
    (dict(mirostat=2, mirostat_tau=4.0, mirostat_eta=0.2), dict(mirostat=2, mirostat_tau=4.0, mirostat_eta=0.2)),
    (dict(dry_multiplier=0.0, dry_base=2.0, dry_allowed_length=3, dry_penalty_last_n=32),  # DRY on needs vocab=
     dict(dry_multiplier=0.0, dry_base=2.0, dry_allowed_length=3, dry_penalty_last_n=32)),
    (dict(dry_sequence_breakers=["\n", "x"]), dict(dry_sequence_breakers=("\n", "x"))),
    (dict(samplers=["top_k", "temperature"]), dict(samplers=["top_k", "temperature"])),
    (dict(temperature=None, top_k=None), dict(temp=0.8, top_k=40)),  # null = absent
])
def test_each_name_lands_on_its_field(request_, want):
    assert fields(from_openai(N, **request_), *want) == want


def test_llama_server_defaults_are_common_params_sampling():
    c = from_openai(N, seed=1)
    ref = common_chain(N, seed=1)
    assert c.names == ref.names == ["?penalties", "?dry", "?top-n-sigma", "top-k", "?typical", "top-p", "min-p",
                                    "?xtc", "temp-ext", "dist"]
    assert fields(c, "temp", "top_k", "top_p", "min_p", "penalty_last_n", "n_probs") == \
        dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, penalty_last_n=64, n_probs=0)
    assert c.params["logprobs"] is False and c.params["post_sampling_probs"] is False


def test_openai_defaults():
    c = from_openai(N, defaults="openai", seed=1)
    assert fields(c, "temp", "top_k", "top_p", "min_p") == dict(temp=1.0, top_k=0, top_p=1.0, min_p=0.0)
    assert [n for n in c.names if not n.startswith("?")] == ["dist"]  # plain softmax sampling
    # given values win over either kind of defaults
    assert fields(from_openai(N, defaults="openai", top_k=5), "top_k", "temp") == dict(top_k=5, temp=1.0)
    # logprobs: true alone: OpenAI returns no alternatives, llama-server 20
    assert fields(from_openai(N, defaults="openai", logprobs=True), "n_probs", "logprobs") == \
        dict(n_probs=0, logprobs=True)
    with pytest.raises(ParameterError, match="defaults"):
        from_openai(N, defaults="vllm")


def test_logit_bias_forms():
    want = [(5, 2.0), (7, -math.inf), (9, -150.0)]
    assert from_openai(N, logit_bias={"5": 2, 7: False, "9": -150}).params["logit_bias"] == want
    assert from_openai(N, logit_bias=[[5, 2], [7, False], ["9", -150.0]]).params["logit_bias"] == want
    assert from_openai(N, logit_bias={"+3": float("-inf")}).params["logit_bias"] == [(3, -math.inf)]
    assert from_openai(N, logit_bias={}).names[0] != "logit-bias"
    c = from_openai(N, logit_bias={"5": 100}, seed=1)
    assert c.names[0] == "logit-bias"


@pytest.mark.parametrize("bias, match", [
    ({"hello": 1}, "not a token id"),
    ({" 5": 1}, "not a token id"),
    ({N: 1}, "outside the vocabulary"),
    ({"-1": 1}, "outside the vocabulary"),
    ({5: True}, "finite number"),
    ({5: float("nan")}, "finite number"),
    ({5: float("inf")}, "finite number"),
    ({5: "1"}, "finite number"),
    ([[5]], "pair"),
    ("5:1", "mapping"),
    ({5.0: 1}, "integer"),
])
def test_logit_bias_errors(bias, match):
    with pytest.raises(ParameterError, match=match):
        from_openai(N, logit_bias=bias)


@pytest.mark.parametrize("name, hint", [
    ("temprature", "did you mean 'temperature'"),
    ("top_P", "did you mean 'top_p'"),
    ("frequency-penalty", "did you mean 'frequency_penalty'"),
    ("repetiton_penalty", "did you mean 'repetition_penalty'"),
    ("topk", "did you mean 'top_k'"),
    ("zzz", "expected one of"),
])
def test_unknown_name_has_a_hint(name, hint):
    with pytest.raises(ParameterError, match=f"unknown sampling parameter '{name}'.*{hint}"):
        from_openai(N, **{name: 1})


@pytest.mark.parametrize("name", ["stop", "max_tokens", "messages", "grammar", "response_format", "n", "stream"])
def test_request_fields_that_are_not_sampling(name):
    with pytest.raises(ParameterError, match=f"'{name}' is not a sampling parameter"):
        from_openai(N, **{name: 1})


@pytest.mark.parametrize("params, match", [
    (dict(temperature=-0.1), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(temperature="0.5"), "temperature"),
    (dict(top_p=1.01), "top_p"),
    (dict(top_p=-0.1), "top_p"),
    (dict(min_p=2), "min_p"),
    (dict(top_k=-2), "top_k"),
    (dict(top_k=4.0), "top_k"),
    (dict(top_k=True), "top_k"),
    (dict(frequency_penalty=float("nan")), "frequency_penalty"),
    (dict(repetition_penalty=0), "repetition_penalty"),
    (dict(repeat_penalty=1.1, repetition_penalty=1.1), "same parameter"),
    (dict(repeat_last_n=-1), "repeat_last_n"),
    (dict(seed=-2), "seed"),
    (dict(seed=2**32), "seed"),
    (dict(seed=1.5), "seed"),
    (dict(top_logprobs=3), "requires logprobs"),
    (dict(logprobs=False, top_logprobs=3), "requires logprobs"),
    (dict(logprobs=2, top_logprobs=3), "top_logprobs goes with"),
    (dict(logprobs=True, top_logprobs=-1), "top_logprobs"),
    (dict(logprobs=-1), "logprobs"),
    (dict(logprobs=True, n_probs=3), "give one"),
    (dict(post_sampling_probs=1), "post_sampling_probs"),
    (dict(mirostat=3), "mirostat"),
    (dict(xtc_probability=1.5), "xtc_probability"),
    (dict(dry_base=0.5), "dry_base"),
    (dict(dry_sequence_breakers=[]), "dry_sequence_breakers"),
    (dict(dry_sequence_breakers="\n"), "dry_sequence_breakers"),
    (dict(samplers=["top_k", "nope"]), "unknown sampler name"),
])
def test_bad_values_raise(params, match):
    with pytest.raises(ParameterError, match=match):
        from_openai(N, **params)


def test_ignore_eos_bans_the_eog_ids():
    vocab = types.SimpleNamespace(eog_ids=(2, 9))
    c = from_openai(N, vocab=vocab, ignore_eos=True, logit_bias={"5": 1.0}, seed=1)
    assert c.spec[0] == ("logit_bias", [(5, 1.0), (2, -math.inf), (9, -math.inf)])  # after the request's
    assert from_openai(N, vocab=vocab, ignore_eos=False, seed=1).names[0] != "logit-bias"
    with pytest.raises(ParameterError, match="needs vocab"):
        from_openai(N, ignore_eos=True)
    with pytest.raises(ParameterError, match="ignore_eos"):
        from_openai(N, vocab=vocab, ignore_eos=1)


def test_bad_n_vocab_and_whole_bodies():
    for bad in (0, -3, 2**31, 3.0, True, "32000"):
        with pytest.raises(ParameterError, match="n_vocab"):
            from_openai(bad, logit_bias={1: 1.0})
        with pytest.raises(ParameterError, match="n_vocab"):
            from_vllm(bad, {})
    body = {"model": "m", "messages": [], "max_tokens": 8, "temperature": 0.5, "seed": 3}
    c = from_openai(N, **{k: v for k, v in body.items() if k in OPENAI_PARAMS})
    assert fields(c, "temp", "seed") == dict(temp=0.5, seed=3)


def test_prompt_tokens_are_accepted_like_init_sampler():
    prompt = [5, 6, 5, 7]
    c = from_openai(N, presence_penalty=1.0, seed=3, prompt_tokens=prompt)
    ref = from_openai(N, presence_penalty=1.0, seed=3)
    for t in prompt:
        ref.accept(t)
    assert c.snapshot() == ref.snapshot()
    for bad, match in [([N], "outside"), ([-1], "outside"), ([[1, 2]], "sequence"), (["a"], "sequence")]:
        with pytest.raises(ParameterError, match=match):
            from_openai(N, prompt_tokens=bad)


# ---- vLLM ----------------------------------------------------------------------------------------
def test_vllm_mapping():
    c = from_vllm(N, dict(temperature=0.7, top_p=0.9, top_k=20, min_p=0.1, presence_penalty=0.5,
                          frequency_penalty=0.2, repetition_penalty=1.1, seed=4, logit_bias={3: 1.0}, logprobs=2),
                  prompt_tokens=[1, 2, 2])
    assert c.names == ["logit-bias", "penalties", "penalties", "temp", "min-p", "top-k", "top-p", "dist"]
    assert list(c.samplers[1].prev) == [1, 2, 2] and list(c.samplers[2].prev) == []  # prompt: repetition only
    assert c.params == dict(n_probs=2, logprobs=True, post_sampling_probs=False)
    # the defaults: plain softmax sampling; top_k -1 and 0 are both off
    for d in ({}, dict(top_k=-1), dict(top_k=0)):
        assert [n for n in from_vllm(N, d).names if not n.startswith("?")] == ["dist"]
    assert from_vllm(N, dict(logprobs=-1)).params["n_probs"] == N
    # an object with attributes (a SamplingParams) reads the same fields; extra attributes ignored
    obj = types.SimpleNamespace(temperature=0.0, top_k=-1, max_tokens=16, stop=["x"], min_tokens=0, seed=None,
                                frequency_penalty=0.5)
    assert from_vllm(N, obj).names == ["penalties", "greedy"]


def test_vllm_greedy_is_argmax_after_penalties():
    c = from_vllm(N, dict(temperature=0, top_k=5, top_p=0.1, presence_penalty=2.0), prompt_tokens=[])
    x = np.zeros(N, np.float32)
    x[10] = x[20] = 1.0  # a tie: the first maximum wins, as torch.argmax
    assert c.sample(x) == 10
    c.accept(10)
    assert c.sample(x) == 20  # the presence penalty moved the generated token down


@pytest.mark.parametrize("params, match", [
    (dict(temperature=0.005), "vLLM raises to 0.01"),
    (dict(min_tokens=2), "min_tokens"),
    (dict(allowed_token_ids=[1, 2]), "allowed_token_ids"),
    (dict(use_beam_search=True), "use_beam_search"),
    (dict(repetition_penalty=1.2), "prompt_tokens"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_k=-2), "top_k"),
    (dict(presence_penalty=2.5), "presence_penalty"),
    (dict(logit_bias=[[1, 2.0]]), "dict"),
    (dict(temprature=1.0), "did you mean 'temperature'"),
    ([("temperature", 1.0)], "SamplingParams or a mapping"),
    (dict(seed=2**40), "seed"),
])
def test_vllm_errors(params, match):
    with pytest.raises(ParameterError, match=match):
        from_vllm(N, params)


# ---- logprobs in the OpenAI shape -----------------------------------------------------------------
def test_openai_logprobs_shape():
    lp = TokenLogprobs(3, 0.25, [(3, 0.25), (1, 0.5)][::-1])
    out = openai_logprobs(lp)
    assert out == {"id": 3, "logprob": float(np.float32(math.log(0.25))),
                   "top_logprobs": [{"id": 1, "logprob": float(np.float32(math.log(0.5)))},
                                    {"id": 3, "logprob": float(np.float32(math.log(0.25)))}]}
    post = openai_logprobs(lp, post_sampling=True)
    assert post == {"id": 3, "prob": 0.25, "top_probs": [{"id": 1, "prob": 0.5}, {"id": 3, "prob": 0.25}]}
    zero = openai_logprobs(TokenLogprobs(0, 0.0, []))
    assert zero["logprob"] == -3.4028234663852886e38  # llama-server's stand-in for -inf
    vocab = types.SimpleNamespace(pieces=[b"a", b" hi", "é".encode()[:1], b"x\xe2\x82"])
    out = openai_logprobs(TokenLogprobs(1, 0.5, [(1, 0.5), (2, 0.25), (3, 0.125)]), vocab=vocab)
    assert out["token"] == " hi" and out["bytes"] == [32, 104, 105]
    assert [e["token"] for e in out["top_logprobs"]] == [" hi", "", "x"]  # incomplete UTF-8 cut off
    assert out["top_logprobs"][2]["bytes"] == [120, 0xE2, 0x82]
    with pytest.raises(ParameterError, match="TokenLogprobs"):
        openai_logprobs({"token": 1})
    with pytest.raises(ParameterError, match="not among the candidates"):
        openai_logprobs(TokenLogprobs(1, None, []))
    with pytest.raises(ParameterError, match="outside the vocabulary"):
        openai_logprobs(TokenLogprobs(9, 0.5, []), vocab=vocab)


def test_batch_logprobs_rows():
    b = Batch()
    chains = [from_openai(N, seed=1, logprobs=True, top_logprobs=3), from_openai(N, seed=2),
              from_openai(N, seed=3, n_probs=2, post_sampling_probs=True), from_vllm(N, dict(seed=4, logprobs=1)),
              from_openai(N, defaults="openai", seed=5, logprobs=True)]
    for c in chains:
        b.add(c)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = (rng.standard_normal((5, N)) * 3).astype(np.float32)
        t = b.sample(x)
        out = batch_logprobs(b, x, t)
        assert out[1] is None
        assert out[0] == openai_logprobs(server_logprobs(x[0], 3, int(t[0])))
        assert out[3] == openai_logprobs(server_logprobs(x[3], 1, int(t[3])))
        assert out[2] == openai_logprobs(post_sampling_logprobs(chains[2].last, 2, int(t[2])), post_sampling=True)
        assert len(out[0]["top_logprobs"]) == 3 and len(out[2]["top_probs"]) <= 2
        assert out[4] == openai_logprobs(server_logprobs(x[4], 0, int(t[4]))) and out[4]["top_logprobs"] == []
        b.accept(t)
    with pytest.raises(ParameterError, match="one row per slot"):
        batch_logprobs(b, x[:2], t[:2])


# ---- llama.cpp (oracle) ----------------------------------------------------------------------------
# (request, the common_params_sampling fields llama-server sets from it: server-schema.cpp, by hand)
REQUESTS = {
    "defaults": (dict(seed=11), dict(seed=11)),
    "openai_typical": (dict(temperature=0.7, top_p=0.9, seed=12), dict(temp=0.7, top_p=0.9, seed=12)),
    "penalties": (dict(frequency_penalty=0.4, presence_penalty=0.3, repeat_penalty=1.15, repeat_last_n=32, seed=13),
                  dict(penalty_freq=0.4, penalty_present=0.3, penalty_repeat=1.15, penalty_last_n=32, seed=13)),
    "bias_topk_minp": (dict(top_k=5, min_p=0.1, logit_bias={"7": 3.0, "9": False}, temperature=1.3, seed=14),
                       dict(top_k=5, min_p=0.1, logit_bias=[(7, 3.0), (9, -math.inf)], temp=1.3, seed=14)),
    "greedy_temp0": (dict(temperature=0, seed=15), dict(temp=0.0, seed=15)),
    "mirostat": (dict(mirostat=2, mirostat_tau=3.0, temperature=0.9, seed=16),
                 dict(mirostat=2, mirostat_tau=3.0, temp=0.9, seed=16)),
    "openai_defaults": (dict(seed=17, presence_penalty=0.5, _defaults="openai"),
                        dict(seed=17, temp=1.0, top_p=1.0, top_k=0, min_p=0.0, penalty_present=0.5)),
}


def _repetitive(rng, n, hist):
    """Logits favouring recent tokens, so penalties and the prompt's history matter."""
    x = (rng.standard_normal(n) * 2).astype(np.float32)
    if hist:
        x[np.array(hist[-8:])] += 4.0
    return x


@pytest.mark.oracle
@pytest.mark.parametrize("case", list(REQUESTS))
def test_from_openai_samples_as_llama_server(case):
    from oracle import sampling as O

    O.require()
    request, server_fields = REQUESTS[case]
    request = dict(request)
    defaults = request.pop("_defaults", "llama-server")
    prompt = [3, 7, 7, 9, 100, 7]
    chain = from_openai(N, defaults=defaults, prompt_tokens=prompt, **request)
    oracle = O.OracleCommonChain(N, **server_fields)
    for t in prompt:
        oracle.accept(t)
    rng = np.random.default_rng(zlib_seed(case))
    hist = list(prompt)
    toks = []
    for _ in range(40):
        x = _repetitive(rng, N, hist)
        want = oracle.apply(x)
        tok = chain.sample(x)
        assert tok == int(want["ids"][want["selected"]])
        if chain.last is not None:  # the candidates llama.cpp leaves (post-sampling probabilities)
            v = chain.last.view()
            assert np.array_equal(v["id"], want["ids"])
            assert np.array_equal(v["p"].view(np.uint32), want["p"].view(np.uint32))
        chain.accept(tok)
        oracle.accept(tok)
        hist.append(tok)
        toks.append(tok)
    if case != "greedy_temp0":
        assert len(set(toks)) > 1


def zlib_seed(s: str) -> int:
    import zlib

    return zlib.crc32(s.encode())


@pytest.mark.oracle
@pytest.mark.parametrize("post", [False, True])
def test_openai_logprobs_carry_llama_cpp_probabilities(post):
    """Pre-sampling: llama-server's get_token_probabilities (the top n in std::partial_sort order of
    the raw row, softmax over the whole row); post-sampling: the chain's final candidates as
    llama.cpp's samplers leave them, sorted by p."""
    from oracle import sampling as O

    import lmtail._core as core

    O.require()
    n = 5
    chain = from_openai(N, seed=21, logprobs=True, top_logprobs=n, post_sampling_probs=post)
    oracle = O.OracleCommonChain(N, seed=21)
    b = Batch()
    b.add(chain)
    rng = np.random.default_rng(5)
    for _ in range(8):
        x = (rng.standard_normal((1, N)) * 3).astype(np.float32)
        tok = int(b.sample(x)[0])
        got = batch_logprobs(b, x, [tok])[0]
        if post:
            want = oracle.apply(x[0])
            assert tok == int(want["ids"][want["selected"]])
            order = sorted(range(len(want["p"])), key=lambda i: -want["p"][i])
            top = [(int(want["ids"][i]), float(want["p"][i])) for i in order[:n] if want["p"][i] > 0]
            assert [e["prob"] for e in got["top_probs"]] == [p for _, p in top]
            assert {e["id"] for e in got["top_probs"]} == {t for t, _ in top} or len({p for _, p in top}) < len(top)
            assert got["prob"] == float(want["p"][list(want["ids"]).index(tok)])
        else:
            assert tok == oracle.sample(x[0])
            o = O.OracleChain([("top_k", n)], N, 1)
            buf = o.fill(x[0])
            o.apply_raw(buf)  # the whole row in std::partial_sort's order
            ref = buf.copy()
            core.sampling_softmax(ref, 0, len(ref), True)  # float softmax, max = the first entry
            assert [e["id"] for e in got["top_logprobs"]] == ref["id"][:n].tolist()
            assert [e["logprob"] for e in got["top_logprobs"]] == \
                [float(np.float32(math.log(float(p)))) for p in ref["p"][:n]]
            p_tok = float(ref["p"][list(ref["id"]).index(tok)])
            assert got["logprob"] == float(np.float32(math.log(p_tok)))
            # and the values are the softmax of the raw logits (float64 reference)
            z = np.exp(x[0].astype(np.float64) - x[0].max())
            assert math.isclose(got["logprob"], math.log(z[tok] / z.sum()), rel_tol=1e-4)  # a float sum over the row
        b.accept([tok])
        oracle.accept(tok)


@pytest.mark.oracle
@pytest.mark.parametrize("params", [
    dict(temperature=0.8, top_p=0.9, top_k=50, min_p=0.05, seed=31),
    dict(temperature=1.2, repetition_penalty=1.3, presence_penalty=0.6, frequency_penalty=0.3,
         logit_bias={4: 2.0}, seed=32),
    dict(temperature=0.0, repetition_penalty=1.5, frequency_penalty=1.0, seed=33),
])
def test_from_vllm_is_llama_cpp_samplers_in_vllm_order(params):
    """The same llama.cpp samplers, composed here as two oracle chains over one buffer: the
    repetition penalty primed with the prompt, the rest seeing only generated tokens."""
    from oracle import sampling as O

    O.require()
    prompt = [5, 6, 7, 7]
    chain = from_vllm(N, params, prompt_tokens=prompt)
    W = 1 << 12  # a window longer than this test (lmtail's is longer still: "every token")
    rep = params.get("repetition_penalty", 1.0)
    first = ([("logit_bias", list(params["logit_bias"].items()))] if "logit_bias" in params else []) + \
        [("penalties", W, rep, 0.0, 0.0)]
    rest = [("penalties", W, 1.0, params.get("frequency_penalty", 0.0), params.get("presence_penalty", 0.0))]
    if params["temperature"] == 0:
        rest.append(("greedy",))
    else:
        rest += [("temp", params["temperature"]), ("min_p", params.get("min_p", 0.0), 1),
                 ("top_k", params.get("top_k", 0)), ("top_p", params.get("top_p", 1.0), 1), ("dist", params["seed"])]
    oa, ob = O.OracleChain(first, N, params["seed"]), O.OracleChain(rest, N, params["seed"])
    for t in prompt:
        oa.accept(t)
    rng = np.random.default_rng(params["seed"])
    hist = list(prompt)
    for _ in range(30):
        x = _repetitive(rng, N, hist)
        buf = oa.fill(x)
        off, size, _, srt = oa.apply_raw(buf)
        assert (off, size) == (0, N)
        off, size, sel, _ = ob.apply_raw(buf, srt)
        want = int(buf["id"][off + sel])
        tok = chain.sample(x)
        assert tok == want
        chain.accept(tok)
        oa.accept(tok)
        ob.accept(tok)
        hist.append(tok)
