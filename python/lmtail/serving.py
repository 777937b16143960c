"""A batch of requests per call, as a serving engine samples them (llama-server's slots, vLLM, SGLang).

:class:`Batch` holds one *slot* per live request: its :class:`~lmtail.sampling.Chain` (any spec,
``common_chain`` parameters, seed, ``stdlib``) and optionally a grammar matcher.  Each step::

    tokens = batch.sample(logits)     # logits (len(batch.slots), n_vocab) float32 -> int32 (B,)
    batch.accept(tokens)              # each row's token into its grammar, then its chain

Row ``r`` of the result is exactly what ``common_sample(slot.chain, logits[r], slot.grammar)``
returns on its own (:mod:`lmtail.common_sampling`: llama-server's sample / check / resample
discipline): every row runs that very function on its own chain and grammar, so a row's RNG
streams, mirostat ``mu`` and histories are touched by nothing else, and a request's tokens do not
depend on which other rows share the batch or on the thread count.

Chains come from any spec, from ``common_chain``, or from the parameter names users bring
(:func:`from_openai`, :func:`from_vllm`; logprobs in the OpenAI shape with :func:`batch_logprobs`;
all in :mod:`lmtail.serving_params`).

Like :mod:`lmtail.common_sampling` this module sits above both the sampler and the grammar layers:
it imports :mod:`lmtail.sampling` and takes a grammar by its protocol (``allows``, ``mask``,
``accept``, ``snapshot``/``check_snapshot``/``restore``, optionally ``awaiting_trigger``).

Threads.  :meth:`Batch.sample` is :func:`lmtail.common_sampling.common_sample_rows`: each row's
candidate fill and its built-in samplers (fused: penalties and logit-bias as a few rewritten
logits of a top-k read straight from the row, so the row is streamed once) run in C++ without
the GIL, rows started as soon as they are planned on ``threads - 1`` helper threads and on the
calling thread, which meanwhile does the Python part (RNG draws, grammar checks, samplers
without a C++ path).  A grammar row whose first draw is rejected is
resampled on its mask in the same job as soon as the rejection is seen (overlapping the other
rows' finishing).  :meth:`Batch.sample_topk` spreads its rows over a small
thread pool; there grammar calls are serialised on one lock (matchers of one grammar share its
interned Earley states and mask cache, which are not safe to grow from two threads).  Results
never depend on the thread count: nothing a row computes is shared with another row.
"""

from __future__ import annotations

import numbers
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, NamedTuple, Optional

import numpy as np

from . import _core
from ._validate import float32_array, threads_arg
from .common_sampling import _sample_rows, common_sample_row
from .errors import ParameterError, ShapeError
from .sampling import Chain, TopKRows, batch_topk_needed, topk_needed
from .serving_params import OPENAI_PARAMS, batch_logprobs, from_openai, from_vllm, openai_logprobs

__all__ = ["Batch", "Slot", "SlotSnapshot", "from_openai", "from_vllm", "openai_logprobs", "batch_logprobs",
           "OPENAI_PARAMS"]


class SlotSnapshot(NamedTuple):
    """One slot's state: its chain's ``snapshot()`` bytes and its grammar's snapshot (or None)."""

    chain: bytes
    grammar: object = None


class Slot:
    """One request in a :class:`Batch`: its chain and grammar (None for none).  Returned by
    :meth:`Batch.add`; pass it to :meth:`Batch.remove`, :meth:`Batch.snapshot`, :meth:`Batch.restore`."""

    __slots__ = ("chain", "grammar", "id", "_batch")

    def __init__(self, chain: Chain, grammar, sid: int, batch: "Batch"):
        self.chain = chain
        self.grammar = grammar
        self.id = sid
        self._batch = batch

    def __repr__(self) -> str:
        g = "" if self.grammar is None else f", grammar={type(self.grammar).__name__}"
        return f"Slot({self.id}, {' -> '.join(self.chain.names)}{g})"


