"""Write small GGUF files for tests.

Valid files go through gguf-py's ``GGUFWriter`` (an implementation independent of lmtail's reader);
malformed ones are assembled byte by byte with :class:`RawGGUF`, which also reports where each
field landed so a test can corrupt exactly one of them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

Q5_K, Q4_K, F32, F16, BF16 = 13, 12, 0, 1, 30
Q5K_BLOCK_BYTES = 176  # d (f16), dmin (f16), scales[12], qh[32], qs[128]

# The LM-head types of issue 14: name -> (ggml id, block elements, block bytes), written out here
# from ggml's type traits so the tests do not read lmtail's own tables back.
HEAD_TYPES = {
    "Q6_K": (14, 256, 210), "Q8_0": (8, 32, 34), "Q4_0": (2, 32, 18), "Q4_K": (12, 256, 144),
    "Q5_K": (13, 256, 176), "F16": (1, 1, 2), "BF16": (30, 1, 2), "F32": (0, 1, 4),
}  # fmt: skip
# Real ggml types lmtail does not run (Q3_K, Q4_1, IQ4_XS): name -> (id, block elements, bytes).
OTHER_TYPES = {"Q3_K": (11, 256, 110), "Q4_1": (3, 32, 20), "IQ4_XS": (23, 256, 136)}


def type_info(type_id: int) -> tuple[str, int, int]:
    for name, (i, be, bb) in {**HEAD_TYPES, **OTHER_TYPES}.items():
        if i == type_id:
            return name, be, bb
    raise KeyError(type_id)


def quant_bytes(type_id: int, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """``rows`` x ``cols`` random weights in ggml type ``type_id`` as GGUF bytes, uint8
    ``(rows, row_bytes)``: gguf-py's quantizer where it implements the type, else llama.cpp's own
    (tests/oracle/quant.py; the test skips when that oracle is absent).  Types lmtail does not run
    get random bytes (only their refusal is tested)."""
    name, be, bb = type_info(type_id)
    assert cols % be == 0
    if type_id == Q5_K:
        return q5k_bytes(rows, cols, seed=seed)
    if name in OTHER_TYPES:
        return np.random.default_rng(seed).integers(0, 256, size=(rows, cols // be * bb), dtype=np.uint8)
    import gguf
    import gguf.quants

    x = (np.random.default_rng(seed).standard_normal((rows, cols)) * 0.05).astype(np.float32)
    try:
        q = gguf.quants.quantize(x, gguf.GGMLQuantizationType(type_id))
    except NotImplementedError:
        import pytest
        from oracle import quant as oq
        from oracle._lib import OracleUnavailable

        try:
            q = oq.quantize(type_id, x)
        except OracleUnavailable as e:  # pragma: no cover - environment dependent
            pytest.skip(f"no quantizer for {name}: gguf-py lacks it and the llama.cpp oracle is absent ({e})")
    q = np.ascontiguousarray(q).view(np.uint8).reshape(rows, cols // be * bb)
    return q

# GGUF value type ids
VT = {
    "UINT8": 0, "INT8": 1, "UINT16": 2, "INT16": 3, "UINT32": 4, "INT32": 5, "FLOAT32": 6,
    "BOOL": 7, "STRING": 8, "ARRAY": 9, "UINT64": 10, "INT64": 11, "FLOAT64": 12,
}  # fmt: skip


def q5k_bytes(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random Q5_K rows, uint8 ``(rows, cols // 256 * 176)``, with small finite fp16 d / dmin."""
    assert cols % 256 == 0
    rng = np.random.default_rng(seed)
    nb = cols // 256
    b = rng.integers(0, 256, size=(rows, nb, Q5K_BLOCK_BYTES), dtype=np.uint8)
    b[:, :, 0:2] = rng.uniform(0.001, 0.01, size=(rows, nb)).astype("<f2")[..., None].view(np.uint8)
    b[:, :, 2:4] = rng.uniform(0.001, 0.01, size=(rows, nb)).astype("<f2")[..., None].view(np.uint8)
    return np.ascontiguousarray(b.reshape(rows, nb * Q5K_BLOCK_BYTES))


@dataclass
class KV:
    """A typed key/value for :func:`write_gguf` (``vtype``/``subtype`` are names from :data:`VT`)."""

    value: Any
    vtype: str
    subtype: str | None = None


def f32(x: float) -> KV:
    return KV(float(x), "FLOAT32")


def u32(x: int) -> KV:
    return KV(int(x), "UINT32")


def i32(x: int) -> KV:
    return KV(int(x), "INT32")


