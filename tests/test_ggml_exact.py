"""precision="ggml" for the K-quant heads (Q4_K, Q5_K, Q6_K): the whole (T, rows) logits are the
bytes of the oracle's ggml ``mul_mat`` on the same weight bytes, with the weight where llama.cpp
puts it (``graph.mul_mat_llama``: the AMX buffer on an AMX build for rows % 32 == 0, else the
CPU_REPACK buffer, which repacks Q4_K with rows % 8 == 0 on AVX2, and a plain buffer for the
other weights). ggml's path changes with T (vec_dot for T < 8, the tiled matmul for T >= 8,
CPU_REPACK's gemv / gemm for repacked Q4_K; AMX's gemv / tile gemm), so every T in 1, 2, 4, 7,
8, 9, 16 is compared, with 1 and 2 threads on both sides.

precision="ggml" for these types reproduces ggml's x86 AVX2, AVX-512 and AMX builds (the first
two give the same bytes: the AVX-512 build's 512-bit / VNNI code changes only exact integer
sums; the AMX build runs its own kernels for the weights its buffer takes), each row's
``ggml_builds``; the comparisons run lmtail as the oracle's build (``isa=``) and skip with the
reason on a host whose oracle is another build; the refusal tests still run."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import lmtail
from lmtail import _core, errors
from oracle import _lib

TYPES = {"Q4_K": (12, 144), "Q5_K": (13, 176), "Q6_K": (14, 210)}
TS = (1, 2, 4, 7, 8, 9, 16)
SHAPES = [(1, 256), (7, 512), (8, 2816), (13, 6656), (9, 2816), (64, 512), (64, 6656), (16, 256)]


def graph():
    """The oracle's graph module, or a visible skip."""
    try:
        from oracle import graph as g

        g.api()
    except _lib.OracleUnavailable as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"ggml oracle unavailable: {e}")
    return g


ROWS = {r["name"]: r for r in _core.cpu_types() if r["name"] in TYPES}
# The table offers "ggml" where ggml's native build on this CPU is one the type reproduces (its
# row's ggml_builds) and this CPU runs the AVX2 emulation.
OFFERED = all("ggml" in r["precisions"] for r in ROWS.values())
BUILDS = {n: r["ggml_builds"] for n, r in ROWS.items()}
ORACLE_ISA = "auto"  # set by need_reproduced_oracle: the build the comparisons ask lmtail for


def need_reproduced_oracle(g):
    global ORACLE_ISA
    isa = g.oracle_build_isa()
    if any(isa not in b for b in BUILDS.values()):
        pytest.skip(f"the oracle is ggml's {isa} build; precision='ggml' reproduces {BUILDS}")
    if not OFFERED:
        pytest.skip(f"precision='ggml' is not offered on this CPU (a native ggml here is its "
                    f"{_core.ggml_native_build()} build; reproduced: {BUILDS}; the emulation needs AVX2)")
    ORACLE_ISA = isa


def quantize(dtype, x):
    tid, bb = TYPES[dtype]
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty((x.shape[0], x.shape[1] // 256 * bb), np.uint8)
    _core.quantize(tid, x, out, 1)
    return out


def ggml_mv(q, x, dtype, threads=1, isa=None):
    """isa None: the oracle's build where a comparison set it, else auto."""
    return lmtail.ops.matvec(q, x, dtype, precision="ggml", threads=threads, isa=isa or ORACLE_ISA)


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a, np.float32).tobytes()).hexdigest()


def activations(kind, T, cols, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, cols)).astype(np.float32)
    if kind == "outlier":
        # one large spike per row (it sets that block's q8_K scale), an all-zero block, tiny values
        x[:, rng.integers(0, cols, T)] = 0  # keep shapes simple; spikes below
        x[np.arange(T), rng.integers(0, cols, T)] = 200.0 * np.where(rng.random(T) < 0.5, -1, 1)
        if cols >= 512:
            x[:, 256:512] = 0.0
        x[:, :16] *= 1e-30
    return x


