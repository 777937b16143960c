"""Sampler chains: ``Chain(spec, n_vocab)`` (llama_sampler_chain) and ``common_chain(**params)``
(what llama.cpp's ``common_sampler_init`` builds from ``common_params_sampling``).

A spec is a list of tuples named as llama.cpp names its samplers; arguments follow
``llama_sampler_init_*`` except that n_vocab and the vocabulary come from the chain and an RNG
seed is always the last, optional argument (absent: the chain's seed). Names are
case-insensitive with ``-`` and ``_`` interchangeable, and every name llama.cpp uses is accepted:
the ``llama_sampler_init_*`` names below, the names llama.cpp prints (``"top-k"``,
``"temp-ext"``, ``"mirostat-v2"``...), and every name and alias of ``common_sampler_types_from_names``
(``"temperature"`` = temp_ext, ``"typ_p"``/``"typ"``/``"typp"`` = typical, ``"nucleus"``/``"topp"``
= top_p, ``"topk"``, ``"minp"``, ``"topnsigma"``, ``"adaptivep"``). :func:`sampler_names` lists
them; an unknown name raises ParameterError listing the valid ones::

    ("greedy",)                          ("dist", [seed])
    ("top_k", k)                         ("top_p", p, [min_keep=1])
    ("min_p", p, [min_keep=1])           ("typical", p, [min_keep=1])
    ("temp", t)                          ("temp_ext", t, [delta=0], [exponent=1])
    ("xtc", probability, threshold, [min_keep=1], [seed])
    ("top_n_sigma", n)                   ("mirostat", tau, eta, [m=100], [seed])
    ("mirostat_v2", tau, eta, [seed])    ("penalties", last_n, repeat, freq, present)
    ("dry", multiplier, base, allowed_length, last_n, [breakers=()])
    ("logit_bias", {token: bias} | [(token, bias), ...])
    ("adaptive_p", target, decay, [seed])
    ("infill",)

Seed 0xFFFFFFFF (LLAMA_DEFAULT_SEED) means a random seed, drawn independently by every
RNG-owning sampler at construction and at every ``reset()`` (as llama.cpp); any other seed is
deterministic, and with one explicit seed dist, XTC, mirostat and adaptive-p start from identical
engine states and then advance separately.

Draw conventions (``stdlib``) are described in :mod:`lmtail.sampling.rng`.

What is exact, and where (read before relying on parity):

* Linux x86-64 with GCC's libstdc++ (the reference: llama.cpp as built by llama-cpp-python
  0.3.36): token-identical, and the whole candidate array bit-identical after every sampler,
  including tie order, -inf/+inf/NaN handling and the degenerate paths. Tested in
  tests/test_sampling_parity.py against llama.cpp itself.
* ``stdlib="libc++"`` (llama.cpp on macOS): the engine, both uniform draws and
  std::discrete_distribution (including its two-word draw on a single weight) follow libc++
  (tests/test_sampling_stdlib.py compares them with a clang + libc++ build). Sorting does **not**:
  lmtail's sorts are libstdc++'s std::sort / std::partial_sort, and libc++ orders *equal* keys
  differently (its introsort and heap differ, and changed across LLVM releases). Results can
  therefore differ from a libc++ llama.cpp only when a sort meets equal logits (or, in typical,
  equal scores): which tied tokens survive a top-k boundary, and the order of tied candidates in a
  sorted prefix — which can change the token a given draw selects in dist, which tied maximum
  temp <= 0 keeps, where top-p cuts inside a group of equal probabilities; and any sort that
  meets a NaN logit (not a strict weak order). Inputs without ties or NaN
  sort identically (a correct sort of distinct keys is unique). tests/test_sampling_stdlib.py
  shows both facts with a clang + libc++ build of std::partial_sort.
* Apple silicon: an Apple-clang build of llama.cpp contracts ``a * b + c`` into FMAs; lmtail is built
  with -ffp-contract=off, so last-bit differences are possible in the bucket index 6.4f*x+64,
  the mirostat mu update, penalties' c*freq+present, top-n-sigma's max-n*std, the entropy sums
  (typical, temp-ext) and adaptive-p's transform. On ARM an +inf logit saturates into the top
  bucket (x86: the lowest); lmtail follows the CPU it runs on. lmtail calls the platform
  expf/logf exactly as a llama.cpp built there does. None of this can be verified here.
"""

