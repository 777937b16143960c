"""End to end against llama.cpp on models llama.cpp itself runs (issue 14 item 5).

Small random models (llama with an untied head, qwen2 / llama / gemma2 / command-r with tied
heads; hidden 256, 512, 640, 896; built SPM and byte-BPE vocabularies and one from
../shared/vocab) are written with gguf-py, quantized by llama.cpp's ``llama_model_quantize`` with
the head in each type real GGUF files ship, and run by llama.cpp on the CPU. From one decode we
take llama.cpp's post-norm hidden states (result_norm) and its logits, then check:

* llama.cpp's logits against a float64 reference (hidden64 @ dequantize(W)64.T, scale, cap; the
  weights dequantized by gguf-py): its error is measured, and bounded per type (what its
  activation rounding costs), so the reference, the hidden states and the scale/cap read from the
  file are the ones llama.cpp uses;
* lmtail's logits from those hidden states (a Head built from ``load_head_spec``'s weight and type,
  no norm) within 1e-6 normwise of the reference and within llama.cpp's measured error of
  llama.cpp's logits; the greedy token equal to llama.cpp's wherever the top-2 gap exceeds it;
* ``Head.from_gguf`` reads the scale, cap, norm kind, epsilon and EOG ids as llama.cpp does
  (the norm: llama.cpp's final-norm input, captured from its graph by the eval callback, normed
  in float64 gives its result_norm; from_gguf's whole tail on that input is within 1e-6);
* seeded generation loops: llama.cpp computes the body, lmtail's common sampler chain samples
  llama.cpp's logits, token for token equal to llama.cpp's own chain with the same seed; and
  with lmtail's head in the loop, equal to llama.cpp's chain on the float64 head (and to
  llama.cpp's own tokens on F32 heads).

A head type the installed lmtail does not run yet is skipped with the reason.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import _e2e_models as M

pytestmark = pytest.mark.oracle

CAP = 8.0  # gemma2's final_logit_softcapping here: about the largest logits, so the cap bites
SCALE = 0.125  # command-r's logit_scale (exact in float32)
GEMMA2_KV = {"final_logit_softcapping": (CAP, "FLOAT32"), "attn_logit_softcapping": (50.0, "FLOAT32")}
CMDR_KV = {"logit_scale": (SCALE, "FLOAT32")}
ALL = tuple(M.HEAD_TYPES)
K_TYPES = ("Q6_K", "Q5_K", "Q4_K")

CASES = [
    # untied head: every type
    M.ModelCase("llama-512", "llama", 512, "spm", 1024, ALL, tied=False),
    # tied heads; 896 and 640 are not multiples of 256: 32-block and float heads
    M.ModelCase("qwen2-896", "qwen2", 896, "gpt2", 1024, ("Q8_0", "Q4_0", "F16", "BF16", "F32")),
    M.ModelCase("qwen2-512", "qwen2", 512, "gpt2", 768, ("Q5_K",)),
    M.ModelCase("gemma2-640", "gemma2", 640, "spm", 768, ("Q8_0", "BF16", "F16"), kv=GEMMA2_KV),
    M.ModelCase("gemma2-512", "gemma2", 512, "spm", 512, ("Q5_K", "Q6_K"), kv=GEMMA2_KV, n_layer=1),
    M.ModelCase("command-r-256", "command-r", 256, "spm", 512, K_TYPES + ("Q8_0",), kv=CMDR_KV),
    # a real tokenizer: llama.cpp's llama SPM vocabulary (32000 tokens), tied llama
    M.ModelCase("llama-spm32k-256", "llama", 256, "shared:ggml-vocab-llama-spm.gguf", 0, ("Q5_K", "Q4_K"),
                n_layer=1),
]
BY_NAME = {c.name: c for c in CASES}
EXPECT = {  # what llama.cpp applies after the head, per architecture: (scale, cap, norm kind)
    "llama": (1.0, 0.0, "rms"), "qwen2": (1.0, 0.0, "rms"), "gemma2": (1.0, CAP, "rms"),
    "command-r": (SCALE, 0.0, "layer"),
}
# llama.cpp's normwise error vs float64 may not exceed this: it rounds the activations to the
# head's vec_dot type (F32: none; F16; BF16; Q8_0 for Q8_0/Q4_0; Q8_K for the K types). A bound an
# order above what those roundings give, far below what a wrong hidden state / scale / cap gives.
LLAMA_BOUND = {"F32": 1e-6, "F16": 2e-3, "BF16": 1e-2, "Q8_0": 3e-2, "Q4_0": 3e-2,
               "Q4_K": 4e-2, "Q5_K": 4e-2, "Q6_K": 4e-2}
LMTAIL_TOL = 1e-6
PROMPT = [1, 5, 300, 7, 9, 260, 11]  # ids valid in every vocabulary above


def _params():
    return [pytest.param(c.name, t, id=f"{c.name}-{t}") for c in CASES for t in c.types]


# ---- fixtures: models written and quantized once per session -----------------------------------
@pytest.fixture(scope="session")
def models(tmp_path_factory):
    from oracle._lib import OracleUnavailable, lib_dir

    try:
        lib_dir()
        M.lc()
    except OracleUnavailable as e:
        pytest.skip(str(e))
    return _Models(tmp_path_factory.mktemp("e2e_models"))


class _Models:
    """Writes each model's F32 file on first use and quantizes it once per head type; keeps
    llama.cpp's outputs for the prompt (T = 1 and T = len(PROMPT))."""

    def __init__(self, root):
        self.root = root
        self.f32 = {}
        self.files = {}
        self.outputs = {}
        self.heads64 = {}

    def w64(self, name, t):
        """The file's head as float64 (dequantized once per session: the 32000-row head is slow in numpy)."""
        if (name, t) not in self.heads64:
            self.heads64[(name, t)] = _w64(self.path(name, t), self.case(name), t)
        return self.heads64[(name, t)]

    def case(self, name) -> M.ModelCase:
        c = BY_NAME[name]
        if c.vocab.startswith("shared:"):
            p = M.shared_vocab_file(c.vocab.split(":", 1)[1])
            if not p.is_file():
                pytest.skip(f"{p} not found (../shared/vocab is present in this workplace and its CI only)")
        return c

    def path(self, name, t):
        key = (name, t)
        if key not in self.files:
            c = self.case(name)
            if name not in self.f32:
                self.f32[name] = M.write_model(self.root / f"{name}.f32.gguf", c, seed=len(self.f32) + 1)
            self.files[key] = M.quantize(self.f32[name], self.root / f"{name}.{t}.gguf", t, c.tied)
        return self.files[key]

    def run(self, name, t):
        """llama.cpp on the prompt: {hidden, logits} for T = 1 and T = 7, the final norm's input for
        T = 7 (xT), the EOG ids, n_vocab."""
        key = (name, t)
        if key not in self.outputs:
            last = f"l_out-{BY_NAME[name].n_layer - 1}"  # the final norm's input
            with M.LlamaRun(self.path(name, t), capture=(last,)) as r:
                h1, l1 = r.decode(PROMPT[:1])
                r.reset()
                hT, lT = r.decode(PROMPT)
                self.outputs[key] = dict(h1=h1, l1=l1, hT=hT, lT=lT, xT=r.captured[last], eog=r.eog_ids(),
                                         n_vocab=r.n_vocab, n_embd=r.n_embd)
        return self.outputs[key]


