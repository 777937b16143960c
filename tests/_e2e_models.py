"""Small random models that llama.cpp runs, for the end-to-end test (tests/test_e2e_models.py).

``write_model`` writes an F32 model with gguf-py's GGUFWriter (an implementation independent of
lmtail); ``quantize`` turns it into a model with the head of one ggml type through llama.cpp's own
``llama_model_quantize`` (llama-cpp-python's ctypes API); ``LlamaRun`` loads it in llama.cpp on the
CPU and decodes tokens, returning llama.cpp's post-norm hidden states (``result_norm``: a context
with ``embeddings = true`` and pooling NONE) and its logits from the same decode.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# ggml type ids of the LM-head types real GGUF files ship (ggml.h)
HEAD_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "BF16": 30}
BLOCK = {"F32": 1, "F16": 1, "BF16": 1, "Q4_0": 32, "Q8_0": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256}
LLAMA_FTYPE_MOSTLY_F16 = 1  # the body: F16 matrices, F32 norms (any shape quantizes to F16)

HEAD_DIM = 64
N_FF = 64
N_CTX = 64


@dataclass(frozen=True)
class ModelCase:
    """One small model: architecture, hidden size, vocabulary, and the head types it is quantized to."""

    name: str
    arch: str  # "llama", "qwen2", "gemma2", "command-r"
    hidden: int
    vocab: str  # "spm" / "gpt2": built here; "shared:<file>": tokenizer keys of ../shared/vocab/<file>
    n_vocab: int  # for the built vocabularies
    types: tuple[str, ...]
    tied: bool = True
    n_layer: int = 2
    head_std: float = 0.15  # spread of the head's weights: logits of a few units, so caps bite
    kv: dict = field(default_factory=dict)  # extra {arch}.* keys

    @property
    def n_head(self) -> int:
        return self.hidden // HEAD_DIM


# --------------------------------------------------------------------------------------------
# Vocabularies
# --------------------------------------------------------------------------------------------
# token types (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
EXTRA_EOG = "<|im_end|>"  # an end-of-turn text llama.cpp marks EOG by name (control token)


def spm_vocab(n: int) -> dict:
    """A SentencePiece ('llama') vocabulary llama.cpp loads: <unk> <s> </s>, the 256 byte tokens
    (<0xXX>, which its byte fallback looks up), an <|im_end|> control token, then ordinary pieces."""
    assert n >= 300
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [EXTRA_EOG]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [CONTROL]
    base = len(toks)
    toks += [f"\u2581p{i}" for i in range(n - base)]
    types += [NORMAL] * (n - base)
    scores = [0.0] * base + [-float(i) for i in range(n - base)]
    return {
        "tokenizer.ggml.model": ("llama", "STRING"),
        "tokenizer.ggml.tokens": (toks, "ARRAY", "STRING"),
        "tokenizer.ggml.scores": (scores, "ARRAY", "FLOAT32"),
        "tokenizer.ggml.token_type": (types, "ARRAY", "INT32"),
        "tokenizer.ggml.unknown_token_id": (0, "UINT32"),
        "tokenizer.ggml.bos_token_id": (1, "UINT32"),
        "tokenizer.ggml.eos_token_id": (2, "UINT32"),
    }


def gpt2_vocab(n: int) -> dict:
    """A byte-level BPE ('gpt2') vocabulary: the 256 byte-level symbols, merges over them, an
    <|endoftext|> (eos) and <|im_end|> (eot) control token."""
    # GPT-2's byte -> unicode map: printable bytes as themselves, the rest shifted past 255.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    k = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    sym = [chr(c) for c in cs]
    merges, extra = [], []
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    for a in letters:
        for b in letters:
            if len(sym) + len(extra) + 2 >= n:
                break
            merges.append(f"{a} {b}")
            extra.append(a + b)
    toks = sym + extra + ["<|endoftext|>", EXTRA_EOG]
    types = [NORMAL] * (len(sym) + len(extra)) + [CONTROL, CONTROL]
    while len(toks) < n:  # pad with unmerged multi-letter pieces (reachable only by id)
        toks.append(f"zz{len(toks)}")
        types.append(NORMAL)
    eos = len(sym) + len(extra)
    return {
        "tokenizer.ggml.model": ("gpt2", "STRING"),
        "tokenizer.ggml.pre": ("default", "STRING"),
        "tokenizer.ggml.tokens": (toks, "ARRAY", "STRING"),
        "tokenizer.ggml.token_type": (types, "ARRAY", "INT32"),
        "tokenizer.ggml.merges": (merges, "ARRAY", "STRING"),
        "tokenizer.ggml.bos_token_id": (eos, "UINT32"),
        "tokenizer.ggml.eos_token_id": (eos, "UINT32"),
    }


def shared_vocab_file(name: str) -> Path:
    """../shared/vocab/<name> relative to the repository (present in this workplace and its CI)."""
    return Path(__file__).resolve().parents[2] / "shared" / "vocab" / name


def vocab_from_gguf(path: Path) -> dict:
    """Every ``tokenizer.*`` key of a vocab-only GGUF, with its GGUF type, as written by gguf-py."""
    import gguf

    r = gguf.GGUFReader(str(path))
    out = {}
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main = gguf.GGUFValueType(f.types[0]).name
        if main == "ARRAY":
            out[key] = (f.contents(), "ARRAY", gguf.GGUFValueType(f.types[1]).name)
        else:
            out[key] = (f.contents(), main)
    return out


def case_vocab(case: ModelCase) -> dict:
    if case.vocab == "spm":
        return spm_vocab(case.n_vocab)
    if case.vocab == "gpt2":
        return gpt2_vocab(case.n_vocab)
    if case.vocab.startswith("shared:"):
        return vocab_from_gguf(shared_vocab_file(case.vocab.split(":", 1)[1]))
    raise ValueError(case.vocab)


# --------------------------------------------------------------------------------------------
# Writing the F32 model
# --------------------------------------------------------------------------------------------
def write_model(path: Path, case: ModelCase, seed: int = 0) -> Path:
    """An F32 model of ``case`` with random weights (numpy shapes are (out, in): ggml ne reversed)."""
    import gguf

    rng = np.random.default_rng(seed)
    voc = case_vocab(case)
    n_vocab = len(voc["tokenizer.ggml.tokens"][0])
    H, a = case.hidden, case.arch
    n_head, n_kv = case.n_head, 1
    w = gguf.GGUFWriter(str(path), a)
    w.add_string("general.name", f"lmtail-e2e-{case.name}")

    def key(k, v, t):
        w.add_key_value(f"{a}.{k}", v, gguf.GGUFValueType[t])

    key("context_length", N_CTX, "UINT32")
    key("embedding_length", H, "UINT32")
    key("block_count", case.n_layer, "UINT32")
    key("feed_forward_length", N_FF, "UINT32")
    key("attention.head_count", n_head, "UINT32")
    key("attention.head_count_kv", n_kv, "UINT32")
    key("rope.freq_base", 10000.0, "FLOAT32")
    if a == "command-r":
        key("attention.layer_norm_epsilon", 1e-5, "FLOAT32")
    else:
        key("attention.layer_norm_rms_epsilon", 1e-6 if a == "gemma2" else 1e-5, "FLOAT32")
    if a == "gemma2":
        key("attention.key_length", HEAD_DIM, "UINT32")
        key("attention.value_length", HEAD_DIM, "UINT32")
        key("attention.sliding_window", 16, "UINT32")
    for k, (v, t) in case.kv.items():
        key(k, v, t)
    for k, spec in voc.items():
        if spec[1] == "ARRAY":
            w.add_key_value(k, spec[0], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType[spec[2]])
        else:
            w.add_key_value(k, spec[0], gguf.GGUFValueType[spec[1]])

    def t(name, *shape, std=0.05, ones=False):
        if ones:  # a norm weight near 1
            arr = rng.uniform(0.8, 1.2, size=shape).astype(np.float32)
        else:
            arr = (rng.standard_normal(shape) * std).astype(np.float32)
        w.add_tensor(name, arr)

    t("token_embd.weight", n_vocab, H, std=case.head_std)
    t("output_norm.weight", H, ones=True)
    if not case.tied:
        t("output.weight", n_vocab, H, std=case.head_std)
    q, kv_ = n_head * HEAD_DIM, n_kv * HEAD_DIM
    for i in range(case.n_layer):
        b = f"blk.{i}."
        t(b + "attn_norm.weight", H, ones=True)
        t(b + "attn_q.weight", q, H)
        t(b + "attn_k.weight", kv_, H)
        t(b + "attn_v.weight", kv_, H)
        t(b + "attn_output.weight", H, q)
        if a == "qwen2":  # qwen2's optional q/k/v biases
            t(b + "attn_q.bias", q)
            t(b + "attn_k.bias", kv_)
            t(b + "attn_v.bias", kv_)
        if a == "gemma2":
            t(b + "post_attention_norm.weight", H, ones=True)
            t(b + "post_ffw_norm.weight", H, ones=True)
        if a != "command-r":  # command-r: parallel attention + FFN off one norm
            t(b + "ffn_norm.weight", H, ones=True)
        t(b + "ffn_gate.weight", N_FF, H)
        t(b + "ffn_up.weight", N_FF, H)
        t(b + "ffn_down.weight", H, N_FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# --------------------------------------------------------------------------------------------
# llama.cpp (llama-cpp-python's low-level ctypes API)
# --------------------------------------------------------------------------------------------
def lc():
    from oracle._lib import llama_cpp_module

    L = llama_cpp_module()
    _silence(L)
    return L


_quiet = None


def _silence(L) -> None:
    global _quiet
    if _quiet is None:
        _quiet = L.llama_log_callback(lambda level, text, user: None)
        L.llama_log_set(_quiet, ctypes.c_void_p(0))


def quantize(src: Path, dst: Path, head_type: str, tied: bool, threads: int = 2) -> Path:
    """llama_model_quantize: body F16, the head (output.weight, or token_embd.weight when tied)
    of ``head_type``; untied models keep token_embd at F16."""
    L = lc()
    p = L.llama_model_quantize_default_params()
    p.nthread = threads
    p.ftype = LLAMA_FTYPE_MOSTLY_F16
    tid = HEAD_TYPES[head_type]
    if tied:
        p.token_embedding_type = tid
    else:
        p.output_tensor_type = tid
        p.token_embedding_type = HEAD_TYPES["F16"]
    rc = L.llama_model_quantize(os.fsencode(src), os.fsencode(dst), ctypes.byref(p))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src.name} -> {head_type}) returned {rc}")
    return dst


_GGML = None


def _ggml():
    """The few libggml-base functions the eval callback needs (the oracle's own library)."""
    global _GGML
    if _GGML is None:
        from oracle._lib import load

        # Its own CDLL object: the restypes set here must not change the function objects of the
        # cached one that tests/oracle/graph.py declares (ggml_get_name returns a pointer there).
        g = ctypes.CDLL(load("ggml-base")._name, mode=ctypes.RTLD_GLOBAL)
        g.ggml_get_name.restype = ctypes.c_char_p
        g.ggml_get_name.argtypes = [ctypes.c_void_p]
        g.ggml_nelements.restype = ctypes.c_int64
        g.ggml_nelements.argtypes = [ctypes.c_void_p]
        g.ggml_nbytes.restype = ctypes.c_size_t
        g.ggml_nbytes.argtypes = [ctypes.c_void_p]
        g.ggml_backend_tensor_get.restype = None
        g.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        _GGML = g
    return _GGML


class LlamaLoadError(RuntimeError):
    pass


def amx_tile_crash(path: Path) -> str | None:
    """Why llama.cpp would die on a batch (T > 1) of this model here, or None: a weight it loads
    into the AMX buffer, where the oracle's AMX tile kernel cannot run (graph.amx_tiles_broken)."""
    from oracle import graph as G

    why = G.amx_tiles_broken()
    if not why:
        return None
    import gguf

    for t in gguf.GGUFReader(str(path)).tensors:
        tid = int(t.tensor_type)
        if len(t.shape) == 2 and tid in G.AMX_TILE_TYPES and G.amx_takes(tid, int(t.shape[1]), int(t.shape[0])):
            return f"{t.name} ({t.tensor_type.name}) goes to the AMX buffer; {why}"
    return None


class LlamaRun:
    """One model and one context in llama.cpp on the CPU, with embeddings on (pooling NONE): each
    decode gives every token's logits and its post-norm hidden state (result_norm).

    Where llama.cpp would die on a batch (``amx_tile_crash``), decode() feeds a batch one token at
    a time (``self.one_by_one`` says why): every logit then comes from the AMX gemv, whose bytes
    the tile gemm shares (graph.mul_mat_llama), and the hidden states are llama.cpp's own."""

    def __init__(self, path: Path, threads: int = 2, capture: tuple[str, ...] = ()):
        L = lc()
        self.L = L
        self.one_by_one = amx_tile_crash(path)
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(os.fsencode(path), mp)
        if not self.model:
            raise LlamaLoadError(f"llama.cpp could not load {path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = N_CTX
        cp.n_batch = N_CTX
        cp.n_ubatch = N_CTX
        cp.n_seq_max = 1
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.embeddings = True
        cp.pooling_type = L.LLAMA_POOLING_TYPE_NONE
        cp.no_perf = True
        # ``capture``: graph tensors (by name, e.g. "l_out-1": the last layer's output, the final
        # norm's input) copied out through the scheduler's eval callback on every decode.
        self.captured: dict[str, np.ndarray] = {}
        if capture:
            self._cb = L.ggml_backend_sched_eval_callback(self._make_cb(set(capture)))
            cp.cb_eval = self._cb
            cp.cb_eval_user_data = None
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            L.llama_model_free(self.model)
            raise LlamaLoadError(f"llama.cpp could not create a context for {path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = int(L.llama_vocab_n_tokens(self.vocab))
        self.n_embd = int(L.llama_model_n_embd(self.model))
        self.pos = 0

    def _make_cb(self, wanted):
        g = _ggml()

        def cb(tensor, ask, user):
            name = g.ggml_get_name(tensor).decode()
            if ask:
                return name in wanted
            if name in wanted:
                n = int(g.ggml_nelements(tensor))
                nb = int(g.ggml_nbytes(tensor))
                assert nb == 4 * n, f"{name}: not an F32 tensor"
                buf = np.empty(n, np.float32)
                g.ggml_backend_tensor_get(tensor, buf.ctypes.data_as(ctypes.c_void_p), 0, nb)
                self.captured[name] = buf.reshape(-1, self.n_embd)
            return True

        return cb

    def close(self) -> None:
        if self.ctx:
            self.L.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            self.L.llama_model_free(self.model)
            self.model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def reset(self) -> None:
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        self.pos = 0

    def decode(self, tokens) -> tuple[np.ndarray, np.ndarray]:
        """Decode ``tokens`` at the next positions; returns (hidden (T, n_embd), logits (T, n_vocab))
        as float32 copies of llama.cpp's buffers."""
        L = self.L
        T = len(tokens)
        if T > 1 and self.one_by_one:
            parts, caps = [], {}
            for tok in tokens:
                parts.append(self.decode([tok]))
                for k, v in self.captured.items():
                    caps.setdefault(k, []).append(v.copy())
            self.captured = {k: np.concatenate(v) for k, v in caps.items()}
            return np.concatenate([h for h, _ in parts]), np.concatenate([g for _, g in parts])
        batch = L.llama_batch_init(T, 0, 1)
        try:
            for i, tok in enumerate(tokens):
                batch.token[i] = int(tok)
                batch.pos[i] = self.pos + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = True
            batch.n_tokens = T
            rc = L.llama_decode(self.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
        finally:
            L.llama_batch_free(batch)
        self.pos += T
        hid = np.empty((T, self.n_embd), np.float32)
        log = np.empty((T, self.n_vocab), np.float32)
        for i in range(T):
            e = L.llama_get_embeddings_ith(self.ctx, i)
            g = L.llama_get_logits_ith(self.ctx, i)
            if not e or not g:
                raise RuntimeError(f"llama.cpp returned no {'embeddings' if not e else 'logits'} for token {i}")
            hid[i] = np.ctypeslib.as_array(e, shape=(self.n_embd,))
            log[i] = np.ctypeslib.as_array(g, shape=(self.n_vocab,))
        return hid, log

    def eog_ids(self) -> tuple[int, ...]:
        f, v = self.L.llama_vocab_is_eog, self.vocab
        return tuple(i for i in range(self.n_vocab) if f(v, i))

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(256)
        n = self.L.llama_model_meta_val_str(self.model, key.encode(), buf, 256)
        return None if n < 0 else buf.value.decode()


# --------------------------------------------------------------------------------------------
# The float64 reference
# --------------------------------------------------------------------------------------------
def dequantize_head(weight: np.ndarray, type_name: str, cols: int) -> np.ndarray:
    """The head as float64 (rows, cols) through gguf-py's dequantizer (gguf.quants.dequantize)."""
    import gguf

    qt = gguf.GGMLQuantizationType(HEAD_TYPES[type_name])
    w = np.asarray(weight)
    if w.dtype != np.uint8:
        w = np.ascontiguousarray(w).view(np.uint8).reshape(w.shape[0], -1)
    return gguf.quants.dequantize(w, qt).reshape(w.shape[0], cols).astype(np.float64)


def reference_logits(hidden: np.ndarray, w64: np.ndarray, scale: float, cap: float) -> np.ndarray:
    z = hidden.astype(np.float64) @ w64.T * scale
    return cap * np.tanh(z / cap) if cap else z


def normwise(a: np.ndarray, ref: np.ndarray) -> float:
    """max over rows of ||a - ref|| / ||ref|| (float64)."""
    a = np.atleast_2d(np.asarray(a, np.float64))
    ref = np.atleast_2d(ref)
    return float(np.max(np.linalg.norm(a - ref, axis=-1) / np.linalg.norm(ref, axis=-1)))
