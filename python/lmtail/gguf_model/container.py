"""The GGUF container: header, key/values, tensor infos, the memory map.

Everything here reads a memory map of an untrusted file.  Every structural problem (truncation,
bad magic/version, absurd counts or lengths, unknown value or tensor types, overlapping or
out-of-file tensor data) raises :class:`lmtail.errors.GGUFError` whose message says what was
expected, what was found and where (byte offset, key or tensor name).  Allocation is bounded by
the file size: every count and length is checked against the bytes that remain before anything
is allocated; numeric arrays and tensor data are zero-copy read-only views of the map.

Container rules mirror llama.cpp as vendored in llama-cpp-python 0.3.36: ``ggml/src/gguf.cpp``
``gguf_init_from_reader`` (version 2/3, int64 counts, ``general.alignment`` a UINT32 power of
two, tensor names < 64 bytes, ``ne[0]`` a multiple of the block size, tensor offsets packed in
order) and ``src/llama-model-loader.cpp`` (tensor data inside the file, strict key types: a key
read as ``float`` must be FLOAT32, a token id UINT32).  Nothing here knows about architectures
or the LM head.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from ..errors import GGUFError, ParameterError

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