from __future__ import annotations

import contextlib
import json
import numbers

import numpy as np

from .. import _core
from .._validate import host_array
from ..errors import DTypeError, LmtailError, ParameterError, ShapeError
from . import samplers as S
from .candidates import TOKEN_DATA, Candidates
from .rng import DEFAULT_SEED, check_seed, check_stdlib

_SNAP_MAGIC = b"LMTCHAIN1\n"

# name -> (required args, optional args)
_SPECS = {
    "greedy": ((), ()),
    "dist": ((), ("seed",)),
    "top_k": (("k",), ()),
    "top_p": (("p",), ("min_keep",)),
    "min_p": (("p",), ("min_keep",)),
    "typical": (("p",), ("min_keep",)),
    "temp": (("t",), ()),
    "temp_ext": (("t",), ("delta", "exponent")),
    "xtc": (("probability", "threshold"), ("min_keep", "seed")),
    "top_n_sigma": (("n",), ()),
    "mirostat": (("tau", "eta"), ("m", "seed")),
    "mirostat_v2": (("tau", "eta"), ("seed",)),
    "penalties": (("last_n", "repeat", "freq", "present"), ()),
    "dry": (("multiplier", "base", "allowed_length", "last_n"), ("breakers",)),
    "logit_bias": (("biases",), ()),
    "adaptive_p": (("target", "decay"), ("seed",)),
    "infill": ((), ()),
}
_DEFAULTS = {"min_keep": 1, "m": 100, "breakers": (), "delta": 0.0, "exponent": 1.0}

# llama.cpp's other names for the samplers, all mapped to the entry above that llama.cpp builds for
# them. The names ``common_sampler_types_from_names`` accepts (common/sampling.cpp: each common
# type's canonical name, its kebab-case and no-dash forms, and "nucleus", "temp", "typ"): "temp"
# stays the plain temperature sampler here (as in llama_sampler_init_temp) -- the two agree
# whenever dynatemp is off, which is all a one-argument entry can say; "temperature" is what
# common builds, temp_ext (with delta = 0 and exponent = 1 when not given).
_ALIASES = {
    "temperature": "temp_ext", "tempext": "temp_ext",
    "typ_p": "typical", "typp": "typical", "typ": "typical",
    "nucleus": "top_p", "topp": "top_p", "topk": "top_k", "minp": "min_p",
    "topnsigma": "top_n_sigma", "adaptivep": "adaptive_p",
}


# Extra sampler kinds registered by other modules (e.g. the grammar sampler):
# name -> factory(args, *, n_vocab, seed, stdlib, vocab) -> Sampler
_EXTRA: dict = {}


def register_sampler(name: str, factory) -> None:
    """Make ``(name, *args)`` usable in chain specs (for samplers defined outside this package,
    such as ``("grammar", text, [root])``). The factory receives the spec arguments and the chain's
    n_vocab, seed, stdlib and vocab as keywords and returns a Sampler."""
    if not isinstance(name, str):
        raise ParameterError(f"register_sampler: expected a string name; found {name!r}")
    key = name.replace("-", "_").lower()
    if key in _SPECS or key in _ALIASES:
        raise ParameterError(f"register_sampler: {name!r} is a built-in llama.cpp sampler name")
    _EXTRA[key] = factory


def sampler_names() -> list[str]:
    """Every name a chain spec accepts (canonical names, llama.cpp's aliases, registered ones);
    case-insensitive, ``-`` and ``_`` interchangeable."""
    return sorted(set(_SPECS) | set(_ALIASES) | set(_EXTRA))


def _canonical(name) -> str:
    if not isinstance(name, str):
        raise ParameterError(f"sampler name: expected a string; found {name!r}")
    key = name.replace("-", "_").lower()
    if key in _EXTRA:
        return key
    key = _ALIASES.get(key, key)
    if key not in _SPECS:
        raise ParameterError(f"unknown sampler {name!r}; expected one of {', '.join(sorted(_SPECS))} "
                             f"or an alias ({', '.join(sorted(_ALIASES))})"
                             + (f" or a registered sampler ({', '.join(sorted(_EXTRA))})" if _EXTRA else ""))
    return key