def write_gguf(
    path: str | Path, arch: str, kv: dict[str, Any] | None = None,
    tensors: Sequence[tuple[str, np.ndarray, int | None]] = (), alignment: int | None = None,
) -> Path:
    """Write a GGUF with gguf.GGUFWriter.

    ``kv`` values: a :class:`KV`, or plain Python (str -> STRING, float -> FLOAT32, bool -> BOOL,
    int -> UINT32, list of str -> ARRAY of STRING).  ``tensors``: ``(name, array, raw_type)``
    where ``raw_type`` is a ggml type id for raw uint8 bytes (e.g. Q5_K) or None for F32/F16/I32.
    """
    import gguf

    path = Path(path)
    w = gguf.GGUFWriter(str(path), arch)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, v in (kv or {}).items():
        if not isinstance(v, KV):
            if isinstance(v, bool):
                v = KV(v, "BOOL")
            elif isinstance(v, (str, bytes)):
                v = KV(v, "STRING")
            elif isinstance(v, float):
                v = KV(v, "FLOAT32")
            elif isinstance(v, int):
                v = KV(v, "UINT32")
            elif isinstance(v, (list, tuple)) and v and isinstance(v[0], (str, bytes)):
                v = KV(list(v), "ARRAY", "STRING")
            else:
                raise TypeError(f"give {key!r} an explicit KV type")
        vt = gguf.GGUFValueType[v.vtype]
        st = gguf.GGUFValueType[v.subtype] if v.subtype else None
        w.add_key_value(key, v.value, vt, sub_type=st)
    for name, arr, raw in tensors:
        if raw is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=gguf.GGMLQuantizationType(raw))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def vocab_kv(tokens: Sequence[str | bytes], *, model: str = "llama", types: Sequence[int] | None = None,
             scores: bool = True, **ids: int) -> dict[str, Any]:
    """Tokenizer keys: tokens, token types (default NORMAL=1), scores, model, ``<name>_token_id``.

    ``ids`` like ``eos=5, eot=7`` become ``tokenizer.ggml.eos_token_id`` (UINT32).
    """
    kv: dict[str, Any] = {
        "tokenizer.ggml.model": model,
        "tokenizer.ggml.tokens": KV(list(tokens), "ARRAY", "STRING"),
        "tokenizer.ggml.token_type": KV(list(types) if types is not None else [1] * len(tokens), "ARRAY", "INT32"),
    }
    if scores:
        kv["tokenizer.ggml.scores"] = KV([0.0] * len(tokens), "ARRAY", "FLOAT32")
    if model == "gpt2":
        kv["tokenizer.ggml.pre"] = "default"
        kv["tokenizer.ggml.merges"] = KV(["a b"], "ARRAY", "STRING")
    for name, v in ids.items():
        kv[f"tokenizer.ggml.{name}_token_id"] = u32(v)
    return kv


def filler_tokens(n: int, planted: dict[int, str | bytes] | None = None) -> list[str | bytes]:
    """``n`` distinct ordinary tokens ``tok0 .. tok<n-1>`` with some ids replaced."""
    toks: list[str | bytes] = [f"tok{i}" for i in range(n)]
    for i, t in (planted or {}).items():
        toks[i] = t
    return toks


def head_model(
    path: str | Path, arch: str = "llama", *, rows: int = 40, cols: int = 512, head: str = "output",
    head_type: int = Q5_K, norm: str | None = "f32", eps: float | None = 1e-5,
    kv: dict[str, Any] | None = None, vocab: bool = True, seed: int = 0, extra_tensors=(),
) -> tuple[Path, dict[str, np.ndarray]]:
    """A minimal model with an LM head.

    head: ``"output"`` (output.weight), ``"tied"`` (token_embd.weight only), ``"both"``, ``"none"``.
    head_type: the head's ggml type id (any of :data:`HEAD_TYPES` / :data:`OTHER_TYPES`), written
    as raw GGUF bytes.  norm: ``"f32"`` / ``"f16"`` / ``"bf16"`` output_norm.weight, or None.  Returns the path and
    the arrays written (``head``, ``embd``, ``norm`` as float32).
    """
    rng = np.random.default_rng(seed + 1)
    arrays: dict[str, np.ndarray] = {}
    tensors: list[tuple[str, np.ndarray, int | None]] = []

    def qbytes(s: int) -> np.ndarray:
        return quant_bytes(head_type, rows, cols, seed=s)

    if head in ("tied", "both"):
        arrays["embd"] = qbytes(seed + 2)
        tensors.append(("token_embd.weight", arrays["embd"], head_type))
    if norm is not None:
        g = rng.uniform(0.5, 1.5, size=cols).astype(np.float32)
        if norm == "f32":
            tensors.append(("output_norm.weight", g, None))
        elif norm == "f16":
            g = g.astype(np.float16).astype(np.float32)
            tensors.append(("output_norm.weight", g.astype(np.float16), None))
        elif norm == "bf16":
            bits = (g.view(np.uint32) >> 16).astype(np.uint16)
            g = (bits.astype(np.uint32) << 16).view(np.float32)
            tensors.append(("output_norm.weight", bits.view(np.uint8).reshape(cols * 2), BF16))
        else:
            raise ValueError(norm)
        arrays["norm"] = g
    if head in ("output", "both"):
        arrays["head"] = qbytes(seed)
        tensors.append(("output.weight", arrays["head"], head_type))
    tensors.extend(extra_tensors)
    allkv: dict[str, Any] = {f"{arch}.embedding_length": u32(cols)}
    if eps is not None:
        allkv[f"{arch}.attention.layer_norm_rms_epsilon"] = f32(eps)
    if vocab:
        allkv.update(vocab_kv(filler_tokens(rows, {0: "<unk>", 1: "<s>", 2: "</s>"})))
    allkv.update(kv or {})
    return write_gguf(path, arch, allkv, tensors), arrays


