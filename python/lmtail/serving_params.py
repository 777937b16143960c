"""Request parameters and logprobs in the shapes serving users bring (OpenAI, llama-server, vLLM).

:func:`from_openai` builds the :class:`~lmtail.sampling.Chain` llama-server builds for an OpenAI
``/v1/chat/completions`` or ``/v1/completions`` request (``tools/server/server-schema.cpp`` and
``server-common.cpp`` of the pinned llama.cpp): each name lands on a ``common_params_sampling``
field, unspecified ones keep llama-server's defaults (``common/common.h``: top_k 40, top_p 0.95,
min_p 0.05, temp 0.8, penalties over the last 64 tokens but neutral) or, with
``defaults="openai"``, the OpenAI API's (temperature 1, top_p 1, no top_k, no min_p).  The chain
is then :func:`~lmtail.sampling.common_chain`'s, so a seeded request samples exactly the tokens
llama-server samples for it.

=====================  ================================  ==========================================
name                   common_params_sampling field      notes
=====================  ================================  ==========================================
temperature            temp                              >= 0; 0: the top token (dist still draws)
top_p                  top_p                             [0, 1]; 1 = off
top_k                  top_k                             >= 0; 0 (or -1) = off
min_p                  min_p                             [0, 1]; 0 = off
frequency_penalty      penalty_freq                      last ``repeat_last_n`` tokens (64)
presence_penalty       penalty_present                   last ``repeat_last_n`` tokens (64)
repeat_penalty         penalty_repeat                    llama-server's name; > 0, 1 = off
repetition_penalty     penalty_repeat                    vLLM's name (llama-server ignores it)
repeat_last_n          penalty_last_n                    >= 0 (0: penalties off)
seed                   seed                              None / -1: random; else [0, 2**32 - 1]
ignore_eos             ignore_eos                        -inf bias on ``vocab.eog_ids`` (needs vocab)
logit_bias             logit_bias                        {id: bias} or [[id, bias]]; false = -inf
logprobs (bool)        n_probs = top_logprobs or 20      chat; ``top_logprobs`` needs it (see below)
logprobs (int)         n_probs                           legacy completions
n_probs                n_probs                           llama-server's name
post_sampling_probs    (response)                        probabilities after the chain
=====================  ================================  ==========================================

llama-server's other sampling fields are accepted under their llama-server names too:
``typical_p`` (typ_p), ``min_keep``, ``top_n_sigma``, ``xtc_probability``, ``xtc_threshold``,
``dynatemp_range``, ``dynatemp_exponent``, ``mirostat``, ``mirostat_tau``, ``mirostat_eta``,
``dry_multiplier``, ``dry_base``, ``dry_allowed_length``, ``dry_penalty_last_n``,
``dry_sequence_breakers``, ``samplers``.  A None value means absent (as llama-server reads JSON null).
DRY (``dry_multiplier > 0``) needs ``vocab=``: its sequence breakers are strings.

Where this is stricter than llama-server (it never changes a valid request's tokens): llama-server
clamps top_k, top_p, min_p, temperature, xtc_* and mirostat into range, replaces a dry_base below
1 by its default, skips out-of-vocabulary or malformed logit_bias entries and wraps a negative seed
modulo 2**32, and ignores names it does not know; lmtail raises :class:`~lmtail.ParameterError`
for each instead (an unknown name with a "did you mean" hint).  Request fields that are not
sampling parameters (``stop``, ``max_tokens``, ``grammar``...) are refused with a note on where they
belong.  A logit_bias key that is text (llama-server tokenizes it) is refused: lmtail has no
tokenizer, pass token ids.  Biases are added to the logit as llama.cpp does: any finite value is
taken (OpenAI documents [-100, 100]; lmtail, like llama-server, takes larger ones too), and
``false`` or ``-inf`` bans the token.

Logprobs.  Chat's ``logprobs: true`` sets ``n_probs`` to ``top_logprobs``, 20 when absent
(llama-server's choice; OpenAI's is 0); llama-server reports probabilities only when ``n_probs >
0``, so ``top_logprobs: 0`` reports nothing there, while with ``defaults="openai"`` the sampled
token's logprob is still reported.  They are llama-server's: by default the softmax of the raw
logits (before logit_bias, penalties, grammar), with ``post_sampling_probs`` the chain's final
candidates (:func:`batch_logprobs`).

Penalties.  llama.cpp's penalties sampler counts the last ``repeat_last_n`` tokens the chain
*accepted*; llama-server accepts every prompt token into the chain before the first step
(``server_slot::init_sampler``), so its penalties see prompt and output alike.  Pass
``prompt_tokens`` to do the same.  OpenAI (and vLLM) count presence/frequency over the generated
tokens only, with no window: not what llama-server computes, and not what lmtail computes here.

:func:`from_vllm` maps a vLLM ``SamplingParams`` (its fields and semantics, not llama-server's);
:func:`openai_logprobs` and :func:`batch_logprobs` write logprobs in llama-server's OpenAI shape.
"""