def build_sampler(entry, n_vocab: int, seed: int, stdlib: str, vocab=None) -> S.Sampler:
    """One spec tuple -> a sampler (or the no-op sampler llama.cpp's init_* returns)."""
    if isinstance(entry, str):
        entry = (entry,)
    if not isinstance(entry, (tuple, list)) or not entry:
        raise ParameterError(f"chain entry: expected a tuple (name, *args); found {entry!r}")
    name = _canonical(entry[0])
    if name in _EXTRA:
        return _EXTRA[name](tuple(entry[1:]), n_vocab=n_vocab, seed=seed, stdlib=stdlib, vocab=vocab)
    req, opt = _SPECS[name]
    args = list(entry[1:])
    if not len(req) <= len(args) <= len(req) + len(opt):
        sig = ", ".join(list(req) + [f"[{o}]" for o in opt])
        raise ParameterError(f"{name}: expected ({sig}); found {len(args)} argument(s) {tuple(args)!r}")
    a = dict(zip(list(req) + list(opt), args))
    for k in opt:
        a.setdefault(k, _DEFAULTS.get(k, seed))
    if "seed" in a:
        a["seed"] = check_seed(a["seed"], f"{name}.seed")
    f32 = np.float32

    def real(k):
        v = a[k]
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise ParameterError(f"{name}.{k}: expected a real number; found {v!r}")
        return f32(v)

    if name == "greedy":
        return S.Greedy()
    if name == "dist":
        return S.Dist(a["seed"], stdlib)
    if name == "top_k":
        top_k = S.TopK(a["k"])
        return S.Empty("?top-k") if top_k.k <= 0 else top_k
    if name == "top_p":
        return S.Empty("?top-p") if real("p") >= 1.0 else S.TopP(a["p"], a["min_keep"])
    if name == "min_p":
        return S.Empty("?min-p") if real("p") <= 0.0 else S.MinP(a["p"], a["min_keep"])
    if name == "typical":
        return S.Empty("?typical") if real("p") >= 1.0 else S.Typical(a["p"], a["min_keep"])
    if name == "temp":
        return S.Empty("?temp") if real("t") == 1.0 else S.Temp(a["t"])
    if name == "temp_ext":
        if real("t") == 1.0 and real("delta") <= 0.0:
            return S.Empty("?temp-ext")
        return S.TempExt(a["t"], a["delta"], a["exponent"])
    if name == "xtc":
        if real("probability") <= 0.0 or real("threshold") > 0.5:
            return S.Empty("?xtc")
        return S.XTC(a["probability"], a["threshold"], a["min_keep"], a["seed"], stdlib)
    if name == "top_n_sigma":
        return S.Empty("?top-n-sigma") if real("n") <= 0.0 else S.TopNSigma(a["n"])
    if name == "mirostat":
        return S.Mirostat(n_vocab, a["tau"], a["eta"], a["m"], a["seed"], stdlib)
    if name == "mirostat_v2":
        return S.MirostatV2(a["tau"], a["eta"], a["seed"], stdlib)
    if name == "penalties":
        pen = S.Penalties(n_vocab, a["last_n"], a["repeat"], a["freq"], a["present"])
        if S.Penalties.disabled(pen.last_n, pen.repeat, pen.freq, pen.present):
            return S.Empty("?penalties")
        return pen
    if name == "dry":
        dry = S.DRY(n_vocab, a["multiplier"], a["base"], a["allowed_length"], a["last_n"], a["breakers"], vocab)
        return dry if dry.enabled() else S.Empty("?dry")
    if name == "logit_bias":
        bias = S.LogitBias(n_vocab, a["biases"])
        return bias if bias.biases else S.Empty("?logit-bias")
    if name == "adaptive_p":
        return S.AdaptiveP(a["target"], a["decay"], a["seed"], stdlib)
    if name == "infill":
        return S.Infill(vocab)
    raise AssertionError(name)  # pragma: no cover


