"""ShardedHead: one process, a head split by rows (vocabulary) over N shards, merged exactly."""

from __future__ import annotations

import concurrent.futures
import threading
import time
import weakref
from typing import Optional, Sequence

import numpy as np

from .. import _backend
from .._validate import float32_array, is_cuda_tensor, stream_arg, token_ids, weight_array
from ..errors import BackendError, DTypeError, LmtailError, ParameterError, ShapeError, UnsupportedError
from ..head import Head, _CallState
from .merge import check_splits, greedy_trusted, merge_trusted

# Head's keyword arguments a shard takes as they are (eog_ids are global here: mapped per shard).
_PASSED = ("logit_scale", "softcap", "eps", "threads", "max_tokens", "norm_kind", "precision")


class _Caller(threading.local):
    """One calling thread's view of a ShardedHead: per shard the published state (the rows of
    its last successful call, which ``row(t)`` reads) and a scratch state the next call computes
    into; they swap only when every shard succeeded."""

    def __init__(self) -> None:
        self.pub: Optional[list] = None
        self.scratch: Optional[list] = None
        self.computed_T = 0
        self.timings: dict = {}
        self.last_bytes: list = []


class ShardedHead:
    """An LM head split by rows over N shards (devices, streams or CPU shards), with the exact merge.

    ``weight`` / ``norm`` / ``dtype`` / ``**head_kwargs`` are :class:`lmtail.Head`'s
    (``logit_scale``, ``softcap``, ``eps``, ``threads``, ``max_tokens``, ``norm_kind``,
    ``precision``, ``eog_ids`` as *global* ids). ``splits`` are the row boundaries
    ``[0, r1, ..., rows]`` (strictly increasing): shard s is a ``Head`` on rows
    ``[splits[s], splits[s+1])``, given a view of those rows of ``weight`` (never a copy: a
    memory-mapped GGUF tensor stays mapped), the same norm, scale and cap. ``backends`` names
    each shard's backend (default all "cpu"); ``streams`` each shard's CUDA stream (a handle or a
    PyTorch / CuPy stream; default 0) so shards of one GPU overlap. Several GPUs in one process
    are not supported yet (a DeviceHead runs on the current device).

    Each call runs every shard, each producing only its local result with global ids (greedy:
    its best (id, value); top-k: its top min(k, its rows); whole rows only on request), and the
    host merges (:func:`lmtail.sharding.merge_topk`): ``greedy`` and ``topk`` equal the unsharded
    Head's, bytes included, ties across a boundary going to the lowest global id. Concurrency:
    device shards, and CPU shards with ``threads=1`` (one core each, fully parallel: for N close
    to the core count), run concurrently (shard 0 on the calling thread, the others on N - 1
    worker threads; the kernels release the GIL). CPU shards on the core's thread pool
    (``threads`` None or > 1) run one after the other on the calling thread: their parallel
    regions would take turns in the one pool anyway, each using every core, so N shards never
    oversubscribe the machine and pay no thread handoff.

    Fail closed, all or nothing: if any shard raises (a non-finite logit on one shard, a
    non-finite hidden value), the call raises that error (the lowest failing shard's, its
    message naming the shard) and publishes nothing: every shard's published rows stay those of
    the calling thread's last successful call, which ``row(t)`` keeps returning (on cuda a
    shard's logits live on the device and a later compute replaces them: ``row`` then raises).
    Threads: as Head, each calling thread has its own rows; calls may overlap.
    """

    def __init__(self, weight: np.ndarray, norm: Optional[np.ndarray] = None, *, splits: Sequence[int],
                 backends: Optional[Sequence[str]] = None, dtype="Q5_K", streams=None, **head_kwargs) -> None:
        if "backend" in head_kwargs:
            raise ParameterError("ShardedHead: pass backends=[...] (one name per shard), not backend=")
        unknown = sorted(set(head_kwargs) - set(_PASSED) - {"eog_ids"})
        if unknown:
            raise ParameterError(f"ShardedHead: unknown keyword argument(s) {unknown}; Head's are {list(_PASSED) + ['eog_ids']}")
        if head_kwargs.get("precision") == "ggml":
            # ggml's mul_mat picks its path by the matrix shape (measured: F16 at T = 8 gives other
            # bytes on a 3-row slice than on the whole head): a shard would not give the head's bytes.
            raise UnsupportedError("ShardedHead: precision='ggml' is not row-slice invariant (ggml's mul_mat path "
                                   "depends on the matrix shape), so shards could not equal the whole head; use "
                                   "the type's default precision (batch and slice invariant)")
        if isinstance(backends, (list, tuple)):
            for b in backends:
                if not isinstance(b, str):
                    raise BackendError(f"backends: expected backend names such as 'cpu'; found {b!r}")
                if b.startswith("cuda:"):
                    raise BackendError(f"backends: {b!r}: shards on several GPUs of one process are not supported yet "
                                       f"(a shard runs on the current CUDA device); use 'cuda', or one process per "
                                       f"GPU with lmtail.sharding.merge_topk_distributed")
        # Validate the whole matrix once (type, shape, contiguity) against the first backend.
        be0 = "cpu" if backends is None or isinstance(backends, str) or not len(backends) else backends[0]
        t = _backend.weight_type(dtype, be0 if isinstance(be0, str) else "cpu", "Head")
        wb, rows, cols = weight_array(weight, t, "weight")
        self._splits = check_splits(splits, rows)
        n = len(self._splits) - 1
        if backends is None:
            backends = ["cpu"] * n
        if isinstance(backends, str) or not hasattr(backends, "__len__"):
            raise ParameterError(f"backends: expected a list of {n} backend names (one per shard); found {backends!r}")
        backends = list(backends)
        if len(backends) != n:
            raise ParameterError(f"backends: expected {n} names (one per shard of splits {list(self._splits)}); found {len(backends)}")
        if streams is None:
            streams = [0] * n
        if isinstance(streams, (str, bytes)) or not hasattr(streams, "__len__") or len(streams) != n:
            raise ParameterError(f"streams: expected {n} CUDA streams or handles (one per shard); found {streams!r}")
        self._streams = [stream_arg(s) for s in streams]
        self._eog = tuple(int(i) for i in token_ids(head_kwargs.pop("eog_ids", ()), rows, "eog_ids"))
        eog = np.asarray(self._eog, dtype=np.int64)
        self._shards = []
        for s in range(n):
            r0, r1 = self._splits[s], self._splits[s + 1]
            local = (eog[(eog >= r0) & (eog < r1)] - r0).tolist()
            # wb[r0:r1] is a view: the shard reads the caller's bytes in place (no copy).
            self._shards.append(Head(wb[r0:r1], norm, backend=backends[s], dtype=t.id, eog_ids=local, **head_kwargs))
            if self._streams[s] and self._shards[s]._device is None:
                raise UnsupportedError(f"streams: shard {s} runs on {backends[s]}, which takes no CUDA stream")
        self._rows, self._cols, self._type = rows, cols, t
        self._weight = wb
        self._backends = tuple(backends)
        # Concurrent shards only where they can overlap: device shards, and CPU shards with
        # threads=1 (run fully in parallel). CPU shards on the core's pool (threads > 1 or None)
        # would take turns in it anyway: handing them to worker threads only adds the handoff
        # (measured: 2 shards of a 8192 x 1024 Q5_K head at T = 1 took ~4x the unsharded time
        # concurrently on 2 cores), so they run one after the other on the calling thread.
        self._concurrent = len(self._shards) > 1 and any(
            h._device is not None or h.threads == 1 for h in self._shards)
        self._caller = _Caller()
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pool_lock = threading.Lock()

    @classmethod
    def from_gguf(cls, path, *, splits: Optional[Sequence[int]] = None, shards: Optional[int] = None,
                  backends: Optional[Sequence[str]] = None, streams=None, logit_scale: Optional[float] = None,
                  softcap: Optional[float] = None, threads: Optional[int] = None,
                  precision: Optional[str] = None) -> "ShardedHead":
        """A ShardedHead of a GGUF model's head, as :meth:`lmtail.Head.from_gguf` loads it (the
        weights memory-mapped: every shard reads its rows of the mapping in place; norm, eps,
        logit scale, soft cap and the EOG ids from the file). Give ``splits`` (row boundaries),
        or ``shards`` (N) for N near-equal row ranges."""
        import os

        from ..gguf_model import load_head_spec

        if not isinstance(path, (str, bytes, os.PathLike)):
            raise ParameterError(f"path: expected a str, bytes or os.PathLike; found {type(path).__name__}")
        if (splits is None) == (shards is None):
            raise ParameterError("ShardedHead.from_gguf: give exactly one of splits= (row boundaries) or shards= (N)")
        spec = load_head_spec(os.fspath(path), logit_scale=logit_scale, softcap=softcap, allow_layer_norm=True)
        if spec.norm_kind not in ("rms", "layer", "none"):  # pragma: no cover - loader contract
            raise ParameterError(f"unsupported final norm {spec.norm_kind!r}")
        if shards is not None:
            if isinstance(shards, bool) or not isinstance(shards, (int, np.integer)) or not 1 <= shards <= spec.rows:
                raise ParameterError(f"shards: expected an integer in [1, {spec.rows}]; found {shards!r}")
            splits = [spec.rows * i // int(shards) for i in range(int(shards) + 1)]
        return cls(spec.weight, spec.norm, splits=splits, backends=backends, streams=streams, dtype=spec.dtype,
                   logit_scale=spec.logit_scale, softcap=spec.softcap, eps=spec.eps, threads=threads,
                   eog_ids=[i for i in spec.eog_ids if i < spec.rows],
                   norm_kind="layer" if spec.norm_kind == "layer" else "rms", precision=precision)

    # ---- properties ----
    @property
    def shards(self) -> tuple:
        """The shards' :class:`lmtail.Head` objects (shard s holds rows ``[splits[s], splits[s+1])``;
        its ids are local). Their own calls are independent of this object's."""
        return tuple(self._shards)

    @property
    def splits(self) -> tuple:
        """Row boundaries ``(0, r1, ..., rows)``: shard s holds global rows ``[splits[s], splits[s+1])``."""
        return self._splits

    @property
    def backends(self) -> tuple:
        """Each shard's backend name."""
        return self._backends

    @property
    def rows(self) -> int:
        """Vocabulary size: rows of the whole head (the sum of the shards' rows)."""
        return self._rows

    @property
    def cols(self) -> int:
        """Hidden size: the length of each hidden row."""
        return self._cols

    @property
    def dtype(self) -> str:
        """The head matrix's ggml weight type, canonical name."""
        return self._type.name

    @property
    def eog_ids(self) -> tuple:
        """End-of-generation token ids, global (sorted, unique)."""
        return self._eog

    @property
    def weight(self) -> np.ndarray:
        """The whole head matrix's bytes, (rows, row_bytes) uint8: the caller's memory."""
        return self._weight

    @property
    def weight_bytes(self) -> int:
        """Bytes of head weights every call streams, over all shards."""
        return sum(h.weight_bytes for h in self._shards)

    @property
    def logit_scale(self) -> float:
        """Factor applied to every logit before the soft cap."""
        return self._shards[0].logit_scale

    @property
    def softcap(self) -> float:
        """Soft cap (0: none)."""
        return self._shards[0].softcap

    @property
    def precision(self) -> str:
        """Activation precision of the head matvec (every shard's)."""
        return self._shards[0].precision

    @property
    def bytes_read_back(self) -> int:
        """Bytes handed back by every shard's calls, all threads (the sum of ``shard_bytes_read_back``)."""
        return sum(h.bytes_read_back for h in self._shards)

    @property
    def shard_bytes_read_back(self) -> tuple:
        """Per shard, bytes handed back by all its calls (through this object or directly)."""
        return tuple(h.bytes_read_back for h in self._shards)

    @property
    def last_bytes_read_back(self) -> int:
        """Bytes the calling thread's last call read back, all shards together."""
        return sum(self._caller.last_bytes)

    @property
    def last_shard_bytes_read_back(self) -> tuple:
        """Per shard, bytes the calling thread's last call read back."""
        return tuple(self._caller.last_bytes)

    @property
    def last_timings(self) -> dict:
        """The calling thread's last call: ``"shards"`` (seconds for all shards' tails, run
        concurrently, wall), ``"merge"`` (seconds of the host merge), ``"per_shard"`` (each
        shard's Head timings)."""
        return dict(self._caller.timings)

    # ---- the concurrent phase ----
    def _states(self) -> _Caller:
        c = self._caller
        if c.pub is None:
            c.pub = [_CallState() for _ in self._shards]
            c.scratch = [_CallState() for _ in self._shards]
            c.last_bytes = [0] * len(self._shards)
        return c

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(self._shards) - 1,
                                                                   thread_name_prefix="lmtail-shard")
                weakref.finalize(self, self._pool.shutdown, wait=False)
            return self._pool

    def _run(self, fn) -> list:
        """fn(s, head, stream) for every shard, each on a scratch state of the caller; publish (swap
        scratch and published states) only if every shard succeeded, else raise the lowest failing
        shard's error with nothing published."""
        c = self._states()
        n = len(self._shards)
        scratch = c.scratch  # read here: c is thread-local, the workers would see their own

        def one(s):
            h = self._shards[s]
            with h._using(scratch[s]):
                return fn(s, h, self._streams[s])

        t0 = time.perf_counter()
        results: list = [None] * n
        errors: list = [None] * n
        futs = {}
        if self._concurrent:
            pool = self._executor()
            futs = {s: pool.submit(one, s) for s in range(1, n)}
        for s in [0] if self._concurrent else range(n):
            try:
                results[s] = one(s)
            except Exception as e:  # noqa: BLE001 - re-raised below, after every shard finished
                errors[s] = e
                break  # one after the other: the lowest failing shard is known, skip the rest
        for s, f in futs.items():
            try:
                results[s] = f.result()
            except Exception as e:  # noqa: BLE001
                errors[s] = e
        t1 = time.perf_counter()
        for s, e in enumerate(errors):
            if e is not None:
                r0, r1 = self._splits[s], self._splits[s + 1]
                msg = f"shard {s} (rows [{r0}, {r1}), {self._backends[s]}): {e}"
                try:
                    err = type(e)(msg) if isinstance(e, LmtailError) else None
                except Exception:  # noqa: BLE001 - an error type with another signature: keep the original
                    err = None
                if err is None:
                    raise e
                raise err from e
        # Every shard succeeded: publish all at once.
        c.pub, c.scratch = c.scratch, c.pub
        c.last_bytes = [st.last_bytes for st in c.pub]
        c.timings = {"shards": t1 - t0, "per_shard": [dict(st.timings) for st in c.pub]}
        return results

    def _hidden(self, hidden):
        if is_cuda_tensor(hidden):
            return hidden  # each cuda shard reads it in place (checked by the shard)
        h = float32_array(hidden, "hidden")
        if h.shape[-1] != self._cols:
            raise ShapeError(f"hidden: expected rows of length {self._cols}; found shape {h.shape}")
        return h.reshape(-1, self._cols)

    @staticmethod
    def _T(h) -> int:
        shape = tuple(h.shape)
        return 1 if len(shape) == 1 else int(shape[0])

    # ---- the tail ----
    def greedy(self, hidden, exclude=None) -> np.ndarray:
        """Greedy token per row, a fresh uint32 (T,) array: exactly the unsharded ``Head.greedy``
        (largest capped logit, lowest global id among equal values; ``exclude`` global ids, e.g.
        ``head.eog_ids``, masked inside each shard's reduction). Each shard hands back its best
        (id, value): on the CPU its greedy token and the logit read from its own rows, on cuda its
        top (1 + its excluded ids) candidates (8 bytes each) with the excluded ones dropped."""
        h2 = self._hidden(hidden)
        excl = token_ids(exclude, self._rows, "exclude").astype(np.int64)
        if excl.size >= self._rows:
            raise ParameterError(f"exclude: excludes all {self._rows} token ids; nothing left to choose")
        T = self._T(h2)
        local = []
        for s in range(len(self._shards)):
            r0, r1 = self._splits[s], self._splits[s + 1]
            local.append(excl[(excl >= r0) & (excl < r1)] - r0)

        def fn(s, h, stream):
            r0, rows_s = self._splits[s], self._splits[s + 1] - self._splits[s]
            ex = local[s]
            if h._device is not None:
                k = min(rows_s, 1 + ex.size)
                ids, vals = h.topk(h2, k, stream=stream)
                keep = ~np.isin(ids, ex.astype(np.uint32))
                if not keep.any(axis=1).all():  # every row's candidates excluded: the shard offers none
                    return None
                j = np.argmax(keep, axis=1)  # first kept candidate = the shard's greedy (canonical order)
                rr = np.arange(ids.shape[0])
                return ids[rr, j].astype(np.int64) + r0, vals[rr, j]
            if ex.size >= rows_s:
                h.topk(h2, 1)  # the shard's rows are all excluded: still run it (finite checks, its rows)
                return None
            tok = h.greedy(h2, ex)
            # the shard's logits are in its (scratch) staging rows: its chosen logit, no extra pass
            st = h._cur()
            vals = st.staging[np.arange(tok.shape[0]), tok]
            return tok.astype(np.int64) + r0, vals

        res = self._run(fn)
        t0 = time.perf_counter()
        got = [r for r in res if r is not None]
        out = greedy_trusted([r[0] for r in got], [r[1] for r in got])
        self._caller.timings["merge"] = time.perf_counter() - t0
        self._caller.computed_T = T
        return out

    def topk(self, hidden, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k candidates per row: fresh (ids uint32 (T, k), values float32 (T, k)) in canonical
        order (value descending, global id ascending among equal values), exactly the unsharded
        ``Head.topk``. Shard s sends its top min(k, its rows) (8 bytes each); the host keeps the k
        best of their union (:func:`lmtail.sharding.merge_topk`)."""
        h2 = self._hidden(hidden)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self._rows:
            raise ParameterError(f"k: expected an integer in [1, {self._rows}]; found {k!r}")
        k = int(k)
        T = self._T(h2)

        def fn(s, h, stream):
            ids, vals = h.topk(h2, min(k, h.rows), stream=stream) if h._device is not None else h.topk(h2, min(k, h.rows))
            return ids.astype(np.int64) + self._splits[s], vals

        res = self._run(fn)
        t0 = time.perf_counter()
        out = merge_trusted([r[0] for r in res], [r[1] for r in res], k)
        self._caller.timings["merge"] = time.perf_counter() - t0
        self._caller.computed_T = T
        return out

    def logits(self, hidden, out: Optional[np.ndarray] = None) -> np.ndarray:
        """(T, rows) float32 capped logits, every shard's rows side by side: the unsharded
        ``Head.logits`` bytes. A fresh array, or ``out=`` (C-contiguous float32 (T, rows), or
        (rows,) for T = 1) filled only after every shard succeeded. Counts 4 * rows * T bytes."""
        h2 = self._hidden(hidden)
        T = self._T(h2)
        if out is not None:
            if not isinstance(out, np.ndarray) or out.dtype != np.float32:
                found = out.dtype if isinstance(out, np.ndarray) else type(out).__name__
                raise DTypeError(f"out: expected a float32 numpy array of shape ({T}, {self._rows}); found {found}")
            if out.shape != (T, self._rows) and not (T == 1 and out.shape == (self._rows,)):
                raise ShapeError(f"out: expected shape ({T}, {self._rows}); found {out.shape}")
            if not (out.flags.c_contiguous and out.flags.writeable):
                raise ShapeError("out: expected a C-contiguous, writable array")

        def fn(s, h, stream):
            return h.logits(h2, stream=stream) if h._device is not None else h.logits(h2)

        res = self._run(fn)
        t0 = time.perf_counter()
        dst = np.empty((T, self._rows), np.float32) if out is None else out.reshape(T, self._rows)
        for s, part in enumerate(res):
            dst[:, self._splits[s]:self._splits[s + 1]] = part
        self._caller.timings["merge"] = time.perf_counter() - t0
        self._caller.computed_T = T
        return dst if out is None else out

    def row(self, t: int) -> np.ndarray:
        """Row t (capped logits, a fresh (rows,) float32 array) of the calling thread's last
        successful call, gathered from the shards (each counts ``4 * its rows`` bytes): the
        whole-row fallback of the top-k route. A failed call leaves the previous rows in place.
        ParameterError if there is no row t (or a cuda shard's device rows were replaced since)."""
        c = self._caller
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= int(t) < c.computed_T:
            raise ParameterError(f"row: expected a row index in [0, {c.computed_T}) of this thread's last "
                                 f"successful call; found {t!r}")
        out = np.empty(self._rows, np.float32)
        for s, h in enumerate(self._shards):
            with h._using(c.pub[s]):
                out[self._splits[s]:self._splits[s + 1]] = h.row(int(t))
        c.last_bytes = [st.last_bytes for st in c.pub]
        return out

    def __repr__(self) -> str:
        return (f"ShardedHead(rows={self._rows}, cols={self._cols}, dtype={self._type.name!r}, "
                f"splits={list(self._splits)}, backends={list(self._backends)})")
