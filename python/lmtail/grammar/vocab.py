"""A tokenizer vocabulary as llama.cpp's grammar sampler sees it: token pieces, types, EOG ids.

``llama_grammar_apply_impl`` / ``llama_grammar_accept_impl`` read each token's text from the
vocabulary's piece cache, which llama.cpp fills with ``token_to_piece(id, special = true,
lstrip = 0)`` (``llama_vocab::impl::load``, ``src/llama-vocab.cpp``).  :meth:`Vocab.from_gguf`
reproduces those bytes:

* control / unknown / user-defined tokens: their text, verbatim (so ``<|im_start|>`` is matched as
  those 12 characters);
* normal tokens: SentencePiece-style vocabularies (SPM, WordPiece, Unigram, and BPE vocabularies
  with ``▁`` such as gemma-4) replace ``▁`` by a space; byte-level BPE maps each character back
  to its byte (GPT-2's byte table; an unmapped character becomes llama.cpp's
  ``[UNK_BYTE_0x..]`` text);
* byte tokens: the byte ``<0xXX>`` names;
* every other type (unused, undefined): an empty piece (the grammar then rejects the token).

Token attributes are the GGUF token types, adjusted as llama.cpp adjusts them while loading:
tokens found by text as EOT/EOM/FIM specials and every end-of-generation text become control
tokens, gpt-oss's ``<|channel|>``-style tokens become user-defined, and so do a dropped ``<|end|>``
(o200k_harmony) and a normal ``</s>`` (gemma-4).  Where llama.cpp picks one of several candidate
texts in hash order, every candidate is treated the same (differs only on vocabularies holding two
candidates for the same slot).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from ..errors import GGUFError, ParameterError
from .utf8 import decode_piece

__all__ = ["Vocab", "TOKEN_NORMAL", "TOKEN_UNKNOWN", "TOKEN_CONTROL", "TOKEN_USER_DEFINED", "TOKEN_UNUSED", "TOKEN_BYTE"]

# GGUF token types (llama.h enum llama_token_type)
TOKEN_UNDEFINED, TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = range(7)
# llama_token_attr bits
_A_UNDEFINED, _A_UNKNOWN, _A_UNUSED, _A_NORMAL, _A_CONTROL, _A_USER, _A_BYTE = 0, 1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5
_TYPE_TO_ATTR = {
    TOKEN_UNKNOWN: _A_UNKNOWN, TOKEN_UNUSED: _A_UNUSED, TOKEN_NORMAL: _A_NORMAL, TOKEN_CONTROL: _A_CONTROL,
    TOKEN_USER_DEFINED: _A_USER, TOKEN_BYTE: _A_BYTE, TOKEN_UNDEFINED: _A_UNDEFINED,
}  # fmt: skip

_SPECIAL_BY_TEXT = {
    "eot": ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
            "_<EOT>", "[EOT]", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<end_of_utterance>"],
    "eom": ["<|eom_id|>"],
    "fim_pre": ["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>", "<PRE>", "\u2581<PRE>",
                "<|code_prefix|>", "<|prefix|>"],
    "fim_suf": ["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>", "<SUF>", "\u2581<SUF>",
                "<|code_suffix|>", "<|suffix|>"],
    "fim_mid": ["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>", "<MID>", "\u2581<MID>",
                "<|code_middle|>", "<|middle|>"],
    "fim_pad": ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    "fim_rep": ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"],
    "fim_sep": ["<|file_sep|>"],
}  # fmt: skip
_LEGACY_KEYS = {"fim_pre": "prefix", "fim_suf": "suffix", "fim_mid": "middle"}
_EOG_TEXTS = [
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
]  # fmt: skip
_GPT_OSS_USER = ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"]


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte <-> printable-character table (``unicode_utf8_to_byte_map``)."""
    m: dict[str, int] = {}
    for ch in list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)):
        m[chr(ch)] = ch
    n = 0
    for ch in range(256):
        if chr(ch) not in m:
            m[chr(256 + n)] = ch
            n += 1
    return m


_BYTE_OF = _byte_decoder()


def _decode_bpe_text(text: bytes) -> bytes:
    out = bytearray()
    s = text.decode("utf-8", "replace")
    for c in s:
        b = _BYTE_OF.get(c)
        if b is not None:
            out.append(b)
        else:
            out += b"[UNK_BYTE_0x" + c.encode("utf-8").hex().encode() + text + b"]"
    return bytes(out)