class Chain:
    """A persistent sampler chain (``llama_sampler_chain``) over a vocabulary of n_vocab tokens.

    ``sample(logits)`` fills the candidate array {id = i, logit = logits[i], p = 0} as
    ``llama_sampler_sample`` does, applies every sampler in order and returns the selected token.
    Unlike ``llama_sampler_sample`` it does **not** accept the token: call ``accept(token)`` (as
    ``common_sampler_sample`` / ``common_sampler_accept`` split it). ``apply(logits)`` returns the
    candidates for inspection (a view of the chain's buffer, valid until the next call).
    """

    n_vocab: int
    stdlib: str
    chain_seed: int
    spec: list
    _buf: np.ndarray
    _greedy_only: bool

    def __init__(self, spec, n_vocab: int, seed: int = DEFAULT_SEED, stdlib: str = "libstdc++", vocab=None,
                 *, _samplers=None):
        if isinstance(n_vocab, bool) or not isinstance(n_vocab, numbers.Integral) or not 0 < int(n_vocab) < 2 ** 31:
            raise ParameterError(f"n_vocab: expected an integer in [1, 2**31 - 1]; found {n_vocab!r}")
        self.n_vocab = int(n_vocab)
        self.stdlib = check_stdlib(stdlib)
        self.chain_seed = check_seed(seed)
        self.vocab = vocab
        self.params: dict = {}
        self.samplers: list[S.Sampler]
        if _samplers is not None:
            self.samplers = list(_samplers)
            self.spec = list(spec)
        else:
            if isinstance(spec, (str, bytes)) or not hasattr(spec, "__iter__"):
                raise ParameterError(f"spec: expected a list of (name, *args) tuples; found {spec!r}")
            self.spec = [tuple(e) if isinstance(e, (list, tuple)) else (e,) for e in spec]
            self.samplers = [build_sampler(e, self.n_vocab, self.chain_seed, self.stdlib, vocab) for e in self.spec]
        self._buf = np.empty(self.n_vocab, TOKEN_DATA)
        self.last: Candidates | None = None
        real = [s for s in self.samplers if not isinstance(s, S.Empty)]
        self._greedy_only = len(real) == 1 and isinstance(real[0], S.Greedy)

    # -- llama.cpp-like API --------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """The samplers' llama.cpp names, in chain order (no-op samplers as "?name")."""
        return [s.name for s in self.samplers]

    @property
    def seed(self) -> int:
        """llama_sampler_get_seed: the effective seed of the last dist/mirostat sampler with one."""
        out = DEFAULT_SEED
        for s in self.samplers:
            if isinstance(s, (S.Dist, S.Mirostat, S.MirostatV2)) and s.seed_cur != DEFAULT_SEED:
                out = s.seed_cur
        return out

    def check_logits(self, logits) -> np.ndarray:
        """``logits`` as a C-contiguous (n_vocab,) float32 array; DTypeError/ShapeError otherwise.
        A CPU ``__dlpack__`` / ``__array_interface__`` object is read in place (a tensor on a
        device is an UnsupportedError naming it)."""
        if not isinstance(logits, np.ndarray):
            logits = host_array(logits, "logits")
        if logits.dtype != np.float32:
            raise DTypeError(f"logits: expected dtype float32; found {logits.dtype} (convert explicitly)")
        if logits.ndim != 1 or logits.shape[0] != self.n_vocab:
            raise ShapeError(f"logits: expected shape ({self.n_vocab},) (n_vocab); found {logits.shape}")
        return np.ascontiguousarray(logits)

    # All-or-nothing: every call that can change sampler state saves (cheaply) the samplers it
    # can change and puts them back when it raises, so a failed call leaves no half-drawn RNG,
    # moved mu or partly accepted token behind.
    def _save(self, kind: str = "all"):
        if kind == "apply":
            items = [(i, s._save()) for i, s in enumerate(self.samplers) if s._mutates_on_apply]
        elif kind == "accept":
            # built-in accepts cannot fail once the token is validated: save only when a sampler
            # defined elsewhere could raise after others have already taken the token
            if all(s._builtin for s in self.samplers):
                items = []
            else:
                items = [(i, s._save()) for i, s in enumerate(self.samplers) if s._mutates_on_accept]
        else:
            items = [(i, s._save()) for i, s in enumerate(self.samplers)
                     if s._mutates_on_apply or s._mutates_on_accept]
        return items, self.last

    def _load(self, saved) -> None:
        items, last = saved
        for i, st in items:
            self.samplers[i]._load(st)
        self.last = last

    @contextlib.contextmanager
    def atomic(self):
        """``with chain.atomic(): ...`` -- if the block raises, every sampler's state (RNG engines,
        mirostat mu, adaptive EMA, histories) is put back as it was on entry; for composing several
        chain calls (e.g. a grammar-constrained resample) into one all-or-nothing step."""
        saved = self._save("all")
        try:
            yield self
        except BaseException:
            self._load(saved)
            raise

    def _run(self, logits) -> Candidates:
        logits = self.check_logits(logits)
        c = Candidates(self._buf, self.n_vocab)
        rest = self.samplers
        # Leading no-op samplers are skipped; when the first real sampler has a fused kernel it
        # builds the array itself (same result as filling {i, logit, 0} and applying it).
        j = 0
        while j < len(rest) and isinstance(rest[j], S.Empty):
            j += 1
        fresh = getattr(rest[j], "apply_fresh", None) if j < len(rest) else None
        if fresh is not None and fresh(c, logits):
            rest = rest[j + 1:]
        else:
            _core.sampling_fill(self._buf, logits)
        for s in rest:
            s.apply(c)
        self.last = c
        return c

    def apply(self, logits) -> Candidates:
        """Fill the candidates from logits and run every sampler; returns the candidates (a view of
        the chain's buffer, valid until the next call). All-or-nothing: on an error no sampler
        state has changed."""
        saved = self._save("apply")
        try:
            return self._run(logits)
        except BaseException:
            self._load(saved)
            raise

    def apply_candidates(self, c: Candidates) -> Candidates:
        """Run the chain on a caller-built candidate array (llama_sampler_apply); all-or-nothing
        for the chain's state (the candidates themselves may be partly rewritten on an error)."""
        if not isinstance(c, Candidates):
            raise ParameterError(f"apply_candidates: expected a Candidates; found {type(c).__name__}")
        saved = self._save("apply")
        try:
            for s in self.samplers:
                s.apply(c)
        except BaseException:
            self._load(saved)
            raise
        self.last = c
        return c

    def sample(self, logits) -> int:
        """Apply the chain to logits and return the selected token (not accepted). All-or-nothing:
        on an error (bad logits, a sampler failing, no selection) no RNG has advanced."""
        if self._greedy_only:
            # greedy on a fresh array selects index == token id; no candidate array is needed
            self.last = None
            return int(_core.sampling_greedy_fresh(self.check_logits(logits)))
        saved = self._save("apply")
        try:
            c = self._run(logits)
            if not 0 <= c.selected < c.size:
                raise S.SamplingError(f"the chain {self.names} selected no token (selected={c.selected}, "
                                      f"size={c.size}); end it with a terminal sampler (dist, greedy, mirostat...)")
            return int(c.buf["id"][c.offset + c.selected])
        except BaseException:
            self._load(saved)
            raise

    def accept(self, token) -> None:
        """Record an emitted token in every sampler (penalty/DRY histories, adaptive-p's EMA), as
        ``llama_sampler_accept``; a token outside [0, n_vocab) raises ParameterError, unchanged."""
        if isinstance(token, bool) or not isinstance(token, numbers.Integral) or not 0 <= int(token) < self.n_vocab:
            raise ParameterError(f"accept: expected a token id in [0, {self.n_vocab}); found {token!r}")
        token = int(token)
        saved = self._save("accept")
        try:
            for s in self.samplers:
                s.accept(token)
        except BaseException:
            self._load(saved)
            raise

    def reset(self) -> None:
        """``llama_sampler_reset``: clear histories, reseed (a random seed again for seed -1)."""
        for s in self.samplers:
            s.reset()

    # -- state ---------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """Every sampler's state (RNG engines, mirostat mu, adaptive EMA, histories) as bytes."""
        doc = {"names": self.names, "n_vocab": self.n_vocab, "stdlib": self.stdlib,
               "state": [s.get_state() for s in self.samplers]}
        return _SNAP_MAGIC + json.dumps(doc, separators=(",", ":")).encode()

    def restore(self, blob: bytes) -> None:
        """Resume from ``snapshot()``: the following draws continue the exact sequence.

        The snapshot is untrusted input and validated as a whole before anything is applied: the
        format, the chain it came from (sampler names and count, n_vocab, stdlib), and every
        sampler's state (exact keys; RNG engines well-formed and not degenerate, with their seed;
        mu/EMA values float32; histories of in-range token ids no longer than the sampler's
        window; adaptive-p's pending selection consistent). Anything else raises ParameterError
        and the chain is exactly as before (also if a sampler defined elsewhere fails in its own
        ``set_state``).
        """
        if not isinstance(blob, (bytes, bytearray)) or not bytes(blob).startswith(_SNAP_MAGIC):
            raise ParameterError("Chain.restore: expected bytes from Chain.snapshot()")
        try:
            doc = json.loads(bytes(blob)[len(_SNAP_MAGIC):].decode())
        except (ValueError, RecursionError) as e:
            raise ParameterError(f"Chain.restore: corrupt snapshot ({e})") from None
        keys = {"names", "n_vocab", "stdlib", "state"}
        if not isinstance(doc, dict) or set(doc) != keys:
            found = sorted(map(str, doc)) if isinstance(doc, dict) else type(doc).__name__
            raise ParameterError(f"Chain.restore: corrupt snapshot (expected keys {sorted(keys)}; found {found})")
        if doc["names"] != self.names or type(doc["n_vocab"]) is not int or doc["n_vocab"] != self.n_vocab:
            raise ParameterError(f"Chain.restore: snapshot of chain {doc['names']!r} (n_vocab "
                                 f"{doc['n_vocab']!r}) does not fit this chain {self.names} (n_vocab {self.n_vocab})")
        if doc["stdlib"] != self.stdlib:
            raise ParameterError(f"Chain.restore: snapshot of a {doc['stdlib']!r} chain; this chain draws as "
                                 f"{self.stdlib!r} (its streams would not continue the same sequence)")
        states = doc["state"]
        if not isinstance(states, list) or len(states) != len(self.samplers):
            raise ParameterError(f"Chain.restore: corrupt snapshot (expected {len(self.samplers)} sampler states; "
                                 f"found {len(states) if isinstance(states, list) else type(states).__name__})")
        parsed = []
        for i, (s, st) in enumerate(zip(self.samplers, states)):
            try:
                parsed.append(s._parse(st, self.n_vocab))
            except ParameterError as e:
                raise ParameterError(f"Chain.restore: sampler {i} ({s.name}): {e}") from None
            except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:  # pragma: no cover
                raise ParameterError(f"Chain.restore: sampler {i} ({s.name}): corrupt state ({e!r})") from None
        saved = self._save("all")
        try:
            for s, p in zip(self.samplers, parsed):
                s._load(p)
        except Exception as e:  # only a sampler defined elsewhere can fail here (its own set_state)
            self._load(saved)
            if isinstance(e, LmtailError):
                raise
            raise ParameterError(f"Chain.restore: corrupt snapshot ({e!r})") from e

    def __repr__(self) -> str:
        return f"Chain({' -> '.join(self.names)}, n_vocab={self.n_vocab}, stdlib={self.stdlib!r})"