from __future__ import annotations

import difflib
import math
import numbers
import re
from collections.abc import Mapping
from typing import Optional

import numpy as np

from .errors import ParameterError
from .sampling import Chain, TokenLogprobs, common_chain, post_sampling_logprobs, server_logprobs
from .sampling.rng import DEFAULT_SEED

__all__ = ["from_openai", "from_vllm", "openai_logprobs", "batch_logprobs", "OPENAI_PARAMS"]

_I32_MAX = 2**31 - 1

# OpenAI name -> common_params_sampling field (the direct ones; logprobs/seed/bias have handlers)
_OPENAI_DIRECT = {
    "temperature": "temp", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
    "frequency_penalty": "penalty_freq", "presence_penalty": "penalty_present",
}
# llama-server's own request names (server-schema.cpp) -> field
_SERVER_DIRECT = {
    "repeat_penalty": "penalty_repeat", "repeat_last_n": "penalty_last_n", "typical_p": "typ_p",
    "min_keep": "min_keep", "top_n_sigma": "top_n_sigma", "xtc_probability": "xtc_probability",
    "xtc_threshold": "xtc_threshold", "dynatemp_range": "dynatemp_range",
    "dynatemp_exponent": "dynatemp_exponent", "mirostat": "mirostat", "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta", "dry_multiplier": "dry_multiplier", "dry_base": "dry_base",
    "dry_allowed_length": "dry_allowed_length", "dry_penalty_last_n": "dry_penalty_last_n",
}
_OTHER = ("repetition_penalty", "ignore_eos", "seed", "logit_bias", "logprobs", "top_logprobs", "n_probs",
          "post_sampling_probs", "dry_sequence_breakers", "samplers")
#: Every name :func:`from_openai` accepts.
OPENAI_PARAMS: tuple[str, ...] = tuple(sorted({*_OPENAI_DIRECT, *_SERVER_DIRECT, *_OTHER}))

# Request fields a serving loop handles itself: refused with a pointer rather than "unknown".
_NOT_SAMPLING = {
    "model": "the engine's business", "messages": "the prompt", "prompt": "the prompt",
    "max_tokens": "the loop's stop condition", "max_completion_tokens": "the loop's stop condition",
    "n_predict": "the loop's stop condition", "stop": "the loop's stop condition",
    "stream": "the response", "stream_options": "the response", "n": "one chain per completion",
    "best_of": "one chain per completion", "echo": "the response", "suffix": "the prompt",
    "user": "the engine's business", "tools": "a grammar", "tool_choice": "a grammar",
    "grammar": "a grammar", "json_schema": "a grammar", "response_format": "a grammar",
}

# (kind, lo, hi) per field: "int" / "real" (finite) with inclusive bounds, None = unbounded
_RANGES = {
    "temp": ("real", 0.0, None), "top_p": ("real", 0.0, 1.0), "min_p": ("real", 0.0, 1.0),
    "top_k": ("int", -1, _I32_MAX), "penalty_freq": ("real", None, None),
    "penalty_present": ("real", None, None), "penalty_repeat": ("real", None, None),
    "penalty_last_n": ("int", 0, _I32_MAX), "typ_p": ("real", None, None), "min_keep": ("int", 0, _I32_MAX),
    "top_n_sigma": ("real", None, None), "xtc_probability": ("real", 0.0, 1.0),
    "xtc_threshold": ("real", 0.0, 1.0), "dynatemp_range": ("real", None, None),
    "dynatemp_exponent": ("real", None, None), "mirostat": ("int", 0, 2), "mirostat_tau": ("real", None, None),
    "mirostat_eta": ("real", None, None), "dry_multiplier": ("real", None, None), "dry_base": ("real", 1.0, None),
    "dry_allowed_length": ("int", 0, _I32_MAX), "dry_penalty_last_n": ("int", 0, _I32_MAX),
}


