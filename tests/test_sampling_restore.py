"""Chain.restore / Mt19937.restore fail closed (issue 18 item 4).

A snapshot is untrusted input. Every corruption either raises ParameterError with the chain
exactly as before (same snapshot, and the following draws equal those of an untouched twin), or is
accepted only when it is a valid state that the chain then holds exactly (its next snapshot is
the accepted document).
"""

from __future__ import annotations

import copy
import json
import struct

import numpy as np
import pytest

from lmtail.errors import ParameterError
from lmtail.sampling import Chain, Mt19937
from lmtail.sampling.chain import _SNAP_MAGIC

N = 300

SPECS = {
    "stateful": [("penalties", 8, 1.3, 0.2, 0.1), ("dry", 0.8, 1.75, 2, 16, [(5, 6)]), ("top_k", 40),
                 ("xtc", 0.6, 0.05), ("temp", 0.9), ("dist",)],
    "mirostat": [("temp", 0.9), ("mirostat", 4.0, 0.2)],
    "mirostat_v2": [("penalties", 4, 1.1, 0.0, 0.0), ("mirostat_v2", 4.0, 0.2)],
    "adaptive": [("min_p", 0.01), ("adaptive_p", 0.4, 0.9)],
}


def _rows(seed: int, k: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        r = (rng.standard_normal(N) * 2).astype(np.float32)
        r[:12] += 3.0  # a few likely tokens: histories repeat
        out.append(r)
    return out


def _drive(c: Chain, rows) -> list[int]:
    toks = []
    for r in rows:
        t = c.sample(r)
        c.accept(t)
        toks.append(t)
    return toks


def _blob(doc) -> bytes:
    return _SNAP_MAGIC + json.dumps(doc, separators=(",", ":")).encode()


BAD_VALUES = [None, True, "1", [], {}, 1.5, -1, 2 ** 32, 2 ** 63, -(2 ** 40), float("inf"), 1e300]


def _mutations(doc: dict, n_vocab: int):
    """(label, mutated document) pairs: systematic corruptions of a snapshot document."""
    yield "no_change", copy.deepcopy(doc)
    for k in list(doc):
        d = copy.deepcopy(doc)
        del d[k]
        yield f"drop {k}", d
        d = copy.deepcopy(doc)
        d[k + "_x"] = d.pop(k)
        yield f"rename {k}", d
    d = copy.deepcopy(doc)
    d["extra"] = 1
    yield "extra top key", d
    for k in ("names", "n_vocab", "stdlib", "state"):
        for v in BAD_VALUES + [n_vocab + 1, n_vocab - 1, "libc++", float(n_vocab)]:
            d = copy.deepcopy(doc)
            d[k] = v
            yield f"{k}={v!r}", d
    names = doc["names"]
    for label, nn in [("drop first name", names[1:]), ("drop last name", names[:-1]),
                      ("extra sampler name", names + ["dist"]), ("renamed", ["x"] + names[1:]),
                      ("swapped", names[::-1])]:
        d = copy.deepcopy(doc)
        d["names"] = nn
        yield label, d
    st = doc["state"]
    for label, ss in [("missing most states", st[:1]), ("missing last state", st[:-1]),
                      ("extra state", st + [{}]), ("extra seeded state", st + [st[-1]]), ("reversed", st[::-1])]:
        d = copy.deepcopy(doc)
        d["state"] = ss
        yield label, d
    for i, s in enumerate(st):
        for v in [None, [], "x", 0]:
            d = copy.deepcopy(doc)
            d["state"][i] = v
            yield f"state[{i}]={v!r}", d
        d = copy.deepcopy(doc)
        d["state"][i]["zz"] = 0
        yield f"state[{i}] extra key", d
        for k in s:
            d = copy.deepcopy(doc)
            del d["state"][i][k]
            yield f"state[{i}] drop {k}", d
            for v in BAD_VALUES + [float("nan"), 0.1, 2 ** 31, n_vocab, "00"]:
                d = copy.deepcopy(doc)
                d["state"][i][k] = v
                yield f"state[{i}].{k}={v!r}", d
            val = s[k]
            if isinstance(val, list):
                for extra in (-1, n_vocab, n_vocab + 5, True, "3", 2.0, None):
                    d = copy.deepcopy(doc)
                    d["state"][i][k] = val + [extra]
                    yield f"state[{i}].{k}+[{extra!r}]", d
                    if val:
                        d = copy.deepcopy(doc)
                        d["state"][i][k] = [extra] + val[1:]
                        yield f"state[{i}].{k}[0]={extra!r}", d
                d = copy.deepcopy(doc)
                d["state"][i][k] = val + [0] * 5000  # longer than any window
                yield f"state[{i}].{k} too long", d
            if isinstance(val, str):  # hex blobs
                for label, v in [("truncated", val[:-2]), ("odd", val[:-1]), ("not hex", "zz" + val[2:]),
                                 ("longer", val + "00"), ("empty", "")]:
                    d = copy.deepcopy(doc)
                    d["state"][i][k] = v
                    yield f"state[{i}].{k} {label}", d
                if k == "rng":
                    raw = bytearray(bytes.fromhex(val))
                    zero = raw[:8] + bytes(4 * 624) + raw[8 + 4 * 624:]
                    idx = raw[:8 + 4 * 624] + struct.pack("<I", 625) + raw[8 + 4 * 624 + 4:]
                    magic = b"X" + raw[1:]
                    seed = raw[:-4] + struct.pack("<I", (struct.unpack("<I", raw[-4:])[0] + 1) % 2 ** 32)
                    for label, v in [("all-zero engine", zero), ("index 625", idx), ("bad magic", magic),
                                     ("engine seed != seed_cur", seed)]:
                        d = copy.deepcopy(doc)
                        d["state"][i][k] = bytes(v).hex()
                        yield f"state[{i}].rng {label}", d
            if isinstance(val, int) and not isinstance(val, bool):
                for v in (val + 1, val - 1, -2):
                    d = copy.deepcopy(doc)
                    d["state"][i][k] = v
                    yield f"state[{i}].{k}={v}", d
            if isinstance(val, float):
                for v in (val * 1.0000001, -val, float("nan"), float("-inf"), 3.5e38, 1e-50):
                    d = copy.deepcopy(doc)
                    d["state"][i][k] = v
                    yield f"state[{i}].{k}={v!r}", d


@pytest.mark.parametrize("name", sorted(SPECS))
def test_restore_mutations_fail_closed(name):
    spec = SPECS[name]
    rows = _rows(1, 30)
    c = Chain(spec, N, seed=7)
    twin = Chain(spec, N, seed=7)
    _drive(c, rows[:6])
    base = c.snapshot()  # the state the chain is in
    other_chain = Chain(spec, N, seed=7)
    _drive(other_chain, rows[:14])  # a later state: mutations of it, if half-applied, would show
    doc = json.loads(other_chain.snapshot()[len(_SNAP_MAGIC):])
    probe = rows[20:24]
    raised = accepted = 0
    for label, mut in _mutations(doc, N):
        c.restore(base)
        try:
            blob = _blob(mut)
        except ValueError:  # pragma: no cover - json cannot write it
            continue
        try:
            c.restore(blob)
        except ParameterError:
            raised += 1
            assert c.snapshot() == base, f"{label}: a failed restore changed the chain"
            twin.restore(base)
            assert _drive(c, probe) == _drive(twin, probe), f"{label}: draws differ after a failed restore"
            continue
        except Exception as e:  # pragma: no cover - the defect this test guards against
            pytest.fail(f"{label}: raw {type(e).__name__}: {e}")
        accepted += 1
        # Accepted: a valid state, held exactly as the document says.
        assert json.loads(c.snapshot()[len(_SNAP_MAGIC):]) == json.loads(blob[len(_SNAP_MAGIC):]), label
    assert raised > 100 and accepted >= 1, (raised, accepted)


def test_restore_byte_level_corruption():
    c = Chain(SPECS["stateful"], N, seed=3)
    _drive(c, _rows(2, 5))
    base = c.snapshot()
    later = Chain(SPECS["stateful"], N, seed=3)
    _drive(later, _rows(2, 9))
    good = later.snapshot()
    rng = np.random.default_rng(0)
    for trial in range(300):
        b = bytearray(good)
        if trial % 3 == 0:
            b = b[: int(rng.integers(0, len(b)))]
        else:
            for _ in range(int(rng.integers(1, 4))):
                b[int(rng.integers(len(_SNAP_MAGIC), len(b)))] = int(rng.integers(0, 256))
        try:
            c.restore(bytes(b))
        except ParameterError:
            assert c.snapshot() == base
            continue
        except Exception as e:  # pragma: no cover
            pytest.fail(f"trial {trial}: raw {type(e).__name__}: {e}")
        c.restore(base)


def test_restore_rejects_negative_penalty_token():
    # Was accepted and silently penalised token n_vocab - 1 (numpy's negative index).
    spec = [("penalties", 8, 2.0, 0.0, 0.0), ("greedy",)]
    c = Chain(spec, N)
    doc = json.loads(c.snapshot()[len(_SNAP_MAGIC):])
    doc["state"][0]["prev"] = [-1]
    with pytest.raises(ParameterError, match="penalties.prev"):
        c.restore(_blob(doc))
    logits = np.zeros(N, np.float32)
    logits[N - 1] = 1.0
    assert c.sample(logits) == N - 1  # nothing penalised


def test_restore_rejects_missing_states_and_other_stdlib():
    c = Chain(SPECS["stateful"], N, seed=1)
    doc = json.loads(c.snapshot()[len(_SNAP_MAGIC):])
    doc["state"] = doc["state"][:1]
    with pytest.raises(ParameterError, match="sampler states"):
        c.restore(_blob(doc))
    other = Chain(SPECS["stateful"], N, seed=1, stdlib="libc++")
    with pytest.raises(ParameterError, match="libc\\+\\+"):
        c.restore(other.snapshot())


def test_restore_of_a_foreign_sampler_that_fails_rolls_back():
    from lmtail.sampling import Sampler

    class Counter(Sampler):
        name = "counter"

        def __init__(self):
            self.n = 0

        def apply(self, c):
            pass

        def accept(self, token):
            self.n += 1

        def get_state(self):
            return {"n": self.n}

        def set_state(self, st):
            if not isinstance(st.get("n"), int):
                raise ValueError("bad n")
            self.n = st["n"]

    spec = [("penalties", 8, 1.3, 0.0, 0.0), ("dist",)]
    c = Chain(spec, N, seed=2)
    c.samplers.append(Counter())
    c.spec.append(("counter",))
    _drive(c, _rows(3, 4))
    base = c.snapshot()
    doc = json.loads(base[len(_SNAP_MAGIC):])
    doc["state"][0]["prev"] = [1, 2, 3]
    doc["state"][2]["n"] = "x"
    with pytest.raises(ParameterError):
        c.restore(_blob(doc))
    assert c.snapshot() == base


# ---- Mt19937 ------------------------------------------------------------------------------------


def _engine_blob(words, idx=624, consumed=0, seed=0) -> bytes:
    return b"MT19937\x01" + struct.pack("<624IIQI", *words, idx, consumed, seed)


@pytest.mark.parametrize("words", [
    [0] * 624,
    [0x7FFFFFFF] + [0] * 623,  # only word 0's low bits: not part of the 19937-bit state
])
@pytest.mark.parametrize("idx", [0, 1, 624])
def test_mt19937_rejects_degenerate_state(words, idx):
    e = Mt19937(5)
    e()
    before = e.snapshot()
    with pytest.raises(ParameterError, match="degenerate"):
        e.restore(_engine_blob(words, idx))
    assert e.snapshot() == before


def test_mt19937_minimal_nonzero_state_is_valid_and_not_stuck():
    e = Mt19937()
    e.restore(_engine_blob([0x80000000] + [0] * 623))
    out = [e() for _ in range(2000)]
    assert any(out[624:])


@pytest.mark.parametrize("blob", [b"", b"MT19937\x01", _engine_blob([1] * 624)[:-1], _engine_blob([1] * 624) + b"\0",
                                  _engine_blob([1] * 624, idx=625), _engine_blob([1] * 624, idx=2 ** 32 - 1),
                                  b"XT19937\x01" + _engine_blob([1] * 624)[8:], "text", None, 5])
def test_mt19937_rejects_malformed_snapshots(blob):
    e = Mt19937(9)
    before = e.snapshot()
    with pytest.raises(ParameterError):
        e.restore(blob)
    assert e.snapshot() == before