# ---- lmtail: what the installed build runs ---------------------------------------------------
def _lmtail_has_dtype() -> bool:
    import lmtail

    return "dtype" in inspect.signature(lmtail.Head).parameters


def _require_lmtail_type(t: str) -> None:
    """Skip, with the reason, a head type the installed lmtail does not run yet."""
    from lmtail import _core

    names = [d["name"] for d in _core.cpu_types()]
    if t not in names:
        pytest.skip(f"the installed lmtail's CPU core does not run {t} yet (cpu_types: {', '.join(names)})")
    if t != "Q5_K" and not _lmtail_has_dtype():
        pytest.skip(f"the installed lmtail.Head has no dtype= yet, so it cannot take a {t} head")


def _spec(path, t):
    from lmtail.gguf_model import load_head_spec

    spec = load_head_spec(path, allow_layer_norm=True)
    assert getattr(spec, "dtype", "Q5_K") == t
    assert spec.weight_type == M.HEAD_TYPES[t]
    return spec


def _head(spec, t, **kw):
    import lmtail

    if _lmtail_has_dtype():
        kw["dtype"] = spec.dtype
    return lmtail.Head(spec.weight, logit_scale=spec.logit_scale, softcap=spec.softcap, **kw)


def _w64(path, c: M.ModelCase, t: str):
    """The head of the file as float64, from the file's bytes (gguf-py, not lmtail's reader)."""
    import gguf

    name = "token_embd.weight" if c.tied else "output.weight"
    ti = next(x for x in gguf.GGUFReader(str(path)).tensors if x.name == name)
    assert ti.tensor_type == M.HEAD_TYPES[t], f"llama_model_quantize wrote {name} as {ti.tensor_type.name}, not {t}"
    rows = int(ti.shape[1])
    raw = np.asarray(ti.data).view(np.uint8).reshape(rows, -1)
    return M.dequantize_head(raw, t, c.hidden)


