"""The op x weight type x backend matrix: every (backend, dtype) ``lmtail.capabilities()`` lists
for an available backend is tested here, with one tolerance table, so a weight type merged into
the C++ CPU table (or a device backend's row) is picked up with no test change.

* matvec against float64 of the dequantised weights (``lmtail.dequantize``, and where the
  oracle is available ggml's own ``to_float`` through tests/oracle/quant.py), 1-D and 2-D x, the
  float-array weight forms, thread-count and batch invariance;
* quantize / dequantize: bytes identical to ggml's (``oracle`` marker: skips visibly without it);
* Head with a dtype: logits, greedy and top-k equal to the ops composition;
* errors: ShapeError naming the type and block, DTypeError, ParameterError for a non-type,
  UnsupportedError for a ggml type nothing runs and for a backend that does not run a type.
"""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from _util import bits

CAPS = lmtail.capabilities()
# (backend, dtype) of every available backend's matvec column.
CASES = [(b, d) for b, c in CAPS.items() if c["available"] for d in c["matvec"]["dtypes"]]
CPU_TYPES = CAPS["cpu"]["matvec"]["dtypes"]
BLOCK = {r["name"]: r["block_elems"] for r in lmtail._core.cpu_types()}

# THE tolerance table: normwise relative error against float64 of the dequantised weights, per
# precision (issue 14: every type's default is <= 1e-6; f32 arithmetic over a few thousand terms
# is ~4e-7; i16 carries x in 16 bits, ~3e-5).
TOLERANCE = {"f32": 1e-6, "i24": 1e-6, "i16": 1e-4,
             # "ggml" is ggml's own arithmetic (x quantized to q8 for the integer types, rounded to
             # f16/bf16 for those heads): its error is ggml's, measured ~5e-3 on Q4_0 at 640 cols.
             "ggml": 2e-2}
# Precisions that follow ggml's path per batch size instead of lmtail's batch-invariant kernels.
BATCH_VARIANT = {"ggml"}
FLOAT_VIEW = {"F16": np.float16, "BF16": np.uint16, "F32": np.float32}


def ids(cases):
    return [f"{b}-{d}" for b, d in cases]


def cols_for(dtype: str) -> int:
    # A few blocks of the type, and not a multiple of 256 where the block allows it (Q8_0 heads).
    blk = BLOCK[dtype]
    return 3 * 256 if blk >= 256 else 640


def weights(dtype: str, rows: int = 37, seed: int = 0):
    cols = cols_for(dtype)
    w = (np.random.default_rng(seed).standard_normal((rows, cols)) * 0.02).astype(np.float32)
    return lmtail.quantize(w, dtype), cols


def reference(q, dtype, x):
    w = lmtail.dequantize(q, dtype).astype(np.float64)
    return (w @ x.astype(np.float64).T).T


def precisions(backend, dtype):
    return CAPS[backend]["matvec"]["by_dtype"][dtype]["precisions"]


@pytest.mark.parametrize("backend,dtype", CASES, ids=ids(CASES))
def test_matvec_matches_float64(backend, dtype):
    q, cols = weights(dtype)
    x = np.random.default_rng(1).standard_normal((3, cols)).astype(np.float32)
    ref = reference(q, dtype, x)
    for prec in [None] + precisions(backend, dtype):
        if prec in CAPS[backend]["matvec"]["requires"]:
            # Needs the caller's library (Metal "ggml": llama.cpp's kernels, tests/test_metal_ggml.py).
            with pytest.raises(lmtail.UnsupportedError, match=CAPS[backend]["matvec"]["requires"][prec]):
                lmtail.ops.matvec(q, x, dtype, backend=backend, precision=prec)
            continue
        y = lmtail.ops.matvec(q, x, dtype, backend=backend, precision=prec)
        assert y.shape == (3, q.shape[0]) and y.dtype == np.float32
        p = prec or CAPS[backend]["matvec"]["by_dtype"][dtype]["default"]
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        assert err <= TOLERANCE[p], (backend, dtype, p, err)
        # 1-D x gives the row of the batch, bit for bit, where the backend is batch invariant
        one = lmtail.ops.matvec(q, x[1], dtype, backend=backend, precision=prec)
        if CAPS[backend]["matvec"]["batch_invariant"] and p not in BATCH_VARIANT:
            assert np.array_equal(bits(one), bits(y[1]))
        else:
            assert np.linalg.norm(one - y[1]) / np.linalg.norm(y[1]) <= 2 * TOLERANCE[p]
    assert CAPS[backend]["matvec"]["by_dtype"][dtype]["default"] == lmtail.ops.default_precision(backend, dtype)