def _real(name: str, v, lo=None, hi=None, *, lo_open: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
        raise ParameterError(f"{name}: expected a finite number; found {v!r}")
    x = float(v)
    if (lo is not None and (x < lo or (lo_open and x == lo))) or (hi is not None and x > hi):
        rng = f"{'(' if lo_open else '['}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
        raise ParameterError(f"{name}: expected a number in {rng}; found {v!r}")
    return x


def _int(name: str, v, lo=None, hi=None) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ParameterError(f"{name}: expected an integer; found {v!r}")
    x = int(v)
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise ParameterError(f"{name}: expected an integer in [{lo}, {hi}]; found {v!r}")
    return x


def _seed(name: str, v) -> int:
    # None and -1 are "random" in both APIs (llama-server reads -1 as uint32 0xFFFFFFFF =
    # LLAMA_DEFAULT_SEED); any other negative would wrap modulo 2**32 there: refused here.
    if v is None:
        return DEFAULT_SEED
    s = _int(name, v)
    if s == -1:
        return DEFAULT_SEED
    if not 0 <= s <= 0xFFFFFFFF:
        raise ParameterError(f"{name}: expected None, -1 (random) or an integer in [0, 2**32 - 1]; found {v!r}")
    return s


_TOKEN_KEY = re.compile(r"[+-]?[0-9]+")


def _bias_token(key, n_vocab: int, where: str) -> int:
    if isinstance(key, str):
        if not _TOKEN_KEY.fullmatch(key):
            raise ParameterError(f"{where}: key {key!r} is not a token id (llama-server would tokenize the text; "
                                 "lmtail has no tokenizer: pass token ids)")
        key = int(key)
    tok = _int(f"{where} key", key)
    if not 0 <= tok < n_vocab:
        raise ParameterError(f"{where}: token {tok} outside the vocabulary [0, {n_vocab})")
    return tok


def _bias_value(v, where: str) -> float:
    if v is False:  # llama-server: false bans the token
        return float("-inf")
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or math.isnan(float(v)) or float(v) == math.inf:
        raise ParameterError(f"{where}: expected a finite number, -inf or false (ban); found {v!r}")
    return float(v)


def _logit_bias(bias, n_vocab: int, name: str = "logit_bias") -> list[tuple[int, float]]:
    if bias is None:
        return []
    if isinstance(bias, dict):
        items = list(bias.items())
    elif isinstance(bias, (list, tuple)):
        items = []
        for i, e in enumerate(bias):
            if not isinstance(e, (list, tuple)) or len(e) != 2:
                raise ParameterError(f"{name}[{i}]: expected a [token, bias] pair; found {e!r}")
            items.append((e[0], e[1]))
    else:
        raise ParameterError(f"{name}: expected a {{token: bias}} mapping or [token, bias] pairs; found {bias!r}")
    return [(_bias_token(k, n_vocab, f"{name}[{k!r}]"), _bias_value(v, f"{name}[{k!r}]")) for k, v in items]


def _unknown(name: str, known) -> ParameterError:
    if name in _NOT_SAMPLING:
        return ParameterError(f"{name!r} is not a sampling parameter (it belongs to {_NOT_SAMPLING[name]}); "
                              "pass only sampling parameters")
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else \
        f"; expected one of {', '.join(sorted(known))}"
    return ParameterError(f"unknown sampling parameter {name!r}{hint}")


def _n_vocab(n_vocab) -> int:
    if isinstance(n_vocab, bool) or not isinstance(n_vocab, numbers.Integral) or not 0 < int(n_vocab) < 2**31:
        raise ParameterError(f"n_vocab: expected an integer in [1, 2**31 - 1]; found {n_vocab!r}")
    return int(n_vocab)


def _tokens(prompt_tokens, n_vocab: int, what: str) -> list[int]:
    toks = np.asarray(prompt_tokens)
    if toks.ndim != 1 or (toks.size and toks.dtype.kind not in "iu"):
        raise ParameterError(f"{what}: expected a sequence of token ids; found {prompt_tokens!r:.80}")
    if toks.size and (toks.min() < 0 or toks.max() >= n_vocab):
        bad = int(toks[(toks < 0) | (toks >= n_vocab)][0])
        raise ParameterError(f"{what}: token {bad} outside [0, {n_vocab})")
    return [int(t) for t in toks.tolist()]


def from_openai(n_vocab: int, *, defaults: str = "llama-server", prompt_tokens=None, stdlib: str = "libstdc++",
                vocab=None, **params) -> Chain:
    """The chain llama-server builds for an OpenAI-style request's sampling parameters.

    ``params``: the request's sampling fields by their OpenAI or llama-server names (the table in
    :mod:`lmtail.serving_params`); a None value is absent.  To pass a whole request body, keep
    its sampling fields: ``{k: v for k, v in body.items() if k in OPENAI_PARAMS}``.  ``defaults``: ``"llama-server"``
    (``common_params_sampling``: top_k 40, top_p 0.95, min_p 0.05, temperature 0.8) or
    ``"openai"`` (temperature 1, top_p 1, top_k and min_p off, ``logprobs: true`` alone returns
    no alternatives; everything else as llama-server).  ``prompt_tokens``: accepted into the
    chain before it is returned, as llama-server's slot does with the prompt (penalty and DRY
    history; not a grammar).  ``stdlib`` and ``vocab`` as for :func:`~lmtail.sampling.common_chain`.

    The chain's ``params`` carry, besides ``common_params_sampling``'s fields, ``logprobs``
    (whether the request asked for logprobs) and ``post_sampling_probs``; :func:`batch_logprobs`
    reads them.  Raises :class:`~lmtail.ParameterError` for an unknown name (with a "did you mean"
    hint), a non-sampling request field, a wrong type or an out-of-range value.
    """
    n_vocab = _n_vocab(n_vocab)
    if defaults not in ("llama-server", "openai"):
        raise ParameterError(f"defaults: expected 'llama-server' or 'openai'; found {defaults!r}")
    known = set(OPENAI_PARAMS)
    for k in params:
        if k not in known:
            raise _unknown(k, known)
    given = {k: v for k, v in params.items() if v is not None}
    common: dict = {}
    if defaults == "openai":
        common.update(temp=1.0, top_p=1.0, top_k=0, min_p=0.0)

    if "repeat_penalty" in given and "repetition_penalty" in given:
        raise ParameterError("repeat_penalty and repetition_penalty are the same parameter; give one")
    for name, field in {**_OPENAI_DIRECT, "repetition_penalty": "penalty_repeat", **_SERVER_DIRECT}.items():
        if name not in given:
            continue
        kind, lo, hi = _RANGES[field]
        v = _int(name, given[name], lo, hi) if kind == "int" else _real(name, given[name], lo, hi)
        if field == "top_k" and v == -1:
            v = 0  # the "off" spelling many clients send; llama-server clamps it to 0
        if field == "penalty_repeat" and v <= 0:
            raise ParameterError(f"{name}: expected a number > 0 (1 = off); found {given[name]!r}")
        common[field] = v
    if "seed" in given:
        common["seed"] = _seed("seed", given["seed"])
    if "logit_bias" in given:
        common["logit_bias"] = _logit_bias(given["logit_bias"], n_vocab)
    if "dry_sequence_breakers" in given:
        br = given["dry_sequence_breakers"]
        if isinstance(br, str) or not isinstance(br, (list, tuple)) or not br or \
                not all(isinstance(b, str) for b in br):
            raise ParameterError(f"dry_sequence_breakers: expected a non-empty list of strings; found {br!r}")
        common["dry_sequence_breakers"] = tuple(br)
    if "samplers" in given:
        common["samplers"] = given["samplers"]  # common_chain validates names and chars
    if "ignore_eos" in given:
        if not isinstance(given["ignore_eos"], bool):
            raise ParameterError(f"ignore_eos: expected true or false; found {given['ignore_eos']!r}")
        if given["ignore_eos"] and vocab is None:
            raise ParameterError("ignore_eos: needs vocab= (its eog_ids get the -inf biases, as llama-server adds them)")
        common["ignore_eos"] = given["ignore_eos"]

    # logprobs: chat's bool (n_probs = top_logprobs, llama-server's default 20), or the legacy
    # completions integer (an alias of n_probs there).
    want_lp = False
    n_probs = 0
    lp = given.get("logprobs")
    if "n_probs" in given and lp is not None:
        raise ParameterError("n_probs and logprobs both set the number of probabilities; give one")
    if isinstance(lp, bool):
        if lp:
            default_top = 20 if defaults == "llama-server" else 0
            n_probs = _int("top_logprobs", given.get("top_logprobs", default_top), 0, _I32_MAX)
            # llama-server reports nothing when n_probs is 0; OpenAI still reports the token's logprob
            want_lp = n_probs > 0 or defaults == "openai"
        elif "top_logprobs" in given:
            raise ParameterError("top_logprobs requires logprobs to be set to true")
    elif lp is not None:
        n_probs = _int("logprobs", lp, 0, _I32_MAX)
        want_lp = n_probs > 0
        if "top_logprobs" in given:
            raise ParameterError("top_logprobs goes with logprobs: true (chat); an integer logprobs "
                                 "(completions) already is the number of alternatives")
    elif "top_logprobs" in given:
        raise ParameterError("top_logprobs requires logprobs to be set to true")
    if "n_probs" in given:
        n_probs = _int("n_probs", given["n_probs"], 0, _I32_MAX)
        want_lp = n_probs > 0
    common["n_probs"] = n_probs
    post = given.get("post_sampling_probs", False)
    if not isinstance(post, bool):
        raise ParameterError(f"post_sampling_probs: expected true or false; found {post!r}")

    chain = common_chain(n_vocab, stdlib=stdlib, vocab=vocab, **common)
    chain.params["logprobs"] = want_lp
    chain.params["post_sampling_probs"] = post
    if prompt_tokens is not None:
        for t in _tokens(prompt_tokens, chain.n_vocab, "prompt_tokens"):
            chain.accept(t)  # server_slot::init_sampler: every prompt token, before the first step
    return chain


# ---- vLLM ------------------------------------------------------------------------------------------
_VLLM_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                  "repetition_penalty", "seed", "logit_bias", "logprobs")
# Fields that do not change the distribution of a step (the loop, the response): read and ignored.
_VLLM_IGNORED = ("n", "best_of", "stop", "stop_token_ids", "max_tokens", "ignore_eos", "include_stop_str_in_output",
                 "detokenize", "skip_special_tokens", "spaces_between_special_tokens", "output_kind",
                 "truncate_prompt_tokens", "prompt_logprobs", "output_text_buffer_length", "logprobs_mode",
                 "extra_args", "flat_logprobs")
