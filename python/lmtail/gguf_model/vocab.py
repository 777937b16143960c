"""Vocabulary keys and end-of-generation ids, as llama.cpp's ``llama_vocab::impl::load``
(``src/llama-vocab.cpp``, llama-cpp-python 0.3.36) reads them from a GGUF's KV."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import GGUFError
from .container import _KV, _T_INT32, _T_STRING, _T_UINT32, GGUFFile, StringArray, _c_str

# --------------------------------------------------------------------------------------------
# Vocabulary and end-of-generation ids
# --------------------------------------------------------------------------------------------

K_TOKENS = "tokenizer.ggml.tokens"
K_TOKEN_TYPE = "tokenizer.ggml.token_type"
K_MODEL = "tokenizer.ggml.model"

# Default special eos id per tokenizer model (llama-vocab.cpp, the tokenizer_model branches of
# llama_vocab::impl::load).  None = LLAMA_TOKEN_NULL.  "no_vocab"/"none" return before any
# special-token handling, so they have no EOG ids at all.
_DEFAULT_EOS = {
    "llama": 2, "bert": None, "gpt2": 11, "hybriddna": 11, "whitespace": 11, "t5": 1,
    "rwkv": None, "test": None, "plamo2": 2, "gemma4": None,
}  # fmt: skip

# Text lists of the auto-detect pass (llama-vocab.cpp, "auto-detect special tokens by text").
_EOT_TEXTS = [
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<end_of_utterance>",
]  # fmt: skip
_EOM_TEXTS = ["<|eom_id|>"]
_FIM_PAD_TEXTS = ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"]
_FIM_REP_TEXTS = ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"]
_FIM_SEP_TEXTS = ["<|file_sep|>"]
# The end-of-generation text list ("maintain a list of tokens that cause end-of-generation").
_EOG_TEXTS = [
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
]  # fmt: skip


def _b(texts: list[str]) -> list[bytes]:
    return [t.encode("utf-8") for t in texts]


_EOT_B, _EOM_B, _EOG_B = _b(_EOT_TEXTS), _b(_EOM_TEXTS), _b(_EOG_TEXTS)
_FIM_PAD_B, _FIM_REP_B, _FIM_SEP_B = _b(_FIM_PAD_TEXTS), _b(_FIM_REP_TEXTS), _b(_FIM_SEP_TEXTS)



def vocab_tokens(kv: "GGUFFile | Mapping[str, Any]") -> list[bytes] | None:
    """The raw token texts (``tokenizer.ggml.tokens``) as bytes, or None when absent."""
    toks = _KV(kv, None, getattr(kv, "path", "<kv>")).get_array(K_TOKENS, (_T_STRING,))
    if toks is None:
        return None
    if isinstance(toks, StringArray):
        return toks.raw_list()
    return [t.encode("utf-8", "surrogateescape") if isinstance(t, str) else bytes(t) for t in toks]


def token_types(kv: "GGUFFile | Mapping[str, Any]") -> np.ndarray | None:
    """``tokenizer.ggml.token_type`` as an int32 array (llama.cpp requires INT32), or None."""
    v = _KV(kv, None, getattr(kv, "path", "<kv>")).get_array(K_TOKEN_TYPE, (_T_INT32,))
    return None if v is None else np.asarray(v, dtype=np.int32)


def eog_ids_from_kv(kv: "GGUFFile | Mapping[str, Any]", *, types: Mapping[str, tuple] | None = None) -> tuple[int, ...]:
    """End-of-generation token ids, sorted, exactly as llama.cpp's ``llama_vocab::is_eog`` sees them.

    Mirrors ``llama_vocab::impl::load`` (src/llama-vocab.cpp, llama-cpp-python 0.3.36):

    1. No ``tokenizer.ggml.tokens``: no vocabulary, ``()`` (llama.cpp would refuse the file; a
       weights-only test file is allowed here).  ``tokenizer.ggml.model`` is then required;
       ``no_vocab``/``none`` return ``()`` (llama.cpp returns before special tokens); an unknown
       model raises (llama.cpp: "unknown tokenizer").
    2. Token texts are the GGUF strings cut at the first NUL (std::string from c_str()); an empty
       text becomes ``[EMPTY_<i>]``.  Two tokens with the same (cut) text raise GGUFError: llama.cpp
       asserts ``id_to_token.size() == token_to_id.size()`` and aborts.
    3. Special ids: each starts from the tokenizer model's default (eos: llama 2, gpt2 11, t5 1,
       plamo2 2, others none; eot, eom, fim_* none), a default >= n_tokens is disabled, then
       ``tokenizer.ggml.{eos,eot,eom,fim_pad,fim_rep,fim_sep}_token_id`` (must be UINT32) replaces
       it when < n_tokens (an out-of-range id keeps the default).
    4. Still-unset eot / eom / fim_pad / fim_rep / fim_sep are found by text (the lists in this
       module).  llama.cpp takes the first match in ``std::unordered_map`` iteration order, which
       is implementation-defined; it only matters for fim_pad/fim_rep when a vocabulary holds two
       candidate texts for the same slot.  lmtail then takes *every* candidate (a superset) rather
       than guess a hash order.  (For eot/eom every candidate text is also an EOG text, so the
       choice cannot change the EOG set.)
    5. EOG = {fim_pad, fim_rep, fim_sep} + every token whose text is in the EOG list (``<|eot_id|>``,
       ``<|im_end|>``, ``<|end|>``, ``<|return|>``, ``<|call|>``, ``<end_of_turn>``,
       ``<|endoftext|>``, ``</s>``, ``<eos>``, ...) + {eos, eot, eom}.
    6. If the set holds ``<|return|>`` and ``<|call|>`` (or ``<|calls|>`` and ``<|flush|>``) and
       ``<|end|>``, the highest-id ``<|end|>`` is removed (o200k_harmony / solar-open).
    7. If it holds ``<|tool_response>`` or ``<|plamo:eos|>`` and ``</s>``, the highest-id ``</s>``
       is removed (gemma4 and plamo treat ``</s>`` as a normal token).

    Token attributes (control/unused flags) only change logging and rendering there, never EOG
    membership, so they are not modelled.  hybriddna's k-mer suffix stripping is not modelled.
    ``types`` gives GGUF value types for a plain mapping (``GGUFFile.kv_types``); without it any
    non-bool int is accepted as an id.
    """
    acc = _KV(kv, types, getattr(kv, "path", "<kv>"))
    toks = acc.get_array(K_TOKENS, (_T_STRING,))
    if toks is None:
        return ()
    model = acc.get(K_MODEL, _T_STRING)
    if model is None:
        raise GGUFError(f"{acc.where}: {K_TOKENS!r} is present but {K_MODEL!r} is missing; expected a tokenizer model name")
    model_b = _c_str(model.encode("utf-8", "surrogateescape") if isinstance(model, str) else bytes(model))
    model = model_b.decode("utf-8", "surrogateescape")
    if model in ("no_vocab", "none"):
        return ()
    if model not in _DEFAULT_EOS:
        raise GGUFError(
            f"{acc.where}: unknown tokenizer model {model!r} in {K_MODEL!r}; expected one of "
            f"{sorted(_DEFAULT_EOS) + ['no_vocab', 'none']} (llama.cpp refuses it)"
        )
    texts = toks.raw_list() if isinstance(toks, StringArray) else vocab_tokens({K_TOKENS: toks}) or []
    n = len(texts)
    if isinstance(toks, StringArray):
        suspicious = toks.nul_or_empty().tolist()
    else:
        suspicious = [i for i, t in enumerate(texts) if not t or b"\0" in t]
    for i in suspicious:
        t = _c_str(texts[i])
        texts[i] = t if t else b"[EMPTY_%d]" % i
    token_to_id = dict(zip(texts, range(n)))
    if len(token_to_id) != n:
        seen: dict[bytes, int] = {}
        for i, t in enumerate(texts):
            if t in seen:
                raise GGUFError(
                    f"{acc.where}: tokens {seen[t]} and {i} have the same text {t!r}; expected distinct "
                    f"texts (llama.cpp aborts on this vocabulary: GGML_ASSERT id_to_token.size() == token_to_id.size())"
                )
            seen[t] = i

    def special(name: str, default: int | None) -> int | None:
        tid = default if default is not None and default < n else None
        key = f"tokenizer.ggml.{name}_token_id"
        v = acc.get(key, _T_UINT32)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise GGUFError(f"{acc.where}: key {key!r} = {v!r}; expected a UINT32 token id")
            if int(v) < n:
                tid = int(v)
        return tid

    eos = special("eos", _DEFAULT_EOS[model])
    eot = special("eot", None)
    eom = special("eom", None)

    def by_text(tid: int | None, cands: list[bytes]) -> list[int]:
        if tid is not None:
            return [tid]
        return [token_to_id[c] for c in cands if c in token_to_id]

    eog: set[int] = set()
    for name, cands in (("fim_pad", _FIM_PAD_B), ("fim_rep", _FIM_REP_B), ("fim_sep", _FIM_SEP_B)):
        eog.update(by_text(special(name, None), cands))
    eog.update(token_to_id[t] for t in _EOG_B if t in token_to_id)
    # eot/eom found by text are EOG texts already; only ids from the keys (or eos) can add here.
    for tid in (eos, eot, eom):
        if tid is not None:
            eog.add(tid)

    srt = sorted(eog)
    text_of = {tid: texts[tid] for tid in srt}
    has_ret = any(text_of[t] == b"<|return|>" for t in srt)
    has_call = any(text_of[t] in (b"<|call|>", b"<|calls|>") for t in srt)
    has_flush = any(text_of[t] == b"<|flush|>" for t in srt)
    ends = [t for t in srt if text_of[t] == b"<|end|>"]
    if ends and ((has_ret and has_call) or (has_call and has_flush)):
        eog.discard(ends[-1])
    marker = any(text_of[t] in (b"<|tool_response>", b"<|plamo:eos|>") for t in srt)
    ss = [t for t in sorted(eog) if text_of[t] == b"</s>"]
    if marker and ss:
        eog.discard(ss[-1])
    return tuple(sorted(eog))


