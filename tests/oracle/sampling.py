"""llama.cpp's real samplers on numpy logits, through llama-cpp-python's low-level ctypes API.

``OracleChain(spec, n_vocab, seed)`` builds a ``llama_sampler_chain`` from the same spec tuples
``lmtail.sampling.Chain`` takes (same argument order and defaults), and ``apply``/``sample``
build a ``llama_token_data_array`` {id = i, logit, p = 0} from numpy exactly as
``llama_sampler_sample`` does (no model or context needed). Tests call ``require()`` first so a
missing oracle is a visible skip.
"""

from __future__ import annotations

import ctypes
import functools
import os

import numpy as np

from ._lib import OracleUnavailable, llama_cpp_module, require  # noqa: F401  (re-exported for tests)

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
DEFAULT_SEED = 0xFFFFFFFF
VOCAB_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "vocab")


def lc():
    return llama_cpp_module()


class OracleVocab:
    """A vocab-only llama_model (for DRY string breakers and infill), with the small protocol
    lmtail's samplers take: n_tokens, detokenize(id), tokenize(bytes), token_to_piece(id),
    is_eog(id), token_eot(), token_eos()."""

    def __init__(self, path):
        L = lc()
        cb = L.llama_log_callback(lambda level, text, user: None)
        self._cb = cb
        L.llama_log_set(cb, ctypes.c_void_p(0))
        params = L.llama_model_default_params()
        params.vocab_only = True
        self.model = L.llama_model_load_from_file(os.fsencode(path), params)
        if not self.model:
            raise OracleUnavailable(f"llama.cpp could not load {path}")
        self.ptr = L.llama_model_get_vocab(self.model)
        self.n_tokens = int(L.llama_vocab_n_tokens(self.ptr))

    def detokenize(self, t: int) -> bytes:
        L = lc()
        toks = (L.llama_token * 1)(t)
        buf = ctypes.create_string_buffer(256)
        n = L.llama_detokenize(self.ptr, toks, 1, buf, 256, False, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = L.llama_detokenize(self.ptr, toks, 1, buf, -n, False, True)
        return buf.raw[:n]

    def tokenize(self, text: bytes) -> list[int]:
        L = lc()
        cap = len(text) + 8
        out = (L.llama_token * cap)()
        n = L.llama_tokenize(self.ptr, text, len(text), out, cap, False, False)
        if n < 0:
            cap = -n
            out = (L.llama_token * cap)()
            n = L.llama_tokenize(self.ptr, text, len(text), out, cap, False, False)
        return list(out[:n])

    def token_to_piece(self, t: int) -> bytes:
        L = lc()
        buf = ctypes.create_string_buffer(512)
        n = L.llama_token_to_piece(self.ptr, t, buf, 512, 0, False)
        return buf.raw[:max(n, 0)]

    def is_eog(self, t: int) -> bool:
        return bool(lc().llama_vocab_is_eog(self.ptr, t))

    def token_eot(self) -> int:
        return int(lc().llama_vocab_eot(self.ptr))

    def token_eos(self) -> int:
        return int(lc().llama_vocab_eos(self.ptr))


def _f(x):
    return float(x)


def _make(entry, n_vocab: int, seed: int, vocab):
    L = lc()
    name = entry[0].replace("-", "_")
    a = list(entry[1:])

    def opt(i, default):
        return a[i] if len(a) > i else default

    if name == "greedy":
        return L.llama_sampler_init_greedy()
    if name == "dist":
        return L.llama_sampler_init_dist(opt(0, seed))
    if name == "top_k":
        return L.llama_sampler_init_top_k(a[0])
    if name == "top_p":
        return L.llama_sampler_init_top_p(_f(a[0]), opt(1, 1))
    if name == "min_p":
        return L.llama_sampler_init_min_p(_f(a[0]), opt(1, 1))
    if name == "typical":
        return L.llama_sampler_init_typical(_f(a[0]), opt(1, 1))
    if name == "temp":
        return L.llama_sampler_init_temp(_f(a[0]))
    if name == "temp_ext":
        return L.llama_sampler_init_temp_ext(_f(a[0]), _f(a[1]), _f(a[2]))
    if name == "xtc":
        return L.llama_sampler_init_xtc(_f(a[0]), _f(a[1]), opt(2, 1), opt(3, seed))
    if name == "top_n_sigma":
        return L.llama_sampler_init_top_n_sigma(_f(a[0]))
    if name == "mirostat":
        return L.llama_sampler_init_mirostat(n_vocab, opt(3, seed), _f(a[0]), _f(a[1]), opt(2, 100))
    if name == "mirostat_v2":
        return L.llama_sampler_init_mirostat_v2(opt(2, seed), _f(a[0]), _f(a[1]))
    if name == "penalties":
        return L.llama_sampler_init_penalties(n_vocab, a[0], _f(a[1]), _f(a[2]), _f(a[3]))
    if name == "dry":
        breakers = [b.encode() if isinstance(b, str) else bytes(b) for b in opt(4, ())]
        arr = (ctypes.c_char_p * max(len(breakers), 1))(*breakers)
        vp = vocab.ptr if vocab is not None else None
        return L.llama_sampler_init_dry(vp, _f(a[0]), _f(a[1]), a[2], a[3], arr, len(breakers))
    if name == "logit_bias":
        items = list(a[0].items()) if isinstance(a[0], dict) else list(a[0])
        arr = (L.llama_logit_bias * max(len(items), 1))()
        for i, (t, b) in enumerate(items):
            arr[i].token = t
            arr[i].bias = b
        return L.llama_sampler_init_logit_bias(n_vocab, len(items), arr)
    if name == "adaptive_p":
        return L.llama_sampler_init_adaptive_p(_f(a[0]), _f(a[1]), opt(2, seed))
    if name == "infill":
        return L.llama_sampler_init_infill(vocab.ptr)
    raise ValueError(f"oracle: unknown sampler {entry[0]!r}")


class OracleChain:
    """A persistent llama.cpp sampler chain."""

    def __init__(self, spec, n_vocab: int, seed: int = DEFAULT_SEED, vocab=None):
        L = lc()
        self.L = L
        self.n_vocab = n_vocab
        params = L.llama_sampler_chain_default_params()
        self.chain = L.llama_sampler_chain_init(params)
        for e in spec:
            L.llama_sampler_chain_add(self.chain, _make(tuple(e), n_vocab, seed, vocab))
        self.buf = np.empty(n_vocab, TOKEN_DATA)
        self._arr = L.llama_token_data_array()

    def __del__(self):
        try:
            self.L.llama_sampler_free(self.chain)
        except Exception:  # noqa: BLE001
            pass

    def apply_raw(self, buf: np.ndarray, sorted: bool = False):
        """llama_sampler_apply on buf (modified in place). Returns (offset, size, selected, sorted)."""
        L = self.L
        arr = self._arr
        base = buf.ctypes.data
        arr.data = ctypes.cast(ctypes.c_void_p(base), L.llama_token_data_p)
        arr.size = len(buf)
        arr.selected = -1
        arr.sorted = sorted
        L.llama_sampler_apply(self.chain, ctypes.byref(arr))
        addr = ctypes.cast(arr.data, ctypes.c_void_p).value or 0
        off = (addr - base) // TOKEN_DATA.itemsize
        return off, int(arr.size), int(arr.selected), bool(arr.sorted)

    def fill(self, logits: np.ndarray) -> np.ndarray:
        buf = self.buf
        buf["id"] = np.arange(self.n_vocab, dtype=np.int32)
        buf["logit"] = logits
        buf["p"] = 0.0
        return buf

    def apply(self, logits: np.ndarray) -> dict:
        buf = self.fill(logits)
        off, size, sel, srt = self.apply_raw(buf)
        v = buf[off:off + size]
        return {"ids": v["id"].copy(), "logits": v["logit"].copy(), "p": v["p"].copy(), "selected": sel,
                "sorted": srt}

    def sample(self, logits: np.ndarray) -> int:
        buf = self.fill(logits)
        off, size, sel, _ = self.apply_raw(buf)
        assert 0 <= sel < size, f"oracle chain selected {sel} of {size}"
        return int(buf["id"][off + sel])

    def accept(self, token: int) -> None:
        self.L.llama_sampler_accept(self.chain, token)

    def reset(self) -> None:
        self.L.llama_sampler_reset(self.chain)

    def seed(self) -> int:
        return int(self.L.llama_sampler_get_seed(self.chain))


# common_params_sampling defaults, read from common/common.h of the pinned llama.cpp.
COMMON_H_DEFAULTS = dict(
    seed=DEFAULT_SEED, min_keep=0, top_k=40, top_p=0.95, min_p=0.05, xtc_probability=0.0,
    xtc_threshold=0.10, typ_p=1.0, temp=0.80, dynatemp_range=0.0, dynatemp_exponent=1.0,
    penalty_last_n=64, penalty_repeat=1.0, penalty_freq=0.0, penalty_present=0.0, dry_multiplier=0.0,
    dry_base=1.75, dry_allowed_length=2, dry_penalty_last_n=64, adaptive_target=-1.0, adaptive_decay=0.90,
    mirostat=0, top_n_sigma=-1.0, mirostat_tau=5.0, mirostat_eta=0.10,
    dry_sequence_breakers=("\n", ":", '"', "*"), logit_bias=(),
    samplers=("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"),
)


class OracleCommonChain(OracleChain):
    """The chain common_sampler_init (common/sampling.cpp) builds, assembled here independently of
    lmtail from the same llama_sampler_init_* calls in the same order (grammar and reasoning
    budget aside; suppress tokens: none for a model-free vocabulary)."""

    def __init__(self, n_vocab: int, vocab=None, **params):
        L = lc()
        self.L = L
        self.n_vocab = n_vocab
        p = {**COMMON_H_DEFAULTS, **params}
        self.chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        add = lambda s: L.llama_sampler_chain_add(self.chain, s)  # noqa: E731
        seed = p["seed"]
        bias = list(p["logit_bias"].items()) if isinstance(p["logit_bias"], dict) else list(p["logit_bias"])
        if bias:
            add(_make(("logit_bias", bias), n_vocab, seed, vocab))
        if p["mirostat"] == 0:
            use_adaptive = False
            for s in p["samplers"]:
                if s == "dry":
                    add(_make(("dry", p["dry_multiplier"], p["dry_base"], p["dry_allowed_length"],
                               p["dry_penalty_last_n"], p["dry_sequence_breakers"]), n_vocab, seed, vocab))
                elif s == "top_k":
                    add(L.llama_sampler_init_top_k(p["top_k"]))
                elif s == "top_p":
                    add(L.llama_sampler_init_top_p(p["top_p"], p["min_keep"]))
                elif s == "top_n_sigma":
                    add(L.llama_sampler_init_top_n_sigma(p["top_n_sigma"]))
                elif s == "min_p":
                    add(L.llama_sampler_init_min_p(p["min_p"], p["min_keep"]))
                elif s == "xtc":
                    add(L.llama_sampler_init_xtc(p["xtc_probability"], p["xtc_threshold"], p["min_keep"], seed))
                elif s == "typ_p":
                    add(L.llama_sampler_init_typical(p["typ_p"], p["min_keep"]))
                elif s == "temperature":
                    add(L.llama_sampler_init_temp_ext(p["temp"], p["dynatemp_range"], p["dynatemp_exponent"]))
                elif s == "infill":
                    add(L.llama_sampler_init_infill(vocab.ptr))
                elif s == "penalties":
                    add(L.llama_sampler_init_penalties(n_vocab, p["penalty_last_n"], p["penalty_repeat"],
                                                       p["penalty_freq"], p["penalty_present"]))
                elif s == "adaptive_p":
                    use_adaptive = True
                else:
                    raise ValueError(s)
            if use_adaptive:
                add(L.llama_sampler_init_adaptive_p(p["adaptive_target"], p["adaptive_decay"], seed))
            else:
                add(L.llama_sampler_init_dist(seed))
        elif p["mirostat"] == 1:
            add(L.llama_sampler_init_temp(p["temp"]))
            add(L.llama_sampler_init_mirostat(n_vocab, seed, p["mirostat_tau"], p["mirostat_eta"], 100))
        else:
            add(L.llama_sampler_init_temp(p["temp"]))
            add(L.llama_sampler_init_mirostat_v2(seed, p["mirostat_tau"], p["mirostat_eta"]))
        self.buf = np.empty(n_vocab, TOKEN_DATA)
        self._arr = L.llama_token_data_array()


def shared_vocab_path(name: str = "ggml-vocab-llama-bpe.gguf"):
    p = os.path.normpath(os.path.join(VOCAB_DIR, name))
    return p if os.path.exists(p) else None