# Fields that would change sampling in ways a llama.cpp chain does not express: refused unless
# at their neutral value.
_VLLM_REFUSED: dict[str, tuple] = {"min_tokens": (0,), "allowed_token_ids": (None,), "bad_words": (None, []),
                 "logits_processors": (None, []), "use_beam_search": (False,), "guided_decoding": (None,),
                 "structured_outputs": (None,), "length_penalty": (1.0,)}
_VLLM_DEFAULTS = dict(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, presence_penalty=0.0, frequency_penalty=0.0,
                      repetition_penalty=1.0, seed=None, logit_bias=None, logprobs=None)
_VLLM_WINDOW = 1 << 24  # "every token": a window no request reaches (histories grow with use only)


def from_vllm(n_vocab: int, params, *, prompt_tokens=None, stdlib: str = "libstdc++") -> Chain:
    """A chain with vLLM ``SamplingParams`` semantics, from a ``SamplingParams`` or a mapping.

    Read: ``temperature`` (1), ``top_p`` (1), ``top_k`` (0 or -1 = off), ``min_p`` (0),
    ``presence_penalty`` / ``frequency_penalty`` (0, in [-2, 2]), ``repetition_penalty`` (1),
    ``seed`` (None = random), ``logit_bias`` ({id: bias}), ``logprobs`` (None, k >= 0, or -1 =
    the whole vocabulary).  Fields that do not change a step's distribution (``max_tokens``,
    ``stop``, ``n``...) are ignored; ``min_tokens``, ``allowed_token_ids``, ``bad_words``,
    ``logits_processors``, beam search and structured outputs are refused unless neutral (use a
    grammar matcher in the :class:`~lmtail.serving.Batch` for structured output).  A mapping with
    any other key raises, with a "did you mean" hint.

    The chain, in vLLM's order (its v1 sampler): logit_bias, repetition penalty, presence and
    frequency penalties, then ``temperature < 1e-5``: greedy (the first maximum, as
    ``torch.argmax``; top_p/top_k/min_p ignored, as vLLM does), else temperature -> min_p -> top_k
    -> top_p -> dist.  Each step is llama.cpp's sampler of that name.  What is exact and what is not:

    * penalties: the formulas are vLLM's (repetition divides positive logits and multiplies the
      others, once per token seen; frequency subtracts ``count * f``, presence ``p``).  vLLM counts
      presence/frequency over the *generated* tokens and repetition over prompt *and* generated
      tokens: the chain holds two llama.cpp penalties samplers, the second over the tokens the
      caller ``accept``\\ s (the generated ones), the first primed with ``prompt_tokens`` too;
      both over a window of 2**24 tokens (vLLM: every token; no request reaches it).
      With ``repetition_penalty != 1`` and no ``prompt_tokens`` this raises (the result would
      silently ignore the prompt; pass ``prompt_tokens=[]`` for a prompt-less request).
      ``chain.reset()`` clears the prompt from that history as well.
    * top_k keeps exactly k tokens (llama.cpp's sort order breaks ties at the boundary); vLLM
      keeps every token tied with the k-th.  min_p and top_p compute the same thresholds in a
      different float order: a token exactly at a threshold can fall either side.
    * draws: llama.cpp's mt19937 ``dist``, not vLLM's torch generator, so a vLLM ``seed``
      gives a reproducible stream but never vLLM's tokens; only the distribution is the same.
    * ``0 < temperature < 0.01``: vLLM raises it to 0.01 (with a warning); this raises instead.
    * logprobs: vLLM's default ("raw_logprobs") are computed from the raw logits, as llama-server's
      pre-sampling probabilities (:func:`batch_logprobs`); vLLM also always reports the sampled
      token, as these do.
    """
    n_vocab = _n_vocab(n_vocab)
    is_map = isinstance(params, Mapping)
    if not is_map and not hasattr(params, "temperature"):
        raise ParameterError(f"params: expected a vLLM SamplingParams or a mapping of its fields; "
                             f"found {type(params).__name__}")
    get = (lambda k, d: params.get(k, d)) if is_map else (lambda k, d: getattr(params, k, d))
    if is_map:
        known = set(_VLLM_SAMPLING) | set(_VLLM_IGNORED) | set(_VLLM_REFUSED)
        for k in params:
            if k not in known:
                close = difflib.get_close_matches(k, sorted(known), n=3, cutoff=0.6)
                hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else \
                    f"; expected SamplingParams fields ({', '.join(_VLLM_SAMPLING)})"
                raise ParameterError(f"unknown SamplingParams field {k!r}{hint}")
    for k, neutral in _VLLM_REFUSED.items():
        v = get(k, neutral[0])
        if not any(v is n or (type(v) is type(n) and v == n) for n in neutral):
            raise ParameterError(f"{k}={v!r}: not expressible by a llama.cpp sampler chain (lmtail refuses "
                                 "rather than sample from a different distribution)")
    p = {k: get(k, d) for k, d in _VLLM_DEFAULTS.items()}
    for k in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        if p[k] is None:
            p[k] = _VLLM_DEFAULTS[k]
    temp = _real("temperature", p["temperature"], 0.0)
    if 0 < temp < 0.01:
        raise ParameterError(f"temperature: {temp!r} is in (0, 0.01), which vLLM raises to 0.01; "
                             "pass 0.01 (or 0 for greedy)")
    top_p = _real("top_p", p["top_p"], 0.0, 1.0, lo_open=True)
    top_k = _int("top_k", 0 if p["top_k"] is None else p["top_k"], -1, _I32_MAX)
    min_p = _real("min_p", p["min_p"], 0.0, 1.0)
    pres = _real("presence_penalty", p["presence_penalty"], -2.0, 2.0)
    freq = _real("frequency_penalty", p["frequency_penalty"], -2.0, 2.0)
    rep = _real("repetition_penalty", p["repetition_penalty"], 0.0, None, lo_open=True)
    seed = _seed("seed", p["seed"])
    bias = p["logit_bias"]
    if bias is not None and not isinstance(bias, dict):
        raise ParameterError(f"logit_bias: expected a {{token: bias}} dict; found {bias!r}")
    biases = _logit_bias(bias, n_vocab)
    lp = p["logprobs"]
    n_probs = 0 if lp is None else (n_vocab if lp == -1 and not isinstance(lp, bool) else
                                    _int("logprobs", lp, 0, _I32_MAX))
    if rep != 1.0 and prompt_tokens is None:
        raise ParameterError("repetition_penalty: vLLM counts the prompt's tokens too; pass prompt_tokens "
                             "(prompt_tokens=[] for none)")

    spec: list[tuple] = []
    if biases:
        spec.append(("logit_bias", biases))
    rep_at = None
    if rep != 1.0:
        rep_at = len(spec)
        spec.append(("penalties", _VLLM_WINDOW, rep, 0.0, 0.0))
    if freq != 0.0 or pres != 0.0:
        spec.append(("penalties", _VLLM_WINDOW, 1.0, freq, pres))
    if temp < 1e-5:  # vLLM's _SAMPLING_EPS: greedy
        spec.append(("greedy",))
    else:
        spec += [("temp", temp), ("min_p", min_p, 1), ("top_k", max(top_k, 0)), ("top_p", top_p, 1), ("dist", seed)]
    chain = Chain(spec, n_vocab, seed=seed, stdlib=stdlib)
    chain.params = {"n_probs": n_probs, "logprobs": lp is not None, "post_sampling_probs": False}
    if prompt_tokens is not None:
        toks = _tokens(prompt_tokens, chain.n_vocab, "prompt_tokens")
        if rep_at is not None:
            for t in toks:  # the prompt feeds only the repetition penalty's history (vLLM's prompt mask)
                chain.samplers[rep_at].accept(t)
    return chain


