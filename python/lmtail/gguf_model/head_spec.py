"""The head spec: everything lmtail's LM head needs from one GGUF file (:func:`load_head_spec`).

Layout reminder: GGUF dims are in ggml order, ``ne[0]`` is the contiguous one.  The head
``output.weight`` has ``ne = (cols, rows) = (hidden, vocab)``; a row is ``cols // block`` blocks
of ``block bytes`` (Q5_K: 256 elements in 176 bytes; F32: 1 in 4).

The head weight types lmtail runs are the C++ core's type table (``lmtail._core.cpu_types()``,
one row per type: id, name, block elements, block bytes), read here, never listed again: a type
the kernels gain is loadable with no change to this module.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from .. import _core
from ..errors import GGUFError, ParameterError, UnsupportedError
from .arch import ARCH_RULES, _f32, _unknown_arch_keys, output_transform
from .container import _T_ARRAY, _T_FLOAT32, _T_INT32, _T_STRING, _T_UINT32, _VT_NAME, BF16, F16, F32, GGML_TYPES, GGUFFile, _c_str
from .vocab import K_TOKEN_TYPE, K_TOKENS, eog_ids_from_kv

# --------------------------------------------------------------------------------------------
# The head spec
# --------------------------------------------------------------------------------------------


@dataclass
class HeadSpec:
    """Everything lmtail's head needs, read from one GGUF file.

    weight: uint8 ``(rows, cols // block * block_bytes)``, C-contiguous, a read-only zero-copy
        view of the file map: the tensor's bytes as stored, for every type (F32/F16/BF16 too).
        weight_offset is its absolute byte offset in the file, weight_type its ggml type id and
        ``dtype`` the canonical ggml name (``"Q6_K"``, ``"Q8_0"``, ``"BF16"``...).
    norm: float32 ``(cols,)`` final-norm weight or None.  ``norm_kind`` says which norm llama.cpp
        applies: ``"rms"`` (x / sqrt(mean(x^2) + eps) * norm), ``"none"`` (no final norm: feed the
        hidden state as is) or, only with ``allow_layer_norm=True``, ``"layer"`` (LayerNorm,
        ``norm`` may then be None = no weight).
    logit_scale: multiplier applied to the head's output; softcap: ``c * tanh(x / c)`` after the
        scale, 0 = none.  eog_ids: sorted end-of-generation ids (see :func:`eog_ids_from_kv`).
    n_vocab: number of tokens (== rows whenever the file has a vocabulary).
    """

    path: str
    arch: str
    rows: int
    cols: int
    weight: np.ndarray
    weight_offset: int
    weight_type: int
    norm: np.ndarray | None
    eps: float
    logit_scale: float
    softcap: float
    eog_ids: tuple[int, ...]
    n_vocab: int
    norm_kind: str = "rms"
    head_tensor: str = "output.weight"
    dtype: str = "Q5_K"


def head_types() -> dict[int, tuple[str, int, int]]:
    """ggml type id -> ``(name, block elements, block bytes)`` of every LM-head weight type lmtail
    runs, from the C++ core's type table (``lmtail._core.cpu_types()``)."""
    return {int(t["id"]): (str(t["name"]), int(t["block_elems"]), int(t["block_bytes"])) for t in _core.cpu_types()}


def _norm_vector(f: GGUFFile, name: str, cols: int) -> np.ndarray:
    ti = f.tensors[name]
    if ti.n_dims != 1 or ti.ne[0] != cols:
        raise GGUFError(f"{f.path}: tensor {name!r} has shape {ti.ne}; expected ({cols},) to match the head's cols")
    if ti.type == F32:
        return ti.data
    if ti.type == F16:
        return ti.data.astype(np.float32)
    if ti.type == BF16:
        return (ti.data.astype(np.uint32) << 16).view(np.float32)
    raise GGUFError(f"{f.path}: tensor {name!r} has type {ti.type_name} ({ti.type}); expected F32, F16 or BF16")


def load_head_spec(
    path: str | os.PathLike, *, logit_scale: float | None = None, softcap: float | None = None,
    allow_layer_norm: bool = False,
) -> HeadSpec:
    """Read the LM-head description of a GGUF model.

    The head is ``output.weight`` or, where llama.cpp ties it (``ARCH_RULES[arch].head``),
    ``token_embd.weight``; it must be 2-D ``ne = (cols, rows)`` of a type lmtail runs
    (:func:`head_types`: Q6_K, Q8_0, Q4_0, Q4_K, Q5_K, F16, BF16, F32 once their kernels are in
    the table) with ``cols`` a positive multiple of the type's block.  A real ggml type lmtail does
    not run (Q3_K, Q4_1, IQ4_XS...) raises :class:`lmtail.UnsupportedError`; an id that is no ggml
    type, a short file or a size that does not match the type raises GGUFError, all before any
    tensor byte is read.
    ``logit_scale`` / ``softcap`` override what the file and llama.cpp's per-architecture rules
    give (see :func:`output_transform`).  Architectures whose final norm is a LayerNorm without
    bias are refused unless ``allow_layer_norm`` (then ``norm_kind == "layer"``, eps is
    ``{arch}.attention.layer_norm_epsilon``).  Every file problem raises GGUFError; bad override
    values raise ParameterError.
    """
    for nm, v in (("logit_scale", logit_scale), ("softcap", softcap)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
            raise ParameterError(f"{nm}={v!r}: expected a float")
        with np.errstate(over="ignore"):
            v32 = float(np.float32(v))  # the head computes in float32
        if not math.isfinite(v32):
            raise ParameterError(f"{nm}={v!r}: expected a value finite in float32")
        if nm == "logit_scale" and v32 == 0.0:
            raise ParameterError(f"logit_scale={v!r}: expected a multiplier that is non-zero in float32")
        if nm == "softcap" and v32 < 0.0:
            raise ParameterError(f"softcap={v!r}: expected >= 0 (0 = no cap)")

    f = GGUFFile(path)
    arch = f.get_typed("general.architecture", _T_STRING, required=True)
    arch = _c_str(arch.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")
    rule = ARCH_RULES.get(arch)
    if rule is not None and rule.unsupported:
        raise GGUFError(f"{f.path}: architecture {arch!r} is not supported by lmtail: {rule.unsupported} (llama.cpp {rule.source})")

    # -- head tensor ---------------------------------------------------------------------------
    how = rule.head if rule else "output_or_tied"
    has_out = "output.weight" in f.tensors
    if how == "tied":
        if has_out:
            raise GGUFError(
                f"{f.path}: architecture {arch!r} always ties the head to 'token_embd.weight', but the file "
                f"also has 'output.weight' (llama.cpp would refuse the extra tensor)"
            )
        name = "token_embd.weight"
    elif how == "output" or has_out:
        name = "output.weight"
    else:
        name = "token_embd.weight"
    if name not in f.tensors:
        if how == "output":
            want = "'output.weight' (llama.cpp requires it for this architecture; no tied fallback)"
        elif how == "tied":
            want = "'token_embd.weight' (the tied head)"
        else:
            want = "'output.weight' or 'token_embd.weight' (tied head)"
        raise GGUFError(f"{f.path}: no LM head for architecture {arch!r}: expected a tensor {want}; found neither")
    ti = f.tensors[name]
    if ti.n_dims != 2:
        raise GGUFError(f"{f.path}: tensor {name!r} has {ti.n_dims} dims {ti.ne}; expected 2 (cols, rows)")
    types = head_types()
    if ti.type not in types:
        supported = ", ".join(f"{n} ({i})" for i, (n, _, _) in sorted(types.items()))
        raise UnsupportedError(
            f"{f.path}: tensor {name!r} has ggml type {ti.type_name} ({ti.type}); lmtail runs LM heads of "
            f"types {supported} (lmtail._core.cpu_types())"
        )
    dtype, blck, bsize = types[ti.type]
    cols, rows = ti.ne
    if cols == 0 or rows == 0 or cols % blck:
        raise GGUFError(
            f"{f.path}: tensor {name!r} of type {dtype} has shape (cols={cols}, rows={rows}); expected cols a "
            f"positive multiple of the {dtype} block ({blck} elements) and rows > 0"
        )
    row_bytes = cols // blck * bsize
    if (GGML_TYPES[ti.type][1:] != (blck, bsize)) or ti.nbytes != rows * row_bytes:
        # The container sized the tensor from its own ggml table; the core's must agree.
        raise GGUFError(
            f"{f.path}: tensor {name!r} of type {dtype} is {ti.nbytes} bytes; expected {rows} rows x {row_bytes} "
            f"bytes ({cols // blck} blocks of {bsize} bytes)"
        )
    # The raw bytes for every type (floats included): a view of the map, never a copy.
    weight = f._u8[ti.abs_offset : ti.abs_offset + ti.nbytes].reshape(rows, row_bytes)
    assert weight.flags.c_contiguous and not weight.flags.writeable

    if rule is not None:
        n_embd = f.get_typed(f"{arch}.embedding_length", _T_UINT32)
        if n_embd is not None and n_embd != cols:
            raise GGUFError(f"{f.path}: key '{arch}.embedding_length' = {n_embd}, but {name!r} has cols = {cols}; expected equal")
        if rule.output_bias == "add" and "output.bias" in f.tensors:
            raise GGUFError(f"{f.path}: architecture {arch!r} adds 'output.bias' to the logits; lmtail's head cannot (llama.cpp {rule.source})")

    # -- final norm ------------------------------------------------------------------------------
    nk = rule.norm if rule else "rms"
    ntensor = rule.norm_tensor if rule else "output_norm.weight"
    nbias = ntensor[: -len("weight")] + "bias"
    if nk == "cohere2moe":
        eps_rms = f.get_typed(f"{arch}.attention.layer_norm_rms_epsilon", _T_FLOAT32)
        nk = "rms" if eps_rms else "layer"
    if nk in ("rms_opt_bias", "layer_opt_bias"):
        if nbias in f.tensors:
            raise GGUFError(f"{f.path}: {nbias!r} is present: architecture {arch!r} adds a bias after the final norm, which lmtail cannot express")
        nk = nk.split("_")[0]
    if nk in ("layer", "layer_noweight") and not allow_layer_norm:
        raise GGUFError(
            f"{f.path}: architecture {arch!r} ends with a LayerNorm (llama.cpp {rule.source if rule else ''}); "
            f"load_head_spec refuses it by default; pass allow_layer_norm=True (lmtail.Head.from_gguf does, and applies "
            f"the LayerNorm itself)"
        )
    norm: np.ndarray | None
    if nk in ("rms", "layer"):
        if ntensor in f.tensors:
            norm = _norm_vector(f, ntensor, cols)
        elif rule is None:
            norm, nk = None, "none"  # unknown architecture without a final-norm tensor
        else:
            raise GGUFError(f"{f.path}: missing tensor {ntensor!r}; llama.cpp requires the final-norm weight for {arch!r}")
    elif nk == "rms_noweight":
        norm, nk = np.ones(cols, dtype=np.float32), "rms"
    elif nk == "layer_noweight":
        norm, nk = None, "layer"
    else:  # "none"
        norm = None

    # -- epsilon -----------------------------------------------------------------------------------
    k_rms, k_ln = f"{arch}.attention.layer_norm_rms_epsilon", f"{arch}.attention.layer_norm_epsilon"
    ek = rule.eps if rule else "rms"
    if nk == "layer":
        ek = "layer"
    if ek == "rms":
        v = f.get_typed(k_rms, _T_FLOAT32, required=(rule is not None or nk != "none"),
                        why=f" (the final RMSNorm epsilon of {arch!r})")
        eps = 0.0 if v is None else v
    elif ek == "rms_or_zero":
        v = f.get_typed(k_rms, _T_FLOAT32)
        eps = 0.0 if v is None else v
    elif ek == "zero":
        eps = 0.0
    elif ek == "rms_or_layer":
        v = f.get_typed(k_rms, _T_FLOAT32)
        eps = f.get_typed(k_ln, _T_FLOAT32, required=True) if v is None else v
    else:  # "layer"
        eps = f.get_typed(k_ln, _T_FLOAT32, required=True, why=f" (the final LayerNorm epsilon of {arch!r})")
    if not math.isfinite(eps) or eps < 0:
        raise GGUFError(f"{f.path}: norm epsilon for {arch!r} is {eps}; expected finite and >= 0")

    # -- scale / cap -------------------------------------------------------------------------------
    if logit_scale is not None and softcap is not None:
        fs, fc = 1.0, 0.0
    elif rule is None and (logit_scale is not None or softcap is not None):
        # The caller vouched for this unknown architecture; a key it did not override still counts.
        ks, kc = _unknown_arch_keys(arch, f)
        fs, fc = (1.0 if ks is None else ks), (0.0 if kc is None else kc)
    else:
        fs, fc = output_transform(arch, f, cols=cols)
    scale = fs if logit_scale is None else _f32(logit_scale)
    cap = fc if softcap is None else _f32(softcap)

    # -- vocabulary ------------------------------------------------------------------------------
    toks = f.kv.get(K_TOKENS)
    if toks is not None and f.kv_types[K_TOKENS] != (_T_ARRAY, _T_STRING):
        raise GGUFError(f"{f.path}: key {K_TOKENS!r} has type {f._type_str(K_TOKENS)}; expected ARRAY of STRING")
    n_vocab = rows if toks is None else len(toks)
    if toks is not None:
        for key, et in ((K_TOKEN_TYPE, (_T_INT32,)), ("tokenizer.ggml.scores", (_T_FLOAT32, _T_INT32))):
            if key in f.kv:
                t = f.kv_types[key]
                if len(t) != 2 or t[0] != _T_ARRAY or t[1] not in et or len(f.kv[key]) < n_vocab:
                    raise GGUFError(
                        f"{f.path}: key {key!r} is {f._type_str(key)} with {len(f.kv[key]) if t[0] == _T_ARRAY else 1} "
                        f"elements; expected an ARRAY of {'/'.join(_VT_NAME[e] for e in et)} with >= {n_vocab} (llama.cpp)"
                    )
        if n_vocab != rows:
            raise GGUFError(f"{f.path}: {name!r} has {rows} rows but the vocabulary has {n_vocab} tokens; expected equal (llama.cpp checks {{n_embd, n_vocab}})")
    eog = eog_ids_from_kv(f)

    return HeadSpec(
        path=f.path, arch=arch, rows=rows, cols=cols, weight=weight, weight_offset=ti.abs_offset,
        weight_type=ti.type, norm=norm, eps=float(eps), logit_scale=float(scale), softcap=float(cap),
        eog_ids=eog, n_vocab=n_vocab, norm_kind=nk, head_tensor=name, dtype=dtype,
    )