# ---- common_sampler_init ------------------------------------------------------------------------
COMMON_DEFAULTS = dict(
    seed=DEFAULT_SEED, n_prev=64, n_probs=0, min_keep=0, top_k=40, top_p=0.95, min_p=0.05,
    xtc_probability=0.0, xtc_threshold=0.10, typ_p=1.0, temp=0.80, dynatemp_range=0.0,
    dynatemp_exponent=1.0, penalty_last_n=64, penalty_repeat=1.0, penalty_freq=0.0, penalty_present=0.0,
    dry_multiplier=0.0, dry_base=1.75, dry_allowed_length=2, dry_penalty_last_n=64,
    adaptive_target=-1.0, adaptive_decay=0.90, mirostat=0, top_n_sigma=-1.0, mirostat_tau=5.0,
    mirostat_eta=0.10, ignore_eos=False, no_perf=False, timing_per_token=False,
    dry_sequence_breakers=("\n", ":", '"', "*"), logit_bias=(),
    samplers=("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"),
)

_COMMON_TYPES = {"dry", "top_k", "top_p", "top_n_sigma", "typ_p", "min_p", "temperature", "xtc", "infill",
                 "penalties", "adaptive_p"}
_COMMON_CHARS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
                 "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p"}


def _common_table() -> dict:
    # common_sampler_types_from_names: canonical names, their kebab-case and no-dash forms,
    # "nucleus", "temp", "typ" (matched after lower-casing, as llama.cpp does)...
    table = {}
    for c in _COMMON_TYPES:
        table[c] = c
        if "_" in c:
            table[c.replace("_", "-")] = c
            table[c.replace("_", "")] = c
    table.update(nucleus="top_p", temp="temperature", typ="typ_p")
    # ... plus the llama_sampler names of what common builds for a type (lmtail: one set of names
    # works in both Chain specs and common_chain)
    table.update({"typical": "typ_p", "temp_ext": "temperature", "temp-ext": "temperature",
                  "tempext": "temperature"})
    return table


