"""Argument checks shared by ops and Head. Nothing is silently converted or accepted."""

from __future__ import annotations

import numbers

import numpy as np

from .errors import DTypeError, LmtailError, ParameterError, ShapeError, UnsupportedError



# DLPack device types (dlpack.h DLDeviceType) by number, for error messages.
_DL_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi", 10: "rocm",
               11: "rocm_host", 13: "cuda_managed", 14: "oneapi"}
_DL_HOST = (1, 3, 11)  # memory the CPU reads directly (plain, CUDA-pinned, ROCm-pinned host memory)


def dlpack_device(x) -> tuple[str, int]:
    """(device name, device id) of a ``__dlpack__`` producer, e.g. ("cuda", 0).

    The hook for device backends: a backend that reads device memory (cuda) checks this before
    :func:`host_array` and takes a CUDA tensor itself; every host path refuses it there."""
    dev = x.__dlpack_device__()
    kind, idx = int(dev[0]), int(dev[1])
    return _DL_DEVICES.get(kind, f"dlpack device type {kind}"), idx


def is_cuda_tensor(x) -> bool:
    """True for an object in CUDA device memory: ``__cuda_array_interface__``, or ``__dlpack__``
    whose device is CUDA (or CUDA managed) memory. numpy arrays and host tensors are not."""
    if isinstance(x, np.ndarray):
        return False
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        try:
            return int(x.__dlpack_device__()[0]) in (2, 13)
        except Exception:  # noqa: BLE001 - a broken producer is reported by the path that reads it
            return False
    return False


def stream_arg(stream) -> int:
    """A CUDA stream argument as its cudaStream_t handle: None or 0 (the legacy default stream),
    an int handle, or an object carrying one (PyTorch's ``cuda_stream``, CuPy's ``ptr``)."""
    if stream is None:
        return 0
    for attr in ("cuda_stream", "ptr"):
        if not isinstance(stream, numbers.Integral) and hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    if isinstance(stream, bool) or not isinstance(stream, numbers.Integral) or int(stream) < 0:
        raise ParameterError(f"stream: expected None, a cudaStream_t handle (int) or a stream object with "
                             f"cuda_stream / ptr; found {stream!r}")
    return int(stream)


class CudaTensor:
    """A validated CUDA tensor argument: ``ptr`` to C-contiguous float32 data of ``shape``;
    ``keep`` holds the producer's DLPack capsule while lmtail uses the pointer."""

    __slots__ = ("ptr", "shape", "keep", "readonly")

    def __init__(self, ptr: int, shape: tuple, keep, readonly: bool) -> None:
        self.ptr, self.shape, self.keep, self.readonly = ptr, shape, keep, readonly


def cuda_tensor(x, name: str, impl, stream: int = 0, ndims=(1, 2), writable: bool = False,
                dtype: str = "float32") -> CudaTensor:
    """Check a CUDA tensor (``__cuda_array_interface__`` or ``__dlpack__``) as strictly as a host
    array: float32 (a float64 tensor is a DTypeError, as on the host), ``ndims`` dimensions,
    non-empty, C-contiguous (a strided view is a ShapeError: lmtail never copies it silently), on
    the current CUDA device (another device: UnsupportedError). Its producer's work is ordered
    before ``stream``."""
    try:
        info = impl.tensor_info(x, stream)
    except LmtailError:
        raise  # the core's own typed refusal (e.g. a pointer that is not device memory)
    except (AttributeError, KeyError, TypeError, ValueError, RuntimeError) as e:
        raise DTypeError(f"{name}: the {type(x).__name__} could not be read as a CUDA tensor ({e})") from None
    names = {"<f4": "float32", "<f8": "float64", "<f2": "float16", "<i4": "int32", "<u4": "uint32", "|u1": "uint8",
             "<u1": "uint8", "|i1": "int8", "<i1": "int8", "<i8": "int64", "<u8": "uint64", "bfloat16": "bfloat16"}
    found = names.get(info["typestr"].replace("=", "<"), info["typestr"])
    if found != dtype:
        raise DTypeError(f"{name}: expected a {dtype} CUDA tensor; found {found} (convert explicitly)")
    itemsize = 4
    shape = tuple(int(d) for d in info["shape"])
    if len(shape) not in ndims:
        raise ShapeError(f"{name}: expected {' or '.join(f'{d}-D' for d in ndims)}; found shape {shape}")
    if 0 in shape:
        raise ShapeError(f"{name}: expected a non-empty tensor; found shape {shape}")
    strides = info["strides"]
    if strides is not None:
        want, acc = [], itemsize
        for d in reversed(shape):
            want.append(acc)
            acc *= d
        want = tuple(reversed(want))
        if any(s != w for s, w, d in zip(strides, want, shape) if d > 1):
            raise ShapeError(f"{name}: expected a C-contiguous CUDA tensor; found strides {tuple(strides)} (bytes) for "
                             f"shape {shape} (call .contiguous() / cupy.ascontiguousarray first)")
    dev, cur = int(info["device"]), int(impl.current_device())
    if dev != cur:
        raise UnsupportedError(f"{name}: a tensor on cuda:{dev}; this backend runs on cuda:{cur} (the current device)")
    if writable and info["readonly"]:
        raise ParameterError(f"{name}: the CUDA tensor is read-only")
    return CudaTensor(int(info["ptr"]), shape, info["keep"], bool(info["readonly"]))