@pytest.mark.parametrize("dtype", CPU_TYPES)
def test_dtype_spellings_and_thread_independence(dtype):
    q, cols = weights(dtype, rows=101, seed=2)
    x = np.random.default_rng(3).standard_normal((5, cols)).astype(np.float32)
    base = lmtail.ops.matvec(q, x, dtype, threads=1)
    type_id = next(r["id"] for r in lmtail._core.cpu_types() if r["name"] == dtype)
    for spelled in (dtype.lower(), type_id, np.int32(type_id)):
        assert np.array_equal(bits(lmtail.ops.matvec(q, x, spelled, threads=1)), bits(base))
    for th in (2, 3):
        assert np.array_equal(bits(lmtail.ops.matvec(q, x, dtype, threads=th)), bits(base))
    if dtype == "Q5_K":  # the alias
        assert np.array_equal(bits(lmtail.ops.matvec_q5_k(q, x, threads=1)), bits(base))


def test_gguf_enum_is_accepted_by_value():
    gguf = pytest.importorskip("gguf")
    q, cols = weights("Q5_K")
    x = np.ones(cols, np.float32)
    assert np.array_equal(bits(lmtail.ops.matvec(q, x, gguf.GGMLQuantizationType.Q5_K)), bits(lmtail.ops.matvec(q, x, "Q5_K")))


@pytest.mark.parametrize("dtype", [d for d in CPU_TYPES if d in FLOAT_VIEW])
def test_float_array_weight_forms_are_zero_copy(dtype):
    q, cols = weights(dtype)
    arr = q.view(FLOAT_VIEW[dtype])  # the same bytes as (rows, cols) floats
    assert arr.shape == (q.shape[0], cols)
    x = np.random.default_rng(4).standard_normal(cols).astype(np.float32)
    assert np.array_equal(bits(lmtail.ops.matvec(arr, x, dtype)), bits(lmtail.ops.matvec(q, x, dtype)))
    head = lmtail.Head(arr, dtype=dtype)
    assert np.shares_memory(head.weight, arr)
    assert np.array_equal(lmtail.dequantize(arr, dtype), lmtail.dequantize(q, dtype))
    with pytest.raises(lmtail.DTypeError):
        lmtail.ops.matvec(arr.astype(arr.dtype.newbyteorder()), x, dtype)


