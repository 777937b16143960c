#!/usr/bin/env python3
"""Seeded mutation fuzzer for lmtail's parsers (the GGUF container, GBNF grammars).

    python tools/fuzz.py --all --seconds 60          # every target, 60 s each (CI)
    python tools/fuzz.py gguf --seconds 10 --seed 3  # one target
    python tools/fuzz.py gguf --runs 5000 --seed 3   # an exact number of inputs
    python tools/fuzz.py gguf --reproduce FILE       # re-run one saved input, with its traceback

A target is ``tests/fuzz/target_<name>.py`` with ``NAME``, ``CORPUS`` (a pathlib.Path to a folder
of seed files), ``one_input(data: bytes) -> None`` and optionally ``DICTIONARY`` (a list of byte
strings the mutator inserts: keywords, operators) and ``MAX_LEN``. ``one_input`` may raise any
``lmtail.errors.LmtailError`` (a refused input); any other exception, a hang past ``--timeout``
seconds, or a crash of the process is a finding: the input is written to the findings folder,
the reproducer command is printed, and the run exits with status 1.

Determinism: input ``i`` of a run is a pure function of (seed, corpus, i) -- the committed seeds
first, unchanged, then mutants each drawn from ``random.Random`` seeded with (seed, i) -- so the
same seed gives the same sequence of inputs, whatever the time limit cuts it to, and the
supervisor can rebuild the input a crashed worker was running from its index alone. No coverage
feedback (atheris is not used: the mutator is the whole fuzzer, and it needs nothing but Python).

The inputs run in a worker process (fork) with a SIGALRM time limit per input; the parent watches
the worker's input counter, so a hard crash (a signal in C code) or a hang that SIGALRM cannot
interrupt (a long C call) is caught too.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import multiprocessing as mp
import os
import random
import signal
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parents[1]
TARGETS_DIR = REPO / "tests" / "fuzz"
KNOWN_TARGETS = ("gguf", "gbnf")  # --all runs these; one whose module is absent is skipped with a note
DEFAULT_FINDINGS = REPO / "build" / "fuzz-findings"

# Values that break length and offset arithmetic: 0, -1, sign and width boundaries.
INTERESTING = (0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
               2**63 - 1, 2**63, 2**64 - 1)
_PACK = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}


# ---- targets ------------------------------------------------------------------------------------


def load_target(name: str, targets_dir: Path = TARGETS_DIR) -> ModuleType | None:
    """The module tests/fuzz/target_<name>.py, or None when that file does not exist."""
    path = targets_dir / f"target_{name}.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"lmtail_fuzz_target_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(targets_dir.parent))  # targets may import the tests' helpers
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(targets_dir.parent))
    for attr in ("NAME", "CORPUS", "one_input"):
        if not hasattr(mod, attr):
            raise SystemExit(f"fuzz: {path} defines no {attr}; a target needs NAME, CORPUS and one_input(data)")
    return mod


def load_corpus(folder: Path) -> list[bytes]:
    """The seed files, in name order (the order is part of the input sequence)."""
    if not folder.is_dir():
        return [b""]
    seeds = [p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()]
    return seeds or [b""]


# ---- the mutator --------------------------------------------------------------------------------


@dataclass
class Mutator:
    corpus: Sequence[bytes]
    seed: int
    dictionary: Sequence[bytes] = ()
    max_len: int = 1 << 17
    ops: list[Callable[[random.Random, bytearray], None]] = field(init=False)

    def __post_init__(self) -> None:
        self.ops = [self._flip_bits, self._set_byte, self._insert_bytes, self._delete_range, self._duplicate_chunk,
                    self._splice, self._interesting_int, self._interesting_int, self._truncate, self._arith]
        if self.dictionary:
            self.ops += [self._dictionary_token] * 3

    def input(self, i: int) -> bytes:
        """Input ``i``: the corpus entries first, then mutants of a random entry."""
        if i < len(self.corpus):
            return bytes(self.corpus[i])
        rng = random.Random(self.seed * 0x9E3779B97F4A7C15 + i)
        data = bytearray(self.corpus[rng.randrange(len(self.corpus))])
        for _ in range(1 + min(int(rng.expovariate(0.7)), 7)):  # mostly 1-2 mutations, sometimes many
            rng.choice(self.ops)(rng, data)
        return bytes(data[: self.max_len])

    @staticmethod
    def _offset(rng: random.Random, data: bytearray, width: int = 1) -> int:
        n = max(len(data) - width + 1, 1)
        off = rng.randrange(n)
        if width > 1 and rng.random() < 0.5:
            off -= off % width  # GGUF fields are mostly 4- and 8-byte aligned
        return off

    def _flip_bits(self, rng, data):
        if data:
            for _ in range(rng.choice((1, 1, 2, 4, 8))):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)

    def _set_byte(self, rng, data):
        if data:
            data[rng.randrange(len(data))] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))

    def _insert_bytes(self, rng, data):
        off = rng.randrange(len(data) + 1)
        n = rng.choice((1, 1, 2, 4, 8, 16))
        fill = bytes([rng.randrange(256)]) * n if rng.random() < 0.5 else rng.randbytes(n)
        data[off:off] = fill

    def _delete_range(self, rng, data):
        if data:
            off = rng.randrange(len(data))
            del data[off : off + rng.choice((1, 1, 2, 4, 8, 32, 256))]

    def _duplicate_chunk(self, rng, data):
        if data:
            a = rng.randrange(len(data))
            chunk = data[a : a + rng.randrange(1, 65)]
            off = rng.randrange(len(data) + 1)
            data[off:off] = chunk

    def _splice(self, rng, data):
        other = self.corpus[rng.randrange(len(self.corpus))]
        if other:
            a = rng.randrange(len(other))
            chunk = other[a : a + rng.randrange(1, 257)]
            off = rng.randrange(len(data) + 1)
            if rng.random() < 0.5:
                data[off : off + len(chunk)] = chunk  # overwrite
            else:
                data[off:off] = chunk  # insert

    def _interesting_int(self, rng, data):
        width = rng.choice((1, 2, 4, 4, 8, 8))
        if len(data) < width:
            return
        v = rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)
        off = self._offset(rng, data, width)
        data[off : off + width] = struct.pack(_PACK[width], v)

    def _arith(self, rng, data):
        width = rng.choice((1, 4, 8))
        if len(data) < width:
            return
        off = self._offset(rng, data, width)
        (v,) = struct.unpack_from(_PACK[width], data, off)
        v = (v + rng.choice((-1, 1, -16, 16, 256))) & ((1 << (8 * width)) - 1)
        data[off : off + width] = struct.pack(_PACK[width], v)

    def _truncate(self, rng, data):
        if data:
            del data[rng.randrange(len(data)) :]

    def _dictionary_token(self, rng, data):
        tok = rng.choice(self.dictionary)
        off = rng.randrange(len(data) + 1)
        if rng.random() < 0.7:
            data[off:off] = tok
        else:
            data[off : off + len(tok)] = tok


# ---- running ------------------------------------------------------------------------------------


class InputTimeout(BaseException):
    """Raised by the SIGALRM handler: a BaseException, so a target's `except Exception` cannot hide it."""