def host_array(x, name: str) -> np.ndarray:
    """A host array object as a numpy array without a copy: ``__dlpack__`` producers in CPU
    memory (np.from_dlpack; a read-only producer stays read-only) and ``__array_interface__``
    objects. A tensor in device memory is an UnsupportedError naming its device (this path reads
    host memory); anything else (lists, scalars) a DTypeError."""
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        dev, idx = dlpack_device(x)
        if int(x.__dlpack_device__()[0]) not in _DL_HOST:
            raise UnsupportedError(f"{name}: a {type(x).__name__} on device {dev}:{idx}; this path reads host memory "
                                   f"(move it to the CPU, or use a backend that takes {dev} tensors)")
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            raise DTypeError(f"{name}: the {type(x).__name__} could not be read through DLPack ({e})") from None
    if hasattr(x, "__array_interface__"):
        try:
            a = np.asarray(x)
        except (TypeError, ValueError) as e:
            raise DTypeError(f"{name}: the {type(x).__name__}'s __array_interface__ is not readable ({e})") from None
        if a.dtype == np.object_:
            raise DTypeError(f"{name}: the {type(x).__name__}'s __array_interface__ describes no numeric array")
        return a
    raise DTypeError(f"{name}: expected a numpy float32 array (or a CPU __dlpack__ / __array_interface__ object); "
                     f"found {type(x).__name__}")


