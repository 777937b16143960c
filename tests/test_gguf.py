"""GGUF reading for the LM head: container robustness, per-architecture scale/cap, EOG parity.

The EOG parity tests compare lmtail's ``eog_ids_from_kv`` with llama.cpp's ``llama_vocab_is_eog``
(llama-cpp-python 0.3.36, the oracle) on the vocab-only GGUFs in ../shared/vocab, in the sdist's
``vendor/llama.cpp/models`` and on files built here.  They skip, with the reason, when the oracle or
the files are absent.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from lmtail.errors import GGUFError, ParameterError
from lmtail.gguf_model import (
    ARCH_RULES,
    GGUFFile,
    HeadSpec,
    eog_ids_from_kv,
    load_head_spec,
    output_transform,
    vocab_tokens,
)

import _gguf_util as gu
from _gguf_util import KV, RawGGUF, f32, head_model, u32

REPO = Path(__file__).resolve().parents[1]
SHARED_VOCAB = REPO.parent / "shared" / "vocab"
from oracle._lib import llama_sdist

SDIST = llama_sdist()
SDIST_LLAMA = SDIST / "vendor" / "llama.cpp"


def f32v(x: float) -> float:
    return float(np.float32(x))


def inv32(x: float) -> float:
    """llama.cpp's ``1.0f / x`` in float32."""
    return float(np.float32(1.0) / np.float32(x))


def _require_oracle():
    from oracle import vocab as ov

    ov.require()
    try:
        ov._llama_cpp()
    except ov.OracleUnavailable as e:  # pragma: no cover - environment dependent
        pytest.skip(str(e))
    return ov


# ============================================================================================
# Head loading
# ============================================================================================


def _mmap_base(a: np.ndarray):
    b = a
    while isinstance(b, np.ndarray):
        b = b.base
    return b.obj if isinstance(b, memoryview) else b


def test_roundtrip_llama(tmp_path):
    path, arr = head_model(tmp_path / "m.gguf", "llama", rows=40, cols=512)
    spec = load_head_spec(path)
    assert isinstance(spec, HeadSpec)
    assert (spec.arch, spec.rows, spec.cols, spec.n_vocab) == ("llama", 40, 512, 40)
    assert spec.weight.shape == (40, 2 * 176) and spec.weight.dtype == np.uint8
    assert np.array_equal(spec.weight, arr["head"])
    assert spec.weight_type == 13 and spec.head_tensor == "output.weight"
    # zero-copy, read-only view of the file map, at the advertised offset
    assert not spec.weight.flags.writeable
    base = _mmap_base(spec.weight)
    assert isinstance(base, mmap.mmap)
    assert np.shares_memory(spec.weight, np.frombuffer(base, dtype=np.uint8))
    with pytest.raises(ValueError):
        spec.weight[0, 0] = 1
    raw = path.read_bytes()
    assert raw[spec.weight_offset : spec.weight_offset + spec.weight.nbytes] == arr["head"].tobytes()
    assert spec.norm.dtype == np.float32 and np.array_equal(spec.norm, arr["norm"])
    assert spec.norm_kind == "rms"
    assert spec.eps == f32v(1e-5)
    assert (spec.logit_scale, spec.softcap) == (1.0, 0.0)
    assert spec.eog_ids == (2,)  # llama default eos 2, also the text "</s>"


@pytest.mark.parametrize("norm", ["f16", "bf16"])
def test_norm_half_types_convert_to_f32(tmp_path, norm):
    path, arr = head_model(tmp_path / "m.gguf", norm=norm)
    spec = load_head_spec(path)
    assert spec.norm.dtype == np.float32 and spec.norm.shape == (512,)
    assert np.array_equal(spec.norm, arr["norm"])


def test_tied_embedding_fallback(tmp_path):
    path, arr = head_model(tmp_path / "m.gguf", head="tied")
    spec = load_head_spec(path)
    assert spec.head_tensor == "token_embd.weight"
    assert np.array_equal(spec.weight, arr["embd"])


def test_output_preferred_over_embedding(tmp_path):
    path, arr = head_model(tmp_path / "m.gguf", head="both")
    spec = load_head_spec(path)
    assert spec.head_tensor == "output.weight" and np.array_equal(spec.weight, arr["head"])