@pytest.mark.parametrize("dtype", CPU_TYPES)
def test_weight_is_not_copied(dtype, tmp_path):
    q, cols = weights(dtype)
    path = tmp_path / "w.bin"
    q.tofile(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r", shape=q.shape)
    head = lmtail.Head(mm, dtype=dtype)
    assert np.shares_memory(head.weight, mm) and head.dtype == dtype
    assert head.weight_bytes == q.nbytes
    x = np.random.default_rng(5).standard_normal(cols).astype(np.float32)
    assert np.array_equal(bits(lmtail.ops.matvec(mm, x, dtype)), bits(lmtail.ops.matvec(q, x, dtype)))
    wide = np.zeros((q.shape[0], q.shape[1] + 64), np.uint8)  # row stride > row bytes: still a view
    wide[:, : q.shape[1]] = q
    assert np.array_equal(bits(lmtail.ops.matvec(wide[:, : q.shape[1]], x, dtype)), bits(lmtail.ops.matvec(q, x, dtype)))


@pytest.mark.parametrize("dtype", CPU_TYPES)
def test_shape_and_dtype_errors(dtype):
    q, cols = weights(dtype, rows=4)
    blk = BLOCK[dtype]
    x = np.ones(cols, np.float32)
    bb = q.shape[1] // (cols // blk)  # block bytes
    if bb > 1:
        with pytest.raises(lmtail.ShapeError, match=rf"{dtype}.*\b{blk}\b"):
            lmtail.ops.matvec(q[:, : q.shape[1] - 1], x, dtype)
    if blk > 1:
        with pytest.raises(lmtail.ShapeError, match=rf"{dtype}.*\b{blk}\b"):
            lmtail.quantize(np.ones((2, blk + 1), np.float32), dtype)
    with pytest.raises(lmtail.ShapeError):
        lmtail.ops.matvec(q, np.ones(cols + blk, np.float32), dtype)
    with pytest.raises(lmtail.DTypeError):
        lmtail.ops.matvec(q.view(np.int8), x, dtype)
    with pytest.raises(lmtail.DTypeError):
        lmtail.ops.matvec(np.asfortranarray(q), x, dtype)  # rows not contiguous bytes
    with pytest.raises(lmtail.DTypeError):
        lmtail.ops.matvec(q, x.astype(np.float64), dtype)
    with pytest.raises(lmtail.DTypeError):
        lmtail.quantize(np.ones((2, cols), np.float64), dtype)
    with pytest.raises(lmtail.ParameterError):
        lmtail.quantize(np.full((2, cols), np.nan, np.float32), dtype)


@pytest.mark.parametrize("bad", ["Q9_X", "", "q5k", -1, 4, 31, 10**6, 1.0, None, True])
def test_not_a_ggml_type_is_a_parameter_error(bad):
    q, cols = weights("Q5_K", rows=2)
    for call in (lambda: lmtail.ops.matvec(q, np.ones(cols, np.float32), bad),
                 lambda: lmtail.Head(q, dtype=bad),
                 lambda: lmtail.quantize(np.ones((1, 256), np.float32), bad),
                 lambda: lmtail.dequantize(q, bad)):
        with pytest.raises(lmtail.ParameterError):
            call()


def test_ggml_type_nothing_runs_is_unsupported():
    q, cols = weights("Q5_K", rows=2)
    for dtype in ("Q3_K", "iq2_xxs", 11):
        for call in (lambda: lmtail.ops.matvec(q, np.ones(cols, np.float32), dtype),
                     lambda: lmtail.Head(q, dtype=dtype),
                     lambda: lmtail.quantize(np.ones((1, 256), np.float32), dtype),
                     lambda: lmtail.dequantize(q, dtype)):
            with pytest.raises(lmtail.UnsupportedError, match=r"Q3_K|IQ2_XXS") as e:
                call()
            assert "cpu: " in str(e.value)  # says which types run where


def test_backend_that_does_not_run_a_type_is_unsupported():
    # Every available backend, every type some backend runs that this one does not.
    every = {d for c in CAPS.values() for d in c["matvec"]["dtypes"]}
    found = False
    for b, c in CAPS.items():
        if not c["available"]:
            continue
        for d in sorted(every - set(c["matvec"]["dtypes"])):
            if d not in CPU_TYPES:
                continue
            found = True
            q, cols = weights(d, rows=2)
            runs = [n for n, cc in CAPS.items() if d in cc["matvec"]["dtypes"]]
            for call in (lambda: lmtail.ops.matvec(q, np.ones(cols, np.float32), d, backend=b),
                         lambda: lmtail.Head(q, dtype=d, backend=b)):
                with pytest.raises(lmtail.UnsupportedError, match=rf"{d}.*{b}.*{', '.join(runs)}"):
                    call()
    if not found:
        pytest.skip("every available backend runs every type here (only the CPU, or no type beyond Q5_K merged)")


@pytest.mark.parametrize("backend,dtype", CASES, ids=ids(CASES))
def test_head_with_dtype_equals_ops_composition(backend, dtype):
    q, cols = weights(dtype, rows=300, seed=6)
    gamma = np.random.default_rng(7).uniform(0.5, 1.5, cols).astype(np.float32)
    h = np.random.default_rng(8).standard_normal((2, cols)).astype(np.float32)
    head = lmtail.Head(q, gamma, dtype=dtype.lower(), backend=backend, logit_scale=0.5, softcap=15.0)
    assert head.dtype == dtype and head.precision == lmtail.ops.default_precision(backend, dtype)
    assert dtype in repr(head)
    normed = lmtail.ops.rms_norm(h, gamma, backend=backend)
    mv = lmtail.ops.matvec(q, normed, dtype, backend=backend)
    want = lmtail.ops.softcap(np.ascontiguousarray(mv), 0.5, 15.0, backend=backend)
    got = head.logits(h)
    assert np.array_equal(bits(got), bits(want))
    # A device-resident head also reads each row's 4-byte pre-cap latch (tests/test_cuda.py).
    latch = 4 * 2 if lmtail._backend.row(backend).head == "device" else 0
    assert head.last_bytes_read_back == 4 * 300 * 2 + latch
    assert head.greedy(h).tolist() == lmtail.ops.greedy_argmax(want).tolist()
    i, v = head.topk(h, 5)
    wi, wv = lmtail.ops.topk(want, 5)
    assert np.array_equal(i, wi) and np.array_equal(bits(v), bits(wv))
    assert np.array_equal(bits(head.row(1)), bits(want[1]))


# ---- bytes against ggml (the oracle) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def oracle_quant():
    from oracle import _lib

    _lib.require()
    from oracle import quant

    return quant


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", CPU_TYPES)
def test_quantize_dequantize_bytes_equal_ggml(dtype, oracle_quant):
    type_id = next(r["id"] for r in lmtail._core.cpu_types() if r["name"] == dtype)
    cols = cols_for(dtype)
    x = (np.random.default_rng(9).standard_normal((13, cols)) * 0.05).astype(np.float32)
    q = lmtail.quantize(x, dtype)
    want = oracle_quant.quantize(type_id, x)
    assert q.shape == want.shape and np.array_equal(q, want)
    deq = lmtail.dequantize(q, dtype, cols)
    assert np.array_equal(bits(deq), bits(oracle_quant.dequantize(type_id, q, cols)))
    # and matvec against float64 of ggml's own dequantisation
    xx = np.random.default_rng(10).standard_normal((2, cols)).astype(np.float32)
    ref = (oracle_quant.dequantize(type_id, q, cols).astype(np.float64) @ xx.T.astype(np.float64)).T
    y = lmtail.ops.matvec(q, xx, dtype)
    assert np.linalg.norm(y - ref) <= TOLERANCE[lmtail.ops.default_precision("cpu", dtype)] * np.linalg.norm(ref)


@pytest.mark.parametrize("dtype", CPU_TYPES)
def test_dequantize_matches_gguf_py(dtype):
    gguf = pytest.importorskip("gguf")
    q, cols = weights(dtype, rows=5)
    type_id = next(r["id"] for r in lmtail._core.cpu_types() if r["name"] == dtype)
    want = gguf.quants.dequantize(q, gguf.GGMLQuantizationType(type_id)).reshape(5, cols).astype(np.float32)
    assert np.array_equal(bits(lmtail.dequantize(q, dtype)), bits(want))
    with pytest.raises(lmtail.ShapeError):
        lmtail.dequantize(q, dtype, cols + BLOCK[dtype])