class _Locked:
    """A grammar seen through the batch's grammar lock (only what common_sample calls)."""

    __slots__ = ("g", "lock")

    def __init__(self, g, lock):
        self.g = g
        self.lock = lock

    @property
    def awaiting_trigger(self):
        return getattr(self.g, "awaiting_trigger", False)

    def allows(self, t):
        with self.lock:
            return self.g.allows(t)

    def mask(self):
        with self.lock:
            return self.g.mask()


_GRAMMAR_API = ("allows", "mask", "accept", "snapshot", "restore", "check_snapshot")


class Batch:
    """Per-request slots sampled together, each row exactly as its own ``common_sample`` call.

    ``threads``: threads the rows are spread over, the caller's included (None: the core's
    default, LMTAIL_NUM_THREADS or the usable CPUs; 1: the calling thread only).  ``n_vocab``: fixed up front, or taken from the first slot.
    """

    def __init__(self, n_vocab: Optional[int] = None, *, threads: Optional[int] = None):
        if n_vocab is not None and (isinstance(n_vocab, bool) or not isinstance(n_vocab, numbers.Integral)
                                    or not 0 < int(n_vocab) < 2 ** 31):
            raise ParameterError(f"n_vocab: expected None or an integer in [1, 2**31 - 1]; found {n_vocab!r}")
        self.n_vocab: Optional[int] = None if n_vocab is None else int(n_vocab)
        t = threads_arg(threads)
        self.threads = t if t else int(_core.default_threads())
        self._slots: list[Slot] = []
        self._next_id = 0
        self._glock = threading.Lock()
        self._pool: Optional[ThreadPoolExecutor] = None

    # -- slots ---------------------------------------------------------------------------------
    @property
    def slots(self) -> list[Slot]:
        """The live slots in row order (the order they were added; removals keep it)."""
        return list(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    def add(self, chain: Chain, grammar=None) -> Slot:
        """A new last row for ``chain`` (and ``grammar``: a GrammarMatcher / LazyGrammarMatcher or
        anything with their protocol).  A chain or grammar object already in the batch is refused:
        two rows sharing one would share RNG streams or parse state."""
        if not isinstance(chain, Chain):
            raise ParameterError(f"add: expected an lmtail.sampling.Chain; found {type(chain).__name__}")
        if self.n_vocab is not None and chain.n_vocab != self.n_vocab:
            raise ShapeError(f"add: the chain's n_vocab {chain.n_vocab} differs from the batch's {self.n_vocab}")
        if grammar is not None:
            missing = [a for a in _GRAMMAR_API if not callable(getattr(grammar, a, None))]
            if missing:
                raise ParameterError(f"add: grammar must be a GrammarMatcher or LazyGrammarMatcher (missing "
                                     f"{', '.join(missing)}); found {type(grammar).__name__}")
            gv = getattr(getattr(grammar, "vocab", None), "n_vocab", None)
            if gv is not None and gv != chain.n_vocab:
                raise ShapeError(f"add: the grammar's vocabulary has {gv} tokens, the chain's n_vocab is {chain.n_vocab}")
        for s in self._slots:
            if s.chain is chain:
                raise ParameterError(f"add: this chain is already in the batch ({s!r}); build one chain per request")
            if grammar is not None and s.grammar is grammar:
                raise ParameterError(f"add: this grammar matcher is already in the batch ({s!r}); one per request")
        slot = Slot(chain, grammar, self._next_id, self)
        self._next_id += 1
        self.n_vocab = chain.n_vocab
        self._slots.append(slot)
        return slot

    def _own(self, slot, what: str) -> Slot:
        if not isinstance(slot, Slot) or slot._batch is not self or slot not in self._slots:
            raise ParameterError(f"{what}: expected a live Slot of this batch (from add()); found {slot!r}")
        return slot

    def remove(self, slot: Slot) -> None:
        """Drop a row; the other rows keep their order."""
        self._slots.remove(self._own(slot, "remove"))

    def row(self, slot: Slot) -> int:
        """The slot's current row index."""
        return self._slots.index(self._own(slot, "row"))

    # -- state ---------------------------------------------------------------------------------
    def snapshot(self, slot: Slot) -> SlotSnapshot:
        """The slot's chain and grammar state (restore with :meth:`restore`)."""
        s = self._own(slot, "snapshot")
        return SlotSnapshot(s.chain.snapshot(), None if s.grammar is None else s.grammar.snapshot())

    def restore(self, slot: Slot, snap: SlotSnapshot) -> None:
        """Put one slot back to a :meth:`snapshot`, all or nothing (both parts are validated
        before either is applied); no other row changes."""
        s = self._own(slot, "restore")
        if not isinstance(snap, SlotSnapshot):
            raise ParameterError(f"restore: expected a SlotSnapshot from Batch.snapshot(); found {type(snap).__name__}")
        if (snap.grammar is None) != (s.grammar is None):
            raise ParameterError("restore: the snapshot's grammar part does not fit this slot "
                                 f"({'no' if s.grammar is None else 'a'} grammar here)")
        if s.grammar is not None:
            s.grammar.check_snapshot(snap.grammar)
        s.chain.restore(snap.chain)  # validates in full before it changes anything
        if s.grammar is not None:
            s.grammar.restore(snap.grammar)

    # -- sampling ------------------------------------------------------------------------------
    def _run(self, fn: Callable[[int], int], n: int) -> np.ndarray:
        """fn(r) for every row, all or nothing: if any row raises, every row that finished is put
        back (its chain's saved state) and the first failing row's error is raised."""
        out = np.empty(n, np.int32)
        saved = [s.chain._save("apply") for s in self._slots]
        errs: list = [None] * n

        def chunk(lo: int, hi: int) -> None:
            for r in range(lo, hi):
                try:
                    out[r] = fn(r)
                except BaseException as e:  # noqa: BLE001 - re-raised below, after the rollback
                    errs[r] = e

        nt = min(self.threads, n)
        if nt <= 1:
            chunk(0, n)
        else:
            if self._pool is None or self._pool._max_workers < nt:
                self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="lmtail-batch")
            bounds = [n * i // nt for i in range(nt + 1)]
            futs = [self._pool.submit(chunk, bounds[i], bounds[i + 1]) for i in range(1, nt)]
            chunk(bounds[0], bounds[1])  # the caller takes the first chunk
            for f in futs:
                f.result()
        bad = [r for r in range(n) if errs[r] is not None]
        if bad:
            for r in range(n):
                if errs[r] is None:
                    self._slots[r].chain._load(saved[r])
            e = errs[bad[0]]
            if hasattr(e, "add_note"):
                e.add_note(f"lmtail.serving.Batch: row {bad[0]} ({self._slots[bad[0]]!r}); no row advanced")
            raise e
        return out

    def _grammar(self, s: Slot):
        return None if s.grammar is None else _Locked(s.grammar, self._glock)

    def sample(self, logits) -> np.ndarray:
        """One token per row: int32 (B,), row r = ``common_sample(chain_r, logits[r], grammar_r)``.

        ``logits``: (B, n_vocab) float32 with B = ``len(batch.slots)`` -- a numpy array, any float32
        view, or a CPU ``__dlpack__`` / ``__array_interface__`` object (read in place; a copy only
        to make rows contiguous).  Nothing is accepted: call :meth:`accept`.  All or nothing: if a
        row fails, no row's state has advanced.
        """
        if not self._slots:
            raise ParameterError("sample: the batch has no slots (add() one first)")
        x = float32_array(logits, "logits", ndims=(2,))
        B = len(self._slots)
        if x.shape != (B, self.n_vocab):
            raise ShapeError(f"logits: expected shape ({B}, {self.n_vocab}) (one row per slot, n_vocab); found {x.shape}")
        slots = self._slots
        return _sample_rows([s.chain for s in slots], x, [s.grammar for s in slots], self.threads,
                            note=lambda r: f"lmtail.serving.Batch: row {r} ({slots[r]!r}); no row advanced")

    def topk_needed(self, n_probs: int = 0, suppressed=()) -> list[int]:
        """Per row, the k its chain needs for the top-k read-back route (0: the whole row), as
        :func:`lmtail.sampling.topk_needed` with the row's grammar."""
        return [topk_needed(s.chain, n_probs, suppressed, grammar=s.grammar) for s in self._slots]

    def batch_topk_needed(self, n_probs: int = 0, suppressed=()) -> int:
        """k for the candidates to read back for every row: the largest any row's top-k route needs
        (rows that need the whole row are fetched whole by :meth:`sample_topk`); 0 when no row can
        use the route.  Read ``k + 1`` candidates per row (``Head.topk(hidden, k + 1)``)."""
        return batch_topk_needed([k for k in self.topk_needed(n_probs, suppressed) if k > 0] or [0])

    def sample_topk(self, ids, values, row: Optional[Callable[[int], np.ndarray]] = None) -> np.ndarray:
        """One token per row from (B, m) top candidates (``Head.topk``'s output), each row exactly
        as :meth:`sample` on the whole logits.  ``row(r)`` returns row r's whole logits; it is
        called only for rows that cannot be decided from their candidates (a tie at the
        boundary, a chain or a grammar that needs the whole distribution, fewer candidates than
        the row's chain needs)."""
        if not self._slots:
            raise ParameterError("sample_topk: the batch has no slots (add() one first)")
        rows = TopKRows(ids, values, row)
        B = len(self._slots)
        if len(rows) != B:
            raise ShapeError(f"sample_topk: expected {B} rows of candidates (one per slot); found {len(rows)}")
        slots = self._slots
        grammars = [self._grammar(s) for s in slots]
        return self._run(lambda r: common_sample_row(slots[r].chain, rows, r, grammars[r]), B)

    def accept(self, tokens) -> None:
        """Accept row r's token into its grammar (first, as ``common_sampler_accept``) and its
        chain.  All or nothing: a token out of range, or one a row's grammar rejects, leaves every
        row as before."""
        t = np.asarray(tokens)
        B = len(self._slots)
        if t.dtype.kind not in "iu" or t.shape != (B,):
            raise ParameterError(f"accept: expected {B} integer tokens (one per slot); found {t.dtype} {t.shape}")
        if B and (t.min() < 0 or t.max() >= self.n_vocab):
            bad = int(np.flatnonzero((t < 0) | (t >= self.n_vocab))[0])
            raise ParameterError(f"accept: row {bad}: token {int(t[bad])} outside [0, {self.n_vocab})")
        toks = [int(v) for v in t]
        # Grammars first (O(1) snapshots undo them), then chains: with the tokens validated a
        # built-in sampler's accept cannot fail, so only chains with samplers defined elsewhere
        # need saving (Chain._save("accept") is empty otherwise).
        gdone: list = []
        r = 0
        try:
            for r, (s, tok) in enumerate(zip(self._slots, toks)):
                if s.grammar is not None:
                    snap = s.grammar.snapshot()
                    s.grammar.accept(tok)
                    gdone.append((s.grammar, snap))
        except BaseException as e:
            for g, snap in gdone:
                g.restore(snap)
            if hasattr(e, "add_note"):
                e.add_note(f"lmtail.serving.Batch.accept: row {r}; no row accepted its token")
            raise
        cdone: list = []
        try:
            for s, tok in zip(self._slots, toks):
                saved = s.chain._save("accept")
                s.chain.accept(tok)
                cdone.append((s.chain, saved))
        except BaseException:
            for c, saved in cdone:
                c._load(saved)
            for g, snap in gdone:
                g.restore(snap)
            raise

    def close(self) -> None:
        """Stop the batch's worker threads (also done when the batch is garbage collected)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"Batch({len(self._slots)} slots, n_vocab={self.n_vocab}, threads={self.threads})"
