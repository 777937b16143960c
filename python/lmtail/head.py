"""The LM-head tail as one object: final norm -> head matvec (any weight type) -> logit scale -> soft cap -> selection."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Optional

import numpy as np

from . import _backend, _core, _ggml_metal
from ._validate import (CudaTensor, cuda_tensor, finite_float, float32_array, is_cuda_tensor, stream_arg, threads_arg,
                        token_ids, weight_array)
from .errors import DTypeError, NonFiniteLogitsError, ParameterError, ResourceError, ShapeError, UnsupportedError
from .ops import check_greedy

# The fail-closed finite checks of the Python paths (metal-emu, cuda) scan host memory (the
# hidden rows, and route A's staging rows after the read-back), so those backends use the CPU's
# threaded SIMD scan rather than one of their own. The cpu backend runs them in lmt::Head.
_all_finite = _core.all_finite

# max_tokens bound: the staging rows are int-indexed in the device code.
_MAX_TOKENS = 2**31 - 1


def _physical_memory() -> int:
    """Bytes of physical memory (a huge number where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 1 << 62


def _empty(shape, dtype) -> np.ndarray:
    """np.empty for a result array; running out of memory is a typed ResourceError."""
    try:
        return np.empty(shape, dtype=dtype)
    except MemoryError as e:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        raise ResourceError(f"Head: cannot allocate a {shape} {np.dtype(dtype)} result ({nbytes} bytes): {e}") from None


def _first_nonfinite(x: np.ndarray) -> tuple:
    idx = np.argwhere(~np.isfinite(x))[0]
    return tuple(int(i) for i in idx)


def _norm_overflow(h2: np.ndarray) -> Optional[str]:
    """Which finite hidden row's RMSNorm overflows float32 (mean of the float squares), if any.

    Only called after a device's latch fired, to say why: the device kernels poison such a row
    with NaN (their own fail-closed mark), and this names the cause on the host."""
    with np.errstate(over="ignore", invalid="ignore"):
        sq = np.square(h2, dtype=np.float32)
        mean = (sq.astype(np.float64).sum(axis=1) / h2.shape[1]).astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(mean))
    if bad.size == 0:
        return None
    t = int(bad[0])
    return (f"rms_norm: row {t}: the mean of the squares overflowed float32 (max |x| = "
            f"{float(np.max(np.abs(h2[t]))):g}); the row would normalise to all zeros")


class _CallState:
    """What one thread's calls on one Head own: staging rows (the capped logits of its last
    compute, which ``row(t)`` reads), the normalised hidden rows, and its last timings/bytes.

    A plain object, so a :class:`lmtail.ShardedHead` can hold several per shard and caller
    (compute into one, publish by swapping) and hand one to a worker thread (``Head._using``)."""

    def __init__(self) -> None:
        self.staging: Optional[np.ndarray] = None
        self.normed: Optional[np.ndarray] = None
        self.computed_T = 0
        self.device_gen = -1
        self.timings: dict = {}
        self.last_bytes = 0


class _ThreadState(_CallState, threading.local):
    """The calling thread's own _CallState (one per thread and Head)."""