def oracle(g, q, dtype, cols, x, threads):
    y, placement = g.mul_mat_llama(q, TYPES[dtype][0], cols, x, threads=threads)
    # llama.cpp's path: the AMX buffer where the oracle has one and rows % 32 == 0, else
    # CPU_REPACK for Q4_K with rows % 8 == 0 on AVX2 / AVX-512, a plain buffer otherwise
    amx = g.amx_takes(TYPES[dtype][0], q.shape[0], cols)
    assert placement == ("AMX" if amx else "CPU_REPACK" if dtype == "Q4_K" and q.shape[0] % 8 == 0 else "CPU")
    return y


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("kind", ["gaussian", "outlier"])
def test_logits_sha_equal_ggml(dtype, rows, cols, kind):
    g = graph()
    need_reproduced_oracle(g)
    rng = np.random.default_rng(rows * 7919 + cols)
    q = quantize(dtype, rng.standard_normal((rows, cols)).astype(np.float32))
    for T in TS:
        x = activations(kind, T, cols, seed=T)
        want = oracle(g, q, dtype, cols, x, threads=1)
        assert sha(oracle(g, q, dtype, cols, x, threads=2)) == sha(want), "ggml itself is thread-variant"
        for threads in (1, 2):
            got = ggml_mv(q, x, dtype, threads=threads)
            assert got.shape == (T, rows)
            assert sha(got) == sha(want), (dtype, rows, cols, T, threads, kind, float(np.abs(got - want).max()))


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", list(TYPES))
def test_one_dim_x_is_the_t1_path(dtype):
    """A 1-D x is T = 1 (vec_dot / gemv); row 0 of a T = 8 batch takes the tiled / gemm path and
    can differ, exactly as in llama.cpp (the documented exemption from batch invariance)."""
    g = graph()
    need_reproduced_oracle(g)
    cols = 2816
    q = quantize(dtype, np.random.default_rng(3).standard_normal((24, cols)).astype(np.float32))
    x = np.random.default_rng(4).standard_normal((8, cols)).astype(np.float32)
    one = ggml_mv(q, x[0], dtype)
    assert one.shape == (24,)
    assert sha(one[None]) == sha(oracle(g, q, dtype, cols, x[:1], threads=1))
    assert sha(ggml_mv(q, x, dtype)) == sha(oracle(g, q, dtype, cols, x, threads=1))


def random_blocks(dtype, rows, cols, seed):
    """Random block bytes with finite, moderate fp16 scales (a full-size head without quantising
    1.3e9 floats)."""
    _, bb = TYPES[dtype]
    rng = np.random.default_rng(seed)
    nb = cols // 256
    q = np.frombuffer(rng.bytes(rows * nb * bb), np.uint8).reshape(rows, nb, bb).copy()
    scale = (rng.random((rows, nb, 2), np.float32) * 1e-3 + 1e-4).astype(np.float16).view(np.uint8)
    if dtype == "Q6_K":
        q[:, :, 208:210] = scale[:, :, 0:2]
    else:
        q[:, :, 0:4] = scale
    return q.reshape(rows, nb * bb)


@pytest.mark.oracle
@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(TYPES))
def test_full_size_head_sha_equal_ggml(dtype):
    g = graph()
    need_reproduced_oracle(g)
    rows, cols = 202048, 6656
    q = random_blocks(dtype, rows, cols, seed=11)
    for T in (1, 8):
        x = np.random.default_rng(T).standard_normal((T, cols)).astype(np.float32)
        want = oracle(g, q, dtype, cols, x, threads=2)
        for threads in (1, 2):
            assert sha(ggml_mv(q, x, dtype, threads=threads)) == sha(want), (dtype, T, threads)


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("rows", [64, 13])
def test_head_publishes_llama_cpp_bytes(dtype, rows):
    """Head(precision="ggml"): llama.cpp's final RMSNorm * gamma, its mul_mat and the four cap
    nodes, bit for bit (the norm and the cap already matched; the matvec now does too)."""
    g = graph()
    need_reproduced_oracle(g)
    cols = 2816
    rng = np.random.default_rng(rows)
    q = quantize(dtype, rng.standard_normal((rows, cols)).astype(np.float32))
    gamma = (1 + 0.1 * rng.standard_normal(cols)).astype(np.float32)
    scale, cap = 0.75, 30.0
    head = lmtail.Head(q, gamma, logit_scale=scale, softcap=cap, precision="ggml", dtype=dtype, threads=2)
    for T in (1, 4, 8):
        h = (3 * rng.standard_normal((T, cols))).astype(np.float32)
        normed = g.rms_norm_mul(h, gamma, 1e-5)
        want = g.softcap_four_nodes(oracle(g, q, dtype, cols, normed, threads=2), scale, cap)
        assert sha(head.logits(h)) == sha(want), (dtype, rows, T)


@pytest.mark.parametrize("dtype", list(TYPES))
def test_auto_is_the_native_build(dtype):
    """isa="auto" reproduces the build a native llama.cpp compiles here; every reproduced build
    is accepted; the AVX2 and AVX-512 builds give the same bytes, and so does the AMX build for a
    weight its buffer does not take (rows % 32 != 0)."""
    if not OFFERED:
        pytest.skip("precision='ggml' is not offered on this CPU")
    for rows in (24, 64):
        q = quantize(dtype, np.random.default_rng(5).standard_normal((rows, 512)).astype(np.float32))
        for T in (1, 4, 8):
            x = np.random.default_rng(T).standard_normal((T, 512)).astype(np.float32)
            want = sha(ggml_mv(q, x, dtype, isa=_core.ggml_native_build()))
            assert sha(ggml_mv(q, x, dtype, isa="auto")) == want
            base = sha(ggml_mv(q, x, dtype, isa="avx2"))
            assert sha(ggml_mv(q, x, dtype, isa="avx512")) == base
            amx = sha(ggml_mv(q, x, dtype, isa="amx"))
            assert (amx == base) == (rows % 32 != 0), (dtype, rows, T)