# ---- llama.cpp vs float64: runs for every type, whatever lmtail runs -------------------------
@pytest.mark.parametrize("name,t", _params())
def test_llama_cpp_matches_float64_reference(models, name, t):
    """llama.cpp's logits are the float64 head (scale, cap) of its own result_norm, up to its
    activation rounding: the harness feeds lmtail the hidden state llama.cpp's head consumed."""
    c = models.case(name)
    path = models.path(name, t)
    out = models.run(name, t)
    scale, cap, _ = EXPECT[c.arch]
    w64 = models.w64(name, t)
    assert out["n_embd"] == c.hidden and out["n_vocab"] == w64.shape[0]
    for h, lg in ((out["h1"], out["l1"]), (out["hT"], out["lT"])):
        ref = M.reference_logits(h, w64, scale, cap)
        err = M.normwise(lg, ref)
        print(f"\n{name} {t} T={len(h)}: llama.cpp vs float64 {err:.3g}")
        assert err <= LLAMA_BOUND[t], f"{name} {t}: llama.cpp vs float64 {err:.3g} > {LLAMA_BOUND[t]:g}"
        if scale != 1.0 or cap:
            # The scale / cap is what llama.cpp applies: without it the logits are far off.
            plain = M.normwise(lg, M.reference_logits(h, w64, 1.0, 0.0))
            assert plain > max(10 * err, 0.1), f"{name}: the scale/cap made no difference ({plain:.3g})"
    # T = 1 and the first row of T = 7 are the same token at position 0 (llama.cpp's body rounds
    # differently for one token and for a batch: close, not equal).
    np.testing.assert_allclose(out["h1"][0], out["hT"][0], rtol=0, atol=1e-3)