# ---- logprobs --------------------------------------------------------------------------------------
_LOWEST = float(np.finfo(np.float32).min)  # llama-server writes log(0) as this (JSON has no -inf)


def _logprob(p: float) -> float:
    # llama-server: std::log on the float probability; lmtail rounds log(p) to float32, which can
    # differ from the platform logf in the last bit
    return _LOWEST if p == 0.0 else float(np.float32(math.log(p)))


def _entry(tok: int, p: float, vocab, post: bool) -> dict:
    e: dict = {"id": tok}
    if vocab is not None:
        piece = bytes(vocab.pieces[tok])
        e["token"] = _valid_utf8_prefix(piece).decode("utf-8", errors="replace")
        e["bytes"] = list(piece)
    if post:
        e["prob"] = p
    else:
        e["logprob"] = _logprob(p)
    return e


def _valid_utf8_prefix(b: bytes) -> bytes:
    # llama-server cuts an incomplete UTF-8 sequence off the end of a piece (validate_utf8)
    for cut in range(1, min(4, len(b)) + 1):
        lead = b[-cut]
        if lead & 0xC0 == 0x80:
            continue
        need = 2 if lead & 0xE0 == 0xC0 else 3 if lead & 0xF0 == 0xE0 else 4 if lead & 0xF8 == 0xF0 else 1
        return b[:-cut] if need > cut else b
    return b