_COMMON_TABLE = _common_table()


def _common_alias(name) -> str:
    if not isinstance(name, str):
        raise ParameterError(f"samplers: expected sampler names (strings); found {name!r}")
    n = name.lower()
    if n not in _COMMON_TABLE:
        raise ParameterError(f"samplers: unknown sampler name {name!r} (llama.cpp would warn and skip it); "
                             f"expected one of {', '.join(sorted(_COMMON_TYPES))} or an alias "
                             f"({', '.join(sorted(set(_COMMON_TABLE) - _COMMON_TYPES))})")
    return _COMMON_TABLE[n]


def common_sampler_names(samplers) -> list[str]:
    """``samplers`` as names or as a char string, resolved to common's canonical type names.

    A list takes every name ``common_sampler_types_from_names`` accepts (case-insensitive): dry,
    top_k, top_p, top_n_sigma, typ_p, min_p, temperature, xtc, infill, penalties, adaptive_p, their
    kebab-case (``top-k``) and no-dash (``topk``) forms, ``nucleus``, ``temp``, ``typ``; and the
    llama_sampler names of the same samplers (``typical``, ``temp_ext``). A string is read as
    ``common_sampler_types_from_chars`` reads ``--sampling-seq``: d = dry, k = top_k, y = typ_p,
    p = top_p, s = top_n_sigma, m = min_p, t = temperature, x = xtc, i = infill, e = penalties,
    a = adaptive_p (case-sensitive). Unknown names or chars raise ParameterError (llama.cpp
    warns and skips them).
    """
    if isinstance(samplers, str):
        out = []
        for ch in samplers:
            if ch not in _COMMON_CHARS:
                raise ParameterError(f"samplers: unknown sampler char {ch!r}; expected one of "
                                     f"{''.join(sorted(_COMMON_CHARS))} "
                                     f"({', '.join(f'{k}={v}' for k, v in sorted(_COMMON_CHARS.items()))})")
            out.append(_COMMON_CHARS[ch])
        return out
    if isinstance(samplers, bytes) or not hasattr(samplers, "__iter__"):
        raise ParameterError(f"samplers: expected a list of names or a char string; found {samplers!r}")
    return [_common_alias(s) for s in samplers]


