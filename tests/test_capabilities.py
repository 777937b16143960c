"""lmtail.capabilities(): the table's shape, every backend present, the available flags, and
ops / Head refusing exactly what the table does not list."""

from __future__ import annotations

import numpy as np
import pytest

import lmtail

BACKENDS = ("cpu", "metal", "metal-emu", "cuda")
FLOAT_OPS = ("rms_norm", "layer_norm", "scale", "tanh", "softcap", "argmax", "greedy_argmax", "topk")
PRECISIONS = {"f32", "i16", "i24", "ggml"}


def test_shape_and_every_backend():
    caps = lmtail.capabilities()
    assert tuple(caps) == BACKENDS
    for b, col in caps.items():
        assert isinstance(col["available"], bool)
        for op in ("matvec", "head") + FLOAT_OPS:
            assert set(col[op]) >= {"dtypes", "precisions"}, (b, op)
        for op in ("matvec", "head"):
            by = col[op]["by_dtype"]
            assert list(by) == col[op]["dtypes"]
            for d, v in by.items():
                assert v["default"] in v["precisions"] and set(v["precisions"]) <= PRECISIONS
                assert set(v["precisions"]) <= set(col[op]["precisions"])
            assert set(col[op]["precisions"]) == {p for v in by.values() for p in v["precisions"]}
        for op in FLOAT_OPS:
            assert col[op]["dtypes"] in (["F32"], [])
        assert "rms" in col["head"]["norms"] and "none" in col["head"]["norms"]
        assert ("layer" in col["head"]["norms"]) == bool(col["layer_norm"]["dtypes"]) or b == "cuda"
    # Batch invariance is a property users can check: every backend.
    assert {b: caps[b]["matvec"]["batch_invariant"] for b in caps} == {
        "cpu": True, "metal": True, "metal-emu": True, "cuda": True}
    # cuda runs every type at f32 (csrc/cuda/mul_mv.cu).
    assert caps["cuda"]["matvec"]["dtypes"] == ["Q6_K", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "F16", "BF16", "F32"]
    assert all(v == {"precisions": ["f32"], "default": "f32"} for v in caps["cuda"]["matvec"]["by_dtype"].values())
    # metal and metal-emu run every CPU type at f32 (one kernel family, metal/matvec.metal), and
    # at "ggml" (llama.cpp's own kernels) only with the caller's llama.cpp library.
    for b in ("metal", "metal-emu"):
        assert sorted(caps[b]["matvec"]["dtypes"]) == sorted(caps["cpu"]["matvec"]["dtypes"])
        want = {"precisions": ["f32", "ggml"], "default": "f32"}
        assert all(v == want for v in caps[b]["matvec"]["by_dtype"].values())
        assert caps[b]["matvec"]["requires"] == caps[b]["head"]["requires"] == {"ggml": "ggml_metal"}
    for b in ("cpu", "cuda"):
        assert caps[b]["matvec"]["requires"] == caps[b]["head"]["requires"] == {}
    # A fresh dict each call: callers may edit theirs.
    caps["cpu"]["matvec"]["dtypes"].append("X")
    assert "X" not in lmtail.capabilities()["cpu"]["matvec"]["dtypes"]


def test_metal_columns_are_the_host_kernel_table():
    # The Python row lists exactly the types of csrc/metal/matvec.cpp's table (metal and
    # metal-emu build the same host code, so the emulator's table is the device's).
    if not hasattr(lmtail._core, "metal_emu"):
        pytest.skip("metal-emu not built (LMTAIL_EMU=OFF): the host kernel table is not importable")
    ids = {r["name"]: r["id"] for r in lmtail._core.cpu_types()}
    table = sorted(lmtail._core.metal_emu.matvec_types())
    for b in ("metal", "metal-emu"):
        assert sorted(ids[d] for d in lmtail.capabilities()[b]["matvec"]["dtypes"]) == table


def test_cpu_column_is_the_cpp_table():
    caps = lmtail.capabilities()["cpu"]
    rows = lmtail._core.cpu_types()
    assert caps["available"] is True
    assert caps["matvec"]["dtypes"] == [r["name"] for r in rows] == caps["head"]["dtypes"]
    for r in rows:
        by = caps["matvec"]["by_dtype"][r["name"]]
        assert by["default"] == r["default_precision"] and set(by["precisions"]) == set(r["precisions"])
    assert "Q5_K" in caps["matvec"]["dtypes"]
    assert caps["matvec"]["by_dtype"]["Q5_K"]["default"] == "i24"


