"""The LM-head tail as one object: final RMSNorm -> Q5_K head -> logit scale -> soft cap -> selection."""

from __future__ import annotations

import os
import threading
import time
from typing import Optional

import numpy as np

from . import _backend, _core
from ._validate import finite_float, float32_array, precision_arg, q5k_weight, threads_arg, token_ids
from .errors import BackendError, NonFiniteLogitsError, ParameterError, ShapeError
from .ops import check_greedy

# The fail-closed finite checks scan host memory (the hidden rows, and route A's staging rows after
# the read-back), so every backend uses the CPU's threaded SIMD scan rather than one of its own.
_all_finite = _core.all_finite


def _first_nonfinite(x: np.ndarray) -> tuple:
    idx = np.argwhere(~np.isfinite(x))[0]
    return tuple(int(i) for i in idx)


class Head:
    """An LM head: ``logits = softcap(scale * (W @ rms_norm(hidden) * gamma))``.

    ``weight`` is a uint8 array (rows, cols/256*176) of Q5_K blocks, used without a copy when
    C-contiguous (e.g. a memory-mapped GGUF tensor). ``norm`` is the final RMSNorm's gamma
    (cols,), or None when the hidden state arrives already normalised (no norm is applied).
    ``norm_kind="layer"`` applies a LayerNorm without bias instead (command-r, cohere2: llama.cpp's
    LLM_NORM), with ``norm`` as its optional weight. ``softcap <= 0`` disables the cap.
    ``precision`` selects the head matvec's activation precision ("f32", or on the CPU "i24" (its
    default, f32-grade) or "i16"; None: the backend's default), see :func:`lmtail.ops.matvec_q5_k`.

    Failure semantics (fail closed): any non-finite hidden value, pre-cap logit or capped logit
    raises :class:`lmtail.NonFiniteLogitsError`, and the previously published distribution stays
    intact. One ``Head`` used from several threads serialises its calls.
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
    ) -> None:
        self._impl = _backend.get(backend)
        self._backend = backend
        self._precision = precision_arg(precision, backend)
        self._weight, self._rows, self._cols = q5k_weight(weight, "weight")
        if norm is not None:
            norm = float32_array(norm, "norm", ndims=(1,))
            if norm.shape[0] != self._cols:
                raise ShapeError(f"norm: expected length {self._cols} (the head's cols); found {norm.shape[0]}")
            if not np.isfinite(norm).all():
                raise ParameterError(f"norm: gamma must be finite; found {norm[~np.isfinite(norm)][0]}")
        if norm_kind not in ("rms", "layer"):
            raise ParameterError(f"norm_kind: expected 'rms' or 'layer'; found {norm_kind!r}")
        if norm_kind == "layer" and not hasattr(self._impl, "layer_norm"):
            raise BackendError(f"backend {backend!r} has no layer_norm; LayerNorm heads run on 'cpu'")
        self._norm = norm
        self._norm_kind = norm_kind
        self._scale = finite_float(logit_scale, "logit_scale")
        self._softcap = finite_float(softcap, "softcap")
        self._eps = finite_float(eps, "eps")
        if self._eps < 0:
            raise ParameterError(f"eps: expected >= 0; found {self._eps}")
        self._threads = threads_arg(threads)
        self._eog = tuple(int(i) for i in token_ids(eog_ids, self._rows, "eog_ids"))
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ParameterError(f"max_tokens: expected an integer >= 1; found {max_tokens!r}")
        self._device = None
        if backend == "cuda":
            # Weights uploaded once; the tail runs on the device and only the route's bytes come back.
            if norm_kind == "layer":
                raise BackendError("backend 'cuda' has no layer_norm yet; LayerNorm heads run on 'cpu'")
            self._device = self._impl.DeviceHead(self._weight, self._cols, norm, 1 if norm is not None else 0,
                                                 self._eps, self._scale, self._softcap, max_tokens)
        self._lock = threading.Lock()
        self._published = np.zeros((max_tokens, self._rows), dtype=np.float32)
        self._published_T = 0
        self._staging = self._staging_rows(max_tokens)
        self._normed = np.empty((max_tokens, self._cols), dtype=np.float32)
        self.last_timings: dict[str, float] = {}
        self.path: Optional[str] = None
        # Rows of the last successful compute still held in the staging buffer (what row(t) reads).
        self._computed_T = 0
        self._device_before = 0
        # Bytes each call hands back to the host (the route's payload: 4 per greedy token, 8 per
        # top-k candidate, 4 * rows per whole row), cumulative and for the last call.
        self.bytes_read_back = 0
        self.last_bytes_read_back = 0

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
    ) -> "Head":
        """Load ``output.weight`` (Q5_K, memory-mapped), ``output_norm.weight``, the RMS epsilon,
        the logit scale and soft cap (llama.cpp's per-architecture semantics) and the EOG ids."""
        from .gguf_model import load_head_spec

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
        )
        head.path = os.fspath(path)
        head.spec = spec
        return head

    # ---- properties ----
    @property
    def rows(self) -> int:
        return self._rows

    @property
    def cols(self) -> int:
        return self._cols

    @property
    def eog_ids(self) -> tuple:
        return self._eog

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def logit_scale(self) -> float:
        return self._scale

    @property
    def softcap(self) -> float:
        return self._softcap

    @property
    def precision(self) -> str:
        """Activation precision of the head matvec: "f32", "i24" or "i16" (see ``ops.matvec_q5_k``)."""
        return self._precision

    @property
    def norm_kind(self) -> str:
        return self._norm_kind

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def weight(self) -> np.ndarray:
        return self._weight

    # ---- the tail ----
    def _hidden(self, hidden) -> np.ndarray:
        h = float32_array(hidden, "hidden")
        if h.shape[-1] != self._cols:
            raise ShapeError(f"hidden: expected rows of length {self._cols}; found shape {h.shape}")
        h2 = h.reshape(-1, self._cols)
        if not _all_finite(h2, self._threads):
            raise NonFiniteLogitsError(f"hidden: non-finite value at {_first_nonfinite(h2)}")
        return h2

    def _staging_rows(self, T: int) -> np.ndarray:
        # On the device backend the staging rows are page-locked: route A's whole-row copy lands
        # there by DMA (then is published to the retained buffer only after the checks pass).
        if self._device is not None:
            return self._impl.pinned_empty(T, self._rows)
        return np.empty((T, self._rows), dtype=np.float32)

    def _ensure_capacity(self, T: int) -> None:
        if T > self._staging.shape[0]:
            # Growing T reallocates: views returned earlier keep the old buffer (documented).
            self._staging = self._staging_rows(T)
            self._normed = np.empty((T, self._cols), dtype=np.float32)
            pub = np.zeros((T, self._rows), dtype=np.float32)
            pub[: self._published.shape[0]] = self._published
            self._published = pub

    def _device_tail(self, h2: np.ndarray, check_latch: bool = True) -> None:
        t0 = time.perf_counter()
        self._computed_T = 0
        if not self._device.run_tail(h2, check_latch):
            raise NonFiniteLogitsError("logits before the soft cap: non-finite value (device latch)")
        self._computed_T = h2.shape[0]
        self.last_timings = {"norm": 0.0, "head": time.perf_counter() - t0, "cap": 0.0}

    def _device_delta(self) -> int:
        dev = self._device
        assert dev is not None
        return int(dev.bytes_read_back - self._device_before)

    def _count(self, nbytes: int) -> None:
        self.last_bytes_read_back = int(nbytes)
        self.bytes_read_back += int(nbytes)

    def _tail(self, h2: np.ndarray) -> np.ndarray:
        """Norm -> head -> scale -> cap into the staging buffer; fail closed on non-finite values."""
        self._computed_T = 0  # a failure below leaves no row for row(t) to hand out
        self._device_before = self._device.bytes_read_back if self._device is not None else 0
        logits = self._tail_impl(h2)
        self._computed_T = h2.shape[0]
        return logits

    def _tail_impl(self, h2: np.ndarray) -> np.ndarray:
        if self._device is not None:
            T = h2.shape[0]
            self._ensure_capacity(T)
            self._device_tail(h2)
            logits = self._staging[:T]
            self._device.read_logits(logits)
            if not np.isfinite(logits).all():
                raise NonFiniteLogitsError(f"logits after scale/soft cap: non-finite value at {_first_nonfinite(logits)}")
            return logits
        impl, th = self._impl, self._threads
        T = h2.shape[0]
        self._ensure_capacity(T)
        t0 = time.perf_counter()
        if self._norm_kind == "layer":
            normed = self._normed[:T]
            impl.layer_norm(h2, self._norm, normed, self._eps)
        elif self._norm is not None:
            normed = self._normed[:T]
            impl.rms_norm(h2, self._norm, normed, self._eps)
        else:  # no final norm: the caller's hidden state is already normalised
            normed = h2
        t1 = time.perf_counter()
        logits = self._staging[:T]
        if self._backend == "cpu":
            impl.matvec_q5_k(self._weight, self._cols, normed, logits, th, "auto", self._precision)
        else:  # the other backends implement f32 activations only (precision_arg checked it)
            impl.matvec_q5_k(self._weight, self._cols, normed, logits, th, "auto")
        t2 = time.perf_counter()
        if not _all_finite(logits, th):
            raise NonFiniteLogitsError(f"logits before the soft cap: non-finite value at {_first_nonfinite(logits)}")
        impl.softcap(logits, self._scale, self._softcap, True, th)
        t3 = time.perf_counter()
        if not _all_finite(logits, th):
            raise NonFiniteLogitsError(f"logits after scale/soft cap: non-finite value at {_first_nonfinite(logits)}")
        self.last_timings = {"norm": t1 - t0, "head": t2 - t1, "cap": t3 - t2}
        return logits

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """(T, rows) float32 logits for hidden (cols,) or (T, cols).

        Returns a read-only view of the head's retained distribution, refilled in place by the
        next successful ``logits`` call (no allocation per call): copy rows you keep. On failure
        the previously published rows are left untouched.
        """
        with self._lock:
            h2 = self._hidden(hidden)
            T = h2.shape[0]
            staged = self._tail(h2)
            np.copyto(self._published[:T], staged)  # publish only after every check passed
            self._published_T = T
            self._count(self._device_delta() if self._device is not None else 4 * self._rows * T)
            view = self._published[:T].view()
            view.flags.writeable = False
            return view

    def greedy(self, hidden: np.ndarray, exclude=None) -> np.ndarray:
        """Greedy token per row (uint32 (T,)): the whole tail plus the fail-closed argmax.

        ``exclude`` (e.g. ``head.eog_ids`` for ignore-eos) is masked inside the reduction only.
        """
        with self._lock:
            h2 = self._hidden(hidden)
            excl = token_ids(exclude, self._rows, "exclude")
            if excl.size >= self._rows:
                raise ParameterError(f"exclude: excludes all {self._rows} token ids; nothing left to choose")
            out = np.empty(h2.shape[0], dtype=np.uint32)
            if self._device is not None:  # route B: 4 bytes per row leave the device
                before = self._device.bytes_read_back
                # no separate pre-cap latch read: the greedy kernel latches, caps and reduces
                self._device_tail(h2, check_latch=False)
                t0 = time.perf_counter()
                self._device.greedy(excl, out)
                self.last_timings["select"] = time.perf_counter() - t0
                self._count(self._device.bytes_read_back - before)
                if np.any(out == 0xFFFFFFFF):
                    self._computed_T = 0  # the stored logits hold a non-finite value
                check_greedy(out, self._rows, excl.size)
                return out
            logits = self._tail(h2)
            t0 = time.perf_counter()
            self._impl.greedy_argmax_rows(logits, excl, out, self._threads)
            self.last_timings["select"] = time.perf_counter() - t0
            check_greedy(out, self._rows, excl.size)
            self._count(4 * out.size)
            return out

    def topk(self, hidden: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k candidates per row: (ids uint32 (T, k), values float32 (T, k)), canonical order."""
        with self._lock:
            h2 = self._hidden(hidden)
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self._rows:
                raise ParameterError(f"k: expected an integer in [1, {self._rows}]; found {k!r}")
            T = h2.shape[0]
            ids = np.empty((T, int(k)), dtype=np.uint32)
            vals = np.empty((T, int(k)), dtype=np.float32)
            if self._device is not None:  # route C: k candidates per row leave the device
                self._device_before = self._device.bytes_read_back
                self._device_tail(h2)
                t0 = time.perf_counter()
                self._device.topk(int(k), ids, vals)
                self.last_timings["select"] = time.perf_counter() - t0
                # 8 bytes per candidate plus the 4-byte pre-cap latch per row
                self._count(self._device_delta())
                if not np.isfinite(vals).all():
                    raise NonFiniteLogitsError("top-k: non-finite candidate value")
                return ids, vals
            logits = self._tail(h2)
            t0 = time.perf_counter()
            self._impl.topk_rows(logits, int(k), ids, vals, self._threads)
            self.last_timings["select"] = time.perf_counter() - t0
            self._count(8 * ids.size)
            return ids, vals

    def row(self, t: int) -> np.ndarray:
        """Row t of the last compute (``logits``, ``greedy`` or ``topk``) as a whole: the fallback of
        the top-k route (a grammar rejection, a tie at the top-k boundary).

        A read-only view valid until the next compute (the next call overwrites it); copy what you
        keep. Counts ``4 * rows`` bytes read back. Raises if the last compute failed or had no row t.
        """
        with self._lock:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= int(t) < self._computed_T:
                raise ParameterError(f"row: expected a row index in [0, {self._computed_T}) of the last successful "
                                     f"compute; found {t!r}")
            t = int(t)
            out = self._staging[t]
            if self._device is not None:
                self._device.read_row(t, out)
                if not np.isfinite(out).all():
                    raise NonFiniteLogitsError(f"row {t}: non-finite logit at {_first_nonfinite(out)}")
            self._count(4 * self._rows)
            view = out.view()
            view.flags.writeable = False
            return view

    def __repr__(self) -> str:
        return (
            f"Head(rows={self._rows}, cols={self._cols}, backend={self._backend!r}, logit_scale={self._scale}, "
            f"softcap={self._softcap}, eps={self._eps}, norm={self._norm_kind if self._norm is not None or self._norm_kind == 'layer' else 'none'})"
        )
