"""Architecture rules: what llama.cpp does between the last layer and the logits.

Per architecture (``src/models/<arch>.cpp`` in llama-cpp-python 0.3.36: ``load_arch_hparams``,
``load_arch_tensors`` and the tail of the graph builder): which tensor is the head (output or the
tied embedding), which final norm and epsilon, which logit scale / soft cap keys, and the
architectures lmtail refuses, each with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GGUFError
from .container import _KV, _T_FLOAT32, GGUFFile

# --------------------------------------------------------------------------------------------
# Per-architecture output semantics (src/models/<arch>.cpp in llama-cpp-python 0.3.36)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchRule:
    """What llama.cpp does between the last layer and the logits, for one architecture.

    head:  ``"output_or_tied"`` output.weight, else token_embd.weight (TENSOR_DUPLICATED);
           ``"output"`` output.weight required (no tie); ``"tied"`` always token_embd.weight.
    norm:  ``"rms"`` RMSNorm * weight; ``"rms_noweight"`` RMSNorm without weight (lmtail gets a
           vector of ones, which is exact); ``"none"`` no final norm; ``"rms_opt_bias"`` RMSNorm
           plus an optional bias; ``"layer"`` LayerNorm (no bias); ``"layer_opt_bias"`` /
           ``"layer_bias"`` LayerNorm with optional / required bias; ``"layer_noweight"``;
           ``"cohere2moe"`` LayerNorm unless the RMS epsilon is non-zero.
    eps:   ``"rms"`` required ``{arch}.attention.layer_norm_rms_epsilon``; ``"rms_or_zero"``
           optional, default 0.0 (hparams are value-initialised); ``"zero"`` not read at all, 0.0;
           ``"rms_or_layer"`` optional, default ``{arch}.attention.layer_norm_epsilon``;
           ``"layer"`` required ``layer_norm_epsilon``.
    scale: ``"none"``; ``"mul_opt_if"`` optional key, applied if non-zero; ``"mul_req_if"``
           required key, applied if non-zero; ``"mul_req"`` required, always applied;
           ``"mul_default"`` optional with default ``scale_default``, always applied;
           ``"div_req"`` required, logits * (1.0f / value); ``"div_opt_if"`` optional, applied if
           non-zero; ``"div_minicpm"`` optional, default 256.0f / n_embd, always divided;
           ``"pre_minicpm3"`` fixed 256.0f / n_embd applied to the normed hidden state.
    cap:   ``"none"``; ``"always_opt30"`` optional key, default 30, always applied;
           ``"always_30"`` key not read, always 30; ``"if_opt0"`` optional, default 0, applied if
           non-zero; ``"if_opt30"`` optional, default 30, applied if non-zero.
    output_bias: ``"add"`` an ``output.bias`` tensor, when present, is added to the logits
           (lmtail cannot express that: the file is refused); ``"ignore"`` loaded, unused.
    unsupported: a reason lmtail cannot reproduce this head at all.
    source: where in llama.cpp this was read.
    """

    head: str = "output_or_tied"
    norm: str = "rms"
    norm_tensor: str = "output_norm.weight"
    eps: str = "rms"
    scale: str = "none"
    scale_default: float = 0.0
    cap: str = "none"
    output_bias: str = "none"
    unsupported: str | None = None
    source: str = ""


def _r(**kw) -> ArchRule:
    return ArchRule(**kw)


_PLAIN = ArchRule(source="models/<arch>.cpp: build_norm(output_norm, LLM_NORM_RMS) -> build_lora_mm(output)")
_PLAIN_O = ArchRule(head="output", source=_PLAIN.source + "; output created with flag 0 (required)")
_EMBED_ONLY = "llama.cpp builds no logits for this architecture (embedding/encoder/vision model)"
_LN_BIAS = "the final norm is a LayerNorm with a bias (LLM_NORM + output_norm.bias); lmtail's head applies RMSNorm only"

ARCH_RULES: dict[str, ArchRule] = {
    # --- plain RMSNorm -> head, output.weight or tied token_embd.weight -------------------
    **{a: _PLAIN for a in (
        "llama", "llama4", "deci", "arcee", "arctic", "afmoe", "bailingmoe3", "chatglm", "cogvlm",
        "deepseek", "deepseek2", "deepseek2-ocr", "deepseek32", "dots3note", "ernie4_5",
        "ernie4_5-moe", "paddleocr", "exaone", "exaone4", "falcon-h1", "glm-dsa", "glm4", "glm4moe",
        "grovemoe", "hunyuan-moe", "hunyuan_vl", "hunyuan-dense", "hy_v3", "jamba", "laguna", "llada",
        "maincoder", "mamba", "mamba2", "minimax-01", "mistral3", "mistral4", "nanbeige",
        "pangu-embedded", "phi3", "plamo2", "plamo3", "qwen3", "qwen35", "qwen35moe", "qwen3moe",
        "qwen3next", "qwen3vl", "qwen3tts", "qwen3vlmoe", "refact", "rnd1", "seed_oss",
        "smallthinker", "smollm3", "spark2_5",
    )},  # fmt: skip
    # --- plain RMSNorm -> head, output.weight required --------------------------------------
    **{a: _PLAIN_O for a in (
        "apertus", "baichuan", "bailingmoe", "bailingmoe2", "deepseek4", "dots1", "exaone-moe",
        "glm5-next", "hy_v4", "internlm2", "kimi-k3", "kimi-linear", "llada-moe", "maple", "mellum",
        "mimo2", "minimax-m2", "minimax-m3", "olmo2", "olmoe", "gpt-oss", "plamo", "qwen",
        "qwen2moe", "xverse", "step35",
    )},  # fmt: skip
    # --- plain, always tied to token_embd.weight --------------------------------------------
    **{a: _r(head="tied", source=f"models/{a}.cpp: output = create_tensor(TOKEN_EMBD, TENSOR_DUPLICATED)")
       for a in ("gemma", "openelm", "plm", "bitnet")},  # fmt: skip
    "gemma4-assistant": _r(head="tied", source="models/gemma4-assistant.cpp:35,187-190"),
    # --- variants of the plain head ---------------------------------------------------------
    "lfm2": _r(norm_tensor="token_embd_norm.weight", source="models/lfm2.cpp:39 (LLM_TENSOR_OUTPUT_NORM_LFM2 = 'token_embd_norm'), :283-288"),
    "lfm2moe": _r(norm_tensor="token_embd_norm.weight", source="models/lfm2moe.cpp:28; graph = lfm2 (models.h:2176)"),
    "t5": _r(norm_tensor="dec.output_norm.weight", source="models/t5.cpp:47-52, :248-256 (decoder head)"),
    "qwen2": _r(output_bias="add", source="models/qwen2.cpp:27 (output.bias optional), :147-149 (added)"),
    "qwen2vl": _r(eps="zero", output_bias="ignore",
                  source="models/qwen2vl.cpp:3-6: load_arch_hparams never reads the RMS epsilon "
                         "(hparams value-initialised: eps = 0.0); output.bias loaded (:16) but unused (:137)"),
    "dream": _r(output_bias="ignore", source="models/dream.cpp:26 (output.bias loaded), :132 (unused)"),
    "arwkv7": _r(head="output", eps="rms_or_zero", source="models/arwkv7.cpp:5 (eps optional), :52-53, :191"),
    "rwkv6qwen2": _r(head="output", norm="rms_opt_bias", eps="rms_or_zero",
                     source="models/rwkv6qwen2.cpp:5, :32 (output_norm.bias optional), :156"),
    "nemotron_h": _r(eps="rms_or_layer", source="models/nemotron-h.cpp:18-21, :71-75, :245-259"),
    "nemotron_h_moe": _r(eps="rms_or_layer", source="nemotron_h_moe inherits nemotron_h (models.h:1545)"),
    "talkie": _r(head="output", norm="rms_noweight", scale="mul_req",
                 source="models/talkie.cpp:5 (logit_scale required), :17 (output required), "
                        ":137 (RMSNorm without weight), :142-143 (logits * logit_scale)"),
    "hrm_text": _r(norm="none", source="models/hrm-text.cpp:40-43, :198-207 (no final norm before the head)"),
    # --- logit scale / soft cap ---------------------------------------------------------------
    "muse-glimmer": _r(head="output", scale="mul_req", cap="if_opt30",
                       source="models/muse-glimmer.cpp:6 (cap optional, hparams default 30), :7 (scale "
                              "required), :26 (output required), :186 (logits * scale), :189-193 (cap if != 0)"),
    "grok": _r(scale="mul_default", scale_default=0.5773502691896257, cap="if_opt0",
               source="models/grok.cpp:6 (scale default 0.5773502691896257f), :12 (cap default 0), :16, :21, "
                      ":211 (always * scale), :214-218 (cap if != 0)"),
    "granite": _r(scale="div_req", source="models/granite.cpp:7 (logit_scale required), :198 (* 1.0f/scale)"),
    "granitemoe": _r(scale="div_req", source="models/granite-moe.cpp:5; graph = granite (models.h:1684, granite.cpp:198)"),
    "granite_swa": _r(scale="div_req", source="models/granite-swa.cpp:7, :193"),
    "graniteswitch": _r(scale="div_req", source="models/granite-switch.cpp:7, :324"),
    "granitehybrid": _r(scale="div_opt_if", source="models/granite-hybrid.cpp:5 (optional), :193-195 (if != 0)"),
    "minicpm": _r(scale="div_minicpm",
                  source="models/minicpm.cpp:7 (default 256.0f/n_embd), :14 (optional key); graph = granite "
                         "(models.h:1745, granite.cpp:198: * 1.0f/scale)"),
    "minicpm3": _r(scale="pre_minicpm3",
                   source="models/minicpm3.cpp:65, :241-242 (normed hidden * 256.0f/n_embd before the head; "
                          "lmtail applies it to the logits: equal in exact arithmetic, rounding may differ)"),
    "gemma2": _r(head="tied", cap="always_opt30",
                 source="llama-hparams.h:136 (default 30.0f); models/gemma2.cpp:15 (optional), :37 (tied), "
                        ":167-169 (always capped)"),
    "gemma3": _r(cap="if_opt0", source="models/gemma3.cpp:14-15 (default 0), :210-214 (if != 0)"),
    "gemma3n": _r(cap="always_30",
                  source="models/gemma3n.cpp:3-19 (key never read: hparams default 30.0f), :306-311 (always capped)"),
    "gemma4": _r(cap="if_opt30", source="models/gemma4.cpp:21 (optional, default 30), :427-431 (if != 0)"),
    # --- LayerNorm final norms ----------------------------------------------------------------
    "command-r": _r(head="tied", norm="layer", eps="layer", scale="mul_opt_if",
                    source="models/command-r.cpp:4 (logit_scale optional), :5, :21 (tied), :129 (LLM_NORM), "
                           ":137-139 (* scale if != 0)"),
    "cohere2": _r(head="tied", norm="layer", eps="layer", scale="mul_req_if",
                  source="models/cohere2.cpp:12 (logit_scale required), :13, :29 (tied), :143 (LLM_NORM), :151-153"),
    "cohere2moe": _r(norm="cohere2moe", eps="rms_or_zero", scale="mul_req_if",
                     source="models/cohere2moe.cpp:4-11 (eps; LayerNorm when the RMS eps is 0), :14 (scale "
                            "required), :60-64, :158, :267, :281-283"),
    "dbrx": _r(head="output", norm="layer", eps="layer", source="models/dbrx.cpp:4, :24, :140-142 (LLM_NORM)"),
    "olmo": _r(norm="layer_noweight", eps="layer", source="models/olmo.cpp:4, :21-24, :128-130 (LLM_NORM, no weight)"),
    "mpt": _r(norm="layer_opt_bias", eps="layer", source="models/mpt.cpp:4, :23 (bias optional), :25-27, :159"),
    **{a: _r(unsupported=_LN_BIAS, source=f"models/{a}.cpp: build_norm(output_norm, output_norm_b, LLM_NORM)")
       for a in ("bloom", "codeshell", "falcon", "gpt2", "gptneox", "jais", "jais2", "nemotron", "orion",
                 "pockettts", "rwkv6", "rwkv7", "stablelm", "starcoder", "starcoder2")},  # fmt: skip
    "phi2": _r(unsupported="LayerNorm with bias and an output.bias added to the logits",
               source="models/phi2.cpp:19-22, :125-136"),
    "phimoe": _r(unsupported="RMSNorm with a bias and an output.bias added to the logits",
                 source="models/phimoe.cpp:20-23; graph = phi3 (phi3.cpp:174-187)"),
    # --- heads lmtail cannot reproduce ---------------------------------------------------------
    "chameleon": _r(unsupported="llama.cpp overwrites the logits of image tokens 4..8195 with -FLT_MAX",
                    source="models/chameleon.cpp:187-198"),
    "qwen4exp": _r(unsupported="the final norm is a hyper-connection mix (hc_head_*), not an RMSNorm",
                   source="models/qwen4exp.cpp:446-456"),
    "eagle3": _r(unsupported="a draft head: it may borrow the target's output and scatters a reduced vocabulary (d2t)",
                 source="models/eagle3.cpp:295-320"),
    "dflash": _r(unsupported="a draft head: target output, optional selector scale/cap, reduced vocabulary (d2t)",
                 source="models/dflash.cpp:24-26, :804-842"),
    **{a: _r(unsupported=_EMBED_ONLY, source="no res->t_logits in its graph")
       for a in ("bert", "modern-bert", "nomic-bert", "nomic-bert-moe", "neo-bert", "jina-bert-v2",
                 "jina-bert-v3", "eurobert", "t5encoder", "llama-embed", "gemma-embedding", "clip",
                 "wavtokenizer-dec")},  # fmt: skip
    "gptj": _r(unsupported="llama.cpp has no model for this architecture name", source="llama-model.cpp:44-300"),
}
"""Architecture name (``general.architecture``) -> :class:`ArchRule`.  Any name not here is
"unknown": its scale/cap come only from ``{arch}.logit_scale`` (multiplied) and
``{arch}.final_logit_softcapping`` (tanh cap) or the caller, and with neither it is refused.
Known architectures that do not read those keys ignore them, as llama.cpp does."""


def _f32(x: float) -> float:
    return float(np.float32(x))


def _div_f32(a: float, b: float) -> float:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return float(np.float32(a) / np.float32(b))


def _unknown_arch_keys(arch: str, kv, types=None) -> tuple[float | None, float | None]:
    """``{arch}.logit_scale`` and ``{arch}.final_logit_softcapping`` (FLOAT32, finite) or None."""
    acc = _KV(kv, types, getattr(kv, "path", "<kv>"))
    out = []
    for key in (f"{arch}.logit_scale", f"{arch}.final_logit_softcapping"):
        v = acc.get(key, _T_FLOAT32)
        if v is not None and not math.isfinite(v):
            raise GGUFError(f"{acc.where}: key {key!r} = {v}; expected a finite FLOAT32")
        out.append(None if v is None else _f32(v))
    if out[0] == 0.0:
        raise GGUFError(f"{acc.where}: key '{arch}.logit_scale' = 0 would zero every logit; expected non-zero")
    return out[0], out[1]


def output_transform(
    arch: str, kv: "GGUFFile | Mapping[str, Any]", *, cols: int | None = None,
    types: Mapping[str, tuple] | None = None,
) -> tuple[float, float]:
    """``(logit_scale, softcap)`` llama.cpp applies for ``arch`` given the metadata, as one
    multiplier and a tanh cap (0 = none), computed in float32 as llama.cpp does.

    Unknown architectures read ``{arch}.logit_scale`` (multiply) and
    ``{arch}.final_logit_softcapping``; with neither key, GGUFError (fail closed).
    ``cols`` (the hidden size) is needed by minicpm/minicpm3 only.
    """
    acc = _KV(kv, types, getattr(kv, "path", "<kv>"))
    k_scale, k_cap = f"{arch}.logit_scale", f"{arch}.final_logit_softcapping"
    rule = ARCH_RULES.get(arch)

    def fkey(key: str, required: bool = False) -> float | None:
        v = acc.get(key, _T_FLOAT32)
        if v is None and required:
            raise GGUFError(f"{acc.where}: missing key {key!r}; llama.cpp requires it for architecture {arch!r} (FLOAT32)")
        if v is not None and not math.isfinite(v):
            raise GGUFError(f"{acc.where}: key {key!r} = {v}; expected a finite FLOAT32")
        return None if v is None else _f32(v)

    if rule is None:
        s, c = _unknown_arch_keys(arch, kv, types)
        if s is None and c is None:
            raise GGUFError(
                f"{acc.where}: architecture {arch!r} is unknown to lmtail and the file has neither "
                f"{k_scale!r} nor {k_cap!r}; lmtail cannot tell what llama.cpp does after the LM head. "
                f"Pass logit_scale= and softcap= explicitly (1.0 and 0.0 for a plain head)"
            )
        scale = 1.0 if s is None else s
        cap = 0.0 if c is None else c
    else:
        if rule.unsupported:
            raise GGUFError(f"{acc.where}: architecture {arch!r} is not supported by lmtail: {rule.unsupported} (llama.cpp {rule.source})")
        sk = rule.scale
        if sk == "none":
            scale = 1.0
        elif sk in ("mul_opt_if", "mul_req_if"):
            v = fkey(k_scale, required=(sk == "mul_req_if"))
            scale = 1.0 if not v else v
        elif sk == "mul_req":
            scale = fkey(k_scale, required=True)  # type: ignore[assignment]
        elif sk == "mul_default":
            v = fkey(k_scale)
            scale = _f32(rule.scale_default) if v is None else v
        elif sk in ("div_req", "div_opt_if", "div_minicpm"):
            v = fkey(k_scale, required=(sk == "div_req"))
            if sk == "div_minicpm" and v is None:
                if not cols:
                    raise GGUFError(f"{acc.where}: minicpm's default logit scale needs n_embd (cols)")
                v = _div_f32(256.0, float(cols))
            if sk == "div_opt_if" and not v:
                scale = 1.0
            else:
                if v == 0.0:
                    raise GGUFError(f"{acc.where}: key {k_scale!r} = 0; llama.cpp would scale the logits by 1.0f/0 = inf")
                scale = _div_f32(1.0, v)  # type: ignore[arg-type]
        elif sk == "pre_minicpm3":
            if not cols:
                raise GGUFError(f"{acc.where}: minicpm3's head scale needs n_embd (cols)")
            scale = _div_f32(256.0, float(cols))
        else:  # pragma: no cover - table typo
            raise AssertionError(sk)
        ck = rule.cap
        if ck == "none":
            cap = 0.0
        elif ck == "always_30":
            cap = 30.0
        else:
            v = fkey(k_cap)
            cap = (0.0 if ck == "if_opt0" else 30.0) if v is None else v
            if ck == "always_opt30" and cap == 0.0:
                raise GGUFError(f"{acc.where}: key {k_cap!r} = 0; llama.cpp's {arch} graph always caps and would divide by 0")
    if not math.isfinite(scale) or scale == 0.0:
        raise GGUFError(f"{acc.where}: the effective logit scale for {arch!r} is {scale}; expected finite and non-zero")
    if not math.isfinite(cap) or cap < 0.0:
        raise GGUFError(
            f"{acc.where}: the final soft cap for {arch!r} is {cap}; expected finite and >= 0 "
            f"(pass softcap= to override)"
        )
    return scale, cap


