"""Every ```python block of README.md runs, on small data this test sets up.

A block is preceded by an HTML comment naming its fixture (invisible on GitHub):
``<!-- test: gguf -->`` (and ``serving``) runs it in a directory holding a small ``model.gguf``; ``sampling`` also
records what the chain samples and accepts, so the test can replay the logits through llama.cpp's
own sampler chain (the oracle) and check that every sampled token was accepted. ``cpp`` and ``sh``
blocks are not run here (the C++ embedding has its own test).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import lmtail.sampling
from _gguf_util import head_model, u32

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(?:<!--\s*test:\s*(?P<fixture>[\w-]+)\s*-->\n)?```(?P<lang>\w*)\n(?P<code>.*?)^```", re.S | re.M)
FIXTURES = ("gguf", "sampling", "grammar", "serving")


def blocks():
    text = README.read_text()
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code")) + 1
        out.append((m.group("lang"), m.group("fixture"), m.group("code"), line))
    return out


PY_BLOCKS = [(f, c, ln) for lang, f, c, ln in blocks() if lang == "python"]


def test_every_python_block_names_a_fixture():
    assert len(PY_BLOCKS) >= 4
    for fixture, _, line in PY_BLOCKS:
        assert fixture in FIXTURES, f"README.md:{line}: a ```python block needs <!-- test: NAME --> ({FIXTURES})"


def test_setup_commands_are_the_documented_ones():
    sh = [c.strip() for lang, _, c, _ in blocks() if lang == "sh"]
    assert "pip install . && python -m lmtail demo" in sh
    assert "pip install '.[test]' && python -m pytest -q tests" in sh


def test_cpp_block_is_present():
    assert any(lang == "cpp" for lang, *_ in blocks())


def _model(tmp_path: Path) -> Path:
    path, _ = head_model(tmp_path / "model.gguf", rows=512, cols=512, seed=5,
                         kv={"tokenizer.ggml.eos_token_id": u32(2)})
    return path


def _exec(code: str, line: int) -> dict:
    ns: dict = {"__name__": "readme_example"}
    exec(compile(code, f"{README}:{line}", "exec"), ns)  # noqa: S102 - the README's own examples
    return ns


class _Recorder:
    """Wraps lmtail.sampling.common_chain: keeps each chain's kwargs, and each sample's logits
    and token and each accept, in call order."""

    def __init__(self):
        self.chains: list = []
        self.real = lmtail.sampling.common_chain

    def __call__(self, n_vocab, **kwargs):
        chain = self.real(n_vocab, **kwargs)
        rec = {"n_vocab": n_vocab, "kwargs": kwargs, "events": [], "chain": chain}
        sample, accept = chain.sample, chain.accept

        def sample_(logits):
            tok = sample(logits)
            rec["events"].append(("sample", np.array(logits, dtype=np.float32, copy=True), tok))
            return tok

        def accept_(token):
            rec["events"].append(("accept", None, int(token)))
            return accept(token)

        chain.sample, chain.accept = sample_, accept_
        self.chains.append(rec)
        return chain


@pytest.mark.parametrize("fixture,code,line", [pytest.param(*b, id=f"README.md:{b[2]}") for b in PY_BLOCKS])
def test_python_block_runs(fixture, code, line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if fixture in ("gguf", "sampling", "serving"):
        _model(tmp_path)
    if fixture == "sampling":
        rec = _Recorder()
        monkeypatch.setattr(lmtail.sampling, "common_chain", rec)
        ns = _exec(code, line)
        check_sampling_history(rec, ns)
    else:
        _exec(code, line)


def _sampling_block():
    found = [(c, ln) for f, c, ln in PY_BLOCKS if f == "sampling"]
    assert len(found) == 1
    return found[0]


def check_sampling_history(rec, ns):
    """Each sampled token is accepted before the next sample; the penalties saw the history."""
    assert len(rec.chains) == 1
    r = rec.chains[0]
    ev = r["events"]
    samples = [e for e in ev if e[0] == "sample"]
    assert len(samples) >= 4
    assert [e[0] for e in ev] == ["sample", "accept"] * len(samples), "chain.accept(token) after every sample"
    assert all(ev[2 * i][2] == ev[2 * i + 1][2] for i in range(len(samples)))
    assert ns["tokens"] == [e[2] for e in samples]
    # the accepted history changes what the chain does with the same logits (penalties applied)
    fresh = rec.real(r["n_vocab"], **r["kwargs"])
    last = samples[-1][1]
    used = r["chain"].apply(last)
    used_ids, used_logits = used.ids.copy(), used.logits.copy()  # a view of the chain's buffer
    new = fresh.apply(last)
    assert not (np.array_equal(used_ids, new.ids) and np.array_equal(used_logits, new.logits)), \
        "the accepted tokens left no trace on the chain"


@pytest.mark.oracle
def test_sampling_block_is_token_identical_to_llama_cpp(tmp_path, monkeypatch):
    from oracle import sampling as O

    O.require()
    code, line = _sampling_block()
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    rec = _Recorder()
    monkeypatch.setattr(lmtail.sampling, "common_chain", rec)
    ns = _exec(code, line)
    r = rec.chains[0]
    oracle = O.OracleCommonChain(r["n_vocab"], **r["kwargs"])
    want = []
    for kind, logits, _ in r["events"]:
        if kind == "sample":
            tok = oracle.sample(logits)
            oracle.accept(tok)
            want.append(tok)
    assert ns["tokens"] == want
    assert len(set(want)) > 1  # a sequence, not one token repeated by construction


@pytest.mark.oracle
def test_serving_block_rows_are_llama_cpp_alone(tmp_path, monkeypatch):
    """Rows without a grammar in the serving example: each request's tokens are what llama.cpp's
    chain for its fields (common_sampler_init; prompt accepted first, as llama-server's slot does)
    samples from that row's logits alone, whatever joined or left the batch around it."""
    from oracle import sampling as O

    from lmtail.serving import Batch

    O.require()
    found = [(c, ln) for f, c, ln in PY_BLOCKS if f == "serving"]
    assert len(found) == 1
    code, line = found[0]
    monkeypatch.chdir(tmp_path)
    _model(tmp_path)
    rows: dict = {}  # id(chain) -> (chain, [(logits row, token)])
    real = Batch.sample

    def sample(self, logits):
        tokens = real(self, logits)
        for s, x, t in zip(self.slots, np.asarray(logits), tokens):
            rows.setdefault(id(s.chain), (s.chain, []))[1].append((x.copy(), int(t)))
        return tokens

    monkeypatch.setattr(Batch, "sample", sample)
    _exec(code, line)
    # requests "a" and "b": seeds 1 and 2, prompt [1, 5, 9], no grammar; "b" leaves after 6 steps
    ab = {c.params["seed"]: (c, ev) for c, ev in rows.values() if c.params["seed"] in (1, 2)}
    assert sorted(ab) == [1, 2] and (len(ab[1][1]), len(ab[2][1])) == (8, 6)
    for chain, events in ab.values():
        oracle = O.OracleCommonChain(chain.n_vocab, **{k: chain.params[k] for k in O.COMMON_H_DEFAULTS})
        for t in (1, 5, 9):
            oracle.accept(t)
        want = []
        for x, _ in events:
            want.append(oracle.sample(x))
            oracle.accept(want[-1])
        assert [t for _, t in events] == want