def common_spec(**params) -> tuple[list[tuple], dict]:
    """The spec common_sampler_init builds (logit-bias first, then samplers, then the terminal)."""
    unknown = set(params) - set(COMMON_DEFAULTS)
    if unknown:
        raise ParameterError(f"common_chain: unknown parameter(s) {sorted(unknown)}; expected fields of "
                             f"common_params_sampling: {', '.join(sorted(COMMON_DEFAULTS))}")
    p = {**COMMON_DEFAULTS, **params}
    f32 = np.float32
    for k in ("penalty_repeat", "penalty_freq", "penalty_present"):
        if isinstance(p[k], bool) or not isinstance(p[k], numbers.Real):
            raise ParameterError(f"{k}: expected a real number; found {p[k]!r}")
    rep = f32(p["penalty_repeat"])
    with np.errstate(divide="ignore", over="ignore"):
        inv = f32(1.0) / rep if rep != 0 else f32(np.inf)
    if not np.isfinite(rep) or rep <= 0 or not np.isfinite(inv):
        raise ParameterError(f"penalty_repeat must be finite and greater than 0; found {p['penalty_repeat']!r}")
    for k in ("penalty_freq", "penalty_present"):
        if not np.isfinite(f32(p[k])):
            raise ParameterError(f"{k} must be finite; found {p[k]!r}")
    seed = check_seed(p["seed"])
    spec: list[tuple] = []
    bias = p["logit_bias"]
    bias = list(bias.items()) if isinstance(bias, dict) else list(bias)
    if bias:
        spec.append(("logit_bias", bias))
    mk = p["min_keep"]
    if p["mirostat"] == 0:
        adaptive = False
        for name in common_sampler_names(p["samplers"]):
            if name == "dry":
                spec.append(("dry", p["dry_multiplier"], p["dry_base"], p["dry_allowed_length"],
                             p["dry_penalty_last_n"], tuple(p["dry_sequence_breakers"])))
            elif name == "top_k":
                spec.append(("top_k", p["top_k"]))
            elif name == "top_p":
                spec.append(("top_p", p["top_p"], mk))
            elif name == "top_n_sigma":
                spec.append(("top_n_sigma", p["top_n_sigma"]))
            elif name == "min_p":
                spec.append(("min_p", p["min_p"], mk))
            elif name == "xtc":
                spec.append(("xtc", p["xtc_probability"], p["xtc_threshold"], mk, seed))
            elif name == "typ_p":
                spec.append(("typical", p["typ_p"], mk))
            elif name == "temperature":
                spec.append(("temp_ext", p["temp"], p["dynatemp_range"], p["dynatemp_exponent"]))
            elif name == "infill":
                spec.append(("infill",))
            elif name == "penalties":
                spec.append(("penalties", p["penalty_last_n"], p["penalty_repeat"], p["penalty_freq"],
                             p["penalty_present"]))
            elif name == "adaptive_p":
                adaptive = True
        if adaptive:
            spec.append(("adaptive_p", p["adaptive_target"], p["adaptive_decay"], seed))
        else:
            spec.append(("dist", seed))
    elif p["mirostat"] == 1:
        spec += [("temp", p["temp"]), ("mirostat", p["mirostat_tau"], p["mirostat_eta"], 100, seed)]
    elif p["mirostat"] == 2:
        spec += [("temp", p["temp"]), ("mirostat_v2", p["mirostat_tau"], p["mirostat_eta"], seed)]
    else:
        raise ParameterError(f"mirostat: expected 0, 1 or 2; found {p['mirostat']!r}")
    return spec, p