# --------------------------------------------------------------------------------------------
# Byte-level assembly, for files GGUFWriter refuses to write
# --------------------------------------------------------------------------------------------


def enc_str(s: str | bytes) -> bytes:
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


_SCALAR_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}


def enc_value(vtype: int, value: Any, subtype: int | None = None) -> bytes:
    """Payload of one value (no type tag)."""
    if vtype == 8:
        return enc_str(value)
    if vtype == 9:
        out = struct.pack("<iQ", subtype, len(value))
        for v in value:
            if subtype == 9:
                inner_t, inner_v = v
                out += enc_value(9, inner_v, inner_t)
            else:
                out += enc_value(subtype, v)
        return out
    return struct.pack(_SCALAR_FMT[vtype], value)


@dataclass
class RawGGUF:
    """Assemble a GGUF byte by byte.  ``offsets`` maps labels to byte offsets after :meth:`build`."""

    version: int = 3
    alignment: int = 32
    kvs: list[tuple[str, bytes]] = field(default_factory=list)  # (label, encoded record)
    tinfos: list[tuple[str, bytes]] = field(default_factory=list)
    data: bytes = b""
    n_kv: int | None = None
    n_tensors: int | None = None
    magic: bytes = b"GGUF"
    offsets: dict[str, int] = field(default_factory=dict)

    def kv(self, key: str | bytes, vtype: int, value: Any = None, subtype: int | None = None, *, payload: bytes | None = None) -> "RawGGUF":
        body = payload if payload is not None else enc_value(vtype, value, subtype)
        label = key if isinstance(key, str) else key.decode("utf-8", "replace")
        self.kvs.append((label, enc_str(key) + struct.pack("<i", vtype) + body))
        return self

    def tensor(self, name: str | bytes, ne: Sequence[int], ttype: int, offset: int, *, n_dims: int | None = None) -> "RawGGUF":
        nd = len(ne) if n_dims is None else n_dims
        rec = enc_str(name) + struct.pack("<I", nd) + b"".join(struct.pack("<q", d) for d in ne) + struct.pack("<iQ", ttype, offset)
        label = name if isinstance(name, str) else name.decode("utf-8", "replace")
        self.tinfos.append((label, rec))
        return self

    def build(self) -> bytes:
        nk = len(self.kvs) if self.n_kv is None else self.n_kv
        nt = len(self.tinfos) if self.n_tensors is None else self.n_tensors
        out = bytearray(self.magic + struct.pack("<I", self.version) + struct.pack("<qq", nt, nk))
        self.offsets = {"version": 4, "n_tensors": 8, "n_kv": 16}
        for label, rec in self.kvs:
            self.offsets[f"kv:{label}"] = len(out)
            out += rec
        for label, rec in self.tinfos:
            self.offsets[f"ti:{label}"] = len(out)
            out += rec
        if self.tinfos:
            out += b"\0" * (-len(out) % self.alignment)
        self.offsets["data"] = len(out)
        out += self.data
        return bytes(out)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_bytes(self.build())
        return path


def minimal_raw_head(rows: int = 8, cols: int = 256, arch: str = "llama", head_type: int = Q5_K) -> RawGGUF:
    """A tiny valid model assembled by hand: arch, eps, Q5_K output.weight, F32 output_norm."""
    head = q5k_bytes(rows, cols, seed=7).tobytes() if head_type == Q5_K else bytes(rows * cols // 256 * 144)
    norm = np.ones(cols, np.float32).tobytes()
    r = RawGGUF()
    r.kv("general.architecture", 8, arch)
    r.kv(f"{arch}.attention.layer_norm_rms_epsilon", 6, 1e-5)
    r.tensor("output.weight", [cols, rows], head_type, 0)
    pad = -len(head) % 32
    r.tensor("output_norm.weight", [cols], F32, len(head) + pad)
    r.data = head + b"\0" * pad + norm
    return r