def _byte_token(text: bytes) -> bytes:
    # token_to_byte: strtol(text.substr(3, 2), 16) -- lenient like strtol (stops at a non-hex char)
    h = text[3:5]
    v = 0
    for c in h:
        d = int(chr(c), 16) if chr(c) in "0123456789abcdefABCDEF" else None
        if d is None:
            break
        v = v * 16 + d
    return bytes([v & 0xFF])


class Vocab:
    """Token pieces (bytes the grammar matches), EOG ids and token types for one tokenizer.

    Build it from a GGUF file with :meth:`from_gguf`, or from pieces directly (tests, other
    tokenizers): ``Vocab([b"a", b"b", b"</s>"], eog_ids=[2])``.
    """

    def __init__(
        self,
        pieces: Sequence[bytes],
        eog_ids: Iterable[int] = (),
        *,
        texts: Sequence[bytes] | None = None,
        types: np.ndarray | Sequence[int] | None = None,
        name: str = "",
    ):
        self.pieces: list[bytes] = [bytes(p) for p in pieces]
        self.n_vocab = len(self.pieces)
        eog = sorted(set(int(t) for t in eog_ids))
        for t in eog:
            if not 0 <= t < self.n_vocab:
                raise ParameterError(f"EOG id {t} is outside the vocabulary [0, {self.n_vocab})")
        self.eog_ids: tuple[int, ...] = tuple(eog)
        self.is_eog = np.zeros(self.n_vocab, dtype=bool)
        self.is_eog[list(self.eog_ids)] = True
        self.texts = list(texts) if texts is not None else list(self.pieces)
        self.types = np.asarray(types, dtype=np.int32) if types is not None else np.full(self.n_vocab, TOKEN_NORMAL, np.int32)
        self.name = name
        self._tables = None

    def __len__(self) -> int:
        return self.n_vocab

    def __repr__(self) -> str:
        return f"Vocab({self.name or 'custom'}, n_vocab={self.n_vocab}, eog={list(self.eog_ids)[:8]})"

    # -- GGUF --------------------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "Vocab":
        """Read ``tokenizer.ggml.*`` from a GGUF file (a vocab-only file is fine)."""
        from ..gguf_model import _T_STRING, GGUFFile, _c_str, eog_ids_from_kv, token_types, vocab_tokens

        f = GGUFFile(path)  # refuses a non-path (ParameterError) and anything but a regular file
        raw = vocab_tokens(f)
        if raw is None:
            raise GGUFError(f"{f.path}: no 'tokenizer.ggml.tokens'; expected a vocabulary")

        def string_key(key: str) -> str | None:
            # llama.cpp's get_key: a STRING or an error; the text stops at a NUL (c_str()).
            v = f.get_typed(key, _T_STRING)
            return None if v is None else _c_str(v.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")

        model = string_key("tokenizer.ggml.model")
        pre = string_key("tokenizer.ggml.pre") or ""
        n = len(raw)
        # std::string from c_str(): the text stops at a NUL; empty texts become [EMPTY_<i>]
        texts = []
        for i, t in enumerate(raw):
            z = t.find(b"\0")
            if z >= 0:
                t = t[:z]
            texts.append(t if t else b"[EMPTY_%d]" % i)
        ttypes = token_types(f)
        if ttypes is None:
            attrs = [_A_NORMAL] * n
            types = np.full(n, TOKEN_NORMAL, np.int32)
        else:
            if len(ttypes) < n:  # llama.cpp: "Index out of array bounds for toktypes"
                raise GGUFError(
                    f"{f.path}: key 'tokenizer.ggml.token_type' has {len(ttypes)} elements for {n} tokens; "
                    f"expected >= {n} (llama.cpp refuses a shorter array)"
                )
            ttypes = ttypes[:n]
            types = ttypes.copy()
            attrs = [_TYPE_TO_ATTR.get(int(t), _A_UNDEFINED) for t in ttypes.tolist()]
        eog = eog_ids_from_kv(f)
        by_text = {t: i for i, t in enumerate(texts)}

        def key_id(slot: str) -> int | None:
            for k in (f"tokenizer.ggml.{slot}_token_id", f"tokenizer.ggml.{_LEGACY_KEYS.get(slot, slot)}_token_id"):
                v = f.kv.get(k)
                if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= int(v) < n:
                    return int(v)
            return None

        def add(tid: int, bit: int) -> None:
            attrs[tid] |= bit

        for slot, cands in _SPECIAL_BY_TEXT.items():
            if key_id(slot) is None:
                for c in cands:
                    tid = by_text.get(c.encode())
                    if tid is not None:
                        add(tid, _A_CONTROL)
        for c in _EOG_TEXTS:
            tid = by_text.get(c.encode())
            if tid is not None:
                add(tid, _A_CONTROL)
        for c in _GPT_OSS_USER:
            tid = by_text.get(c.encode())
            if tid is not None:
                attrs[tid] = _A_USER
        eog_set = set(eog)
        # <|end|> dropped from EOG (o200k_harmony / solar-open) becomes user-defined; gemma-4's </s> normal
        for tid in [i for i, t in enumerate(texts) if t == b"<|end|>"]:
            if tid not in eog_set and (attrs[tid] & _A_CONTROL) and _end_dropped(texts, eog_set):
                attrs[tid] = _A_USER
        for tid in [i for i, t in enumerate(texts) if t == b"</s>"]:
            if tid not in eog_set and _s_dropped(texts, eog_set):
                attrs[tid] = _A_NORMAL

        if model == "llama" or model == "bert" or model == "t5":
            kind = "spm"
        elif model in ("gpt2", "hybriddna", "whitespace"):
            kind = "spm" if pre in ("gemma4", "granite-embed-multi-311m", "sarvam-moe") else "bpe"
        elif model == "gemma4":
            kind = "spm"
        else:
            raise GGUFError(f"{f.path}: tokenizer model {model!r} is not supported by lmtail's grammar vocabulary "
                            "(supported: llama, bert, t5, gpt2, gemma4)")
        pieces: list[bytes] = []
        special = _A_UNKNOWN | _A_CONTROL | _A_USER
        for i in range(n):
            a = attrs[i]
            t = texts[i]
            if a & special:
                pieces.append(t)
            elif a & _A_NORMAL:
                pieces.append(t.replace("\u2581".encode(), b" ") if kind == "spm" else _decode_bpe_text(t))
            elif a & _A_BYTE:
                pieces.append(_byte_token(t))
            else:
                pieces.append(b"")
        return cls(pieces, eog, texts=texts, types=types, name=os.path.basename(os.fspath(path)))

    # -- tables for the matcher --------------------------------------------------------------

    def tables(self):
        """Per-token decode (no pending bytes): flat code points, offsets, lengths, final partial state."""
        if self._tables is None:
            n = self.n_vocab
            lens = np.zeros(n, np.int64)
            fval = np.zeros(n, np.int64)
            fnrem = np.zeros(n, np.int64)
            bad = np.zeros(n, bool)
            cont = []
            flat: list[int] = []
            for i, p in enumerate(self.pieces):
                if not p or p[0] == 0:
                    bad[i] = True
                    continue
                if (p[0] >> 6) == 2:
                    cont.append(i)
                cps, (v, r) = decode_piece(p)
                if 0 in cps:
                    cps = cps[: cps.index(0)]  # llama.cpp's mask reads a decoded 0 as the end of the token
                lens[i] = len(cps)
                fval[i] = v
                fnrem[i] = r
                flat.extend(cps)
            offs = np.zeros(n, np.int64)
            np.cumsum(lens[:-1], out=offs[1:])
            flat_a = np.asarray(flat + [0], dtype=np.int64)
            valid = ~bad & ~self.is_eog
            self._tables = (flat_a, offs, lens, fval, fnrem, bad, np.asarray(cont, np.int64), np.flatnonzero(valid))
        return self._tables


def _end_dropped(texts, eog) -> bool:
    present = {texts[t] for t in eog}
    return (b"<|return|>" in present and (b"<|call|>" in present or b"<|calls|>" in present)) or (
        (b"<|call|>" in present or b"<|calls|>" in present) and b"<|flush|>" in present
    )


def _s_dropped(texts, eog) -> bool:
    present = {texts[t] for t in eog}
    return b"<|tool_response>" in present or b"<|plamo:eos|>" in present