def openai_logprobs(lp: TokenLogprobs, *, vocab=None, post_sampling: bool = False) -> dict:
    """One generated token's probabilities as llama-server writes them in an OpenAI response
    (``choices[i].logprobs.content[j]``).

    ``lp``: from :func:`~lmtail.sampling.server_logprobs` (pre-sampling: the softmax of the raw
    logits, llama-server's default) or :func:`~lmtail.sampling.post_sampling_logprobs` (after the
    chain; pass ``post_sampling=True``).  Returns ``{"id", "logprob", "top_logprobs": [{"id",
    "logprob"}, ...]}``, most likely first; with a ``vocab`` (anything with ``pieces``, e.g.
    :class:`lmtail.grammar.Vocab`) each entry also has llama-server's ``"token"`` (the piece as
    text, an incomplete trailing UTF-8 sequence cut off) and ``"bytes"``.  Pieces are the
    vocabulary's (control tokens spelled out, as llama-server with ``--special``).
    ``post_sampling=True`` writes ``"prob"`` / ``"top_probs"`` instead, as llama-server does for
    ``post_sampling_probs``.  A probability of 0 has logprob ``-3.4028234663852886e38`` (the
    lowest float32; llama-server's stand-in for -inf, which JSON cannot carry).
    """
    if not isinstance(lp, TokenLogprobs):
        raise ParameterError(f"openai_logprobs: expected a TokenLogprobs (server_logprobs / "
                             f"post_sampling_logprobs); found {type(lp).__name__}")
    if lp.prob is None:
        raise ParameterError(f"openai_logprobs: token {lp.token} is not among the candidates (no probability)")
    if vocab is not None:
        n = len(getattr(vocab, "pieces", ()))
        bad = [t for t in [lp.token] + [t for t, _ in lp.top] if not 0 <= t < n]
        if bad:
            raise ParameterError(f"openai_logprobs: token {bad[0]} outside the vocabulary's {n} pieces")
    out = _entry(lp.token, lp.prob, vocab, post_sampling)
    out["top_probs" if post_sampling else "top_logprobs"] = [_entry(t, p, vocab, post_sampling) for t, p in lp.top]
    return out