class Head:
    """An LM head: ``logits = softcap(scale * (W @ rms_norm(hidden) * gamma))``.

    ``weight`` is the head matrix of ggml type ``dtype`` (default "Q5_K"; any type
    ``lmtail.capabilities()[backend]["head"]["dtypes"]`` lists, by name in any case or id): its
    GGUF bytes as uint8 (rows, row_bytes), or for F16 / BF16 / F32 a float16 / uint16 / float32
    (rows, cols) array (see :func:`lmtail.ops.matvec`). It is used without a copy (its rows must
    be contiguous bytes, e.g. a memory-mapped GGUF tensor): keep it alive and unchanged.
    ``norm`` is the final RMSNorm's gamma (cols,), or None when the hidden state arrives already
    normalised (no norm is applied). ``norm_kind="layer"`` applies a LayerNorm without bias
    instead (command-r, cohere2: llama.cpp's LLM_NORM), with ``norm`` as its optional weight.
    ``logit_scale`` must be finite and non-zero; ``softcap`` finite and >= 0, where 0 disables the
    cap. ``precision`` selects the head matvec's activation precision (per type and backend, see
    :func:`lmtail.capabilities`; for Q5_K on the CPU "i24" (its default, f32-grade), "f32" or
    "i16"; None: the type's default there, normwise error <= 1e-6), see :func:`lmtail.ops.matvec`.
    ``precision="ggml"`` publishes llama.cpp's full-logit bytes (ggml's mul_mat on the path
    llama.cpp takes for the type and T, then the same scale and four cap nodes); like llama.cpp's,
    they are not batch invariant (a verify batch can differ from one-by-one decoding).
    On ``backend="metal"`` / ``"metal-emu"``, ``precision="ggml"`` needs ``ggml_metal=PATH``
    (llama.cpp's library, see :func:`lmtail.ops.matvec`): the head matvec, the scale and the four
    cap nodes are then llama.cpp's own Metal kernels, run with lmtail's RMSNorm as one graph
    (one command buffer, a resource barrier between dependent nodes); T <= 8 (llama.cpp's
    ``kernel_mul_mv`` / ``kernel_mul_mv_ext`` as it selects them; where it would run its simdgroup
    matmul, T > 8, :class:`lmtail.UnsupportedError`). ``ggml_metal``
    without ``precision="ggml"``, or on another backend, raises :class:`lmtail.ParameterError`.
    A type, precision or norm the backend does not run raises :class:`lmtail.UnsupportedError`
    naming the backends that run it. ``threads``: None (the core's default) or 1..1024.
    ``max_tokens``: rows of staging each thread starts with (grown on demand).

    On ``backend="cpu"`` the tail is the C++ ``lmt::Head`` (``lmtail/head.hpp``): one
    implementation of the fail-closed rules for Python and C++ users.

    Failure semantics (fail closed): a non-finite hidden value, a hidden row whose norm overflows
    float32 (its mean of squares or variance is infinite: ggml would silently output zeros), a
    non-finite pre-cap or capped logit raises :class:`lmtail.NonFiniteLogitsError`; nothing the
    caller holds is modified then (``out=`` buffers included). Running out of memory while growing
    buffers raises :class:`lmtail.ResourceError` and leaves the Head usable.

    Threads: one ``Head`` may be shared by several threads. Nothing a call returns is shared:
    ``logits`` returns a fresh array (or fills the caller's ``out=``), ``greedy``/``topk`` fresh
    arrays, and ``row(t)`` reads the *calling thread's* own last compute. On the CPU, calls run
    concurrently (their parallel regions take turns in the core's thread pool); the other
    backends serialise their calls.
    """

    def __init__(
        self,
        weight: np.ndarray,
        norm: Optional[np.ndarray] = None,
        *,
        logit_scale: float = 1.0,
        softcap: float = 0.0,
        eps: float = 1e-5,
        backend: str = "cpu",
        threads: Optional[int] = None,
        eog_ids=(),
        max_tokens: int = 8,
        norm_kind: str = "rms",
        precision: Optional[str] = None,
        dtype="Q5_K",
        ggml_metal: Optional[str] = None,
    ) -> None:
        self._impl = _backend.get(backend)
        self._backend = backend
        self._route = _backend.row(backend)
        self._type = _backend.weight_type(dtype, backend, "Head")
        # precision="ggml" on the Metal backends: llama.cpp's own kernels from the user's library
        # (compiled/loaded here, so a bad library fails at construction, typed).
        self._ggml_lib: Optional[str] = None
        if ggml_metal is not None:
            if precision != "ggml" or backend not in _ggml_metal.BACKENDS:
                raise ParameterError(f"ggml_metal= names llama.cpp's library for precision='ggml' on backend 'metal' "
                                     f"or 'metal-emu'; found precision={precision!r} on backend {backend!r}")
            self._ggml_lib = _ggml_metal.library_path(backend, self._impl, ggml_metal)
            self._precision = "ggml"
        else:
            self._precision = _backend.precision(precision, self._type, backend)
        self._weight, self._rows, self._cols = weight_array(weight, self._type, "weight")
        if norm is not None:
            norm = float32_array(norm, "norm", ndims=(1,))
            if norm.shape[0] != self._cols:
                raise ShapeError(f"norm: expected length {self._cols} (the head's cols); found {norm.shape[0]}")
            if not np.isfinite(norm).all():
                raise ParameterError(f"norm: gamma must be finite; found {norm[~np.isfinite(norm)][0]}")
        if not isinstance(norm_kind, str) or norm_kind not in ("rms", "layer"):
            raise ParameterError(f"norm_kind: expected 'rms' or 'layer'; found {norm_kind!r}")
        if norm_kind not in self._route.head_norms:
            runs = ", ".join(n for n, c in _backend.capabilities().items() if norm_kind in c["head"]["norms"])
            raise UnsupportedError(f"Head: norm_kind={norm_kind!r} is not run by the {backend} backend; backends that "
                                   f"run it: {runs}")
        self._norm = norm
        self._norm_kind = norm_kind
        self._scale = finite_float(logit_scale, "logit_scale")
        if self._scale == 0.0:
            raise ParameterError("logit_scale: expected a finite non-zero number; found 0 (every logit would be 0)")
        self._softcap = finite_float(softcap, "softcap")
        if self._softcap < 0.0:
            raise ParameterError(f"softcap: expected >= 0 (0 disables the cap); found {self._softcap}")
        self._eps = finite_float(eps, "eps")
        if self._eps < 0:
            raise ParameterError(f"eps: expected >= 0; found {self._eps}")
        self._threads = threads_arg(threads)
        self._eog = tuple(int(i) for i in token_ids(eog_ids, self._rows, "eog_ids"))
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or not 1 <= max_tokens <= _MAX_TOKENS:
            raise ParameterError(f"max_tokens: expected an integer in [1, {_MAX_TOKENS}]; found {max_tokens!r}")
        self._max_tokens = int(max_tokens)
        # The tail's norm as the kernels see it: "none" when no gamma and RMS (the old contract).
        self._norm_mode = "layer" if norm_kind == "layer" else ("rms" if norm is not None else "none")
        self._cpu = None
        self._device = None
        if self._route.head == "core":
            # precision=None passes "default": the C++ table's default for the type, reported back.
            self._cpu = _core.CpuHead(self._weight, self._cols, norm, self._norm_mode, self._eps, self._scale,
                                      self._softcap, "default" if precision is None else self._precision,
                                      self._threads, weight_type=self._type.id)
            self._precision = self._cpu.precision
        elif self._route.head == "device":
            # Weights uploaded once; the tail runs on the device and only the route's bytes come back.
            _backend.cuda_check_cols(self._type, self._cols)
            self._device = self._impl.DeviceHead(self._weight, self._cols, norm, 1 if norm is not None else 0,
                                                 self._eps, self._scale, self._softcap, self._max_tokens,
                                                 weight_type=self._type.id)
        # Serialises the non-CPU paths (the device head holds one set of device buffers).
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._device_gen = 0  # bumped by every device tail: row(t) checks its rows are still there
        self._tls = _ThreadState()
        # A worker thread computing for another thread's state (ShardedHead): set by _using.
        self._bound = threading.local()
        self._bytes_total = 0
        self.path: Optional[str] = None
        self._grow(self._tls, self._max_tokens)  # the constructing thread's buffers: fail here, typed

    # ---- construction from a GGUF file ----
    @classmethod
    def from_gguf(
        cls,
        path,
        backend: str = "cpu",
        *,
        logit_scale: Optional[float] = None,
        softcap: Optional[float] = None,
        threads: Optional[int] = None,
        precision: Optional[str] = None,
        ggml_metal: Optional[str] = None,
    ) -> "Head":
        """Load ``output.weight`` (or the tied ``token_embd.weight``; any weight type the backend
        runs, memory-mapped: ``head.dtype`` names it), ``output_norm.weight``, the RMS epsilon,
        the logit scale and soft cap (llama.cpp's per-architecture semantics) and the EOG ids.

        ``path`` is a str, bytes or os.PathLike (anything else: :class:`lmtail.ParameterError`).
        ``logit_scale`` / ``softcap`` override the file's values; ``precision`` and ``ggml_metal``
        are as in :class:`Head`. The head weights stay memory-
        mapped: the file must not be truncated or rewritten while the Head lives — a page the
        kernels read past the new end of file kills the process with SIGBUS (mmap semantics;
        no Python exception can be raised for it).
        """
        from .gguf_model import load_head_spec

        if not isinstance(path, (str, bytes, os.PathLike)):
            raise ParameterError(f"path: expected a str, bytes or os.PathLike; found {type(path).__name__}")
        spec = load_head_spec(os.fspath(path), logit_scale=logit_scale, softcap=softcap, allow_layer_norm=True)
        if spec.norm_kind not in ("rms", "layer", "none"):  # pragma: no cover - loader contract
            raise ParameterError(f"unsupported final norm {spec.norm_kind!r}")
        head = cls(
            spec.weight,
            spec.norm,
            logit_scale=spec.logit_scale,
            softcap=spec.softcap,
            eps=spec.eps,
            backend=backend,
            threads=threads,
            eog_ids=[i for i in spec.eog_ids if i < spec.rows],
            norm_kind="layer" if spec.norm_kind == "layer" else "rms",
            precision=precision,
            # The head spec names the tensor's ggml type; a spec without one is the Q5_K-only loader.
            dtype=spec.dtype,
            ggml_metal=ggml_metal,
        )
        head.path = os.fspath(path)
        head.spec = spec
        return head

    # ---- properties ----
    @property
    def rows(self) -> int:
        """Vocabulary size: rows of the head matrix, the length of each logits row."""
        return self._rows

    @property
    def cols(self) -> int:
        """Hidden size: the length of each hidden row (a multiple of the weight type's block)."""
        return self._cols

    @property
    def eog_ids(self) -> tuple:
        """End-of-generation token ids (sorted, unique; from the GGUF vocabulary or ``eog_ids=``),
        e.g. ``greedy(h, exclude=head.eog_ids)`` for ignore-eos."""
        return self._eog

    @property
    def dtype(self) -> str:
        """The head matrix's ggml weight type, canonical name ("Q5_K", "Q8_0", "BF16", ...)."""
        return self._type.name

    @property
    def weight_bytes(self) -> int:
        """Bytes of head weights every call streams: ``rows * row_bytes`` of the weight type."""
        return self._rows * self._type.row_bytes(self._cols)

    @property
    def backend(self) -> str:
        """The backend this head runs on ("cpu", "metal-emu", "metal", "cuda")."""
        return self._backend

    @property
    def logit_scale(self) -> float:
        """Factor applied to every logit before the soft cap (finite, non-zero)."""
        return self._scale

    @property
    def softcap(self) -> float:
        """Soft cap: logits become ``cap * tanh(x / cap)`` after the scale; 0 means no cap."""
        return self._softcap

    @property
    def precision(self) -> str:
        """Activation precision of the head matvec, resolved ("f32", "i24", "i16", "ggml"; see ``ops.matvec``)."""
        return self._precision

    @property
    def norm_kind(self) -> str:
        """The final norm's kind: "rms" (RMSNorm, applied only when a gamma was given) or "layer"."""
        return self._norm_kind

    @property
    def eps(self) -> float:
        """Epsilon of the final norm (added to the mean of squares or the variance)."""
        return self._eps

    @property
    def weight(self) -> np.ndarray:
        """The head matrix's GGUF bytes, (rows, row_bytes) uint8: the caller's memory, not a copy
        (a float16 / uint16 / float32 weight is this byte view of it)."""
        return self._weight

    @property
    def threads(self) -> Optional[int]:
        """Threads per call (None: the core's default)."""
        return self._threads or None

    @property
    def max_tokens(self) -> int:
        """Hidden rows each thread's buffers start with (they grow on demand)."""
        return self._max_tokens

    @property
    def last_timings(self) -> dict:
        """Seconds per stage ("norm", "head", "cap", "select") of the calling thread's last call."""
        return dict(self._cur().timings)

    @property
    def bytes_read_back(self) -> int:
        """Bytes handed back to the host by every call on this head, all threads (the route's
        payload: 4 per greedy token, 8 per top-k candidate, 4 * rows per whole row; on a device
        backend also each call's 4-byte pre-cap latch per row)."""
        return self._bytes_total

    @property
    def last_bytes_read_back(self) -> int:
        """Bytes handed back by the calling thread's last call (see ``bytes_read_back``)."""
        return self._cur().last_bytes

    # ---- buffers ----
    def _stream(self, stream) -> int:
        s = stream_arg(stream)
        if s and self._device is None:
            raise UnsupportedError(f"stream: the {self._backend} backend takes no CUDA stream")
        return s

    def _staging_rows(self, T: int) -> np.ndarray:
        # On the device backend the staging rows are page-locked: route A's whole-row copy lands
        # there by DMA (then is copied to the caller's array only after the checks pass).
        if self._device is not None:
            return self._impl.pinned_empty(T, self._rows)
        return np.empty((T, self._rows), dtype=np.float32)

    def _grow(self, st: _CallState, T: int) -> None:
        """Give this thread's state room for T rows: allocate everything first, then swap, so a
        failed allocation leaves the old buffers (and the Head) as they were."""
        cap = max(T, self._max_tokens)
        need_normed = self._norm_mode != "none" and self._device is None
        nbytes = 4 * cap * (self._rows + (self._cols if need_normed else 0))
        # More than the machine's memory: refuse before allocating. With overcommit enabled the
        # allocation itself would succeed and the first write past physical memory would get the
        # process killed instead of raising.
        if nbytes > _physical_memory():
            raise ResourceError(f"Head: {nbytes} bytes of buffers for {cap} hidden rows (rows={self._rows}, "
                                f"cols={self._cols}) exceed this machine's {_physical_memory()} bytes of memory")
        try:
            staging = self._staging_rows(cap)
            normed = np.empty((cap, self._cols), dtype=np.float32) if need_normed else None
        except MemoryError as e:
            raise ResourceError(f"Head: cannot allocate {nbytes} bytes of buffers for {cap} hidden rows "
                                f"(rows={self._rows}, cols={self._cols}): {e}") from None
        st.staging, st.normed = staging, normed
        st.computed_T = 0

    def _cur(self) -> _CallState:
        """The state this thread's calls use: its own, or the one a ShardedHead bound (_using)."""
        st = getattr(self._bound, "st", None)
        return self._tls if st is None else st

    @contextlib.contextmanager
    def _using(self, st: _CallState):
        """Run this thread's calls on ``st`` (staging rows, timings, last bytes) instead of the
        thread's own: a ShardedHead computes each shard into a state of its caller, on a worker."""
        self._bound.st = st
        try:
            yield
        finally:
            self._bound.st = None

    def _state(self, T: int) -> _CallState:
        st = self._cur()
        if st.staging is None or st.staging.shape[0] < T:
            self._grow(st, T)
        return st

    def _count(self, st: _CallState, nbytes: int) -> None:
        st.last_bytes = int(nbytes)
        with self._count_lock:
            self._bytes_total += int(nbytes)

    def _hidden(self, hidden, stream: int = 0):
        if self._device is not None and is_cuda_tensor(hidden):
            # A CUDA tensor goes to the kernels as it is (no host round trip). Its values are not
            # scanned on the host: a non-finite hidden value reaches the pre-cap latch instead.
            ct = cuda_tensor(hidden, "hidden", self._impl, stream)
            if ct.shape[-1] != self._cols:
                raise ShapeError(f"hidden: expected rows of length {self._cols}; found shape {ct.shape}")
            ct.shape = (1 if len(ct.shape) == 1 else ct.shape[0], self._cols)
            return ct
        h = float32_array(hidden, "hidden")
        if h.shape[-1] != self._cols:
            raise ShapeError(f"hidden: expected rows of length {self._cols}; found shape {h.shape}")
        h2 = h.reshape(-1, self._cols)
        # Checked here as well as in lmt::Head (microseconds): a hidden state refused before any
        # compute leaves this thread's last rows (row(t)) valid.
        if not _all_finite(h2, self._threads):
            raise NonFiniteLogitsError(f"hidden: non-finite value at {_first_nonfinite(h2)}")
        return h2

    def _out(self, out, T: int) -> np.ndarray:
        if out is None:
            return _empty((T, self._rows), np.float32)
        if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.dtype.isnative:
            found = out.dtype if isinstance(out, np.ndarray) else type(out).__name__
            raise DTypeError(f"out: expected a native float32 numpy array of shape ({T}, {self._rows}); found {found}")
        if out.shape != (T, self._rows) and not (T == 1 and out.shape == (self._rows,)):
            raise ShapeError(f"out: expected shape ({T}, {self._rows}); found {out.shape}")
        if not (out.flags.c_contiguous and out.flags.aligned and out.flags.writeable):
            raise ShapeError("out: expected a C-contiguous, aligned, writable array")
        return out

    # ---- the non-CPU paths (metal-emu, metal, cuda): the ops one by one ----
    def _device_tail(self, st: _CallState, h2, check_latch: bool = True) -> None:
        t0 = time.perf_counter()
        st.computed_T = 0
        self._device_gen += 1
        if isinstance(h2, CudaTensor):
            ok = self._device.run_tail_device(h2.ptr, h2.shape[0], check_latch)
        else:
            ok = self._device.run_tail(h2, check_latch)
        if not ok:
            why = _norm_overflow(h2) if self._norm is not None and not isinstance(h2, CudaTensor) else None
            raise NonFiniteLogitsError(why or "logits before the soft cap: non-finite value (device latch)")
        st.computed_T = h2.shape[0]
        st.device_gen = self._device_gen
        st.timings = {"norm": 0.0, "head": time.perf_counter() - t0, "cap": 0.0}

    def _ops_tail(self, st: _CallState, h2: np.ndarray) -> np.ndarray:
        """Norm -> head -> scale -> cap into the thread's staging rows; fail closed."""
        st.computed_T = 0  # a failure below leaves no row for row(t) to hand out
        T = h2.shape[0]
        logits = st.staging[:T]
        if self._device is not None:
            self._device_tail(st, h2)
            self._device.read_logits(logits)
            if not np.isfinite(logits).all():
                raise NonFiniteLogitsError(f"logits after scale/soft cap: non-finite value at {_first_nonfinite(logits)}")
            st.computed_T = T
            return logits
        impl, th = self._impl, self._threads
        if self._ggml_lib is not None:
            return self._ggml_tail(st, h2, logits)
        t0 = time.perf_counter()
        if self._norm_mode == "layer":
            normed = st.normed[:T]
            impl.layer_norm(h2, self._norm, normed, self._eps)
        elif self._norm_mode == "rms":
            normed = st.normed[:T]
            impl.rms_norm(h2, self._norm, normed, self._eps)
        else:  # no final norm: the caller's hidden state is already normalised
            normed = h2
        t1 = time.perf_counter()
        self._route.run_matvec(impl, self._type, self._weight, self._cols, normed, logits, th, "auto", self._precision)
        t2 = time.perf_counter()
        if not _all_finite(logits, th):
            raise NonFiniteLogitsError(f"logits before the soft cap: non-finite value at {_first_nonfinite(logits)}")
        impl.softcap(logits, self._scale, self._softcap, True, th)
        t3 = time.perf_counter()
        if not _all_finite(logits, th):
            raise NonFiniteLogitsError(f"logits after scale/soft cap: non-finite value at {_first_nonfinite(logits)}")
        st.timings = {"norm": t1 - t0, "head": t2 - t1, "cap": t3 - t2}
        st.computed_T = T
        return logits

    def _ggml_tail(self, st: _CallState, h2: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """precision="ggml" on Metal: norm -> llama.cpp's matvec -> its scale and cap nodes as one
        graph (csrc/metal/ggml.cpp); the same fail-closed checks as the op-by-op tail."""
        t0 = time.perf_counter()
        gamma = self._norm if self._norm_mode == "rms" else None
        bad = self._impl.ggml_head(self._ggml_lib, self._weight, self._type.id, self._cols, gamma, h2, self._eps,
                                   self._scale, self._softcap, logits)
        if bad >= 0:
            why = _norm_overflow(h2) if gamma is not None else None
            raise NonFiniteLogitsError(why or "logits before the soft cap: non-finite value at "
                                              f"{divmod(int(bad), self._rows)}")
        if not _all_finite(logits, self._threads):
            raise NonFiniteLogitsError(f"logits after scale/soft cap: non-finite value at {_first_nonfinite(logits)}")
        st.timings = {"norm": 0.0, "head": time.perf_counter() - t0, "cap": 0.0}
        st.computed_T = h2.shape[0]
        return logits

    @staticmethod
    def _cpu_timings(st: _CallState, t: tuple, select: bool) -> None:
        st.timings = {"norm": t[0], "head": t[1], "cap": t[2]}
        if select:
            st.timings["select"] = t[3]

    # ---- the tail ----
    def logits(self, hidden: np.ndarray, out: Optional[np.ndarray] = None, *, device: bool = False,
               stream=None):
        """(T, rows) float32 capped logits for hidden (cols,) or (T, cols).

        Returns a fresh array the caller owns (nothing another call or thread can refill), or,
        with ``out=`` (a C-contiguous writable float32 array of shape (T, rows), or (rows,) for
        T = 1), fills and returns ``out``: the zero-allocation form. ``out`` is written only after
        every check passed: on failure it is left untouched. Counts ``4 * rows * T`` bytes read
        back (plus the device's pre-cap latch on cuda). ``row(t)`` afterwards gives the same rows.

        On ``cuda``: ``hidden`` may be a CUDA tensor (``__cuda_array_interface__`` or
        ``__dlpack__``: PyTorch, CuPy, ...; float32, C-contiguous, on the current device), read by
        the kernels in place; ``device=True`` returns the logits as a fresh
        ``lmtail._core.cuda.DeviceArray`` (``torch.from_dlpack`` / ``cupy.from_dlpack`` take it),
        and ``out=`` may be a writable CUDA tensor of shape (T, rows): nothing but the 4-byte
        latch per row crosses to the host then. ``stream`` (a ``cudaStream_t`` handle or a
        PyTorch / CuPy stream) orders the tail after the caller's work on that stream; the call
        returns when the logits are complete.
        """
        s = self._stream(stream)
        if device and self._device is None:
            raise UnsupportedError(f"logits(device=True): the {self._backend} backend returns host arrays")
        h2 = self._hidden(hidden, s)
        T = h2.shape[0]
        if self._device is not None and (device or is_cuda_tensor(out)):
            return self._logits_on_device(h2, T, out, s)
        res = self._out(out, T)
        res2 = res.reshape(T, self._rows)
        if self._cpu is not None:
            st = self._state(T)
            st.computed_T = 0
            t = self._cpu.logits(h2, res2, st.normed, st.staging)
            st.computed_T = T
            self._cpu_timings(st, t, False)
            self._count(st, 4 * self._rows * T)
            return res
        with self._lock:
            if self._device is not None:
                self._device.set_stream(s)
            st = self._state(T)
            before = self._device.bytes_read_back if self._device is not None else 0
            staged = self._ops_tail(st, h2)
            np.copyto(res2, staged)  # publish only after every check passed
            self._count(st, self._device.bytes_read_back - before if self._device is not None else 4 * self._rows * T)
            return res

    def _logits_on_device(self, h2, T: int, out, s: int):
        dst = None
        if out is not None:
            dst = cuda_tensor(out, "out", self._impl, s, writable=True)
            if dst.shape != (T, self._rows) and not (T == 1 and dst.shape == (self._rows,)):
                raise ShapeError(f"out: expected shape ({T}, {self._rows}); found {dst.shape}")
        with self._lock:
            self._device.set_stream(s)
            st = self._state(T)
            before = self._device.bytes_read_back
            self._ops_tail_device(st, h2)
            if dst is not None:
                self._device.copy_logits_to(dst.ptr, T)
                res = out
            else:
                res = self._device.logits_device(T)
            self._count(st, self._device.bytes_read_back - before)
            return res

    def _ops_tail_device(self, st: _CallState, h2) -> None:
        """The device tail with its logits left on the device; fail closed on the capped logits
        with the latch (4 bytes per row) instead of reading them back."""
        T = h2.shape[0]
        self._device_tail(st, h2)
        st.computed_T = 0
        if not self._device.stored_logits_finite(T):
            raise NonFiniteLogitsError("logits after scale/soft cap: non-finite value (device latch)")
        st.computed_T = T

    def greedy(self, hidden: np.ndarray, exclude=None, *, stream=None) -> np.ndarray:
        """Greedy token per row (a fresh uint32 (T,) array): the whole tail plus the fail-closed argmax.

        ``exclude`` (a collection of token ids, e.g. ``head.eog_ids`` for ignore-eos) is masked
        inside the reduction only; excluding every id raises :class:`lmtail.ParameterError`.
        Counts 4 bytes per row read back. On ``cuda``, ``hidden`` may be a CUDA tensor and
        ``stream`` the caller's stream (see :meth:`logits`).
        """
        s = self._stream(stream)
        h2 = self._hidden(hidden, s)
        excl = token_ids(exclude, self._rows, "exclude")
        if excl.size >= self._rows:
            raise ParameterError(f"exclude: excludes all {self._rows} token ids; nothing left to choose")
        T = h2.shape[0]
        out = _empty(T, np.uint32)
        if self._cpu is not None:
            st = self._state(T)
            st.computed_T = 0
            t = self._cpu.greedy(h2, excl, out, st.normed, st.staging)
            st.computed_T = T
            self._cpu_timings(st, t, True)
            self._count(st, 4 * T)
            return out
        with self._lock:
            st = self._state(T)
            if self._device is not None:  # route B: 4 bytes per row leave the device
                self._device.set_stream(s)
                before = self._device.bytes_read_back
                # no separate pre-cap latch read: the greedy kernel latches, caps and reduces
                self._device_tail(st, h2, check_latch=False)
                t0 = time.perf_counter()
                self._device.greedy(excl, out)
                st.timings["select"] = time.perf_counter() - t0
                self._count(st, self._device.bytes_read_back - before)
                if np.any(out == 0xFFFFFFFF):
                    st.computed_T = 0  # the stored logits hold a non-finite value
                    why = _norm_overflow(h2) if self._norm is not None and not isinstance(h2, CudaTensor) else None
                    if why:
                        raise NonFiniteLogitsError(why)
                check_greedy(out, self._rows, excl.size)
                return out
            logits = self._ops_tail(st, h2)
            t0 = time.perf_counter()
            self._impl.greedy_argmax_rows(logits, excl, out, self._threads)
            st.timings["select"] = time.perf_counter() - t0
            check_greedy(out, self._rows, excl.size)
            self._count(st, 4 * out.size)
            return out

    def topk(self, hidden: np.ndarray, k: int, *, stream=None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k candidates per row: fresh (ids uint32 (T, k), values float32 (T, k)) arrays in
        canonical order (value descending, id ascending among equal values). Counts 8 bytes per
        candidate read back. On ``cuda``, ``hidden`` may be a CUDA tensor and ``stream`` the
        caller's stream (see :meth:`logits`)."""
        s = self._stream(stream)
        h2 = self._hidden(hidden, s)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self._rows:
            raise ParameterError(f"k: expected an integer in [1, {self._rows}]; found {k!r}")
        T = h2.shape[0]
        ids = _empty((T, int(k)), np.uint32)
        vals = _empty((T, int(k)), np.float32)
        if self._cpu is not None:
            st = self._state(T)
            st.computed_T = 0
            t = self._cpu.topk(h2, int(k), ids, vals, st.normed, st.staging)
            st.computed_T = T
            self._cpu_timings(st, t, True)
            self._count(st, 8 * ids.size)
            return ids, vals
        with self._lock:
            st = self._state(T)
            if self._device is not None:  # route C: k candidates per row leave the device
                self._device.set_stream(s)
                before = self._device.bytes_read_back
                self._device_tail(st, h2)
                t0 = time.perf_counter()
                self._device.topk(int(k), ids, vals)
                st.timings["select"] = time.perf_counter() - t0
                # 8 bytes per candidate plus the 4-byte pre-cap latch per row
                self._count(st, self._device.bytes_read_back - before)
                if not np.isfinite(vals).all():
                    st.computed_T = 0
                    raise NonFiniteLogitsError("top-k: non-finite candidate value")
                return ids, vals
            logits = self._ops_tail(st, h2)
            t0 = time.perf_counter()
            self._impl.topk_rows(logits, int(k), ids, vals, self._threads)
            st.timings["select"] = time.perf_counter() - t0
            self._count(st, 8 * ids.size)
            return ids, vals

    def row(self, t: int) -> np.ndarray:
        """Row t (capped logits, (rows,) float32) of the calling thread's last successful compute
        (``logits``, ``greedy`` or ``topk``): the fallback of the top-k route (a grammar rejection,
        a tie at the top-k boundary).

        Each thread has its own rows: another thread's calls never change what this returns. The
        result is a read-only view of this thread's staging rows, valid until this thread's next
        compute on this head; copy what you keep. Counts ``4 * rows`` bytes read back. Raises
        :class:`lmtail.ParameterError` if this thread's last compute failed or had no row t, or
        (cuda, whose logits stay on the device) if another thread's call has replaced them since.
        """
        st = self._cur()
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= int(t) < st.computed_T:
            raise ParameterError(f"row: expected a row index in [0, {st.computed_T}) of this thread's last "
                                 f"successful compute; found {t!r}")
        t = int(t)
        out = st.staging[t]
        if self._device is not None:
            with self._lock:
                if st.device_gen != self._device_gen:
                    raise ParameterError("row: another thread's call has replaced this thread's logits on the "
                                         "device since its last compute; compute them again")
                self._device.set_stream(0)  # the caller's stream of the compute may be gone by now
                self._device.read_row(t, out)
            if not np.isfinite(out).all():
                raise NonFiniteLogitsError(f"row {t}: non-finite logit at {_first_nonfinite(out)}")
        self._count(st, 4 * self._rows)
        view = out.view()
        view.flags.writeable = False
        return view

    def __repr__(self) -> str:
        return (
            f"Head(rows={self._rows}, cols={self._cols}, dtype={self._type.name!r}, backend={self._backend!r}, "
            f"logit_scale={self._scale}, "
            f"softcap={self._softcap}, eps={self._eps}, norm={self._norm_kind if self._norm is not None or self._norm_kind == 'layer' else 'none'})"
        )