def test_available_flags_match_backends():
    caps = lmtail.capabilities()
    assert [b for b in BACKENDS if caps[b]["available"]] == lmtail.backends()
    assert caps["metal-emu"]["available"] == hasattr(lmtail._core, "metal_emu")
    assert caps["cuda"]["available"] == (hasattr(lmtail._core, "cuda") and lmtail._core.cuda.available())
    for b in BACKENDS:
        if not caps[b]["available"]:
            with pytest.raises(lmtail.BackendError, match=b):
                lmtail.ops.argmax(np.ones(4, np.float32), backend=b)


def test_ops_and_head_refuse_per_the_table():
    caps = lmtail.capabilities()
    q = lmtail.quantize(np.ones((3, 256), np.float32), "Q5_K")
    x = np.ones((1, 256), np.float32)
    for b in lmtail.backends():
        col = caps[b]
        for op in FLOAT_OPS:
            fn = {"rms_norm": lambda: lmtail.ops.rms_norm(x, backend=b),
                  "layer_norm": lambda: lmtail.ops.layer_norm(x, backend=b),
                  "scale": lambda: lmtail.ops.scale(x, 2.0, backend=b),
                  "tanh": lambda: lmtail.ops.tanh(x, backend=b),
                  "softcap": lambda: lmtail.ops.softcap(x, 1.0, 5.0, backend=b),
                  "argmax": lambda: lmtail.ops.argmax(x, backend=b),
                  "greedy_argmax": lambda: lmtail.ops.greedy_argmax(x, backend=b),
                  "topk": lambda: lmtail.ops.topk(x, 1, backend=b)}[op]
            if col[op]["dtypes"]:
                fn()
            else:
                with pytest.raises(lmtail.UnsupportedError, match=rf"{op} .*{b}.*: cpu"):
                    fn()
        for p in sorted(PRECISIONS):
            if p in col["matvec"]["requires"]:
                # Listed, but usable only with the argument it names (tests/test_metal_ggml.py
                # runs it with llama.cpp's library): without it, a typed refusal saying so.
                arg = col["matvec"]["requires"][p]
                with pytest.raises(lmtail.UnsupportedError, match=rf"{p}.*{b}.*requires.*{arg}="):
                    lmtail.ops.matvec(q, x, "Q5_K", backend=b, precision=p)
                with pytest.raises(lmtail.UnsupportedError, match=rf"{arg}="):
                    lmtail.Head(q, backend=b, precision=p)
                with pytest.raises(lmtail.UnsupportedError, match=rf"{arg}="):
                    lmtail.ops.softcap(x, 1.0, 5.0, backend=b, precision=p)
            elif p in col["matvec"]["by_dtype"]["Q5_K"]["precisions"]:
                assert lmtail.ops.matvec(q, x, "Q5_K", backend=b, precision=p).shape == (1, 3)
                assert lmtail.Head(q, backend=b, precision=p).precision == p
            else:
                with pytest.raises(lmtail.UnsupportedError, match=rf"{p}.*Q5_K.*{b}"):
                    lmtail.ops.matvec(q, x, "Q5_K", backend=b, precision=p)
                with pytest.raises(lmtail.UnsupportedError):
                    lmtail.Head(q, backend=b, precision=p)
        for kind in ("rms", "layer"):
            if kind in col["head"]["norms"]:
                lmtail.Head(q, np.ones(256, np.float32), backend=b, norm_kind=kind)
            else:
                with pytest.raises(lmtail.UnsupportedError, match=rf"{kind}.*{b}.*: cpu"):
                    lmtail.Head(q, np.ones(256, np.float32), backend=b, norm_kind=kind)
    with pytest.raises(lmtail.ParameterError):
        lmtail.ops.matvec(q, x, "Q5_K", precision="f16")


def test_head_precision_none_is_the_cpp_default():
    q = lmtail.quantize(np.ones((3, 256), np.float32), "Q5_K")
    for d in lmtail.capabilities()["cpu"]["head"]["dtypes"]:
        if d == "Q5_K":
            head = lmtail.Head(q)
            assert head.precision == lmtail.capabilities()["cpu"]["head"]["by_dtype"][d]["default"]