def common_chain(n_vocab: int, *, stdlib: str = "libstdc++", vocab=None, **params) -> Chain:
    """The chain llama.cpp's ``common_sampler_init`` builds from ``common_params_sampling``.

    ``params`` are that struct's field names with its defaults (seed = LLAMA_DEFAULT_SEED, i.e.
    random; top_k 40, top_p 0.95, min_p 0.05, temp 0.8, ...); with the defaults the effective chain
    is top_k 40 -> top_p 0.95 -> min_p 0.05 -> temp 0.8 -> dist(seed), the other entries being no-ops.
    There is no greedy sampler in common: temp <= 0 keeps the first maximum of the top-k-sorted
    array and dist still draws. ``logit_bias`` is a {token: bias} mapping or (token, bias) pairs;
    ``ignore_eos`` adds -inf biases for ``vocab.eog_ids`` when a vocabulary is given. A vocabulary's
    ``suppress_tokens`` (if it has that attribute) are appended as -inf biases, as llama.cpp does.
    ``n_probs`` and ``n_prev`` are kept on ``chain.params`` (used by :mod:`lmtail.sampling.logprobs`).
    ``samplers`` is a list of names or a ``--sampling-seq`` char string (see
    :func:`common_sampler_names` for every accepted name, alias and char). Unlike llama.cpp,
    unknown sampler names raise ParameterError (listing the valid ones) instead of being skipped
    with a warning.
    """
    spec, p = common_spec(**params)
    if vocab is not None:
        extra = [(int(t), float("-inf")) for t in getattr(vocab, "suppress_tokens", ())]
        if p["ignore_eos"]:
            extra += [(int(t), float("-inf")) for t in getattr(vocab, "eog_ids", ())]
        if extra:
            if spec and spec[0][0] == "logit_bias":
                spec[0] = ("logit_bias", list(spec[0][1]) + extra)
            else:
                spec.insert(0, ("logit_bias", extra))
    chain = Chain(spec, n_vocab, seed=p["seed"], stdlib=stdlib, vocab=vocab)
    chain.params = p
    return chain


__all__ = ["Chain", "common_chain", "common_spec", "build_sampler", "COMMON_DEFAULTS", "set_threads", "get_threads",
           "register_sampler", "sampler_names", "common_sampler_names"]


def set_threads(n: int) -> None:
    """Threads used by the large sampler loops (expf passes, per-bucket sorts); default 1, like
    llama.cpp. Token choices and probabilities never depend on it: only independent work is split,
    every order-dependent sum stays sequential."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ParameterError(f"threads: expected an integer >= 1; found {n!r}")
    _core.sampling_set_threads(int(n))


def get_threads() -> int:
    """The thread count set by :func:`set_threads`."""
    return int(_core.sampling_get_threads())
