"""Every llama.cpp sampler, reimplemented from the semantics of ``src/llama-sampler.cpp``.

Each class mirrors one ``llama_sampler_init_*`` and works on a :class:`Candidates` window in
place: ``apply(c)`` (may reorder, truncate, rewrite logits/p, set ``selected``), ``accept(token)``
(history), ``reset()`` (reseed, clear history), ``get_state()/set_state()`` (snapshots).
The numeric loops run in ``lmtail._core`` (platform expf/logf, the reference precision and the
libstdc++ sort order); the policy below reads like the reference.

Parameters are stored as float32 exactly as the C API receives them. Where llama.cpp disables a
sampler at init (``init_*`` returns the no-op "?name" sampler) ``chain.build_sampler`` returns
:class:`Empty`, so chains print and behave the same.
"""

from __future__ import annotations

import collections
import numbers

import numpy as np

from .. import _core
from ..errors import LmtailError, ParameterError
from .candidates import Candidates
from .rng import DEFAULT_SEED, Mt19937, check_seed, random_seed

f32 = np.float32
INT32_MIN = -(2 ** 31)


class SamplingError(LmtailError, RuntimeError):
    """A chain ended without a valid selection, or a sampler met a state llama.cpp asserts on."""


# ---- shared helpers (llama.cpp's *_impl functions) ------------------------------------------
def sort_partial(c: Candidates, npartial: int) -> None:
    """llama_token_data_array_partial_sort_inplace: keep the top npartial, sorted."""
    _core.sampling_sort(c.buf, c.offset, c.size, npartial)
    c.size = npartial
    c.sorted = True


def softmax(c: Candidates, do_sort: bool) -> None:
    """llama_sampler_softmax_impl (asserts a non-empty array, as llama.cpp does)."""
    if c.size == 0:
        raise SamplingError("softmax over an empty candidate array (llama.cpp asserts here)")
    if do_sort and not c.sorted:
        sort_partial(c, c.size)
    _core.sampling_softmax(c.buf, c.offset, c.size, c.sorted)


def top_k_impl(c: Candidates, k: int) -> None:
    if k <= 0:
        return
    k = min(k, c.size)
    if not c.sorted:
        sort_partial(c, k)
    c.size = k


def sample_discrete(c: Candidates, rng: Mt19937, stdlib: str) -> int:
    """llama_sample_dist: std::discrete_distribution over p (draw count depends on the stdlib)."""
    n = c.size
    if n < 2 and stdlib != "libc++":
        return 0  # libstdc++: empty table, no engine output consumed
    u = rng.uniform_double(stdlib)
    return int(_core.sampling_discrete(c.buf, c.offset, n, u, stdlib == "libc++"))


def _clamp(v, lo, hi):
    # std::clamp: (v < lo) ? lo : (hi < v) ? hi : v
    return lo if v < lo else (hi if hi < v else v)


# ---- parameter checks -----------------------------------------------------------------------
def _int(v, name):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ParameterError(f"{name}: expected an integer; found {v!r}")
    v = int(v)
    if not -(2 ** 31) <= v < 2 ** 31:
        raise ParameterError(f"{name}: expected a 32-bit integer; found {v}")
    return v


def _size(v, name):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ParameterError(f"{name}: expected an integer; found {v!r}")
    v = int(v)
    if not 0 <= v < 2 ** 63:
        raise ParameterError(f"{name}: expected an integer >= 0 (a size_t in llama.cpp); found {v}")
    return v


def _real(v, name):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ParameterError(f"{name}: expected a real number; found {v!r}")
    return f32(v)


# ---- state validation (snapshots are untrusted input) --------------------------------------
def _st_fields(st, keys: tuple, who: str) -> dict:
    if not isinstance(st, dict) or set(st) != set(keys):
        found = sorted(map(str, st)) if isinstance(st, dict) else type(st).__name__
        raise ParameterError(f"{who}: expected a state with keys {sorted(keys)}; found {found}")
    return st