# ---- lmtail vs float64 vs llama.cpp ----------------------------------------------------------
@pytest.mark.parametrize("name,t", _params())
def test_lmtail_logits_vs_llama_cpp(models, name, t, record_property):
    c = models.case(name)
    path = models.path(name, t)
    _require_lmtail_type(t)
    out = models.run(name, t)
    spec = _spec(path, t)
    scale, cap, _ = EXPECT[c.arch]
    assert (spec.logit_scale, spec.softcap) == (scale, cap)
    head = _head(spec, t)
    w64 = models.w64(name, t)
    errs = []
    n_clear = n_rows = 0
    for h, lg in ((out["h1"], out["l1"]), (out["hT"], out["lT"])):
        ours = head.logits(h)
        assert ours.shape == lg.shape and ours.dtype == np.float32
        ref = M.reference_logits(h, w64, scale, cap)
        e_ours = M.normwise(ours, ref)
        e_llama = M.normwise(lg, ref)
        errs.append((e_ours, e_llama))
        assert e_ours <= LMTAIL_TOL, f"{name} {t}: lmtail vs float64 {e_ours:.3g} > {LMTAIL_TOL:g}"
        # Within llama.cpp's own measured error of llama.cpp's logits, row by row, normwise
        # (relative to the reference's norm) and per element.
        nref = np.linalg.norm(ref, axis=-1)
        r_llama = np.linalg.norm(lg - ref, axis=-1) / nref
        r_ours = np.linalg.norm(ours - ref, axis=-1) / nref
        assert np.all(np.linalg.norm(ours - lg.astype(np.float64), axis=-1) / nref <= (r_llama + r_ours) * (1 + 1e-9))
        d_llama = np.abs(lg - ref).max(axis=-1)
        d_ours = np.abs(ours - ref).max(axis=-1)
        assert np.all(np.abs(ours - lg).max(axis=-1) <= (d_llama + d_ours) * (1 + 1e-9))
        # Greedy: the same token as llama.cpp wherever the reference's top-2 gap exceeds both errors.
        top2 = np.sort(ref, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 2 * (d_llama + d_ours)
        want = np.argmax(ref, axis=-1)
        assert np.array_equal(np.argmax(lg, axis=-1)[clear], want[clear])
        assert np.array_equal(head.greedy(h)[clear], want[clear])
        assert np.array_equal(np.argmax(ours, axis=-1)[clear], want[clear])
        n_clear += int(clear.sum())
        n_rows += len(clear)
    e_ours, e_llama = max(e[0] for e in errs), max(e[1] for e in errs)
    record_property("errors", {"lmtail_vs_f64": e_ours, "llama_vs_f64": e_llama})
    print(f"\n{name} {t}: lmtail vs float64 {e_ours:.3g}, llama.cpp vs float64 {e_llama:.3g}; "
          f"greedy compared on {n_clear}/{n_rows} rows")


# ---- Head.from_gguf reads what llama.cpp reads ---------------------------------------------------
@pytest.mark.parametrize("name,t", _params())
def test_from_gguf_reads_as_llama_cpp(models, name, t):
    import lmtail

    c = models.case(name)
    path = models.path(name, t)
    _require_lmtail_type(t)
    out = models.run(name, t)
    head = lmtail.Head.from_gguf(path)
    scale, cap, norm_kind = EXPECT[c.arch]
    assert (head.logit_scale, head.softcap, head.norm_kind) == (scale, cap, norm_kind)
    assert head.eog_ids == out["eog"] and len(out["eog"]) >= 1
    assert (head.rows, head.cols) == (out["n_vocab"], out["n_embd"])
    assert head.spec.head_tensor == ("token_embd.weight" if c.tied else "output.weight")
    if _lmtail_has_dtype():
        assert head.dtype == t
    # from_gguf's scale and cap are llama.cpp's: the capped logits of its head (fed the post-norm
    # state, so without the norm) match llama.cpp's within llama.cpp's own error.
    spec = _spec(path, t)
    bare = _head(spec, t)
    w64 = models.w64(name, t)
    h, lg, x = out["hT"], out["lT"], out["xT"]
    ref = M.reference_logits(h, w64, head.logit_scale, head.softcap)
    assert M.normwise(bare.logits(h), ref) <= LMTAIL_TOL
    assert M.normwise(bare.logits(h), lg) <= 2 * M.normwise(lg, ref) + 2 * LMTAIL_TOL
    # The norm: llama.cpp's result_norm is the float64 norm of the kind, epsilon and weight
    # from_gguf read, applied to llama.cpp's own norm input (captured from its graph); the
    # other kind is visibly off. Then from_gguf's whole tail (norm included) on that input.
    x64 = x.astype(np.float64)
    g64 = spec.norm.astype(np.float64)
    def norm64(kind):
        m = x64 - x64.mean(-1, keepdims=True) if kind == "layer" else x64
        return m / np.sqrt((m * m).mean(-1, keepdims=True) + spec.eps) * g64
    e_norm = M.normwise(h, norm64(head.norm_kind))
    e_other = M.normwise(h, norm64("rms" if head.norm_kind == "layer" else "layer"))
    assert e_norm <= 1e-6 and e_other > 100 * e_norm, (e_norm, e_other)
    print(f"\n{name} {t}: result_norm vs float64 {head.norm_kind} norm {e_norm:.3g} (the other kind {e_other:.3g})")
    full = head.logits(x)
    ref_full = M.reference_logits(norm64(head.norm_kind), w64, head.logit_scale, head.softcap)
    e_full = M.normwise(full, ref_full)
    assert e_full <= LMTAIL_TOL, f"{name} {t}: from_gguf's tail (norm included) vs float64 {e_full:.3g}"
    assert M.normwise(full, lg) <= 2 * M.normwise(lg, ref_full) + 2 * LMTAIL_TOL


# ---- a seeded generation loop ---------------------------------------------------------------------
GEN_STEPS = 16
GEN_CASES = [pytest.param(c.name, c.types[0], id=f"{c.name}-{c.types[0]}") for c in CASES]


@pytest.mark.parametrize("name,t", GEN_CASES)
def test_generation_loop_matches_llama_cpp_sampler(models, name, t):
    """llama.cpp runs the body; each step lmtail's common chain and llama.cpp's (same samplers,
    same seed) sample llama.cpp's logits; the token is fed back. Token for token equal."""
    from oracle import sampling as O

    from lmtail.sampling import common_chain

    c = models.case(name)
    path = models.path(name, t)
    # Tied heads favour the input token (its embedding rides the residual stream): penalties keep
    # the loop moving, and exercise the samplers' token history.
    params = dict(seed=1234 + len(name), penalty_last_n=16, penalty_repeat=1.3, penalty_present=0.5, temp=1.0)
    with M.LlamaRun(path) as r:
        ours = common_chain(r.n_vocab, **params)
        theirs = O.OracleCommonChain(r.n_vocab, **params)
        _, lg = r.decode(PROMPT[:4])
        logits = lg[-1]
        toks = []
        for step in range(GEN_STEPS):
            a = theirs.sample(logits)
            b = ours.sample(logits)
            assert a == b, f"step {step}: llama.cpp sampled {a}, lmtail {b} (tokens so far {toks})"
            theirs.accept(a)
            ours.accept(b)
            toks.append(a)
            _, lg = r.decode([a])
            logits = lg[-1]
    print(f"\n{name} {t}: sampled {toks}")
    assert len(set(toks)) > 1, f"the loop sampled one token only ({toks}): the logits are too peaked to test"


# lmtail's head in the loop: llama.cpp's body, lmtail's head (fed llama.cpp's result_norm) and
# lmtail's chain. Its tokens are those of llama.cpp's chain sampling the float64 head (lmtail is
# within 1e-6 of it); on an F32 head llama.cpp's own logits are that close too, so there its
# tokens are llama.cpp's own. (On quantized heads llama.cpp rounds the activations, ~1e-2, which
# flips near-tied candidates: its own loop then legitimately samples other tokens.)
HEAD_LOOP_CASES = [pytest.param(n, t, id=f"{n}-{t}") for n, t in (
    ("llama-512", "Q5_K"), ("llama-512", "F32"), ("qwen2-896", "F32"), ("qwen2-896", "Q8_0"),
    ("gemma2-512", "Q5_K"), ("gemma2-640", "BF16"), ("command-r-256", "Q5_K"), ("command-r-256", "Q4_K"))]


@pytest.mark.parametrize("name,t", HEAD_LOOP_CASES)
def test_generation_loop_with_lmtail_head(models, name, t):
    from oracle import sampling as O

    from lmtail.sampling import common_chain

    c = models.case(name)
    path = models.path(name, t)
    _require_lmtail_type(t)
    spec = _spec(path, t)
    head = _head(spec, t)
    w64 = models.w64(name, t)
    params = dict(seed=99 + len(name), penalty_last_n=16, penalty_repeat=1.3, penalty_present=0.5, temp=1.0)
    with M.LlamaRun(path) as r:
        ours = common_chain(r.n_vocab, **params)
        exact = O.OracleCommonChain(r.n_vocab, **params)  # llama.cpp's chain on the float64 head
        theirs = O.OracleCommonChain(r.n_vocab, **params) if t == "F32" else None  # ... on its own logits
        h, lg = r.decode(PROMPT[:4])
        toks = []
        for step in range(GEN_STEPS):
            b = ours.sample(head.logits(h[-1:])[0])
            ref = M.reference_logits(h[-1:], w64, spec.logit_scale, spec.softcap)[0].astype(np.float32)
            a = exact.sample(ref)
            assert a == b, f"step {step}: llama.cpp's chain on the float64 head sampled {a}, lmtail {b}; so far {toks}"
            if theirs is not None:
                a2 = theirs.sample(lg[-1])
                assert a2 == b, f"step {step}: llama.cpp sampled {a2}, lmtail (its head + chain) {b}; so far {toks}"
                theirs.accept(b)
            exact.accept(b)
            ours.accept(b)
            toks.append(b)
            h, lg = r.decode([b])
    assert len(set(toks)) > 1


# ---- precision="ggml": llama.cpp's logits bit for bit from its own hidden states -------------------
GGML_EXACT_TYPES = ("Q4_K", "Q5_K", "Q6_K", "Q8_0", "Q4_0", "F16", "BF16", "F32")  # every type with precision="ggml"


@pytest.mark.parametrize("name,t", [p for p in _params() if p.values[1] in GGML_EXACT_TYPES])
def test_ggml_precision_reproduces_llama_cpp_logits(models, name, t):
    """Head(precision="ggml") on llama.cpp's result_norm gives llama.cpp's logits, bit for bit,
    at T = 1 (vec_dot / repack gemv) and T = 7 (a batch: vec_dot, or repack gemm + gemv)."""
    from lmtail import _core
    from oracle import graph as G

    _require_lmtail_type(t)
    row = next(d for d in _core.cpu_types() if d["name"] == t)
    if "ggml" not in row["precisions"]:
        pytest.skip(f"lmtail offers no precision='ggml' for {t} here (reproduced builds: {row['ggml_builds']}, "
                    f"native: {_core.ggml_native_build()})")
    if G.oracle_build_isa() != _core.ggml_native_build():
        pytest.skip(f"llama.cpp here is ggml's {G.oracle_build_isa()} build, not this CPU's native "
                    f"{_core.ggml_native_build()} build (what Head(precision='ggml') reproduces)")
    c = models.case(name)
    out = models.run(name, t)
    head = _head(_spec(models.path(name, t), t), t, precision="ggml")
    for h, lg in ((out["h1"], out["l1"]), (out["hT"], out["lT"])):
        ours = head.logits(h)
        same = ours.view(np.uint32) == lg.view(np.uint32)
        assert same.all(), (f"{name} {t} T={len(h)} (tied={c.tied}, rows % 8 = {lg.shape[1] % 8}): "
                            f"{int((~same).sum())} of {same.size} logits differ, max {np.abs(ours - lg).max():.3g}")