def maybe_host_array(x, name: str):
    """``x`` itself unless it is a ``__dlpack__`` / ``__array_interface__`` object (not an
    ndarray), which becomes a numpy view (:func:`host_array`); lets a caller keep its own error
    for everything else."""
    if isinstance(x, np.ndarray) or not (hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__")):
        return x
    return host_array(x, name)


def float32_array(x, name: str, ndims=(1, 2)) -> np.ndarray:
    """``x`` as a C-contiguous, aligned float32 array of ``ndims`` dimensions, without converting
    values: any float32 view is accepted (a ctypes buffer such as llama-cpp-python's logits,
    ``np.frombuffer``, a memoryview, a read-only or memory-mapped array, a CPU ``__dlpack__`` or
    ``__array_interface__`` object: :func:`host_array`); a copy is made only to
    make it contiguous or aligned. A byte-swapped float32 is refused (convert it explicitly)."""
    if not isinstance(x, np.ndarray):
        x = host_array(x, name)
    dt = x.dtype
    if dt.kind == "f" and dt.itemsize == 4 and dt.fields is None and not dt.isnative:
        raise DTypeError(f"{name}: expected float32 in the machine's byte order; found byte-swapped {dt.str!r} "
                         f"(convert with .astype(np.float32))")
    if dt != np.float32 or dt.fields is not None:
        raise DTypeError(f"{name}: expected dtype float32; found {dt} (convert explicitly)")
    if x.ndim not in ndims:
        raise ShapeError(f"{name}: expected {' or '.join(f'{d}-D' for d in ndims)}; found shape {x.shape}")
    if x.size == 0:
        raise ShapeError(f"{name}: expected a non-empty array; found shape {x.shape}")
    if not (x.flags.c_contiguous and x.flags.aligned):
        x = np.require(x, requirements=("C", "A"))
    return x


# The float-array forms of the float weight types: (array dtype, ggml type) pairs whose element
# is one weight, stored exactly as GGUF stores it (so a byte view is the GGUF row).
FLOAT_WEIGHT_VIEWS = {"F16": np.dtype(np.float16), "BF16": np.dtype(np.uint16), "F32": np.dtype(np.float32)}


def weight_array(w, t, name: str = "weight") -> tuple[np.ndarray, int, int]:
    """(w as uint8 (rows, row_bytes), rows, cols) for a matrix of weight type ``t`` (a
    ``_backend.TypeInfo``), never copied.

    Accepted: raw GGUF bytes, uint8 (rows, row_bytes) with row_bytes a whole number of blocks;
    for F16 / BF16 / F32 also float16 / uint16 / float32 (rows, cols) in the machine's byte order,
    viewed as their bytes. Rows must be contiguous bytes (row stride >= row bytes, e.g. a slice of
    a wider matrix or a memory map): anything else is a DTypeError (copy it explicitly; a silent
    copy of a head costs its whole size)."""
    if not isinstance(w, np.ndarray):
        raise DTypeError(f"{name}: expected a numpy uint8 array of {t.name} blocks; found {type(w).__name__}")
    view = FLOAT_WEIGHT_VIEWS.get(t.name)
    dt = w.dtype
    if dt.fields is not None or (dt != np.uint8 and (view is None or dt != view)):
        forms = "uint8 (raw GGUF bytes)" + (f" or {view} (rows, cols)" if view is not None else "")
        raise DTypeError(f"{name}: expected dtype {forms} for {t.name}; found {dt}")
    if dt.itemsize > 1 and not dt.isnative:
        raise DTypeError(f"{name}: expected {dt.name} in the machine's byte order; found byte-swapped {dt.str!r}")
    if w.ndim != 2:
        raise ShapeError(f"{name}: expected 2-D (rows, {'row_bytes' if dt.itemsize == 1 else 'cols'}); found shape {w.shape}")
    rows, n = w.shape
    isz = dt.itemsize
    if rows < 1 or n < 1:
        raise ShapeError(f"{name}: expected a non-empty matrix; found shape {w.shape}")
    if rows >= 2**31:
        raise ShapeError(f"{name}: at most 2^31-1 rows (vocabulary ids fit in 31 bits); found {rows}")
    if not (w.strides[1] == isz and (rows == 1 or w.strides[0] >= n * isz)):
        raise DTypeError(f"{name}: rows must be contiguous in memory (strides {w.strides} for shape {w.shape}); pass "
                         f"np.ascontiguousarray({name}) to copy it")
    if isz > 1:
        cols = n
        w = w.view(np.uint8)  # (rows, cols * itemsize): the same memory, GGUF's bytes
        if t.block_elems > 1 and cols % t.block_elems:  # pragma: no cover - float types have blocks of 1
            raise ShapeError(f"{name}: cols must be a multiple of {t.name}'s block of {t.block_elems}; found {cols}")
    else:
        if n % t.block_bytes:
            raise ShapeError(f"{name}: row bytes must be a positive multiple of {t.block_bytes} (one {t.name} block per "
                             f"{t.block_elems} weights); found shape {w.shape}")
        cols = n // t.block_bytes * t.block_elems
        if dt is not np.dtype(np.uint8):
            # An equal dtype instance that is not numpy's own (a ctypes-backed buffer): the same
            # bytes under the canonical dtype, still without a copy.
            w = w.view(np.uint8)
    return w, rows, cols


def block_cols(cols: int, t, name: str) -> None:
    """ShapeError unless ``cols`` is a positive multiple of ``t``'s block."""
    if cols < 1 or cols % t.block_elems:
        raise ShapeError(f"{name}: cols must be a positive multiple of {t.name}'s block of {t.block_elems} weights; "
                         f"found {cols}")


# Upper bound of every ``threads=`` argument (the C++ core's lmt::kMaxThreads).
MAX_THREADS = 1024


def threads_arg(threads) -> int:
    """None -> 0 (the core's default: LMTAIL_NUM_THREADS or the usable CPUs); else 1..MAX_THREADS."""
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or not 1 <= threads <= MAX_THREADS:
        raise ParameterError(f"threads: expected None or an integer in [1, {MAX_THREADS}]; found {threads!r}")
    return int(threads)


def finite_float(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ParameterError(f"{name}: expected a real number; found {v!r}")
    f = float(v)
    if not np.isfinite(f):
        raise ParameterError(f"{name}: expected a finite number; found {f}")
    return f


def token_ids(ids, n: int, name: str) -> np.ndarray:
    """Validate a collection of token ids against [0, n); returns sorted unique uint32."""
    if ids is None:
        return np.zeros(0, dtype=np.uint32)
    if isinstance(ids, (numbers.Number, str, bytes, np.generic)):
        raise ParameterError(f"{name}: expected a collection of integer token ids (e.g. a list or tuple); "
                             f"found {type(ids).__name__} {ids!r} (wrap a single id in a list)")
    if isinstance(ids, np.ndarray):
        arr = ids
    else:
        try:
            arr = np.asarray(list(ids))
        except TypeError:
            raise ParameterError(f"{name}: expected a collection of integer token ids; found {type(ids).__name__}") from None
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint32)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise ParameterError(f"{name}: expected a 1-D collection of integer token ids; found {arr.dtype} {arr.shape}")
    bad = (arr < 0) | (arr >= n)
    if bad.any():
        raise ParameterError(f"{name}: token id {int(arr[bad][0])} out of range [0, {n})")
    return np.unique(arr.astype(np.uint32))