def _st_int(v, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ParameterError(f"{what}: expected an integer in [{lo}, {hi}]; found {v!r}")
    return v


def _st_f32(v, what: str) -> np.float32:
    # The snapshot wrote float(f32): anything that does not round-trip through float32 is corrupt.
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ParameterError(f"{what}: expected a float32 value; found {v!r}")
    with np.errstate(over="ignore"):
        f = f32(v)
    if not (float(f) == v or (v != v and f != f)):
        raise ParameterError(f"{what}: expected a float32 value; found {v!r} (not representable)")
    return f


def _st_tokens(v, n_vocab: int | None, max_len: int, what: str) -> tuple:
    if not isinstance(v, list):
        raise ParameterError(f"{what}: expected a list of token ids; found {type(v).__name__}")
    if len(v) > max_len:
        raise ParameterError(f"{what}: expected at most {max_len} tokens (the sampler's window); found {len(v)}")
    hi = (n_vocab - 1) if n_vocab is not None else 2 ** 31 - 1
    for i, t in enumerate(v):
        _st_int(t, 0, hi, f"{what}[{i}]")
    return tuple(v)


class _Foreign:
    """State of a sampler defined outside lmtail: opaque (its own set_state validates it)."""

    __slots__ = ("st",)

    def __init__(self, st):
        self.st = st


# ---- samplers ---------------------------------------------------------------------------------
class Sampler:
    """Base class of every sampler: one ``llama_sampler`` (its ``apply``/``accept``/``reset``).

    Subclasses (e.g. for :func:`lmtail.sampling.register_sampler`) override ``apply`` and, if they
    keep state, ``accept``/``reset``/``get_state``/``set_state``. A chain treats a subclass that
    overrides ``set_state`` as opaque: it saves its state with ``get_state()`` (deep-copied) and
    puts it back with ``set_state()`` when a call must be undone, so such a ``set_state`` should
    validate its input and change nothing when it raises.
    """

    name = "?"
    # Which calls change the sampler's state (a chain saves exactly those samplers before a call
    # so that a failing call can be undone). Conservative for samplers defined elsewhere.
    _mutates_on_apply = True
    _mutates_on_accept = True
    _builtin = False

    def apply(self, c: Candidates) -> None:  # pragma: no cover - interface
        """Transform the candidates in place (reorder, truncate, rewrite logits/p, select)."""
        raise NotImplementedError

    def accept(self, token: int) -> None:
        """Record that ``token`` was emitted (histories, adaptive state). Default: nothing."""

    def reset(self) -> None:
        """Back to the state after construction (reseeding from the seed). Default: nothing."""

    def get_state(self) -> dict:
        """The sampler's state as a JSON-compatible dict (what ``Chain.snapshot`` stores)."""
        return {}

    def set_state(self, st: dict) -> None:
        """Restore a ``get_state()`` dict; validated first (ParameterError, nothing changed)."""
        self._load(self._parse(st, None))

    def _foreign(self) -> bool:
        t = type(self)
        return t.set_state is not Sampler.set_state or t.get_state is not Sampler.get_state

    def _parse(self, st, n_vocab: int | None):
        """Validate a ``get_state()`` dict without changing anything; returns what ``_load`` takes."""
        if self._foreign():
            return _Foreign(st)
        _st_fields(st, (), self.name)
        return None

    def _save(self):
        """The live state, cheaply (for undoing a call): what ``_load`` takes."""
        if self._foreign():
            import copy

            return _Foreign(copy.deepcopy(self.get_state()))
        return None

    def _load(self, saved) -> None:
        if isinstance(saved, _Foreign):
            type(self).set_state(self, saved.st)

    def __repr__(self) -> str:
        return f"<{self.name}>"


class _Stateless(Sampler):
    _mutates_on_apply = False
    _mutates_on_accept = False
    _builtin = True


class _Seeded(Sampler):
    """A sampler owning an mt19937 seeded like llama.cpp's get_rng_seed(seed)."""

    rng: Mt19937
    _mutates_on_apply = True
    _mutates_on_accept = False
    _builtin = True
    _STATE_KEYS: tuple = ("seed_cur", "rng")

    def __init__(self, seed: int, stdlib: str):
        self.seed = check_seed(seed)
        self.stdlib = stdlib
        self.seed_cur = random_seed() if self.seed == DEFAULT_SEED else self.seed
        self.rng = Mt19937(self.seed_cur)

    def reset(self) -> None:
        """Reseed: the same stream for an explicit seed, a fresh random seed otherwise."""
        self.seed_cur = random_seed() if self.seed == DEFAULT_SEED else self.seed
        self.rng.reseed(self.seed_cur)

    def get_state(self) -> dict:
        """{"seed_cur": the effective seed, "rng": the engine snapshot as hex} (+ subclass fields)."""
        return {"seed_cur": self.seed_cur, "rng": self.rng.snapshot().hex()}

    def _parse(self, st, n_vocab):
        return self._parse_fields(_st_fields(st, self._STATE_KEYS, self.name), n_vocab)

    def _parse_fields(self, d: dict, n_vocab) -> dict:
        seed_cur = _st_int(d["seed_cur"], 0, 0xFFFFFFFF, f"{self.name}.seed_cur")
        if not isinstance(d["rng"], str):
            raise ParameterError(f"{self.name}.rng: expected a hex string; found {type(d['rng']).__name__}")
        try:
            blob = bytes.fromhex(d["rng"])
        except ValueError:
            raise ParameterError(f"{self.name}.rng: expected a hex string; found {d['rng'][:40]!r}") from None
        rng = Mt19937.parse_snapshot(blob)
        if rng.seed != seed_cur:  # the engine is always (re)seeded with seed_cur
            raise ParameterError(f"{self.name}: engine seed {rng.seed} does not match seed_cur {seed_cur}")
        return {"seed_cur": seed_cur, "rng": rng}

    def _save(self) -> dict:
        return {"seed_cur": self.seed_cur, "rng": self.rng.copy()}

    def _load(self, p: dict) -> None:
        self.seed_cur = p["seed_cur"]
        self.rng.assign(p["rng"])  # in place: RequestSamplerState's references stay live


class Empty(_Stateless):
    """The no-op sampler llama.cpp returns when the parameters disable a sampler ("?top-k"...)."""

    def __init__(self, name: str):
        self.name = name

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        pass


class Greedy(_Stateless):
    """llama_sampler_init_greedy: first index with the strictly largest logit (NaN only wins at
    index 0; all -inf gives index 0). Writes no probabilities."""

    name = "greedy"

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        c.selected = int(_core.sampling_greedy(c.buf, c.offset, c.size)) if c.size else 0


class Dist(_Seeded):
    """llama_sampler_init_dist(seed): the terminal sampler of the common chain.

    One ``uniform_real_distribution<double>`` draw (two engine outputs) per apply, also for a
    single candidate (kept aligned with llama.cpp's backend path); none for an empty array.
    p = expf(logit - max) in float, sums in double in array order, the first index whose running
    sum reaches sum * u is selected (any NaN or +inf makes the sum NaN: the last index is chosen).
    """

    name = "dist"

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if c.size == 0:
            c.selected = -1
            return
        if c.size == 1:
            self.rng.uniform_double(self.stdlib)
            c.selected = 0
            c.buf["p"][c.offset] = 1.0
            return
        u = self.rng.uniform_double(self.stdlib)
        c.selected = int(_core.sampling_dist(c.buf, c.offset, c.size, c.sorted, u))


class TopK(_Stateless):
    """llama_sampler_init_top_k(k). k <= 0 disables it. Unsorted input is partially sorted
    (std::partial_sort for k <= 128, the 128-bucket sort over [-10, 10) otherwise, where NaN, -inf
    and, on x86, +inf land in the lowest bucket)."""

    name = "top-k"

    def __init__(self, k: int):
        self.k = _int(k, "top_k.k")

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        top_k_impl(c, self.k)

    def apply_fresh(self, c: Candidates, logits: np.ndarray) -> bool:
        """Fill fused with top-k on a fresh array (same result as fill + apply)."""
        k = min(self.k, len(logits))
        if k <= 0:
            return False
        _core.sampling_fill_top_k(c.buf, logits, k)
        c.size, c.sorted = k, True
        return True


class TopP(_Stateless):
    """llama_sampler_init_top_p(p, min_keep). p >= 1 disables it. Softmax in array order, then a
    256-candidate bucket guess (arrays > 1024) with a full-sort fallback; keeps the first prefix whose
    float running sum reaches p (inclusive) with at least min_keep entries. p is not renormalised."""

    name = "top-p"

    def __init__(self, p: float, min_keep: int = 1):
        self.p = _real(p, "top_p.p")
        self.min_keep = _size(min_keep, "top_p.min_keep")

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if self.p >= 1.0:
            return
        softmax(c, False)
        c.size = int(_core.sampling_top_p(c.buf, c.offset, c.size, c.sorted, self.p, self.min_keep))
        c.sorted = True


class MinP(_Stateless):
    """llama_sampler_init_min_p(p, min_keep). p <= 0 disables it. Unsorted input: keep, in array
    order, every logit >= max + logf(p) (``sorted`` stays false); when that keeps nothing or fewer
    than min_keep, or the input is sorted, sort and cut at the first failing index."""

    name = "min-p"

    def __init__(self, p: float, min_keep: int = 1):
        self.p = _real(p, "min_p.p")
        self.min_keep = _size(min_keep, "min_p.min_keep")

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if self.p <= 0.0 or c.size == 0:
            return
        k, srt = _core.sampling_min_p(c.buf, c.offset, c.size, c.sorted, self.p, self.min_keep)
        c.size, c.sorted = int(k), bool(srt)

    def apply_fresh(self, c: Candidates, logits: np.ndarray) -> bool:
        """Build the candidates from ``logits`` fused with this sampler (the same result as filling
        {i, logit, 0} and calling ``apply``); False (nothing done) when there is no fused path."""
        if self.p <= 0.0:
            return False
        k, srt = _core.sampling_fill_min_p(c.buf, logits, self.p, self.min_keep)
        c.size, c.sorted = int(k), bool(srt)
        return True


class Typical(_Stateless):
    """llama_sampler_init_typical(p, min_keep). p >= 1 disables it. Reproduces llama.cpp exactly,
    including its degenerate case: a probability that underflows to 0 makes the entropy NaN, and
    then nearly every candidate is kept in whatever order std::sort left them (not "fixed")."""

    name = "typical"

    def __init__(self, p: float, min_keep: int = 1):
        self.p = _real(p, "typical.p")
        self.min_keep = _size(min_keep, "typical.min_keep")

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if self.p >= 1.0:
            return
        softmax(c, True)
        c.size = int(_core.sampling_typical(c.buf, c.offset, c.size, self.p, self.min_keep))
        c.sorted = False


class Temp(_Stateless):
    """llama_sampler_init_temp(t). t == 1 disables it; t <= 0 keeps only the first maximum in
    array order (the rest become -inf); otherwise logit / t in float (a division)."""

    name = "temp"

    def __init__(self, t: float):
        self.t = _real(t, "temp.t")

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        _core.sampling_temperature(c.buf, c.offset, c.size, self.t)

    def apply_fresh(self, c: Candidates, logits: np.ndarray) -> bool:
        """Build the candidates from ``logits`` fused with this sampler (the same result as filling
        {i, logit, 0} and calling ``apply``); False (nothing done) when there is no fused path."""
        _core.sampling_fill_temperature(c.buf, logits, self.t)
        return True


class TempExt(_Stateless):
    """llama_sampler_init_temp_ext(t, delta, exponent): dynamic temperature for delta > 0 (entropy
    of a sorted softmax mapped into [max(0, t - delta), t + delta]; probabilities recomputed in
    double), plain temperature otherwise. With delta > 0 a single candidate is left untouched."""

    name = "temp-ext"

    def __init__(self, t: float, delta: float, exponent: float):
        self.t = _real(t, "temp_ext.t")
        self.delta = _real(delta, "temp_ext.delta")
        self.exponent = _real(exponent, "temp_ext.exponent")

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if self.delta > 0:
            if c.size <= 1:
                return
            softmax(c, True)
            _core.sampling_temp_ext_dynamic(c.buf, c.offset, c.size, self.t, self.delta, self.exponent)
        else:
            _core.sampling_temperature(c.buf, c.offset, c.size, self.t)

    def apply_fresh(self, c: Candidates, logits: np.ndarray) -> bool:
        """Build the candidates from ``logits`` fused with this sampler (the same result as filling
        {i, logit, 0} and calling ``apply``); False (nothing done) when there is no fused path."""
        if self.delta > 0:
            return False
        _core.sampling_fill_temperature(c.buf, logits, self.t)
        return True


class XTC(_Seeded):
    """llama_sampler_init_xtc(probability, threshold, min_keep, seed). Disabled when probability <= 0
    or threshold > 0.5. Draws one ``uniform_real_distribution<float>`` (one engine output) per apply
    on >= 2 candidates; when the draw is <= probability, drops every above-threshold candidate but the
    least likely of them (advancing the window like llama.cpp advances ``data``)."""

    name = "xtc"

    def __init__(self, probability: float, threshold: float, min_keep: int = 1,
                 seed: int = DEFAULT_SEED, stdlib: str = "libstdc++"):
        self.probability = _real(probability, "xtc.probability")
        self.threshold = _real(threshold, "xtc.threshold")
        self.min_keep = _size(min_keep, "xtc.min_keep")
        super().__init__(seed, stdlib)

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if self.probability <= 0.0 or self.threshold > 0.5 or c.size < 2:
            return
        chance = self.rng.uniform_float(self.stdlib)
        if chance > self.probability:
            return
        softmax(c, True)
        shift = int(_core.sampling_xtc_shift(c.buf, c.offset, c.size, self.threshold, self.min_keep))
        c.offset += shift
        c.size -= shift


class TopNSigma(_Stateless):
    """llama_sampler_init_top_n_sigma(n). n <= 0 disables it. Logits below max - n * std (over the
    finite-below entries; -inf excluded) become -inf; size and order unchanged."""

    name = "top-n-sigma"

    def __init__(self, n: float):
        self.n = _real(n, "top_n_sigma.n")

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if self.n <= 0.0 or c.size <= 1:
            return
        _core.sampling_top_n_sigma(c.buf, c.offset, c.size, self.n)


class _MuSeeded(_Seeded):
    """Seeded sampler with mirostat's mu (reset to 2 tau)."""

    tau: np.float32
    mu: np.float32
    _STATE_KEYS = ("seed_cur", "rng", "mu")

    def reset(self) -> None:
        """mu back to 2 tau; reseed."""
        self.mu = f32(f32(2.0) * self.tau)
        super().reset()

    def get_state(self) -> dict:
        """The engine state and mu."""
        return {**super().get_state(), "mu": float(self.mu)}

    def _parse_fields(self, d, n_vocab) -> dict:
        return {**super()._parse_fields(d, n_vocab), "mu": _st_f32(d["mu"], f"{self.name}.mu")}

    def _save(self) -> dict:
        return {**super()._save(), "mu": self.mu}

    def _load(self, p) -> None:
        super()._load(p)
        self.mu = p["mu"]


class Mirostat(_MuSeeded):
    """llama_sampler_init_mirostat(n_vocab, seed, tau, eta, m). mu starts at 2 tau and is updated
    inside apply (so a draw later rejected by a grammar still moves it). Selection uses
    std::discrete_distribution (stdlib-dependent draw count)."""

    name = "mirostat"

    def __init__(self, n_vocab: int, tau: float, eta: float, m: int = 100, seed: int = DEFAULT_SEED,
                 stdlib: str = "libstdc++"):
        self.n_vocab = _int(n_vocab, "mirostat.n_vocab")
        self.tau = _real(tau, "mirostat.tau")
        self.eta = _real(eta, "mirostat.eta")
        self.m = _int(m, "mirostat.m")
        self.mu = f32(f32(2.0) * self.tau)
        super().__init__(seed, stdlib)

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        softmax(c, True)
        k = int(_core.sampling_mirostat_k(c.buf, c.offset, c.size, self.m, self.n_vocab, self.mu))
        top_k_impl(c, k)
        softmax(c, True)
        idx = sample_discrete(c, self.rng, self.stdlib)
        c.selected = idx
        self.mu = f32(_core.sampling_mirostat_mu(self.mu, self.eta, self.tau, c.buf["p"][c.offset + idx]))



class MirostatV2(_MuSeeded):
    """llama_sampler_init_mirostat_v2(seed, tau, eta): truncate the sorted softmax at the first
    token whose surprise -log2f(p) exceeds mu (keeping at least one), renormalise, draw with
    std::discrete_distribution, update mu inside apply."""

    name = "mirostat-v2"

    def __init__(self, tau: float, eta: float, seed: int = DEFAULT_SEED, stdlib: str = "libstdc++"):
        self.tau = _real(tau, "mirostat_v2.tau")
        self.eta = _real(eta, "mirostat_v2.eta")
        self.mu = f32(f32(2.0) * self.tau)
        super().__init__(seed, stdlib)

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        softmax(c, True)
        c.size = max(int(_core.sampling_mirostat_v2_cut(c.buf, c.offset, c.size, self.mu)), 1)
        softmax(c, True)
        idx = sample_discrete(c, self.rng, self.stdlib)
        c.selected = idx
        self.mu = f32(_core.sampling_mirostat_mu(self.mu, self.eta, self.tau, c.buf["p"][c.offset + idx]))



class Penalties(Sampler):
    """llama_sampler_init_penalties(n_vocab, last_n, repeat, freq, present).

    last_n < 0 is clamped to 0 (as llama.cpp does), and last_n == 0 or (repeat == 1, freq == 0,
    present == 0) disables the sampler. For every candidate whose id occurs c > 0 times among the
    last last_n accepted tokens: logit *= repeat if logit <= 0 else logit /= repeat, then
    logit -= c * freq + present (float). Clears ``sorted``.
    """

    name = "penalties"
    _mutates_on_apply = False
    _builtin = True

    def __init__(self, n_vocab: int, last_n: int, repeat: float, freq: float, present: float):
        self.n_vocab = _int(n_vocab, "penalties.n_vocab")
        self.last_n = max(_int(last_n, "penalties.last_n"), 0)
        self.repeat = _real(repeat, "penalties.repeat")
        self.freq = _real(freq, "penalties.freq")
        self.present = _real(present, "penalties.present")
        self.counts = np.zeros(self.n_vocab, np.int32)
        self.prev: collections.deque = collections.deque()

    @staticmethod
    def disabled(last_n, repeat, freq, present) -> bool:
        """llama.cpp's no-op condition for these parameters."""
        return last_n == 0 or (f32(repeat) == 1.0 and f32(freq) == 0.0 and f32(present) == 0.0)

    def accept(self, token: int) -> None:
        """Push ``token`` into the last-n window (updating the counts)."""
        if self.last_n == 0:
            return
        self.counts[token] += 1
        if len(self.prev) >= self.last_n:
            old = self.prev.popleft()
            self.counts[old] -= 1
        self.prev.append(token)

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if self.disabled(self.last_n, self.repeat, self.freq, self.present):
            return
        _core.sampling_penalties(c.buf, c.offset, c.size, self.counts, self.repeat, self.freq, self.present)
        c.sorted = False

    def apply_fresh(self, c: Candidates, logits: np.ndarray) -> bool:
        """Build the candidates from ``logits`` fused with this sampler (the same result as filling
        {i, logit, 0} and calling ``apply``); False (nothing done) when there is no fused path."""
        if self.disabled(self.last_n, self.repeat, self.freq, self.present):
            return False
        _core.sampling_fill_penalties(c.buf, logits, self.counts, self.repeat, self.freq, self.present)
        c.sorted = False
        return True

    def reset(self) -> None:
        """Clear the history."""
        self.prev.clear()
        self.counts[:] = 0

    def get_state(self) -> dict:
        """{"prev": the last last_n accepted tokens, oldest first}."""
        return {"prev": list(self.prev)}

    def _parse(self, st, n_vocab):
        d = _st_fields(st, ("prev",), self.name)
        return _st_tokens(d["prev"], self.n_vocab, self.last_n, "penalties.prev")

    def _save(self):
        return tuple(self.prev)

    def _load(self, prev) -> None:
        self.reset()
        for t in prev:
            self.accept(t)


def _bytes_find(word: bytes, s: bytes) -> bool:
    return word.find(s) != -1


def process_dry_breakers(vocab, breakers) -> dict[int, list[tuple[int, ...]]]:
    """llama.cpp's DRY sequence-breaker preprocessing (get_overlapping_token_sequences).

    Each breaker (str or bytes; truncated to 40 bytes; empty ones skipped) makes every token whose
    text contains it a head with an empty tail, and every token whose text ends with a proper prefix
    of it a head whose tail is the tokenisation of the rest (at most 20 tokens). A breaker given as
    a sequence of token ids (llama_sampler_init_dry_testing) is used directly: head = first id.
    ``vocab`` needs ``n_tokens``, ``detokenize(id) -> bytes`` (special tokens rendered) and
    ``tokenize(bytes) -> list[int]`` (no BOS, no special parsing).
    """
    heads: dict[int, list[tuple[int, ...]]] = {}

    def add(head, tail):
        lst = heads.setdefault(head, [])
        lst.append(tuple(tail))

    texts = None
    for b in breakers:
        if isinstance(b, (list, tuple)) and all(isinstance(t, numbers.Integral) for t in b):
            if len(b):
                add(int(b[0]), [int(t) for t in b[1:]])
            continue
        s = b.encode("utf-8") if isinstance(b, str) else bytes(b)
        if not s:
            continue
        s = s[:40]
        if vocab is None:
            raise ParameterError("dry: string sequence breakers need a vocabulary (Chain(..., vocab=...)); "
                                 "pass token-id sequences instead, or an empty breaker list")
        if texts is None:
            texts = [vocab.detokenize(t) for t in range(vocab.n_tokens)]
        for tok, word in enumerate(texts):
            if _bytes_find(word, s):
                add(tok, [])
                continue
            pos = word.find(s[:1])
            while pos != -1:
                i = 1
                match = True
                while i < len(s) and i + pos < len(word):
                    if word[pos + i] != s[i]:
                        match = False
                        break
                    i += 1
                if match:
                    tail = list(vocab.tokenize(s[i:]))[:20]
                    lst = heads.get(tok, [])
                    if tuple(tail) not in lst:
                        add(tok, tail)
                pos = word.find(s[:1], pos + 1)
    return heads


class DRY(Sampler):
    """llama_sampler_init_dry(vocab, multiplier, base, allowed_length, last_n, breakers).

    last_n < 0 is clamped to 0; multiplier == 0, base < 1 or last_n == 0 disables it. Penalises
    tokens that would extend a repetition longer than allowed_length within the last last_n tokens
    (restart sequences from the breakers cut the repetition), by multiplier * base^(len - allowed)
    with the exponent clamped to keep the power finite. Clears ``sorted``.
    """

    name = "dry"
    _mutates_on_apply = False
    _builtin = True

    def __init__(self, n_vocab: int, multiplier: float, base: float, allowed_length: int, last_n: int,
                 breakers=(), vocab=None):
        self.multiplier = _real(multiplier, "dry.multiplier")
        self.base = _real(base, "dry.base")
        self.allowed_length = _int(allowed_length, "dry.allowed_length")
        self.last_n = max(_int(last_n, "dry.last_n"), 0)
        if isinstance(breakers, (str, bytes)):
            raise ParameterError("dry.breakers: expected a sequence of strings or token-id sequences; found a "
                                 "single string")
        self.breakers = process_dry_breakers(vocab, list(breakers)) if self.enabled() else {}
        self.last: collections.deque = collections.deque(maxlen=max(self.last_n, 1))
        self.max_len = np.full(n_vocab, INT32_MIN, np.int32)

    def enabled(self) -> bool:
        """False when llama.cpp's init would return the no-op sampler."""
        return self.multiplier != 0.0 and self.base >= 1.0 and self.last_n != 0

    def accept(self, token: int) -> None:
        """Append ``token`` to the history (kept to last_n tokens)."""
        if self.enabled():
            self.last.append(token)

    def reset(self) -> None:
        """Clear the history."""
        self.last.clear()

    def get_state(self) -> dict:
        """{"last": the history, oldest first}."""
        return {"last": list(self.last)}

    def _parse(self, st, n_vocab):
        d = _st_fields(st, ("last",), self.name)
        return _st_tokens(d["last"], len(self.max_len), self.last.maxlen, "dry.last")

    def _save(self):
        return tuple(self.last)

    def _load(self, last) -> None:
        self.last.clear()
        self.last.extend(last)

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if not self.enabled():
            return
        n = min(len(self.last), self.last_n)
        allowed = self.allowed_length
        if n <= allowed:
            return
        hist = list(self.last)

        def rat(i):  # i-th most recent token
            return hist[len(hist) - 1 - i]

        # 1. restart sequences limit the repetition length
        rep_limit = n
        for i in range(n):
            tails = self.breakers.get(rat(i))
            if tails is None:
                continue
            longest = -1
            for tail in tails:
                L = len(tail)
                if longest < L <= i and all(tail[o] == rat(i - o - 1) for o in range(L)):
                    longest = L
            if longest >= 0:
                rep_limit = i - longest
                break
        if rep_limit < allowed:
            return

        # 2. reversed Z-algorithm (values clamped to rep_limit as stored, as in llama.cpp)
        rep = [0] * n
        last = n - 1
        lt = rt = 0
        for k in range(1, n):
            if k > rt:
                m = 0
                while m + k < n and rat(m) == rat(m + k):
                    m += 1
                rep[last - k] = min(m, rep_limit)
                if m > 0:
                    lt, rt = k, k + m - 1
            else:
                p = k - lt
                right = rt - k + 1
                if rep[last - p] < right:
                    rep[last - k] = min(rep[last - p], rep_limit)
                else:
                    i = rt + 1
                    while i < n and rat(i) == rat(i - k):
                        i += 1
                    rep[last - k] = min(i - k, rep_limit)
                    lt, rt = k, i - 1

        # 3. the token after each long-enough repeat would extend it
        max_rep: dict[int, int] = {}
        for i in range(n - 1):
            r = rep[i]
            if r >= allowed:
                tok = rat(n - 2 - i)
                if tok not in max_rep or max_rep[tok] < r:
                    max_rep[tok] = r

        # 4. penalties (single-token breakers are exempt)
        touched = [t for t, r in max_rep.items()
                   if 0 <= t < len(self.max_len) and not any(len(tl) == 0 for tl in self.breakers.get(t, ()))]
        if touched:
            for t in touched:
                self.max_len[t] = max_rep[t]
            try:
                _core.sampling_dry(c.buf, c.offset, c.size, self.max_len, self.multiplier, self.base, allowed)
            finally:
                self.max_len[touched] = INT32_MIN
        c.sorted = False


class LogitBias(_Stateless):
    """llama_sampler_init_logit_bias(n_vocab, biases). ``biases``: a {token: bias} mapping or a
    sequence of (token, bias) pairs (duplicates allowed and kept in order).

    Reproduces llama.cpp's two paths: an entry whose token is still at its own index (array in id
    order) is added there directly, in list order (a token listed twice gets both biases); the
    others are searched for in array order, each candidate getting the bias of the *first*
    remaining entry with its id. Does not clear ``sorted`` (as llama.cpp).
    """

    name = "logit-bias"

    def __init__(self, n_vocab: int, biases):
        self.n_vocab = _int(n_vocab, "logit_bias.n_vocab")
        items = list(biases.items()) if isinstance(biases, dict) else list(biases)
        self.biases: list[tuple[int, np.float32]] = []
        for it in items:
            if not (isinstance(it, (tuple, list)) and len(it) == 2):
                raise ParameterError(f"logit_bias: expected (token, bias) pairs; found {it!r}")
            tok = _int(it[0], "logit_bias.token")
            self.biases.append((tok, _real(it[1], f"logit_bias[{tok}]")))

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        if not self.biases:
            return
        v = c.view()
        logits = v["logit"]
        ids = v["id"]
        rest = []
        for tok, b in self.biases:
            if 0 <= tok < c.size and ids[tok] == tok:
                logits[tok] = f32(logits[tok] + b)
            else:
                rest.append((tok, b))
        if not rest:
            return
        first: dict[int, np.float32] = {}
        for tok, b in rest:
            first.setdefault(tok, b)
        keys = np.fromiter(first.keys(), np.int64, len(first))
        vals = np.fromiter(first.values(), np.float32, len(first))
        order = np.argsort(keys)
        keys, vals = keys[order], vals[order]
        pos = np.searchsorted(keys, ids)
        pos_c = np.minimum(pos, len(keys) - 1)
        hit = keys[pos_c] == ids
        if hit.any():
            logits[hit] = logits[hit] + vals[pos_c[hit]]


class AdaptiveP(_Seeded):
    """llama_sampler_init_adaptive_p(target, decay, seed): terminal sampler. decay is clamped to
    [0, 0.99] (as llama.cpp). target < 0: plain std::discrete_distribution draw over the softmax.
    Otherwise logits are remapped around an EMA-adapted target probability, re-softmaxed and drawn;
    accept() of the selected token updates the EMA with its pre-transform probability."""

    name = "adaptive-p"
    _mutates_on_accept = True

    def __init__(self, target: float, decay: float, seed: int = DEFAULT_SEED, stdlib: str = "libstdc++"):
        self.target = _real(target, "adaptive_p.target")
        self.decay = f32(_clamp(_real(decay, "adaptive_p.decay"), f32(0.0), f32(0.99)))
        super().__init__(seed, stdlib)
        self._reset_ema()

    def _reset_ema(self):
        self.weighted_sum = f32(self.target / f32(f32(1.0) - self.decay))
        self.total_weight = f32(f32(1.0) / f32(f32(1.0) - self.decay))
        self.original_probs = np.zeros(0, np.float32)
        self.pending_id = -1
        self.pending_idx = -1

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        softmax(c, False)
        if self.target < 0.0:
            c.selected = sample_discrete(c, self.rng, self.stdlib)
            return
        self.original_probs = c.view()["p"].copy()
        target = _clamp(self.target, f32(0.0), f32(1.0))
        if self.total_weight == 0.0:
            raw = target
        else:
            raw = f32(f32(f32(2.0) * target) - f32(self.weighted_sum / self.total_weight))
        adapted = _clamp(raw, f32(0.0), f32(1.0))
        _core.sampling_adaptive_transform(c.buf, c.offset, c.size, adapted)
        softmax(c, False)
        idx = sample_discrete(c, self.rng, self.stdlib)
        c.selected = idx
        self.pending_id = int(c.buf["id"][c.offset + idx])
        self.pending_idx = idx

    def accept(self, token: int) -> None:
        """Update the EMA with the pre-transform probability of the token apply selected."""
        if self.pending_id == token and self.pending_id != -1:
            p = self.original_probs[self.pending_idx]
            self.weighted_sum = f32(p + f32(self.decay * self.weighted_sum))
            self.total_weight = f32(f32(1.0) + f32(self.decay * self.total_weight))
        self.pending_id = -1
        self.pending_idx = -1

    def reset(self) -> None:
        """EMA back to its initial value; reseed."""
        self._reset_ema()
        super().reset()

    _STATE_KEYS = ("seed_cur", "rng", "weighted_sum", "total_weight", "pending_id", "pending_idx",
                   "original_probs")

    def get_state(self) -> dict:
        """The engine state, the EMA and the pending selection (with its probabilities)."""
        return {**super().get_state(), "weighted_sum": float(self.weighted_sum),
                "total_weight": float(self.total_weight), "pending_id": self.pending_id,
                "pending_idx": self.pending_idx, "original_probs": self.original_probs.tobytes().hex()}

    def _parse_fields(self, d, n_vocab) -> dict:
        p = super()._parse_fields(d, n_vocab)
        who = self.name
        ws = p["weighted_sum"] = _st_f32(d["weighted_sum"], f"{who}.weighted_sum")
        tw = p["total_weight"] = _st_f32(d["total_weight"], f"{who}.total_weight")
        # Reachable values: total_weight starts at 1 / (1 - decay) >= 1 and stays >= 1; both are
        # finite unless target is NaN (then weighted_sum is NaN from the start).
        if not (np.isfinite(ws) or (np.isnan(ws) and np.isnan(self.target))):
            raise ParameterError(f"{who}.weighted_sum: expected a finite value; found {float(ws)}")
        if not (np.isfinite(tw) and tw >= 1.0):
            raise ParameterError(f"{who}.total_weight: expected a finite value >= 1; found {float(tw)}")
        raw = d["original_probs"]
        try:
            blob = bytes.fromhex(raw) if isinstance(raw, str) else None
        except ValueError:
            blob = None
        if blob is None or len(blob) % 4 or (n_vocab is not None and len(blob) > 4 * n_vocab):
            raise ParameterError(f"{who}.original_probs: expected the hex of at most n_vocab float32 values")
        probs = np.frombuffer(blob, np.float32).copy()
        if np.any(~((probs >= 0) & (probs <= 1)) & ~np.isnan(probs)):
            raise ParameterError(f"{who}.original_probs: expected probabilities in [0, 1]")
        hi = (n_vocab - 1) if n_vocab is not None else 2 ** 31 - 1
        pid = _st_int(d["pending_id"], -1, hi, f"{who}.pending_id")
        pidx = _st_int(d["pending_idx"], -1, len(probs) - 1, f"{who}.pending_idx")
        if (pid == -1) != (pidx == -1):
            raise ParameterError(f"{who}: pending_id {pid} and pending_idx {pidx} must both be -1 or both set")
        p.update(original_probs=probs, pending_id=pid, pending_idx=pidx)
        return p

    def _save(self) -> dict:
        # original_probs is replaced by apply, never written in place: a reference suffices.
        return {**super()._save(), "weighted_sum": self.weighted_sum, "total_weight": self.total_weight,
                "pending_id": self.pending_id, "pending_idx": self.pending_idx,
                "original_probs": self.original_probs}

    def _load(self, p) -> None:
        super()._load(p)
        self.weighted_sum, self.total_weight = p["weighted_sum"], p["total_weight"]
        self.pending_id, self.pending_idx = p["pending_id"], p["pending_idx"]
        self.original_probs = p["original_probs"]


class Infill(_Stateless):
    """llama_sampler_init_infill(vocab): fill-in-the-middle filtering (EOG vs text mass, merging
    candidates whose piece is a prefix of another's, two probability thresholds). ``vocab`` needs
    ``is_eog(id)``, ``token_to_piece(id) -> bytes`` (special=false), ``token_eot()``, ``token_eos()``
    (-1 when absent). Float arithmetic throughout, as llama.cpp."""

    name = "infill"

    def __init__(self, vocab):
        if vocab is None:
            raise ParameterError("infill: needs a vocabulary (Chain(..., vocab=...))")
        self.vocab = vocab

    def apply(self, c: Candidates) -> None:
        """Apply this sampler to the candidate window in place (behaviour: the class docstring)."""
        softmax(c, True)
        v = c.view()
        ids = [int(t) for t in v["id"]]
        logit = [f32(x) for x in v["logit"]]
        p = [f32(x) for x in v["p"]]
        eog = [bool(self.vocab.is_eog(t)) for t in ids]
        p_txt = f32(0.0)
        p_eog = f32(0.0)
        for i in range(len(ids)):
            if eog[i]:
                p_eog = f32(p_eog + p[i])
            else:
                p_txt = f32(p_txt + p[i])
        n = len(ids)
        if f32(f32(f32(3.0) * p_eog) * f32(n)) > p_txt:
            keep = [i for i in range(n) if eog[i]]
            s = f32(0.0)
            for i in keep:
                s = f32(s + p[i])
            self._write(c, [(ids[i], logit[i], p[i]) for i in keep], s)
            return
        pieces = {}

        def piece(t):
            if t not in pieces:
                pieces[t] = bytes(self.vocab.token_to_piece(t))
            return pieces[t]

        ninf = f32(-np.inf)
        for i0 in range(n):
            for i1 in range(n):
                if logit[i0] == ninf:
                    break
                if i0 == i1 or logit[i1] == ninf:
                    continue
                a, b = piece(ids[i0]), piece(ids[i1])
                if len(a) > 0 and len(a) <= len(b) and b[:len(a)] == a:
                    dst, src = i0, i1
                    if p[i1] > p[i0]:
                        dst, src = src, dst
                    p[dst] = f32(p[dst] + p[src])
                    logit[src] = ninf
                    p[src] = f32(0.0)
        kept = []
        n_non_eog = 0
        s = f32(0.0)
        thold = f32(0.2)
        for i in range(n):
            if p[i] < thold and not eog[i]:
                continue
            if not eog[i]:
                n_non_eog += 1
            s = f32(s + p[i])
            kept.append(i)
        if n_non_eog == 0:
            tok = self.vocab.token_eot()
            if tok == -1:
                tok = self.vocab.token_eos()
            if tok == -1:
                raise SamplingError("infill: the vocabulary has neither EOT nor EOS")
            c.buf[c.offset]["id"] = tok
            c.buf[c.offset]["logit"] = 1.0
            if kept:
                c.buf[c.offset]["p"] = p[kept[0]]
            else:
                c.buf[c.offset]["p"] = p[0] if n else 0.0
            c.size = 1
            return
        rows = [(ids[i], logit[i], f32(p[i] / s)) for i in kept]
        thold = f32(1.0 / (n_non_eog + 1))
        s2 = f32(0.0)
        rows2 = []
        for t, lg, pp in rows:
            if pp < thold and not self.vocab.is_eog(t):
                continue
            s2 = f32(s2 + pp)
            rows2.append((t, lg, pp))
        self._write(c, rows2, s2)

    @staticmethod
    def _write(c: Candidates, rows, s):
        v = c.buf[c.offset:c.offset + len(rows)]
        for i, (t, lg, pp) in enumerate(rows):
            v[i] = (t, lg, f32(pp / s))
        c.size = len(rows)


__all__ = [
    "Sampler", "Empty", "Greedy", "Dist", "TopK", "TopP", "MinP", "Typical", "Temp", "TempExt", "XTC",
    "TopNSigma", "Mirostat", "MirostatV2", "Penalties", "DRY", "LogitBias", "AdaptiveP", "Infill",
    "SamplingError", "softmax", "sort_partial", "top_k_impl", "sample_discrete",
]
