"""Fuzz target: the GGUF container reader and everything that reads a GGUF path.

Each input is written to a fresh file (a new inode each time, renamed over the last one, so a
view of an earlier map can never see its file shrink) and handed to every entry point:
``GGUFFile`` (and every key and tensor view it offers), ``eog_ids_from_kv``,
``load_head_spec``, ``Vocab.from_gguf`` (and its matcher tables) and, when a head loads,
``Head.from_gguf`` with one greedy step. A refused file must raise an ``LmtailError``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

import lmtail
from lmtail.errors import LmtailError
from lmtail.gguf_model import GGUFFile, StringArray, eog_ids_from_kv, load_head_spec, token_types, vocab_tokens
from lmtail.grammar import Vocab

NAME = "gguf"
CORPUS = Path(__file__).resolve().parent / "corpus" / "gguf"
MAX_LEN = 1 << 17
# Key names and type tags the mutator inserts (a GGUF string is a u64 length + bytes).
DICTIONARY = [
    b"GGUF", b"general.architecture", b"general.alignment", b"tokenizer.ggml.tokens", b"tokenizer.ggml.token_type",
    b"tokenizer.ggml.model", b"tokenizer.ggml.pre", b"tokenizer.ggml.eos_token_id", b"output.weight",
    b"output_norm.weight", b"token_embd.weight", b"llama", b"gpt2", b"gemma2", b"<|im_end|>", b"</s>",
    b"\x09\x00\x00\x00", b"\x08\x00\x00\x00", b"\x0d\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00\x00\x00",
]

_dir = Path(tempfile.mkdtemp(prefix="lmtail-fuzz-gguf-"))
atexit.register(shutil.rmtree, _dir, True)
_path = _dir / "input.gguf"


def _write(data: bytes) -> Path:
    tmp = _dir / "input.gguf.new"
    tmp.write_bytes(data)
    os.replace(tmp, _path)
    return _path


def _touch_file(p: Path) -> None:
    f = GGUFFile(p)
    for v in f.kv.values():
        if isinstance(v, StringArray):
            v.raw_list()
            v.nul_or_empty()
            for _ in v:
                pass
        elif isinstance(v, np.ndarray):
            v.sum()
    for ti in f.tensors.values():
        try:
            d = ti.data
        except LmtailError:
            continue
        if d.size:
            d.reshape(-1)[-1:].tobytes()  # the last element is inside the file
    repr(f)
    eog_ids_from_kv(f)
    vocab_tokens(f)
    token_types(f)


def one_input(data: bytes) -> None:
    p = _write(data)
    for stage in (_touch_file, _spec_and_head, _vocab):
        try:
            stage(p)
        except LmtailError:
            pass


def _spec_and_head(p: Path) -> None:
    spec = load_head_spec(p, allow_layer_norm=True)
    if spec.rows * spec.cols > 1 << 22:
        return  # keep one input fast
    head = lmtail.Head.from_gguf(p)
    h = np.linspace(-1.0, 1.0, spec.cols, dtype=np.float32)[None, :]
    t = head.greedy(h)
    assert 0 <= int(t[0]) < spec.rows, t


def _vocab(p: Path) -> None:
    v = Vocab.from_gguf(p)
    v.tables()