def test_missing_head(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", head="none")
    with pytest.raises(GGUFError, match=r"output\.weight.*token_embd\.weight"):
        load_head_spec(path)


# --------------------------------------------------------------------------------------------
# Every head weight type (issue 14): the supported list is the C++ core's type table
# --------------------------------------------------------------------------------------------

# The issue's head types as lmtail._core.cpu_types() rows: what the table holds once every kernel
# is merged. The "issue14" runs load through this table, so the GGUF side of every type is tested
# before its kernel exists; the "core" runs use the real table and skip a type it lacks.
_ISSUE14_ROWS = [{"id": i, "name": n, "block_elems": be, "block_bytes": bb} for n, (i, be, bb) in gu.HEAD_TYPES.items()]
_COLS = {"Q6_K": 512, "Q4_K": 512, "Q5_K": 256, "Q8_0": 640, "Q4_0": 896, "F16": 896, "BF16": 640, "F32": 96}


@pytest.fixture(params=["core", "issue14"])
def head_table(request, monkeypatch):
    """Which type table load_head_spec reads: the C++ core's, or the issue's full list."""
    from lmtail import _core

    if request.param == "issue14":
        monkeypatch.setattr(_core, "cpu_types", lambda: [dict(r) for r in _ISSUE14_ROWS])
    return request.param


def _need_type(name: str) -> None:
    from lmtail import _core

    if name not in {t["name"] for t in _core.cpu_types()}:
        pytest.skip(f"type {name} not in lmtail._core.cpu_types() yet")


def _check_zero_copy(path, spec, expect: np.ndarray, name: str) -> None:
    tid, be, bb = gu.HEAD_TYPES[name]
    assert (spec.dtype, spec.weight_type) == (name, tid)
    assert spec.weight.dtype == np.uint8 and spec.weight.shape == (spec.rows, spec.cols // be * bb)
    assert spec.weight.flags.c_contiguous and not spec.weight.flags.writeable
    base = _mmap_base(spec.weight)
    assert isinstance(base, mmap.mmap)  # a view of the file map, never a copy
    assert np.shares_memory(spec.weight, np.frombuffer(base, dtype=np.uint8))
    assert np.array_equal(spec.weight, expect)
    raw = Path(path).read_bytes()
    assert raw[spec.weight_offset : spec.weight_offset + spec.weight.nbytes] == expect.tobytes()


@pytest.mark.parametrize("name", list(gu.HEAD_TYPES))
@pytest.mark.parametrize("head", ["output", "tied"])
def test_every_head_type_loads_zero_copy(tmp_path, head_table, name, head):
    if head_table == "core":
        _need_type(name)
    tid = gu.HEAD_TYPES[name][0]
    rows, cols = 24, _COLS[name]
    path, arr = head_model(tmp_path / "m.gguf", "llama", rows=rows, cols=cols, head=head, head_type=tid)
    spec = load_head_spec(path)
    assert (spec.rows, spec.cols, spec.n_vocab) == (rows, cols, rows)
    assert spec.head_tensor == ("output.weight" if head == "output" else "token_embd.weight")
    _check_zero_copy(path, spec, arr["head" if head == "output" else "embd"], name)


@pytest.mark.parametrize("name", ["Q8_0", "Q6_K", "BF16"])
@pytest.mark.parametrize("arch,kv,scale,cap", [
    ("gemma2", {}, 1.0, 30.0),  # always tied, soft cap default 30
    ("command-r", {"command-r.logit_scale": f32(0.0625), "command-r.attention.layer_norm_epsilon": f32(1e-5)}, 0.0625, 0.0),
])
def test_tied_archs_of_every_type(tmp_path, head_table, name, arch, kv, scale, cap):
    if head_table == "core":
        _need_type(name)
    cols = 640 if name == "Q8_0" else 512
    path, arr = head_model(tmp_path / "m.gguf", arch, cols=cols, head="tied", head_type=gu.HEAD_TYPES[name][0], kv=kv)
    spec = load_head_spec(path, allow_layer_norm=True)
    assert spec.head_tensor == "token_embd.weight" and (spec.logit_scale, spec.softcap) == (f32v(scale), cap)
    _check_zero_copy(path, spec, arr["embd"], name)


def test_output_preferred_over_tied_embedding_of_another_type(tmp_path, head_table):
    # Untied: output.weight is the head even when token_embd.weight has another (unsupported) type.
    w = gu.quant_bytes(gu.HEAD_TYPES["Q8_0"][0], 40, 640, seed=3)
    path, arr = head_model(tmp_path / "m.gguf", rows=40, cols=640, head="none",
                           extra_tensors=[("token_embd.weight", gu.quant_bytes(gu.OTHER_TYPES["Q4_1"][0], 40, 640, 4),
                                           gu.OTHER_TYPES["Q4_1"][0]), ("output.weight", w, gu.HEAD_TYPES["Q8_0"][0])])
    if head_table == "core":
        _need_type("Q8_0")
    spec = load_head_spec(path)
    assert spec.head_tensor == "output.weight"
    _check_zero_copy(path, spec, w, "Q8_0")


@pytest.mark.parametrize("name", list(gu.HEAD_TYPES))
def test_short_file_is_refused_before_any_read(tmp_path, head_table, name):
    tid = gu.HEAD_TYPES[name][0]
    path, _ = head_model(tmp_path / "m.gguf", rows=16, cols=_COLS[name], head_type=tid)
    raw = path.read_bytes()
    for cut in (1, gu.HEAD_TYPES[name][2], len(raw) // 3):
        short = tmp_path / f"short{cut}.gguf"
        short.write_bytes(raw[:-cut])
        with pytest.raises(GGUFError, match=r"past the end of the file|truncated"):
            load_head_spec(short)


@pytest.mark.parametrize("name", [n for n, (_, be, _) in gu.HEAD_TYPES.items() if be > 1])
def test_cols_not_a_multiple_of_the_block(tmp_path, head_table, name):
    tid, be, bb = gu.HEAD_TYPES[name]
    cols = be + be // 2  # 1.5 blocks
    r = gu.RawGGUF()
    r.kv("general.architecture", 8, "llama")
    r.kv("llama.attention.layer_norm_rms_epsilon", 6, 1e-5)
    r.tensor("output.weight", [cols, 4], tid, 0)
    r.data = bytes(4 * 2 * bb)
    with pytest.raises(GGUFError, match=rf"type {name} has ne\[0\] = {cols}.*multiple of the block size {be}"):
        load_head_spec(r.write(tmp_path / "m.gguf"))


@pytest.mark.parametrize("name", list(gu.OTHER_TYPES))
@pytest.mark.parametrize("head", ["output", "tied"])
def test_real_ggml_type_lmtail_does_not_run_is_unsupported(tmp_path, head_table, name, head):
    from lmtail.errors import UnsupportedError

    tid = gu.OTHER_TYPES[name][0]
    path, _ = head_model(tmp_path / "m.gguf", rows=8, cols=512, head=head, head_type=tid)
    tensor = "output.weight" if head == "output" else "token_embd.weight"
    with pytest.raises(UnsupportedError, match=rf"'{re.escape(tensor)}' has ggml type {name} \({tid}\); lmtail runs LM heads of types .*Q5_K \(13\)") as e:
        load_head_spec(path)
    assert not isinstance(e.value, GGUFError)
    if head_table == "issue14":  # the message lists every supported type
        for n in gu.HEAD_TYPES:
            assert f"{n} ({gu.HEAD_TYPES[n][0]})" in str(e.value)


@pytest.mark.parametrize("tid", [4, 31, 43, 999])
def test_head_id_that_is_no_ggml_type_is_a_gguf_error(tmp_path, tid):
    r = gu.minimal_raw_head()
    r.tinfos[0] = ("output.weight", gu.enc_str("output.weight") + struct.pack("<Iqq", 2, 256, 8) + struct.pack("<iQ", tid, 0))
    with pytest.raises(GGUFError, match=rf"unknown ggml type {tid}"):
        load_head_spec(r.write(tmp_path / "m.gguf"))


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(gu.HEAD_TYPES))
def test_head_from_gguf_reads_the_type_it_was_given(tmp_path, name):
    # End to end through the real table: Head.from_gguf must run spec.weight as spec.dtype (a
    # Q8_0 head read as Q5_K bytes would be silently wrong), checked against float64 logits of
    # ggml's own dequantization of the same bytes.
    import lmtail
    from oracle import quant as oq
    from oracle._lib import OracleUnavailable

    _need_type(name)
    tid = gu.HEAD_TYPES[name][0]
    path, arr = head_model(tmp_path / "m.gguf", "llama", rows=24, cols=_COLS[name], head_type=tid)
    head = lmtail.Head.from_gguf(path)
    assert getattr(head, "dtype", "Q5_K") == name and head.spec.dtype == name
    try:
        w = oq.dequantize(tid, arr["head"], _COLS[name]).astype(np.float64)
    except OracleUnavailable as e:  # pragma: no cover - environment dependent
        pytest.skip(str(e))
    h = np.random.default_rng(5).standard_normal((3, _COLS[name])).astype(np.float32)
    h64 = h.astype(np.float64)
    x = h64 / np.sqrt(np.mean(h64 * h64, axis=1, keepdims=True) + head.spec.eps) * head.spec.norm
    ref = x @ w.T
    got = head.logits(h).astype(np.float64)
    assert np.linalg.norm(got - ref) <= 1e-5 * np.linalg.norm(ref)


def test_core_type_table_agrees_with_ggml():
    # The one list of runnable types (the C++ core's) must describe each type as ggml does.
    import gguf

    from lmtail import _core
    from lmtail.gguf_model import GGML_TYPES

    rows = _core.cpu_types()
    assert rows and "Q5_K" in {r["name"] for r in rows}
    for r in rows:
        assert GGML_TYPES[r["id"]] == (r["name"], r["block_elems"], r["block_bytes"])
        assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(r["id"])] == (r["block_elems"], r["block_bytes"])
        assert gu.HEAD_TYPES[r["name"]] == (r["id"], r["block_elems"], r["block_bytes"])


def test_arch_requiring_output_has_no_tied_fallback(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", "qwen", head="tied")
    with pytest.raises(GGUFError, match=r"requires it"):
        load_head_spec(path)


def test_tied_only_arch_refuses_output_weight(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", "gemma", head="both")
    with pytest.raises(GGUFError, match=r"always ties"):
        load_head_spec(path)
    path, arr = head_model(tmp_path / "t.gguf", "gemma", head="tied")
    assert np.array_equal(load_head_spec(path).weight, arr["embd"])


def test_no_vocabulary(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", vocab=False, rows=24)
    spec = load_head_spec(path)
    assert spec.n_vocab == 24 and spec.eog_ids == ()


def test_rows_must_match_vocab(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", rows=16, kv=gu.vocab_kv(gu.filler_tokens(20)))
    with pytest.raises(GGUFError, match=r"16 rows but the vocabulary has 20 tokens"):
        load_head_spec(path)


def test_embedding_length_must_match(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", kv={"llama.embedding_length": u32(1024)})
    with pytest.raises(GGUFError, match=r"embedding_length"):
        load_head_spec(path)


def test_missing_eps(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", eps=None)
    with pytest.raises(GGUFError, match=r"llama\.attention\.layer_norm_rms_epsilon"):
        load_head_spec(path)


def test_eps_wrong_type(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", eps=None, kv={"llama.attention.layer_norm_rms_epsilon": KV(1e-5, "FLOAT64")})
    with pytest.raises(GGUFError, match=r"FLOAT64.*expected FLOAT32"):
        load_head_spec(path)


def test_missing_norm_for_known_arch(tmp_path):
    path, _ = head_model(tmp_path / "m.gguf", norm=None)
    with pytest.raises(GGUFError, match=r"output_norm\.weight"):
        load_head_spec(path)


def test_norm_wrong_length(tmp_path):
    bad = np.ones(300, np.float32)
    path, _ = head_model(tmp_path / "m.gguf", norm=None, extra_tensors=[("output_norm.weight", bad, None)])
    with pytest.raises(GGUFError, match=r"output_norm\.weight.*expected \(512,\)"):
        load_head_spec(path)


def test_norm_wrong_type(tmp_path):
    bad = np.ones(512, np.int32)
    path, _ = head_model(tmp_path / "m.gguf", norm=None, extra_tensors=[("output_norm.weight", bad, None)])
    with pytest.raises(GGUFError, match=r"expected F32, F16 or BF16"):
        load_head_spec(path)


def test_three_dim_head(tmp_path):
    w = gu.q5k_bytes(16, 256).reshape(2, 8, 176)
    path, _ = head_model(tmp_path / "m.gguf", head="none", vocab=False, cols=256, extra_tensors=[("output.weight", w, gu.Q5_K)])
    with pytest.raises(GGUFError, match=r"3 dims.*expected 2"):
        load_head_spec(path)


def test_cols_not_multiple_of_256(tmp_path):
    r = gu.minimal_raw_head()
    # rewrite output.weight with ne0 = 300 (not a Q5_K block multiple)
    r.tinfos[0] = ("output.weight", gu.enc_str("output.weight") + struct.pack("<Iqq", 2, 300, 8) + struct.pack("<iQ", 13, 0))
    with pytest.raises(GGUFError, match=r"ne\[0\] = 300.*multiple of the block size 256"):
        load_head_spec(r.write(tmp_path / "m.gguf"))


def test_minimal_raw_file_loads(tmp_path):
    spec = load_head_spec(gu.minimal_raw_head().write(tmp_path / "m.gguf"))
    assert (spec.rows, spec.cols) == (8, 256) and spec.eog_ids == ()


# --------------------------------------------------------------------------------------------
# Per-architecture logit scale / soft cap (llama.cpp src/models/<arch>.cpp)
# --------------------------------------------------------------------------------------------


def _arch(tmp_path, arch, kv=None, name="m.gguf", **kw):
    path, _ = head_model(tmp_path / name, arch, kv=kv or {}, **kw)
    return path


def test_command_r_multiplies(tmp_path):
    ln = {"command-r.attention.layer_norm_epsilon": f32(1e-5)}
    p = _arch(tmp_path, "command-r", {**ln, "command-r.logit_scale": f32(0.0625)}, head="tied", eps=None)
    with pytest.raises(GGUFError, match=r"LayerNorm"):
        load_head_spec(p)
    spec = load_head_spec(p, allow_layer_norm=True)
    assert (spec.logit_scale, spec.softcap, spec.norm_kind) == (0.0625, 0.0, "layer")
    assert spec.head_tensor == "token_embd.weight" and spec.eps == f32v(1e-5)
    p2 = _arch(tmp_path, "command-r", ln, name="n.gguf", head="tied", eps=None)
    assert load_head_spec(p2, allow_layer_norm=True).logit_scale == 1.0  # key optional, 0 -> no scale


def test_cohere2_requires_scale(tmp_path):
    ln = {"cohere2.attention.layer_norm_epsilon": f32(1e-5)}
    p = _arch(tmp_path, "cohere2", ln, head="tied", eps=None)
    with pytest.raises(GGUFError, match=r"cohere2\.logit_scale"):
        load_head_spec(p, allow_layer_norm=True)
    p = _arch(tmp_path, "cohere2", {**ln, "cohere2.logit_scale": f32(0.25)}, name="b.gguf", head="tied", eps=None)
    assert load_head_spec(p, allow_layer_norm=True).logit_scale == 0.25


@pytest.mark.parametrize("arch", ["granite", "granitemoe", "granite_swa", "graniteswitch"])
def test_granite_divides(tmp_path, arch):
    p = _arch(tmp_path, arch, {f"{arch}.logit_scale": f32(12.0)})
    spec = load_head_spec(p)
    assert spec.logit_scale == inv32(12.0) and spec.softcap == 0.0
    assert spec.logit_scale != 1.0 / 12.0  # float32 arithmetic, like llama.cpp's 1.0f / x
    with pytest.raises(GGUFError, match=rf"{arch}\.logit_scale"):
        load_head_spec(_arch(tmp_path, arch, name="n.gguf"))
    with pytest.raises(GGUFError, match=r"1\.0f/0"):
        load_head_spec(_arch(tmp_path, arch, {f"{arch}.logit_scale": f32(0.0)}, name="z.gguf"))


def test_granitehybrid_optional(tmp_path):
    assert load_head_spec(_arch(tmp_path, "granitehybrid")).logit_scale == 1.0
    assert load_head_spec(_arch(tmp_path, "granitehybrid", {"granitehybrid.logit_scale": f32(0.0)}, name="z.gguf")).logit_scale == 1.0
    assert load_head_spec(_arch(tmp_path, "granitehybrid", {"granitehybrid.logit_scale": f32(8.0)}, name="e.gguf")).logit_scale == 0.125


def test_minicpm_default_and_key(tmp_path):
    assert load_head_spec(_arch(tmp_path, "minicpm")).logit_scale == inv32(f32v(256.0 / 512))  # = 2.0
    p = _arch(tmp_path, "minicpm", {"minicpm.logit_scale": f32(0.3)}, name="k.gguf")
    assert load_head_spec(p).logit_scale == inv32(0.3)


def test_minicpm3_pre_head_scale(tmp_path):
    assert load_head_spec(_arch(tmp_path, "minicpm3")).logit_scale == 0.5


def test_gemma2_cap_default_30(tmp_path):
    spec = load_head_spec(_arch(tmp_path, "gemma2", head="tied"))
    assert (spec.logit_scale, spec.softcap) == (1.0, 30.0)
    p = _arch(tmp_path, "gemma2", {"gemma2.final_logit_softcapping": f32(50.0)}, name="e.gguf", head="tied")
    assert load_head_spec(p).softcap == 50.0
    p = _arch(tmp_path, "gemma2", {"gemma2.final_logit_softcapping": f32(0.0)}, name="z.gguf", head="tied")
    with pytest.raises(GGUFError, match=r"always caps"):
        load_head_spec(p)


def test_gemma3_no_cap_by_default(tmp_path):
    assert load_head_spec(_arch(tmp_path, "gemma3")).softcap == 0.0
    p = _arch(tmp_path, "gemma3", {"gemma3.final_logit_softcapping": f32(25.0)}, name="e.gguf")
    assert load_head_spec(p).softcap == 25.0


def test_gemma3n_ignores_key(tmp_path):
    p = _arch(tmp_path, "gemma3n", {"gemma3n.final_logit_softcapping": f32(50.0)})
    assert load_head_spec(p).softcap == 30.0


def test_gemma4_cap(tmp_path):
    assert load_head_spec(_arch(tmp_path, "gemma4")).softcap == 30.0
    p = _arch(tmp_path, "gemma4", {"gemma4.final_logit_softcapping": f32(0.0)}, name="z.gguf")
    assert load_head_spec(p).softcap == 0.0


def test_muse_glimmer(tmp_path):
    kv = {"muse-glimmer.logit_scale": f32(0.196116), "muse-glimmer.final_logit_softcapping": f32(20.0)}
    spec = load_head_spec(_arch(tmp_path, "muse-glimmer", kv))
    assert (spec.logit_scale, spec.softcap) == (f32v(0.196116), 20.0)
    p = _arch(tmp_path, "muse-glimmer", {"muse-glimmer.logit_scale": f32(0.5)}, name="d.gguf")
    assert load_head_spec(p).softcap == 30.0  # hparams default when the key is absent
    with pytest.raises(GGUFError, match=r"muse-glimmer\.logit_scale"):
        load_head_spec(_arch(tmp_path, "muse-glimmer", name="n.gguf"))
    with pytest.raises(GGUFError, match=r"requires it"):
        load_head_spec(_arch(tmp_path, "muse-glimmer", kv, name="t.gguf", head="tied"))


def test_grok_default_scale(tmp_path):
    spec = load_head_spec(_arch(tmp_path, "grok"))
    assert (spec.logit_scale, spec.softcap) == (f32v(0.5773502691896257), 0.0)
    kv = {"grok.logit_scale": f32(2.0), "grok.final_logit_softcapping": f32(30.0)}
    assert load_head_spec(_arch(tmp_path, "grok", kv, name="k.gguf")).softcap == 30.0


def test_talkie_weightless_norm(tmp_path):
    spec = load_head_spec(_arch(tmp_path, "talkie", {"talkie.logit_scale": f32(0.5)}, norm=None))
    assert spec.logit_scale == 0.5 and spec.norm_kind == "rms"
    assert np.array_equal(spec.norm, np.ones(512, np.float32))


def test_hrm_text_has_no_final_norm(tmp_path):
    spec = load_head_spec(_arch(tmp_path, "hrm_text", norm=None))
    assert spec.norm is None and spec.norm_kind == "none"


def test_known_arch_ignores_unread_keys(tmp_path):
    kv = {"llama.logit_scale": f32(3.0), "llama.final_logit_softcapping": f32(10.0)}
    spec = load_head_spec(_arch(tmp_path, "llama", kv))
    assert (spec.logit_scale, spec.softcap) == (1.0, 0.0)


def test_unknown_arch_fails_closed(tmp_path):
    p = _arch(tmp_path, "mystery")
    with pytest.raises(GGUFError, match=r"unknown to lmtail.*logit_scale=.*softcap="):
        load_head_spec(p)
    spec = load_head_spec(p, logit_scale=1.0, softcap=0.0)
    assert (spec.logit_scale, spec.softcap) == (1.0, 0.0)
    assert load_head_spec(p, softcap=10.0).logit_scale == 1.0
    kv = {"mystery.logit_scale": f32(2.0), "mystery.final_logit_softcapping": f32(15.0)}
    spec = load_head_spec(_arch(tmp_path, "mystery", kv, name="k.gguf"))
    assert (spec.logit_scale, spec.softcap) == (2.0, 15.0)
    p = _arch(tmp_path, "mystery", {"mystery.final_logit_softcapping": f32(15.0)}, name="c.gguf")
    assert (load_head_spec(p).logit_scale, load_head_spec(p, logit_scale=4.0).logit_scale) == (1.0, 4.0)


def test_caller_overrides(tmp_path):
    spec = load_head_spec(_arch(tmp_path, "gemma2", head="tied"), softcap=0.0)
    assert spec.softcap == 0.0
    p = _arch(tmp_path, "granite", {"granite.logit_scale": f32(4.0)}, name="g.gguf")
    assert load_head_spec(p, logit_scale=3.0).logit_scale == 3.0
    for bad in ({"logit_scale": float("nan")}, {"logit_scale": 0.0}, {"logit_scale": 1e-60}, {"logit_scale": 1e300},
                {"softcap": -1.0}, {"softcap": float("inf")}, {"softcap": "20"}):
        with pytest.raises(ParameterError):
            load_head_spec(p, **bad)


def test_qwen2vl_eps_is_zero(tmp_path):
    # llama.cpp's qwen2vl never reads the RMS epsilon (hparams value-initialised to 0).
    assert load_head_spec(_arch(tmp_path, "qwen2vl")).eps == 0.0


def test_qwen2_output_bias_refused(tmp_path):
    assert load_head_spec(_arch(tmp_path, "qwen2")).logit_scale == 1.0
    bias = ("output.bias", np.zeros(40, np.float32), None)
    with pytest.raises(GGUFError, match=r"output\.bias"):
        load_head_spec(_arch(tmp_path, "qwen2", name="b.gguf", extra_tensors=[bias]))


@pytest.mark.parametrize("arch", ["gpt2", "chameleon", "bert", "phi2", "qwen4exp", "eagle3"])
def test_unsupported_arch(tmp_path, arch):
    with pytest.raises(GGUFError, match=r"not supported by lmtail"):
        load_head_spec(_arch(tmp_path, arch))


def test_lfm2_norm_tensor_name(tmp_path):
    g = np.full(512, 2.0, np.float32)
    p = _arch(tmp_path, "lfm2", norm=None, extra_tensors=[("token_embd_norm.weight", g, None)])
    assert np.array_equal(load_head_spec(p).norm, g)
    with pytest.raises(GGUFError, match=r"token_embd_norm\.weight"):
        load_head_spec(_arch(tmp_path, "lfm2", name="n.gguf"))


def test_nemotron_h_eps_fallback(tmp_path):
    p = _arch(tmp_path, "nemotron_h", {"nemotron_h.attention.layer_norm_epsilon": f32(1e-6)}, eps=None)
    assert load_head_spec(p).eps == f32v(1e-6)


def test_cohere2moe_norm_type(tmp_path):
    kv = {"cohere2moe.logit_scale": f32(0.5)}
    assert load_head_spec(_arch(tmp_path, "cohere2moe", kv)).norm_kind == "rms"
    p = _arch(tmp_path, "cohere2moe", {**kv, "cohere2moe.attention.layer_norm_epsilon": f32(1e-5)}, name="l.gguf", eps=None)
    with pytest.raises(GGUFError, match=r"LayerNorm"):
        load_head_spec(p)
    assert load_head_spec(p, allow_layer_norm=True).norm_kind == "layer"


def test_output_transform_direct():
    kv = {"granite.logit_scale": 10.0}
    assert output_transform("granite", kv) == (inv32(10.0), 0.0)
    assert output_transform("gemma2", {}) == (1.0, 30.0)
    assert output_transform("llama", {}) == (1.0, 0.0)
    with pytest.raises(GGUFError):
        output_transform("not-an-arch", {})


def _llama_arch_names() -> list[str]:
    src = SDIST_LLAMA / "src" / "llama-arch.cpp"
    if not src.exists():
        pytest.skip(f"llama.cpp sources not found at {src} (set LMTAIL_LLAMA_SDIST)")
    text = src.read_text()
    block = text[text.index("LLM_ARCH_NAMES") :]
    block = block[: block.index("};")]
    return [n for n in re.findall(r'\{\s*LLM_ARCH_\w+\s*,\s*"([^"]+)"\s*\}', block) if n != "(unknown)"]


def test_arch_table_covers_llama_cpp():
    names = _llama_arch_names()
    assert len(names) > 100
    assert sorted(set(names) - set(ARCH_RULES)) == []
    assert sorted(set(ARCH_RULES) - set(names)) == []


def test_arch_table_kinds_are_valid():
    for arch, r in ARCH_RULES.items():
        assert r.head in ("output_or_tied", "output", "tied"), arch
        assert r.norm in ("rms", "rms_noweight", "none", "rms_opt_bias", "layer", "layer_opt_bias", "layer_bias",
                          "layer_noweight", "cohere2moe"), arch
        assert r.eps in ("rms", "rms_or_zero", "zero", "rms_or_layer", "layer"), arch
        assert r.scale in ("none", "mul_opt_if", "mul_req_if", "mul_req", "mul_default", "div_req", "div_opt_if",
                           "div_minicpm", "pre_minicpm3"), arch
        assert r.cap in ("none", "always_opt30", "always_30", "if_opt0", "if_opt30"), arch
        assert r.source, arch


# ============================================================================================
# Container parsing
# ============================================================================================


def test_all_value_types_roundtrip(tmp_path):
    kv = {
        "t.u8": KV(200, "UINT8"), "t.i8": KV(-5, "INT8"), "t.u16": KV(60000, "UINT16"), "t.i16": KV(-300, "INT16"),
        "t.u32": KV(4000000000, "UINT32"), "t.i32": KV(-7, "INT32"), "t.f32": KV(1.5, "FLOAT32"), "t.bool": KV(True, "BOOL"),
        "t.str": KV("héllo", "STRING"), "t.u64": KV(2**63 + 5, "UINT64"), "t.i64": KV(-(2**40), "INT64"),
        "t.f64": KV(0.1, "FLOAT64"), "t.arr_i32": KV([1, -2, 3], "ARRAY", "INT32"),
        "t.arr_f64": KV([0.5, 0.25], "ARRAY", "FLOAT64"), "t.arr_str": KV(["a", "", "ü"], "ARRAY", "STRING"),
        "t.arr_bool": KV([True, False], "ARRAY", "BOOL"), "t.nested": KV([[1, 2], [3]], "ARRAY", "ARRAY"),
    }  # fmt: skip
    p = gu.write_gguf(tmp_path / "kv.gguf", "llama", kv, [("x", np.arange(6, dtype=np.float32).reshape(2, 3), None)])
    f = GGUFFile(p)
    assert f.kv["general.architecture"] == "llama" and f.version == 3
    exp = {"t.u8": 200, "t.i8": -5, "t.u16": 60000, "t.i16": -300, "t.u32": 4000000000, "t.i32": -7, "t.f32": 1.5,
           "t.bool": True, "t.str": "héllo", "t.u64": 2**63 + 5, "t.i64": -(2**40), "t.f64": 0.1}
    for k, v in exp.items():
        assert f.kv[k] == v and type(f.kv[k]) is type(v), k
    assert f.kv_types["t.f32"] == (6,) and f.kv_types["t.arr_i32"] == (9, 5)
    assert f.kv["t.arr_i32"].tolist() == [1, -2, 3] and not f.kv["t.arr_i32"].flags.writeable
    assert f.kv["t.arr_f64"].tolist() == [0.5, 0.25]
    assert list(f.kv["t.arr_str"]) == ["a", "", "ü"] and f.kv["t.arr_str"].raw(2) == "ü".encode()
    assert f.kv["t.arr_bool"].tolist() == [True, False]
    assert [a.tolist() for a in f.kv["t.nested"]] == [[1, 2], [3]]
    x = f.tensors["x"]
    assert x.ne == (3, 2) and x.type_name == "F32" and x.data.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert f.data_offset % 32 == 0


def test_matches_gguf_py_reader(tmp_path):
    gguf = pytest.importorskip("gguf")
    path, _ = head_model(tmp_path / "m.gguf")
    ours, ref = GGUFFile(path), gguf.GGUFReader(str(path))
    assert set(ours.kv) == {k for k in ref.fields if not k.startswith("GGUF.")}
    for k in ours.kv:
        if not isinstance(ours.kv[k], (np.ndarray, list)) and k != "tokenizer.ggml.tokens":
            assert ours.kv[k] == ref.fields[k].contents(), k
    for t in ref.tensors:
        ti = ours.tensors[t.name]
        assert ti.abs_offset == t.data_offset and ti.nbytes == t.n_bytes and ti.type == int(t.tensor_type)
        assert tuple(int(d) for d in t.shape) == ti.ne
    assert vocab_tokens(ours) == [bytes(ref.fields["tokenizer.ggml.tokens"].parts[i]) for i in ref.fields["tokenizer.ggml.tokens"].data]


def test_custom_alignment(tmp_path):
    path = gu.write_gguf(tmp_path / "a.gguf", "llama", {}, [("a", np.ones(3, np.float32), None), ("b", np.ones(5, np.float32), None)], alignment=64)
    f = GGUFFile(path)
    assert f.alignment == 64 and f.data_offset % 64 == 0 and f.tensors["b"].offset == 64


def test_quant_table_matches_gguf_py():
    gguf = pytest.importorskip("gguf")
    from lmtail.gguf_model import GGML_TYPES

    for t, (blck, size) in gguf.GGML_QUANT_SIZES.items():
        assert GGML_TYPES[int(t)][1:] == (blck, size), t.name
        assert GGML_TYPES[int(t)][0] == t.name


def _raw_ok() -> RawGGUF:
    return gu.minimal_raw_head()


def _expect(tmp_path, data: bytes, pattern: str):
    p = tmp_path / "bad.gguf"
    p.write_bytes(data)
    with pytest.raises(GGUFError, match=pattern):
        load_head_spec(p)


def test_bad_magic(tmp_path):
    r = _raw_ok()
    r.magic = b"GGML"
    _expect(tmp_path, r.build(), r"bad magic at byte offset 0: expected b'GGUF', found b'GGML'")


@pytest.mark.parametrize("ver,pat", [(0, r"found 0"), (1, r"GGUFv1"), (4, r"found 4"), (0x03000000, r"big-endian")])
def test_bad_version(tmp_path, ver, pat):
    r = _raw_ok()
    r.version = ver
    _expect(tmp_path, r.build(), pat)


def test_version_2_accepted(tmp_path):
    r = _raw_ok()
    r.version = 2
    p = tmp_path / "v2.gguf"
    p.write_bytes(r.build())
    assert load_head_spec(p).rows == 8


@pytest.mark.parametrize("field", ["n_kv", "n_tensors"])
@pytest.mark.parametrize("value", [2**60, -1, 2**63 - 1])
def test_absurd_counts(tmp_path, field, value):
    r = _raw_ok()
    setattr(r, field, value)
    _expect(tmp_path, r.build(), r"absurd")


def test_absurd_key_length(tmp_path):
    r = _raw_ok()
    data = bytearray(r.build())
    struct.pack_into("<Q", data, r.offsets["kv:general.architecture"], 2**60)
    _expect(tmp_path, bytes(data), r"key #0 at byte offset 24 claims length 1152921504606846976")


def test_absurd_string_value_length(tmp_path):
    r = _raw_ok()
    data = bytearray(r.build())
    at = r.offsets["kv:general.architecture"] + 8 + len("general.architecture") + 4
    struct.pack_into("<Q", data, at, 2**60)
    _expect(tmp_path, bytes(data), rf"general\.architecture'.*offset {at}.*claims length")


@pytest.mark.parametrize("etype", [8, 5, 9])
def test_absurd_array_count(tmp_path, etype):
    r = _raw_ok()
    r.kv("x.arr", 9, payload=struct.pack("<iQ", etype, 2**60))
    _expect(tmp_path, r.build(), r"'x\.arr'.*claims 1152921504606846976 elements")


def test_absurd_string_in_array(tmp_path):
    r = _raw_ok()
    r.kv("x.arr", 9, payload=struct.pack("<iQ", 8, 2) + gu.enc_str("ok") + struct.pack("<Q", 2**62))
    _expect(tmp_path, r.build(), r"string #1 of array 'x\.arr' runs past the end")


@pytest.mark.parametrize("vt", [13, 99, -1, 2**31 - 1])
def test_unknown_value_type(tmp_path, vt):
    r = _raw_ok()
    r.kv("x.weird", vt, payload=b"\0" * 8)
    _expect(tmp_path, r.build(), rf"'x\.weird' has unknown value type {vt}")


def test_unknown_array_element_type(tmp_path):
    r = _raw_ok()
    r.kv("x.arr", 9, payload=struct.pack("<iQ", 77, 1) + b"\0" * 8)
    _expect(tmp_path, r.build(), r"'x\.arr' has unknown element type 77")


def test_nested_array_parses(tmp_path):
    r = _raw_ok()
    r.kv("x.nest", 9, [(5, [1, 2]), (8, ["a"])], 9)
    p = r.write(tmp_path / "n.gguf")
    f = GGUFFile(p)
    assert f.kv["x.nest"][0].tolist() == [1, 2] and list(f.kv["x.nest"][1]) == ["a"]


def test_deeply_nested_array_refused(tmp_path):
    r = _raw_ok()
    r.kv("x.deep", 9, payload=struct.pack("<iQ", 9, 1) * 20 + struct.pack("<iQ", 5, 0))
    _expect(tmp_path, r.build(), r"nests deeper")


def test_duplicate_key(tmp_path):
    r = _raw_ok()
    r.kv("general.architecture", 8, "llama")
    _expect(tmp_path, r.build(), r"duplicate key 'general\.architecture'")


def test_empty_key(tmp_path):
    r = _raw_ok()
    r.kv("", 4, 1)
    _expect(tmp_path, r.build(), r"is empty")


def test_duplicate_tensor(tmp_path):
    r = _raw_ok()
    r.tinfos.append(r.tinfos[1])
    _expect(tmp_path, r.build(), r"duplicate tensor name 'output_norm\.weight'")


def test_long_tensor_name(tmp_path):
    r = _raw_ok()
    r.tensor("x" * 64, [4], 0, 99999)
    _expect(tmp_path, r.build(), r"64 bytes; expected fewer than 64")


def test_too_many_dims(tmp_path):
    r = _raw_ok()
    r.tensor("x", [1, 1, 1, 1, 1], 0, 0)
    _expect(tmp_path, r.build(), r"'x' has n_dims 5")


def test_negative_dim(tmp_path):
    r = _raw_ok()
    r.tensor("x", [4, -2], 0, 0)
    _expect(tmp_path, r.build(), r"'x' ne\[1\] = -2")


def test_element_overflow(tmp_path):
    r = _raw_ok()
    r.tensor("x", [2**40, 2**40], 0, 0)
    _expect(tmp_path, r.build(), r"more than INT64_MAX")


@pytest.mark.parametrize("tt", [4, 31, 43, 999, -3])
def test_unknown_tensor_type(tmp_path, tt):
    r = _raw_ok()
    r.tensor("x", [32], tt, 0)
    _expect(tmp_path, r.build(), rf"'x' has unknown ggml type {tt}")


def test_tensor_offset_out_of_order(tmp_path):
    r = _raw_ok()
    name, rec = r.tinfos[1]
    r.tinfos[1] = (name, rec[:-8] + struct.pack("<Q", 32))
    _expect(tmp_path, r.build(), r"'output_norm\.weight' has data offset 32; expected 1408")


def test_tensor_data_past_eof(tmp_path):
    data = _raw_ok().build()
    _expect(tmp_path, data[:-1], r"'output_norm\.weight' data \[\d+, \d+\) runs past the end of the file")


@pytest.mark.parametrize("align,pat", [(KV(3, "UINT32"), r"power of two"), (KV(0, "UINT32"), r"power of two"),
                                       (KV(64, "INT32"), r"must be UINT32")])
def test_bad_alignment(tmp_path, align, pat):
    r = _raw_ok()
    r.kv("general.alignment", gu.VT[align.vtype], align.value)
    _expect(tmp_path, r.build(), pat)


def test_missing_architecture(tmp_path):
    r = _raw_ok()
    r.kvs = r.kvs[1:]
    _expect(tmp_path, r.build(), r"missing key 'general\.architecture'")


def test_architecture_wrong_type(tmp_path):
    r = _raw_ok()
    r.kvs[0] = ("general.architecture", gu.enc_str("general.architecture") + struct.pack("<iI", 4, 7))
    _expect(tmp_path, r.build(), r"'general\.architecture' has type UINT32; expected STRING")


def test_not_a_file(tmp_path):
    with pytest.raises(GGUFError, match="cannot open"):
        load_head_spec(tmp_path / "nope.gguf")
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(GGUFError, match="empty file"):
        load_head_spec(tmp_path / "empty.gguf")
    with pytest.raises(GGUFError):
        load_head_spec(tmp_path)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> bytes:
    p, _ = head_model(tmp_path_factory.mktemp("small") / "s.gguf", rows=8, cols=256,
                      kv=gu.vocab_kv(gu.filler_tokens(8, {2: "</s>", 5: "<|im_end|>"}), eos=2))
    return p.read_bytes()


def test_truncated_at_every_prefix(tmp_path, small_model):
    p = tmp_path / "t.gguf"
    assert len(small_model) < 8000
    for n in range(len(small_model)):
        p.write_bytes(small_model[:n])
        with pytest.raises(GGUFError):
            load_head_spec(p)
    p.write_bytes(small_model)
    assert load_head_spec(p).eog_ids == (2, 5)


try:
    from hypothesis import HealthCheck, given, reject, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    HAVE_HYPOTHESIS = False

    def given(*a, **k):
        return lambda f: pytest.mark.skip(reason="hypothesis is not installed")(f)

    def settings(*a, **k):
        return lambda f: f

    class HealthCheck:  # type: ignore[no-redef]
        function_scoped_fixture = too_slow = None

    class st:  # type: ignore[no-redef]
        data = staticmethod(lambda: None)
else:
    HAVE_HYPOTHESIS = True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_corruption_never_crashes(tmp_path, small_model, data):
    buf = bytearray(small_model)
    # bias edits towards the header/metadata, where parsing decisions are made
    hot = st.integers(0, min(len(buf) - 1, 900))
    anywhere = st.integers(0, len(buf) - 1)
    edits = data.draw(st.lists(st.tuples(st.one_of(hot, anywhere), st.integers(0, 255)), min_size=1, max_size=8))
    for pos, val in edits:
        buf[pos] = val
    if data.draw(st.booleans()):
        pos = data.draw(hot)
        word = data.draw(st.sampled_from([2**64 - 1, 2**63, 2**32, 2**31 - 1, 0]))
        struct.pack_into("<Q", buf, min(pos, len(buf) - 8), word)
    p = tmp_path / "fuzz.gguf"
    p.write_bytes(bytes(buf))
    t0 = time.perf_counter()
    try:
        spec = load_head_spec(p, logit_scale=None)
    except GGUFError as e:
        assert str(e)
    else:
        assert spec.weight.shape == (spec.rows, spec.cols // 256 * 176)
    assert time.perf_counter() - t0 < 5.0


# ============================================================================================
# End-of-generation ids
# ============================================================================================

# (case id, tokenizer model, n tokens, planted texts, special ids, expected EOG ids)
EOG_CASES = [
    ("llama-default-eos", "llama", 16, {}, {}, (2,)),
    ("eos-key", "llama", 16, {}, {"eos": 5}, (5,)),
    ("eos-key-out-of-range-keeps-default", "llama", 16, {}, {"eos": 100}, (2,)),
    ("texts", "llama", 16, {3: "<|im_end|>", 7: "<|eot_id|>", 9: "<end_of_turn>", 12: "<|endoftext|>"}, {}, (2, 3, 7, 9, 12)),
    ("more-texts", "llama", 16, {3: "[EOS]", 4: "<eos>", 5: "[e~[", 6: "<|end_of_text|>", 7: "<EOT>", 8: "_<EOT>"}, {}, (2, 3, 4, 5, 6, 7, 8)),
    ("eot-eom-keys", "llama", 16, {}, {"eot": 11, "eom": 12}, (2, 11, 12)),
    ("eom-text", "llama", 16, {10: "<|eom_id|>"}, {}, (2, 10)),
    ("fim-texts", "llama", 16, {4: "<|fim_pad|>", 5: "<|repo_name|>", 6: "<|file_sep|>", 7: "<|fim_prefix|>"}, {}, (2, 4, 5, 6)),
    ("fim-keys", "llama", 16, {}, {"fim_pad": 9, "fim_rep": 10, "fim_sep": 11, "fim_pre": 12}, (2, 9, 10, 11)),
    ("harmony-drops-end", "llama", 16, {3: "<|return|>", 4: "<|call|>", 5: "<|end|>"}, {}, (2, 3, 4)),
    ("harmony-partial-keeps-end", "llama", 16, {3: "<|return|>", 5: "<|end|>"}, {}, (2, 3, 5)),
    ("solar-drops-end", "llama", 16, {3: "<|calls|>", 4: "<|flush|>", 5: "<|end|>"}, {}, (2, 3, 4)),
    ("plamo-drops-s", "llama", 16, {2: "</s>", 6: "<|plamo:eos|>"}, {"eos": 6}, (6,)),
    ("tool-response-drops-s", "llama", 16, {2: "</s>", 8: "<|tool_response>"}, {}, (8,)),
    ("nul-truncated", "llama", 16, {4: b"<|im_end|>\x00junk"}, {}, (2, 4)),
    ("empty-token", "llama", 16, {5: b""}, {}, (2,)),
    ("gpt2-default-eos", "gpt2", 16, {}, {}, (11,)),
    ("gpt2-default-out-of-range", "gpt2", 8, {}, {}, ()),
    ("bert-no-eos", "bert", 16, {}, {}, ()),
    ("t5-default", "t5", 16, {}, {}, (1,)),
]


def _eog_file(tmp_path, model, n, planted, ids, name="v.gguf"):
    kv = gu.vocab_kv(gu.filler_tokens(n, planted), model=model, **ids)
    return gu.write_gguf(tmp_path / name, "llama", kv)


@pytest.mark.parametrize("case", EOG_CASES, ids=[c[0] for c in EOG_CASES])
def test_eog_synthetic(tmp_path, case):
    _, model, n, planted, ids, expected = case
    p = _eog_file(tmp_path, model, n, planted, ids)
    assert eog_ids_from_kv(GGUFFile(p)) == expected


@pytest.mark.oracle
@pytest.mark.parametrize("case", EOG_CASES, ids=[c[0] for c in EOG_CASES])
def test_eog_synthetic_oracle(tmp_path, case):
    ov = _require_oracle()
    _, model, n, planted, ids, expected = case
    p = _eog_file(tmp_path, model, n, planted, ids)
    assert ov.eog_ids(p) == expected == eog_ids_from_kv(GGUFFile(p))


def test_eog_fim_ambiguity_is_a_superset(tmp_path):
    # Two FIM_PAD candidate texts: llama.cpp picks one by std::unordered_map order; lmtail takes both.
    p = _eog_file(tmp_path, "llama", 16, {4: "<|fim_pad|>", 5: "<PAD>"}, {})
    ours = eog_ids_from_kv(GGUFFile(p))
    assert ours == (2, 4, 5)
    try:
        ov = _require_oracle()
    except pytest.skip.Exception:
        return
    theirs = ov.eog_ids(p)
    assert set(theirs) <= set(ours) and len(theirs) == 2


@pytest.mark.parametrize("planted", [{3: "<|im_end|>", 10: "<|im_end|>"}, {3: b"tok5\x00x"}, {3: "[EMPTY_5]", 5: b""}],
                         ids=["same-text", "same-after-nul", "same-as-empty-placeholder"])
def test_eog_duplicate_texts_refused(tmp_path, planted):
    p = _eog_file(tmp_path, "llama", 16, planted, {})
    with pytest.raises(GGUFError, match=r"same text"):
        eog_ids_from_kv(GGUFFile(p))
    try:
        ov = _require_oracle()
    except pytest.skip.Exception:
        return
    with pytest.raises(ov.OracleLoadError):  # llama.cpp aborts (GGML_ASSERT)
        ov.eog_ids(p)


def test_eog_wrong_id_type(tmp_path):
    kv = gu.vocab_kv(gu.filler_tokens(16))
    kv["tokenizer.ggml.eos_token_id"] = gu.i32(3)
    p = gu.write_gguf(tmp_path / "v.gguf", "llama", kv)
    with pytest.raises(GGUFError, match=r"eos_token_id' has type INT32; expected UINT32"):
        eog_ids_from_kv(GGUFFile(p))


def test_eog_unknown_tokenizer(tmp_path):
    p = gu.write_gguf(tmp_path / "v.gguf", "llama", gu.vocab_kv(gu.filler_tokens(4), model="sentencepiece-ish"))
    with pytest.raises(GGUFError, match=r"unknown tokenizer model"):
        eog_ids_from_kv(GGUFFile(p))


def test_eog_no_vocab(tmp_path):
    p = gu.write_gguf(tmp_path / "v.gguf", "llama", gu.vocab_kv(gu.filler_tokens(4, {1: "<|im_end|>"}), model="no_vocab"))
    assert eog_ids_from_kv(GGUFFile(p)) == ()


def test_eog_from_plain_mapping():
    kv = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "b", "</s>", "<|im_end|>"]}
    assert eog_ids_from_kv(kv) == (2, 3)


def _vocab_files(where: Path, what: str):
    if not where.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{what} not found at {where}"), id="absent")]
    files = sorted(where.glob("*.gguf"))
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no *.gguf in {where}"), id="empty")]
    return [pytest.param(p, id=p.name) for p in files]


@pytest.mark.oracle
@pytest.mark.parametrize("path", _vocab_files(SHARED_VOCAB, "../shared/vocab"))
def test_eog_parity_shared_vocab(path):
    ov = _require_oracle()
    assert eog_ids_from_kv(GGUFFile(path)) == ov.eog_ids(path)


@pytest.mark.oracle
@pytest.mark.parametrize("path", _vocab_files(SDIST_LLAMA / "models", "the llama.cpp sdist (LMTAIL_LLAMA_SDIST)"))
def test_eog_parity_sdist_vocab(path):
    ov = _require_oracle()
    f = GGUFFile(path)
    n, theirs = ov.summary(path)
    assert eog_ids_from_kv(f) == theirs
    assert len(f.kv["tokenizer.ggml.tokens"]) == n


# Texts that drive llama.cpp's special-token logic, for the differential test below.
_SPECIAL_TEXTS = [
    "</s>", "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|calls|>", "<|flush|>",
    "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "[EOS]", "<eos>", "<turn|>",
    "<|tool_response>", "<|plamo:eos|>", "<|fim_pad|>", "<PAD>", "<|fim_repo|>", "<reponame>",
    "<|file_sep|>", "<|fim_prefix|>", "<PRE>", "\uff5cnot-special", "<|im_start|>",
]
_FIM_GROUPS = [["<|fim_pad|>", "<PAD>"], ["<|fim_repo|>", "<reponame>"]]


@pytest.mark.oracle
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_eog_differential_vs_llama_cpp(tmp_path, data):
    """Random vocabularies (planted texts, random special-id keys, random token types, several
    tokenizer models) give the same EOG set as llama.cpp, or a superset where llama.cpp's answer
    depends on std::unordered_map order (two FIM candidates for one slot)."""
    ov = _require_oracle()
    n = data.draw(st.integers(3, 40), label="n")  # llama.cpp cannot load a t5 (UGM) vocab of < 3 tokens
    model = data.draw(st.sampled_from(["llama", "gpt2", "t5", "bert"]), label="model")
    k = data.draw(st.integers(0, min(n, 10)), label="k")
    pos = data.draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k, unique=True), label="pos")
    texts = data.draw(st.lists(st.sampled_from(_SPECIAL_TEXTS), min_size=k, max_size=k, unique=True), label="texts")
    planted = dict(zip(pos, texts))
    ids = {}
    for name in ("eos", "eot", "eom", "fim_pad", "fim_rep", "fim_sep"):
        if data.draw(st.booleans(), label=f"has_{name}"):
            ids[name] = data.draw(st.integers(0, n + 3), label=name)
    # NORMAL..UNUSED; BYTE (6) tokens need <0xNN> texts, and llama.cpp aborts on some bogus ones
    types = data.draw(st.lists(st.integers(1, 5), min_size=n, max_size=n), label="types")
    kv = gu.vocab_kv(gu.filler_tokens(n, planted), model=model, types=types, **ids)
    p = gu.write_gguf(tmp_path / "d.gguf", "llama", kv)
    ours = eog_ids_from_kv(GGUFFile(p))
    try:
        theirs = ov.eog_ids(p)
    except ov.OracleLoadError:
        reject()  # llama.cpp has no answer for this vocabulary
    slot_key = {0: "fim_pad", 1: "fim_rep"}
    ambiguous = any(
        sum(t in planted.values() for t in grp) > 1 and not (slot_key[g] in ids and ids[slot_key[g]] < n)
        for g, grp in enumerate(_FIM_GROUPS)
    )
    if ambiguous:
        assert set(theirs) <= set(ours)
    else:
        assert ours == theirs


# ---- entry points refuse non-files and non-paths (issue 18 items 8, 9, 12) ----------------------

import contextlib
import signal

from lmtail.grammar import Vocab


@contextlib.contextmanager
def _deadline(seconds: float):
    """Fail (instead of hanging the suite) when the body blocks, e.g. in open() of a FIFO: the
    SIGALRM handler raises, which interrupts the blocked system call (PEP 475)."""

    def fire(signum, frame):
        raise TimeoutError(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _head_from_gguf(p):
    import lmtail

    return lmtail.Head.from_gguf(p)


_ENTRY_POINTS = [GGUFFile, load_head_spec, Vocab.from_gguf, _head_from_gguf]
_ENTRY_IDS = ["GGUFFile", "load_head_spec", "Vocab.from_gguf", "Head.from_gguf"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no os.mkfifo on this platform")
@pytest.mark.parametrize("entry", _ENTRY_POINTS, ids=_ENTRY_IDS)
def test_fifo_is_refused_without_blocking(tmp_path, entry):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with _deadline(5.0), pytest.raises(GGUFError, match="is a FIFO; expected a regular GGUF file"):
        entry(fifo)


@pytest.mark.parametrize("entry", _ENTRY_POINTS, ids=_ENTRY_IDS)
def test_directory_and_device_are_refused(tmp_path, entry):
    with pytest.raises(GGUFError, match="is a directory"):
        entry(tmp_path)
    if os.path.exists("/dev/null"):
        with _deadline(5.0), pytest.raises(GGUFError, match="is a character device"):
            entry("/dev/null")


@pytest.mark.parametrize("entry", _ENTRY_POINTS[:3], ids=_ENTRY_IDS[:3])  # Head.from_gguf: the head module's
@pytest.mark.parametrize("bad", [None, 3, 1.5, ["a.gguf"]], ids=["None", "int", "float", "list"])
def test_non_path_is_a_parameter_error(entry, bad):
    with pytest.raises(ParameterError, match="expected a GGUF file path"):
        entry(bad)


def test_symlink_and_bytes_path_to_a_regular_file_load(tmp_path):
    p = gu.write_gguf(tmp_path / "v.gguf", "llama", gu.vocab_kv(gu.filler_tokens(5)))
    link = tmp_path / "link.gguf"
    link.symlink_to(p)
    assert Vocab.from_gguf(link).n_vocab == 5
    assert GGUFFile(os.fsencode(p)).path == str(p)


def test_vocab_short_token_type_array_is_a_gguf_error(tmp_path):
    kv = gu.vocab_kv(gu.filler_tokens(6))
    kv["tokenizer.ggml.token_type"] = KV([1, 1, 1], "ARRAY", "INT32")
    p = gu.write_gguf(tmp_path / "v.gguf", "llama", kv)
    with pytest.raises(GGUFError, match=r"'tokenizer.ggml.token_type' has 3 elements for 6 tokens; expected >= 6"):
        Vocab.from_gguf(p)
    kv["tokenizer.ggml.token_type"] = KV([1] * 6 + [3, 3], "ARRAY", "INT32")  # longer: llama.cpp reads the first n
    v = Vocab.from_gguf(gu.write_gguf(tmp_path / "w.gguf", "llama", kv))
    assert v.n_vocab == 6 and v.types.tolist() == [1] * 6


@pytest.mark.parametrize("key", ["tokenizer.ggml.pre", "tokenizer.ggml.model"])
@pytest.mark.parametrize("value", [KV(["default", "x"], "ARRAY", "STRING"), KV([1, 2], "ARRAY", "INT32"), u32(7)],
                         ids=["str-array", "int-array", "uint32"])
def test_vocab_string_keys_of_another_type_are_gguf_errors(tmp_path, key, value):
    kv = gu.vocab_kv(gu.filler_tokens(6), model="gpt2")
    kv[key] = value
    p = gu.write_gguf(tmp_path / "v.gguf", "llama", kv)
    with pytest.raises(GGUFError, match=re.escape(f"key {key!r} has type") + ".*expected STRING"):
        Vocab.from_gguf(p)


def test_vocab_string_keys_stop_at_nul(tmp_path):
    kv = gu.vocab_kv(gu.filler_tokens(6), model="gpt2")
    kv["tokenizer.ggml.model"] = KV(b"gpt2\0junk", "STRING")  # llama.cpp's std::string from c_str()
    v = Vocab.from_gguf(gu.write_gguf(tmp_path / "v.gguf", "llama", kv))
    assert v.n_vocab == 6