def batch_logprobs(batch, logits, tokens, *, vocab=None) -> list[Optional[dict]]:
    """Per row of a :class:`~lmtail.serving.Batch`, the sampled token's logprobs in the OpenAI shape
    (:func:`openai_logprobs`), or None for rows whose request did not ask for them.

    Call after ``tokens = batch.sample(logits)`` and before the next ``sample``.  A row reports
    when its chain's ``params`` ask (``logprobs`` / ``n_probs > 0``: chains from :func:`from_openai`,
    :func:`from_vllm` or ``common_chain(n_probs=...)``): ``n_probs`` alternatives from the raw
    ``logits`` row (llama-server's default), or with ``post_sampling_probs`` from the chain's final
    candidates of this step (``chain.last``).
    """
    slots = batch.slots
    x = np.asarray(logits)
    t = np.asarray(tokens)
    if x.ndim != 2 or x.shape[0] != len(slots) or t.shape != (len(slots),):
        raise ParameterError(f"batch_logprobs: expected ({len(slots)}, n_vocab) logits and {len(slots)} tokens "
                             f"(one row per slot); found {x.shape} and {t.shape}")
    out: list[Optional[dict]] = []
    for r, s in enumerate(slots):
        prm = s.chain.params
        n = int(prm.get("n_probs", 0) or 0)
        if not (prm.get("logprobs") or n > 0):
            out.append(None)
            continue
        tok = int(t[r])
        if prm.get("post_sampling_probs"):
            if s.chain.last is None:
                raise ParameterError(f"batch_logprobs: row {r}: the chain kept no candidates (post_sampling_probs "
                                     "needs a chain that builds them; a greedy-only chain does not)")
            lp = post_sampling_logprobs(s.chain.last, n, tok)
        else:
            lp = server_logprobs(np.ascontiguousarray(x[r]), n, tok)
        out.append(openai_logprobs(lp, vocab=vocab, post_sampling=bool(prm.get("post_sampling_probs"))))
    return out