def test_k_types_reproduce_the_x86_avx2_and_avx512_builds():
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("precision='ggml' for the K types is compiled on x86 builds only")
    assert BUILDS == {t: ["avx2", "avx512", "amx"] for t in TYPES}


@pytest.mark.parametrize("dtype", list(TYPES))
def test_other_ggml_builds_refused(dtype):
    q = quantize(dtype, np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32))
    x = np.ones(256, np.float32)
    for isa in sorted({"avx2", "avx512", "scalar", "neon", "neon_dotprod"} - set(BUILDS[dtype])):
        with pytest.raises(errors.UnsupportedError, match="ggml"):
            ggml_mv(q, x, dtype, isa=isa)


@pytest.mark.parametrize("dtype", list(TYPES))
def test_invalid_uses_raise_typed_errors(dtype):
    if not OFFERED:
        pytest.skip("precision='ggml' is not offered on this CPU (a build it does not reproduce is native here)")
    q = quantize(dtype, np.random.default_rng(0).standard_normal((8, 512)).astype(np.float32))
    with pytest.raises(errors.ShapeError):
        ggml_mv(q, np.ones(256, np.float32), dtype)  # cols mismatch
    with pytest.raises(errors.ShapeError):
        lmtail.ops.matvec(q[:, :100], np.ones(512, np.float32), dtype, precision="ggml")  # partial rows
    with pytest.raises(errors.LmtailError):
        ggml_mv(q, np.ones(512, np.float64), dtype)  # not float32
    with pytest.raises(errors.ParameterError):
        lmtail.ops.matvec(q, np.ones(512, np.float32), dtype, precision="ggml-avx2")
    with pytest.raises(errors.LmtailError):
        ggml_mv(q, np.ones(512, np.float32), dtype, isa="sse9")


def test_capabilities_list_ggml_for_the_k_types():
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("precision='ggml' for the K types is compiled on x86 builds only")
    by = lmtail.capabilities()["cpu"]["matvec"]["by_dtype"]
    for dtype in TYPES:
        expect = _core.ggml_native_build() in BUILDS[dtype] and _core.isa_available("avx2")
        assert ("ggml" in by[dtype]["precisions"]) == expect == OFFERED and by[dtype]["default"] != "ggml"


@pytest.mark.parametrize("dtype", list(TYPES))
def test_every_path_thread_invariant_and_close_without_oracle(dtype):
    """Runs where the oracle is absent (the sanitizer venv): every path (vec_dot, tiled, repack
    gemv/gemm) gives the same bytes at 1 and 3 threads and stays within ggml's q8_K error of the
    float64 product of the dequantised weights."""
    if not OFFERED:
        pytest.skip("precision='ggml' is not offered on this CPU (a build it does not reproduce is native here)")
    tid, _ = TYPES[dtype]
    for rows, cols in ((16, 512), (13, 256)):
        q = quantize(dtype, np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32))
        w = np.empty((rows, cols), np.float32)
        _core.dequantize(tid, q, w, 1)
        for T in TS:
            x = activations("gaussian", T, cols, seed=T)
            got = ggml_mv(q, x, dtype, threads=1)
            assert sha(ggml_mv(q, x, dtype, threads=3)) == sha(got)
            ref = x.astype(np.float64) @ w.astype(np.float64).T
            assert np.linalg.norm(got - ref) <= 2e-2 * np.linalg.norm(ref), (dtype, rows, T)


@pytest.mark.parametrize("dtype", ["Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"])
def test_amx_build_is_batch_and_thread_invariant(dtype):
    """ggml's AMX build (isa="amx": native where the CPU has AMX-INT8) applies one per-block float
    update to exact integer sums in its T = 1 gemv and its T > 1 tile gemm, so a batch row is the
    bytes of that row alone, for any thread count (compared with the oracle's AMX buffer in the
    byte tests above wherever the oracle has one); the values are float-error close to float64."""
    if not _core.isa_available("avx2"):
        pytest.skip("the ggml emulations run AVX2 code")
    rng = np.random.default_rng(21)
    for rows, cols in ((64, 512), (96, 2816), (32, 256)):
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        q = np.ascontiguousarray(lmtail.quantize(w, dtype))
        x = rng.standard_normal((9, cols)).astype(np.float32)
        batch = ggml_mv(q, x, dtype, isa="amx", threads=2)
        alone = np.stack([ggml_mv(q, x[t], dtype, isa="amx", threads=1) for t in range(len(x))])
        assert sha(batch) == sha(alone), (dtype, rows, cols)
        assert sha(ggml_mv(q, x, dtype, isa="amx", threads=3)) == sha(batch)
        ref = x.astype(np.float64) @ lmtail.dequantize(q, dtype, cols).astype(np.float64).T
        err = np.linalg.norm(batch - ref) / np.linalg.norm(ref)
        assert err < (2e-2 if dtype in ("Q4_0", "Q4_K") else 1e-2), (dtype, err)  # q8 activations
        # the AVX-512 build runs other orders (vec_dot / tiled): AMX is its own build
        assert dtype == "Q4_0" or sha(ggml_mv(q, x[:1], dtype, isa="avx512")) != sha(batch[:1])
