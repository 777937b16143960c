"""GGUF reader for the LM-head stage: final norm, Q5_K head, logit scale, soft cap, EOG ids.

Everything here reads a memory map of an untrusted file.  Every structural problem (truncation,
bad magic/version, absurd counts or lengths, unknown value or tensor types, overlapping or
out-of-file tensor data, wrong tensor type or shape, missing keys) raises
:class:`lmtail.errors.GGUFError` whose message says what was expected, what was found and where
(byte offset, key or tensor name).  Allocation is bounded by the file size: every count and
length is checked against the bytes that remain before anything is allocated, numeric arrays and
tensor data are zero-copy read-only views of the map.

The semantics mirror llama.cpp as vendored in llama-cpp-python 0.3.36 (paths below are relative
to ``vendor/llama.cpp``):

* container rules: ``ggml/src/gguf.cpp`` ``gguf_init_from_reader`` (version 2/3, int64 counts,
  ``general.alignment`` a UINT32 power of two, tensor names < 64 bytes, ``ne[0]`` a multiple of
  the block size, tensor offsets packed in order) and ``src/llama-model-loader.cpp`` (tensor data
  inside the file, strict key types: a key read as ``float`` must be FLOAT32, a token id UINT32);
* head / norm / scale / soft cap per architecture: ``src/models/<arch>.cpp`` (``load_arch_hparams``,
  ``load_arch_tensors`` and the tail of the graph builder), see :data:`ARCH_RULES`;
* end-of-generation ids: ``llama_vocab::impl::load`` in ``src/llama-vocab.cpp``, see
  :func:`eog_ids_from_kv`.

Layout reminder: GGUF dims are in ggml order, ``ne[0]`` is the contiguous one.  The head
``output.weight`` has ``ne = (cols, rows) = (hidden, vocab)``; a Q5_K row is ``cols // 256``
blocks of 176 bytes.
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import struct
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from .errors import GGUFError, ParameterError

__all__ = [
    "GGUFFile",
    "TensorInfo",
    "StringArray",
    "HeadSpec",
    "ArchRule",
    "ARCH_RULES",
    "load_head_spec",
    "output_transform",
    "eog_ids_from_kv",
    "vocab_tokens",
    "token_types",
    "GGML_TYPES",
    "GGUF_VALUE_TYPES",
    "Q5_K",
]

# --------------------------------------------------------------------------------------------
# Constants (ggml/include/ggml.h, ggml/src/ggml.c type_traits, ggml/include/gguf.h)
# --------------------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
GGUF_MAX_STRING_LENGTH = 1024 * 1024 * 1024  # gguf.cpp GGUF_MAX_STRING_LENGTH
GGUF_MAX_ARRAY_ELEMENTS = 1024 * 1024 * 1024  # gguf.cpp GGUF_MAX_ARRAY_ELEMENTS
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64
_MAX_ARRAY_NESTING = 8  # ggml rejects nested arrays outright; gguf-py allows them
_INT64_MAX = (1 << 63) - 1
_U64 = struct.Struct("<Q")
_UINT64_MAX = (1 << 64) - 1

# name -> GGUF value type id (gguf.h enum gguf_type)
GGUF_VALUE_TYPES = {
    "UINT8": 0, "INT8": 1, "UINT16": 2, "INT16": 3, "UINT32": 4, "INT32": 5, "FLOAT32": 6,
    "BOOL": 7, "STRING": 8, "ARRAY": 9, "UINT64": 10, "INT64": 11, "FLOAT64": 12,
}  # fmt: skip
_VT_NAME = {v: k for k, v in GGUF_VALUE_TYPES.items()}
_T_UINT32, _T_INT32, _T_FLOAT32, _T_BOOL, _T_STRING, _T_ARRAY = 4, 5, 6, 7, 8, 9
# scalar value type -> (struct format, numpy dtype)
_SCALAR: dict[int, tuple[str, np.dtype]] = {
    0: ("<B", np.dtype("<u1")), 1: ("<b", np.dtype("<i1")), 2: ("<H", np.dtype("<u2")),
    3: ("<h", np.dtype("<i2")), 4: ("<I", np.dtype("<u4")), 5: ("<i", np.dtype("<i4")),
    6: ("<f", np.dtype("<f4")), 7: ("<B", np.dtype("<u1")), 10: ("<Q", np.dtype("<u8")),
    11: ("<q", np.dtype("<i8")), 12: ("<d", np.dtype("<f8")),
}  # fmt: skip

# ggml type id -> (name, block size in elements, block size in bytes).  Ids 4, 5, 31-33, 36-38
# were removed from ggml; a file using them is rejected like ggml does (block size 0).
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4),
    27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}  # fmt: skip
GGML_TYPE_COUNT = 43
F32, F16, BF16, Q5_K = 0, 1, 30, 13
_PLAIN_DTYPES = {0: "<f4", 1: "<f2", 24: "<i1", 25: "<i2", 26: "<i4", 27: "<i8", 28: "<f8", 30: "<u2"}


def _type_name(t: int) -> str:
    return GGML_TYPES[t][0] if t in GGML_TYPES else f"unknown type {t}"


# --------------------------------------------------------------------------------------------
# The container
# --------------------------------------------------------------------------------------------


class StringArray(Sequence):
    """A GGUF array of strings, kept as offsets into the map (no per-element copy until read).

    ``arr[i]`` is the UTF-8 decoded ``str`` (``surrogateescape``, so invalid bytes round-trip);
    ``arr.raw(i)`` is the exact ``bytes``.
    """

    __slots__ = ("_buf", "_offsets", "_lengths")

    def __init__(self, buf: mmap.mmap, offsets: np.ndarray, lengths: np.ndarray):
        self._buf = buf
        self._offsets = offsets
        self._lengths = lengths

    def __len__(self) -> int:
        return int(self._offsets.shape[0])

    def raw(self, i: int) -> bytes:
        o = int(self._offsets[i])
        return self._buf[o : o + int(self._lengths[i])]

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.raw(i).decode("utf-8", "surrogateescape")

    def raw_list(self) -> list[bytes]:
        buf = self._buf
        return [buf[o : o + n] for o, n in zip(self._offsets.tolist(), self._lengths.tolist())]

    def nul_or_empty(self) -> np.ndarray:
        """Indices of strings that are empty or contain a NUL byte (vectorised, no copies)."""
        n = len(self)
        if n == 0:
            return np.zeros(0, np.int64)
        lo = int(self._offsets[0])
        hi = int(self._offsets[-1] + self._lengths[-1])
        region = np.frombuffer(self._buf, dtype=np.uint8, count=hi - lo, offset=lo)
        z = np.flatnonzero(region == 0) + lo  # includes the zero bytes of the length prefixes
        idx = np.searchsorted(self._offsets, z, side="right") - 1
        inside = (idx >= 0) & (z < self._offsets[np.maximum(idx, 0)] + self._lengths[np.maximum(idx, 0)])
        return np.union1d(np.unique(idx[inside]), np.flatnonzero(self._lengths == 0))

    def __iter__(self) -> Iterator[str]:
        for b in self.raw_list():
            yield b.decode("utf-8", "surrogateescape")

    def __repr__(self) -> str:
        return f"StringArray(n={len(self)})"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor-info record.  ``ne`` is in ggml order (``ne[0]`` contiguous)."""

    name: str
    n_dims: int
    ne: tuple[int, ...]  # length n_dims
    type: int
    offset: int  # relative to the data section, as stored
    abs_offset: int  # absolute byte offset in the file
    nbytes: int
    _file: "GGUFFile" = field(repr=False, compare=False)

    @property
    def type_name(self) -> str:
        return _type_name(self.type)

    @property
    def row_bytes(self) -> int:
        _, blck, size = GGML_TYPES[self.type]
        return (self.ne[0] // blck) * size if self.ne else size

    @property
    def data(self) -> np.ndarray:
        """Zero-copy read-only view of the tensor data, numpy (row-major) shape.

        F32/F16/I8..I64/F64 get their dtype; BF16 is uint16; block-quantized types are uint8 with
        the last axis the row's bytes.
        """
        ne = list(self.ne) or [1]
        raw = self._file._u8[self.abs_offset : self.abs_offset + self.nbytes]
        if self.type in _PLAIN_DTYPES:
            return raw.view(np.dtype(_PLAIN_DTYPES[self.type])).reshape(tuple(reversed(ne)))
        return raw.reshape(tuple(reversed(ne[1:])) + (self.row_bytes,))


class _Cursor:
    """Bounds-checked little-endian reads over the map.  Every failure is a GGUFError."""

    __slots__ = ("mm", "size", "pos", "path")

    def __init__(self, mm: mmap.mmap, size: int, path: str):
        self.mm, self.size, self.pos, self.path = mm, size, 0, path

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise GGUFError(
                f"{self.path}: truncated: expected {n} bytes for {what} at byte offset {self.pos}, "
                f"but the file is {self.size} bytes ({self.size - self.pos} left)"
            )

    def unpack(self, fmt: str, n: int, what: str):
        self.need(n, what)
        v = struct.unpack_from(fmt, self.mm, self.pos)[0]
        self.pos += n
        return v

    def u32(self, what: str) -> int:
        return self.unpack("<I", 4, what)

    def i32(self, what: str) -> int:
        return self.unpack("<i", 4, what)

    def u64(self, what: str) -> int:
        return self.unpack("<Q", 8, what)

    def i64(self, what: str) -> int:
        return self.unpack("<q", 8, what)

    def string_bytes(self, what: str) -> bytes:
        at = self.pos
        n = self.u64(f"the length of {what}")
        if n > GGUF_MAX_STRING_LENGTH:
            raise GGUFError(
                f"{self.path}: {what} at byte offset {at} claims length {n}; "
                f"expected at most {GGUF_MAX_STRING_LENGTH} (ggml's limit)"
            )
        if n > self.size - self.pos:
            raise GGUFError(
                f"{self.path}: truncated: {what} at byte offset {at} claims length {n}, "
                f"but only {self.size - self.pos} bytes remain in the file"
            )
        b = self.mm[self.pos : self.pos + n]
        self.pos += n
        return b


def _dec(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _check_path(path: Any) -> str:
    """``os.fspath(path)``, or ParameterError for anything that is not a path (None, an int)."""
    if isinstance(path, bytes):
        return os.fsdecode(path)
    try:
        return os.fspath(path)
    except TypeError:
        raise ParameterError(
            f"path: expected a GGUF file path (str or os.PathLike); found {type(path).__name__}"
        ) from None


def _require_regular(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
            else "a character device" if stat.S_ISCHR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
            else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file"
        )
        raise GGUFError(f"{path}: is {kind}; expected a regular GGUF file")


class GGUFFile:
    """A parsed, memory-mapped GGUF file.

    Attributes:
        path: the file path.
        version: GGUF version (2 or 3).
        kv: ``dict[str, value]`` in file order.  Scalars are ``int``/``float``/``bool``/``str``;
            numeric arrays are read-only numpy views of the map; string arrays are
            :class:`StringArray`; nested arrays are lists.
        kv_types: ``dict[str, tuple]``: ``(type,)`` for scalars, ``(ARRAY, element type)`` for
            arrays (GGUF value type ids, see :data:`GGUF_VALUE_TYPES`).
        tensors: ``dict[str, TensorInfo]`` in file order; ``tensors[name].data`` is a view.
        alignment, data_offset (absolute start of the data section), file_size.

    The map stays alive as long as any view into it does; there is nothing to close.

    ``path`` must name a regular file (a FIFO, device or directory raises GGUFError before
    anything is read: a FIFO would block forever); anything that is not a path raises
    ParameterError.  The file is memory-mapped, not copied: truncating it while a view is alive
    makes a later read of the lost pages kill the process with SIGBUS (mmap semantics, as in
    llama.cpp); replace a model file by renaming a new one over it, never rewrite it in place.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = _check_path(path)
        # Only a regular file: a FIFO would block open() (and read()) forever, a device or a
        # directory is no GGUF. stat first for the clear message; open with O_NONBLOCK and
        # fstat again so a path swapped for a FIFO in between cannot block either.
        try:
            _require_regular(self.path, os.stat(self.path))
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError as e:
            raise GGUFError(f"{self.path}: cannot open: {e.strerror or e}") from e
        try:
            st = os.fstat(fd)
            _require_regular(self.path, st)
            size = st.st_size
            if size == 0:
                raise GGUFError(f"{self.path}: empty file; expected a GGUF header (magic 'GGUF')")
            try:
                mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as e:
                raise GGUFError(f"{self.path}: cannot memory-map ({size} bytes): {e}") from e
        finally:
            os.close(fd)
        self._mm = mm
        self.file_size = len(mm)
        self._u8 = np.frombuffer(mm, dtype=np.uint8)  # read-only: the map is ACCESS_READ
        try:
            self._parse()
        except GGUFError:
            raise
        except (MemoryError, RecursionError, OverflowError, ValueError, struct.error, IndexError) as e:
            # Defence in depth: a bug here must still surface as a typed, located error.
            raise GGUFError(f"{self.path}: malformed GGUF ({type(e).__name__}: {e})") from e

    # -- parsing ---------------------------------------------------------------------------

    def _parse(self) -> None:
        c = _Cursor(self._mm, self.file_size, self.path)
        c.need(4, "the magic 'GGUF'")
        magic = self._mm[0:4]
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: bad magic at byte offset 0: expected b'GGUF', found {magic!r}")
        c.pos = 4
        ver = c.u32("the version")
        if ver not in (2, 3):
            hint = ""
            if ver != 0 and (ver & 0xFFFF) == 0:
                hint = " (a byte-swapped version: big-endian files are not supported)"
            elif ver == 1:
                hint = " (GGUFv1 is no longer supported by ggml)"
            raise GGUFError(f"{self.path}: unsupported GGUF version at byte offset 4: expected 2 or 3, found {ver}{hint}")
        self.version = ver
        n_tensors = c.i64("the tensor count")
        n_kv = c.i64("the key/value count")
        # Smallest possible records: KV = key len 8 + 1 byte + type 4 + value 1; tensor info =
        # name len 8 + 1 byte + n_dims 4 + type 4 + offset 8.
        for n, what, rec in ((n_tensors, "tensor count", 25), (n_kv, "key/value count", 14)):
            if n < 0 or n * rec > self.file_size - c.pos:
                raise GGUFError(
                    f"{self.path}: absurd {what} {n} in the header: expected 0 <= n and "
                    f"n * {rec} bytes <= the {self.file_size - c.pos} bytes after the header"
                )

        self.kv: dict[str, Any] = {}
        self.kv_types: dict[str, tuple[int, ...]] = {}
        for i in range(n_kv):
            at = c.pos
            kb = c.string_bytes(f"key #{i}")
            key = _dec(kb)
            if not kb:
                raise GGUFError(f"{self.path}: key #{i} at byte offset {at} is empty; expected a non-empty name")
            if key in self.kv:
                raise GGUFError(f"{self.path}: duplicate key {key!r} (key #{i} at byte offset {at})")
            vt_at = c.pos
            vt = c.i32(f"the value type of key {key!r}")
            if vt == _T_ARRAY:
                val, types = self._read_array(c, key, 0)
            elif vt in _SCALAR or vt == _T_STRING:
                val, types = self._read_scalar(c, vt, key), (vt,)
            else:
                raise GGUFError(
                    f"{self.path}: key {key!r} has unknown value type {vt} at byte offset {vt_at}; "
                    f"expected one of {sorted(GGUF_VALUE_TYPES.values())}"
                )
            self.kv[key] = val
            self.kv_types[key] = types

        align = GGUF_DEFAULT_ALIGNMENT
        if "general.alignment" in self.kv:
            if self.kv_types["general.alignment"] != (_T_UINT32,):
                raise GGUFError(
                    f"{self.path}: key 'general.alignment' must be UINT32, found "
                    f"{self._type_str('general.alignment')}"
                )
            align = self.kv["general.alignment"]
            if align == 0 or align & (align - 1):
                raise GGUFError(f"{self.path}: key 'general.alignment' = {align}; expected a non-zero power of two")
        self.alignment = align

        infos: list[tuple[str, int, tuple[int, ...], int, int, int]] = []
        names: set[str] = set()
        for i in range(n_tensors):
            at = c.pos
            nb = c.string_bytes(f"the name of tensor #{i}")
            name = _dec(nb)
            if len(nb) >= GGML_MAX_NAME:
                raise GGUFError(
                    f"{self.path}: tensor #{i} name at byte offset {at} is {len(nb)} bytes; "
                    f"expected fewer than {GGML_MAX_NAME} (ggml's GGML_MAX_NAME)"
                )
            if name in names:
                raise GGUFError(f"{self.path}: duplicate tensor name {name!r} (tensor #{i} at byte offset {at})")
            names.add(name)
            nd_at = c.pos
            n_dims = c.u32(f"n_dims of tensor {name!r}")
            if n_dims > GGML_MAX_DIMS:
                raise GGUFError(
                    f"{self.path}: tensor {name!r} has n_dims {n_dims} at byte offset {nd_at}; expected <= {GGML_MAX_DIMS}"
                )
            dims: list[int] = []
            for j in range(n_dims):
                d_at = c.pos
                d = c.i64(f"ne[{j}] of tensor {name!r}")
                if d < 0:
                    raise GGUFError(f"{self.path}: tensor {name!r} ne[{j}] = {d} at byte offset {d_at}; expected >= 0")
                dims.append(d)
            ne = tuple(dims)
            nel = 1
            for d in ne:
                nel *= d
                if nel > _INT64_MAX:
                    raise GGUFError(f"{self.path}: tensor {name!r} shape {ne} has more than INT64_MAX elements")
            t_at = c.pos
            t = c.i32(f"the ggml type of tensor {name!r}")
            if t not in GGML_TYPES:
                raise GGUFError(
                    f"{self.path}: tensor {name!r} has unknown ggml type {t} at byte offset {t_at}; "
                    f"expected one of {sorted(GGML_TYPES)}"
                )
            tname, blck, tsize = GGML_TYPES[t]
            ne0 = ne[0] if ne else 1
            if ne0 % blck:
                raise GGUFError(
                    f"{self.path}: tensor {name!r} of type {tname} has ne[0] = {ne0} elements per row; "
                    f"expected a multiple of the block size {blck}"
                )
            nbytes = nel // blck * tsize
            if nbytes > _UINT64_MAX - (align - 1):
                raise GGUFError(f"{self.path}: tensor {name!r} is {nbytes} bytes, which overflows a 64-bit size")
            off = c.u64(f"the data offset of tensor {name!r}")
            infos.append((name, n_dims, ne, t, off, nbytes))

        if n_tensors > 0:
            start = -(-c.pos // align) * align
            if start > self.file_size:
                raise GGUFError(
                    f"{self.path}: truncated: the data section should start at byte offset {start} "
                    f"(tensor infos end at {c.pos}, alignment {align}), but the file is {self.file_size} bytes"
                )
        else:
            start = c.pos
        self.data_offset = start

        # ggml packs tensors in order: offset[i] == sum of the padded sizes before it.
        self.tensors: dict[str, TensorInfo] = {}
        expect = 0
        for name, n_dims, ne, t, off, nbytes in infos:
            if off != expect:
                raise GGUFError(
                    f"{self.path}: tensor {name!r} has data offset {off}; expected {expect} "
                    f"(ggml requires tensors packed in order, each padded to {align} bytes)"
                )
            end = start + off + nbytes
            if end > self.file_size:
                raise GGUFError(
                    f"{self.path}: tensor {name!r} data [{start + off}, {end}) runs past the end of the "
                    f"file ({self.file_size} bytes): truncated file or bad offset/shape"
                )
            self.tensors[name] = TensorInfo(name, n_dims, ne, t, off, start + off, nbytes, self)
            expect = off + (-(-nbytes // align) * align)

    def _read_scalar(self, c: _Cursor, vt: int, key: str):
        if vt == _T_STRING:
            return _dec(c.string_bytes(f"the string value of key {key!r}"))
        fmt, dt = _SCALAR[vt]
        v = c.unpack(fmt, dt.itemsize, f"the {_VT_NAME[vt]} value of key {key!r}")
        if vt == _T_BOOL:
            return v != 0  # ggml: int8 read, != 0
        return float(v) if vt in (6, 12) else int(v)

    def _read_array(self, c: _Cursor, key: str, depth: int):
        at = c.pos
        et = c.i32(f"the element type of array {key!r}")
        n = c.u64(f"the element count of array {key!r}")
        if depth >= _MAX_ARRAY_NESTING:
            raise GGUFError(f"{self.path}: array {key!r} nests deeper than {_MAX_ARRAY_NESTING} levels at byte offset {at}")
        if et in _SCALAR:
            elem = _SCALAR[et][1].itemsize
        elif et == _T_STRING:
            elem = 8
        elif et == _T_ARRAY:
            elem = 12
        else:
            raise GGUFError(
                f"{self.path}: array {key!r} has unknown element type {et} at byte offset {at}; "
                f"expected one of {sorted(GGUF_VALUE_TYPES.values())}"
            )
        if n > GGUF_MAX_ARRAY_ELEMENTS or n * elem > c.size - c.pos:
            raise GGUFError(
                f"{self.path}: array {key!r} at byte offset {at} claims {n} elements of "
                f"{_VT_NAME[et]}; only {c.size - c.pos} bytes remain (limit {GGUF_MAX_ARRAY_ELEMENTS} elements)"
            )
        if et in _SCALAR:
            dt = _SCALAR[et][1]
            view = self._u8[c.pos : c.pos + n * dt.itemsize].view(dt)
            c.pos += n * dt.itemsize
            return (view != 0 if et == _T_BOOL else view), (_T_ARRAY, et)
        if et == _T_STRING:
            # Hot loop (150k+ tokens): record where each string starts, check bounds once per item.
            # Memory grows with what was actually parsed (8 bytes per string), never with the
            # claimed count, so a lying count in a large file cannot reserve gigabytes up front.
            mm, size, pos = c.mm, c.size, c.pos
            unpack = _U64.unpack_from
            end_of = array("q")
            app = end_of.append
            i = 0
            try:
                for i in range(n):
                    pos += 8 + unpack(mm, pos)[0]
                    if pos > size:
                        break
                    app(pos)
            except struct.error:
                c.pos = pos
                c.need(8, f"the length of string #{i} of array {key!r}")
            if len(end_of) != n:
                raise GGUFError(
                    f"{self.path}: string #{i} of array {key!r} runs past the end of the file "
                    f"({self.file_size} bytes): truncated or absurd length"
                )
            ends = np.frombuffer(end_of, dtype=np.int64) if n else np.zeros(0, np.int64)
            begins = np.empty_like(ends)
            if n:
                begins[0] = c.pos + 8
                begins[1:] = ends[:-1] + 8
            lengths = ends - begins
            if n and int(lengths.max()) > GGUF_MAX_STRING_LENGTH:
                j = int(lengths.argmax())
                raise GGUFError(f"{self.path}: string #{j} of array {key!r} is {int(lengths[j])} bytes; expected at most {GGUF_MAX_STRING_LENGTH}")
            c.pos = pos
            return StringArray(self._mm, begins, lengths), (_T_ARRAY, et)
        # ARRAY of ARRAY: each element is (element type, count, items) with no type tag of its own.
        items = []
        for i in range(n):
            v, _ = self._read_array(c, f"{key}[{i}]", depth + 1)
            items.append(v)
        return items, (_T_ARRAY, et)

    # -- helpers ---------------------------------------------------------------------------

    def _type_str(self, key: str) -> str:
        t = self.kv_types[key]
        return "ARRAY of " + "/".join(_VT_NAME.get(x, str(x)) for x in t[1:]) if t[0] == _T_ARRAY else _VT_NAME[t[0]]

    def get_typed(self, key: str, vtype: int, *, required: bool = False, why: str = ""):
        """``kv[key]`` if present with scalar GGUF type ``vtype`` (llama.cpp's strict get_key).

        Missing: None, or GGUFError when ``required``.  Present with another type: GGUFError.
        """
        if key not in self.kv:
            if required:
                raise GGUFError(f"{self.path}: missing key {key!r}; expected a {_VT_NAME[vtype]}{why}")
            return None
        if self.kv_types[key] != (vtype,):
            raise GGUFError(
                f"{self.path}: key {key!r} has type {self._type_str(key)}; expected {_VT_NAME[vtype]} "
                f"(llama.cpp rejects other types){why}"
            )
        return self.kv[key]

    def __repr__(self) -> str:
        return f"GGUFFile({self.path!r}, v{self.version}, {len(self.kv)} keys, {len(self.tensors)} tensors)"


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


class _KV:
    """Uniform typed access over a GGUFFile or a plain mapping (types then unknown)."""

    def __init__(self, kv: "GGUFFile | Mapping[str, Any]", types: Mapping[str, tuple] | None, where: str):
        self.kv: Mapping[str, Any]
        self.types: Mapping[str, tuple] | None
        if isinstance(kv, GGUFFile):
            self.kv, self.types, self.where = kv.kv, kv.kv_types, kv.path
        else:
            self.kv, self.types, self.where = kv, types, where

    def get(self, key: str, vtype: int):
        if key not in self.kv:
            return None
        v = self.kv[key]
        if self.types is not None:
            t = self.types.get(key)
            if t != (vtype,):
                tn = "?" if t is None else "/".join(_VT_NAME.get(x, str(x)) for x in t)
                raise GGUFError(f"{self.where}: key {key!r} has type {tn}; expected {_VT_NAME[vtype]} (llama.cpp rejects other types)")
        return v

    def get_array(self, key: str, etypes: tuple[int, ...]):
        if key not in self.kv:
            return None
        v = self.kv[key]
        if self.types is not None:
            t = self.types.get(key)
            if t is None or len(t) != 2 or t[0] != _T_ARRAY or t[1] not in etypes:
                want = "/".join(_VT_NAME[e] for e in etypes)
                raise GGUFError(f"{self.where}: key {key!r} must be an ARRAY of {want} (llama.cpp: invalid gguf type)")
        return v


def _c_str(b: bytes) -> bytes:
    """llama.cpp builds std::string from gguf's c_str(): text stops at the first NUL byte."""
    i = b.find(b"\0")
    return b if i < 0 else b[:i]


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


# --------------------------------------------------------------------------------------------
# The head spec
# --------------------------------------------------------------------------------------------


@dataclass
class HeadSpec:
    """Everything lmtail's head needs, read from one GGUF file.

    weight: uint8 ``(rows, cols // 256 * 176)``, a read-only zero-copy view of the file map (Q5_K
        blocks as stored).  weight_offset is its absolute byte offset in the file.
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
    ``token_embd.weight``; it must be Q5_K, 2-D ``ne = (cols, rows)`` with ``cols % 256 == 0``.
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
    if ti.type != Q5_K:
        raise GGUFError(f"{f.path}: {name} has type {ti.type_name} ({ti.type}); lmtail supports Q5_K ({Q5_K})")
    cols, rows = ti.ne
    if cols == 0 or rows == 0 or cols % 256:
        raise GGUFError(f"{f.path}: tensor {name!r} has shape (cols={cols}, rows={rows}); expected cols a positive multiple of 256 and rows > 0")
    weight = ti.data
    assert weight.shape == (rows, cols // 256 * 176) and not weight.flags.writeable

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
        eog_ids=eog, n_vocab=n_vocab, norm_kind=nk, head_tensor=name,
    )
