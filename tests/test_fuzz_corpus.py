"""The fuzz targets (tests/fuzz/target_*.py, run by tools/fuzz.py) over their committed corpus and
a few hundred seeded mutants, in process and bounded (a few seconds per target), plus the
harness's own contract: deterministic inputs, and every kind of finding reported with a
reproducer and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import fuzz  # noqa: E402

PRESENT = [n for n in fuzz.KNOWN_TARGETS if (fuzz.TARGETS_DIR / f"target_{n}.py").is_file()]
N_MUTANTS = 300


@pytest.mark.parametrize("name", PRESENT)
def test_target_over_corpus_and_mutants(name):
    target = fuzz.load_target(name)
    corpus = fuzz.load_corpus(Path(target.CORPUS))
    assert corpus != [b""], f"{name}: no committed seed corpus in {target.CORPUS}"
    mut = fuzz.Mutator(corpus, 7, getattr(target, "DICTIONARY", ()), getattr(target, "MAX_LEN", 1 << 17))
    t0 = time.monotonic()
    for i in range(len(corpus) + N_MUTANTS):
        data = mut.input(i)
        kind, detail = fuzz.run_one(target, data, 5.0)
        assert kind is None, f"{name}: input {i} (seed 7): {kind}\n{detail}"
        if time.monotonic() - t0 > 15.0:  # a slow machine: keep the bound, say how far it got
            pytest.skip(f"{name}: stopped after {i + 1} inputs at the 15 s bound")


def test_gguf_corpus_is_small_and_loads():
    from lmtail.gguf_model import GGUFFile

    files = sorted((ROOT / "tests" / "fuzz" / "corpus" / "gguf").iterdir())
    assert len(files) >= 8
    assert all(f.stat().st_size < 64 * 1024 for f in files) and sum(f.stat().st_size for f in files) < 1 << 20
    for f in files:
        GGUFFile(f)  # every seed is a valid container: mutants start from deep inside the parser


def test_inputs_are_deterministic_per_seed():
    corpus = [b"GGUF\x03\x00\x00\x00" + bytes(range(40)), b"root ::= [a-z]+"]
    a = fuzz.Mutator(corpus, 3, (b"::=",))
    b = fuzz.Mutator(corpus, 3, (b"::=",))
    c = fuzz.Mutator(corpus, 4, (b"::=",))
    seq_a = [a.input(i) for i in range(500)]
    assert seq_a == [b.input(i) for i in range(500)]
    assert seq_a[:2] == corpus  # the seeds first, unchanged
    assert seq_a != [c.input(i) for i in range(500)]
    assert [a.input(i) for i in range(499, -1, -1)] == seq_a[::-1]  # input i depends on i alone
    assert len(set(seq_a)) > 400


_BAD_TARGET = '''
import os, pathlib, time
NAME = "bad"
CORPUS = pathlib.Path(__file__).parent / "corpus_bad"
MODE = {mode!r}

def one_input(data):
    from lmtail.errors import ParameterError
    if len(data) % 3 == 0:
        raise ParameterError("refused")  # a typed refusal is fine
    if MODE == "exception" and data.startswith(b"x"):
        raise IndexError("a raw error")
    if MODE == "timeout" and data.startswith(b"x"):
        while True:
            pass
    if MODE == "crash" and data.startswith(b"x"):
        os.abort()
'''


@pytest.mark.parametrize("mode", ["exception", "timeout", "crash"])
def test_findings_are_reported_with_a_reproducer(tmp_path, mode):
    targets = tmp_path / "targets"
    (targets / "corpus_bad").mkdir(parents=True)
    (targets / "corpus_bad" / "a").write_bytes(b"ab")
    (targets / "corpus_bad" / "b").write_bytes(b"xy")  # the second seed triggers the finding
    (targets / "target_bad.py").write_text(_BAD_TARGET.format(mode=mode))
    findings = tmp_path / "findings"
    cmd = [sys.executable, str(ROOT / "tools" / "fuzz.py"), "bad", "--seconds", "20", "--seed", "1",
           "--timeout", "0.5", "--findings", str(findings), "--targets-dir", str(targets)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    kind = {"exception": "IndexError", "timeout": "timeout", "crash": "crash-exit-6"}[mode]
    saved = list((findings / "bad").glob(f"{kind}-*.bin"))
    assert len(saved) == 1 and saved[0].read_bytes() == b"xy", (r.stdout, list((findings / "bad").iterdir()))
    assert "reproduce: python tools/fuzz.py bad --reproduce" in r.stdout
    if mode != "crash":
        rep = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz.py"), "bad", "--reproduce", str(saved[0]),
                              "--targets-dir", str(targets), "--timeout", "0.5"], capture_output=True, text=True,
                             timeout=60)
        assert rep.returncode == 1 and kind in rep.stdout, rep.stdout + rep.stderr


def test_absent_target_is_skipped_with_a_note(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz.py"), "--all", "--seconds", "0.5",
                        "--targets-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for name in fuzz.KNOWN_TARGETS:
        assert f"fuzz {name}: skipped: no {tmp_path / f'target_{name}.py'}" in r.stdout