def classify(exc: BaseException) -> str | None:
    """None for an accepted outcome (an LmtailError), else the kind of finding."""
    from lmtail.errors import LmtailError

    if isinstance(exc, InputTimeout):
        return "timeout"
    if isinstance(exc, LmtailError):
        return None
    return type(exc).__name__


def run_one(target: ModuleType, data: bytes, timeout: float) -> tuple[str | None, str]:
    """(None, error type or "") for an accepted input; (kind, traceback) for a finding."""

    def fire(signum, frame):
        raise InputTimeout(f"input ran for more than {timeout} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        target.one_input(data)
        return None, ""
    except BaseException as e:  # noqa: BLE001 - every outcome is classified
        if isinstance(e, KeyboardInterrupt):
            raise
        kind = classify(e)
        return (kind, traceback.format_exc()) if kind else (None, type(e).__name__)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def save_finding(findings: Path, name: str, kind: str, data: bytes, detail: str) -> Path:
    d = findings / name
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{kind}-{hashlib.sha1(data).hexdigest()[:16]}.bin"
    p.write_bytes(data)
    (d / (p.name + ".txt")).write_text(detail)
    return p


def _worker(target_name: str, targets_dir: str, seed: int, start: int, stop: int, deadline: float, timeout: float,
            counter, result_q) -> None:
    target = load_target(target_name, Path(targets_dir))
    assert target is not None
    mut = Mutator(load_corpus(Path(target.CORPUS)), seed, getattr(target, "DICTIONARY", ()),
                  getattr(target, "MAX_LEN", 1 << 17))
    refused: dict[str, int] = {}
    i = start
    while i < stop and time.monotonic() < deadline:
        counter.value = i  # the supervisor rebuilds input i if this process dies on it
        kind, detail = run_one(target, mut.input(i), timeout)
        if kind is not None:
            result_q.put(("finding", i, kind, detail, refused))
            return
        if detail:
            refused[detail] = refused.get(detail, 0) + 1
        i += 1
    counter.value = i
    result_q.put(("done", i, None, None, refused))


@dataclass
class Report:
    name: str
    inputs: int = 0
    seconds: float = 0.0
    refused: dict[str, int] = field(default_factory=dict)
    finding: Path | None = None
    kind: str = ""


def fuzz(name: str, *, seconds: float, seed: int, runs: int | None = None, timeout: float = 2.0,
         findings: Path = DEFAULT_FINDINGS, targets_dir: Path = TARGETS_DIR, log=print) -> Report:
    """Fuzz one target in a worker process for `seconds` (or `runs` inputs); restart after nothing."""
    target = load_target(name, targets_dir)
    assert target is not None
    corpus = load_corpus(Path(target.CORPUS))
    mut = Mutator(corpus, seed, getattr(target, "DICTIONARY", ()), getattr(target, "MAX_LEN", 1 << 17))
    rep = Report(name)
    ctx = mp.get_context("fork")
    counter = ctx.Value("q", -1, lock=False)  # -1 until the worker has loaded the target
    q = ctx.Queue()
    t0 = time.monotonic()
    stop = runs if runs is not None else 1 << 62
    proc = ctx.Process(target=_worker, args=(name, str(targets_dir), seed, 0, stop, t0 + seconds, timeout, counter, q),
                       daemon=True)
    proc.start()
    last, last_change = -1, time.monotonic()
    msg = None
    while True:
        try:
            msg = q.get(timeout=0.2)
            break
        except Exception:  # queue.Empty
            pass
        now = time.monotonic()
        if counter.value != last or counter.value < 0:
            last, last_change = counter.value, now
        if not proc.is_alive():
            try:
                msg = q.get(timeout=1.0)  # the worker may have reported just before exiting
            except Exception:
                msg = ("finding", max(counter.value, 0), f"crash-exit{proc.exitcode}",
                       f"the worker process died (exit code {proc.exitcode}; a negative code is the signal)", {})
            break
        if now - last_change > timeout + 5.0:  # SIGALRM could not interrupt it: a hang in C code
            proc.kill()
            msg = ("finding", counter.value, "hang", f"no progress for {now - last_change:.1f} s (SIGALRM did not "
                   "interrupt it: a long call in C code)", {})
            break
    proc.join(5.0)
    what, i, kind, detail, refused = msg
    rep.inputs, rep.refused, rep.seconds = i, refused, time.monotonic() - t0
    if what == "finding":
        rep.kind = kind
        rep.finding = save_finding(findings, name, kind, mut.input(i), detail)
        log(f"fuzz {name}: FINDING ({kind}) at input {i} (seed {seed}):\n{detail}")
        log(f"fuzz {name}: input saved to {rep.finding}\n  reproduce: python tools/fuzz.py {name} --reproduce {rep.finding}")
    return rep


def reproduce(name: str, path: Path, targets_dir: Path = TARGETS_DIR, timeout: float = 2.0) -> int:
    target = load_target(name, targets_dir)
    if target is None:
        raise SystemExit(f"fuzz: no target {name!r} ({targets_dir}/target_{name}.py)")
    kind, detail = run_one(target, path.read_bytes(), timeout)
    if kind is None:
        print(f"fuzz {name}: {path}: no finding ({detail or 'accepted'})")
        return 0
    print(f"fuzz {name}: {path}: {kind}\n{detail}")
    return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help=f"target names ({', '.join(KNOWN_TARGETS)})")
    ap.add_argument("--all", action="store_true", help="every known target (an absent target module is skipped)")
    ap.add_argument("--seconds", type=float, default=60.0, help="time per target (default 60)")
    ap.add_argument("--runs", type=int, default=None, help="stop after this many inputs per target")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=2.0, help="per-input time limit in seconds (default 2)")
    ap.add_argument("--findings", type=Path, default=DEFAULT_FINDINGS, help=f"where findings go ({DEFAULT_FINDINGS})")
    ap.add_argument("--targets-dir", type=Path, default=TARGETS_DIR, help=argparse.SUPPRESS)
    ap.add_argument("--reproduce", type=Path, help="run one saved input of the (single) target and show the result")
    a = ap.parse_args(argv)
    names = list(KNOWN_TARGETS) if a.all else a.targets
    if not names:
        ap.error("name a target or pass --all")
    if a.reproduce:
        if len(names) != 1:
            ap.error("--reproduce takes exactly one target")
        return reproduce(names[0], a.reproduce, a.targets_dir, a.timeout)
    status = 0
    for name in names:
        if load_target(name, a.targets_dir) is None:
            print(f"fuzz {name}: skipped: no {a.targets_dir / f'target_{name}.py'}")
            continue
        rep = fuzz(name, seconds=a.seconds, seed=a.seed, runs=a.runs, timeout=a.timeout, findings=a.findings,
                   targets_dir=a.targets_dir)
        # Typed errors one_input let through (a target that handles them itself reports none).
        refused = ", ".join(f"{k} {v}" for k, v in sorted(rep.refused.items(), key=lambda kv: -kv[1]))
        print(f"fuzz {name}: {rep.inputs} inputs in {rep.seconds:.1f} s ({rep.inputs / max(rep.seconds, 1e-9):.0f}/s), "
              f"seed {a.seed}; {'FINDING ' + rep.kind if rep.finding else 'no finding'}"
              + (f"; refused with: {refused}" if refused else ""))
        if rep.finding:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
