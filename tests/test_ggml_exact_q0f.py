"""precision="ggml" for Q8_0, Q4_0, F16, BF16 and F32: the raw bytes of ggml's CPU mul_mat.

Every comparison runs the oracle's ggml graph (tests/oracle/graph.py MatMul) on the same weight
bytes and x, with the weight where llama.cpp puts it (llama.cpp's default use_extra_bufts): the AMX
buffer on an AMX build for Q8_0 / Q4_0 with rows % 32 == 0, else the CPU_REPACK buffer for Q4_0
with rows % 8 == 0, a plain CPU buffer otherwise. The whole
(T, rows) output must be byte-identical for T = 1 .. 16 (ggml switches from vec_dot to llamafile's
sgemm at T = 2, from the repack gemv to its gemm at T = 4), with 1 and 2 threads on both sides.
Each type's row lists the ggml builds it reproduces (``ggml_builds``): Q8_0 and Q4_0 the x86 AVX2
and AVX-512 builds (the same bytes), the float types both (the AVX-512 build's 16-lane sums have
their own emulation; BF16 only on an AVX512_BF16 CPU: vdpbf16ps). The comparisons ask lmtail for the oracle's build and skip with the reason where the
oracle is a build the type does not reproduce or "ggml" is not offered for it on this CPU.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest

import lmtail
from lmtail import _core, errors

X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
needs_x86 = pytest.mark.skipif(not X86, reason="precision='ggml' for these types is built for x86 only (ggml's AVX2 build)")
TYPE_ID = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "BF16": 30}
TS = (1, 2, 3, 4, 7, 8, 9, 16)
ROWS = {r["name"]: r for r in _core.cpu_types() if r["name"] in TYPE_ID}
BUILDS = {n: r["ggml_builds"] for n, r in ROWS.items()}
# The table offers "ggml" for a type where ggml's native build on this CPU is one it reproduces
# and this CPU runs the emulation (AVX2 + FMA + F16C).
OFFERED = {n for n, r in ROWS.items() if X86 and "ggml" in r["precisions"]}


def need_offered(dtype):
    if dtype not in OFFERED:
        pytest.skip(f"precision='ggml' is not offered for {dtype} on this CPU: a native ggml here is its "
                    f"{_core.ggml_native_build()} build; {dtype} reproduces {BUILDS[dtype] or 'none'}")


class _Oracle:
    """The graph module; need(dtype) skips unless the oracle is a build dtype reproduces here."""

    def __init__(self, graph):
        self.graph, self.isa = graph, graph.oracle_build_isa()

    def __getattr__(self, name):
        return getattr(self.graph, name)

    def need(self, dtype):
        need_offered(dtype)
        if self.isa not in BUILDS[dtype]:
            pytest.skip(f"the oracle is ggml's {self.isa} build; precision='ggml' reproduces {BUILDS[dtype]} for {dtype}")


@pytest.fixture(scope="module")
def G():
    from oracle import graph

    if not OFFERED:
        pytest.skip("precision='ggml' is not offered on this CPU for any of these types")
    if not graph.available():
        pytest.skip("llama-cpp-python (the ggml oracle) is not installed")
    return _Oracle(graph)


def raw(dtype, w):
    """The GGUF bytes of w (rows, cols) as dtype: (rows, row_bytes) uint8."""
    return np.ascontiguousarray(lmtail.quantize(w, dtype))


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def oracle(G, q, dtype, cols, x, threads):
    if dtype not in ("Q4_0", "Q8_0", "F16"):  # F32 / BF16 stay in a plain buffer (as llama.cpp's)
        with G.MatMul(q, TYPE_ID[dtype], cols, x.shape[0]) as mm:
            return mm.run(x, threads)
    y, placement = G.mul_mat_llama(q, TYPE_ID[dtype], cols, x, threads)
    amx = G.amx_takes(TYPE_ID[dtype], q.shape[0], cols)
    assert placement == ("AMX" if amx else "CPU_REPACK" if dtype == "Q4_0" and q.shape[0] % 8 == 0 else "CPU")
    return y


def activations(rng, kind, T, cols):
    x = rng.standard_normal((T, cols)).astype(np.float32)
    if kind == "outlier":  # one large value per row, a few tiny blocks: q8_0's scale per block
        x[:, rng.integers(0, cols, T)] *= 300.0
        x[:, : min(cols, 32)] *= 1e-6
    elif kind == "scaled":  # rows of very different magnitude
        x *= np.float32(10.0) ** rng.integers(-6, 6, (T, 1)).astype(np.float32)
    return x


def check(G, q, dtype, cols, x, threads=(1, 2)):
    G.need(dtype)
    for th in threads:
        ref = oracle(G, q, dtype, cols, x, th)
        for lt in (1, 2):
            got = lmtail.ops.matvec(q, x, dtype, precision="ggml", threads=lt, isa=G.isa)
            diff = np.flatnonzero(bits(got) != bits(ref))
            assert diff.size == 0, (
                f"{dtype} {q.shape[0]}x{cols} T={x.shape[0]} ggml threads={th} lmtail threads={lt}: "
                f"{diff.size} logits differ, first at {np.unravel_index(diff[0], ref.shape)}: "
                f"{got.ravel()[diff[0]]!r} vs ggml {ref.ravel()[diff[0]]!r}"
            )


QUANT_COLS = (32, 64, 96, 640, 896, 2880, 6656)
FLOAT_COLS = (1, 7, 8, 37, 64, 96, 100, 200, 208, 640, 896, 2880, 6656)
ROWS = (1, 7, 8, 9, 13, 64)


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize("cols", QUANT_COLS)
def test_quant_types_bytes_equal_ggml(G, dtype, cols):
    rng = np.random.default_rng(cols)
    for rows in ROWS:
        q = raw(dtype, rng.standard_normal((rows, cols)).astype(np.float32))
        for T in TS:
            check(G, q, dtype, cols, activations(rng, ("gauss", "outlier", "scaled")[T % 3], T, cols))


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32"])
@pytest.mark.parametrize("cols", FLOAT_COLS)
def test_float_types_bytes_equal_ggml(G, dtype, cols):
    """cols % 8 != 0 and rows % 4 != 0 keep ggml on vec_dot at every T (tinyBLAS declines); cols
    % 32 != 0 exercises vec_dot's leftover loop."""
    rng = np.random.default_rng(1000 + cols)
    for rows in ROWS + (4, 12):
        q = raw(dtype, rng.standard_normal((rows, cols)).astype(np.float32))
        for T in TS:
            check(G, q, dtype, cols, activations(rng, ("gauss", "outlier", "scaled")[T % 3], T, cols), threads=(2,))


@pytest.mark.oracle
def test_f16_weights_as_float16_array_equal_raw_bytes(G):
    G.need("F16")
    rng = np.random.default_rng(5)
    w16 = rng.standard_normal((64, 896)).astype(np.float16)
    q = np.ascontiguousarray(w16).view(np.uint8)
    for T in (1, 8):
        x = rng.standard_normal((T, 896)).astype(np.float32)
        a = lmtail.ops.matvec(w16, x, "F16", precision="ggml")
        assert np.array_equal(bits(a), bits(lmtail.ops.matvec(q, x, "F16", precision="ggml")))
        assert np.array_equal(bits(a), bits(oracle(G, q, "F16", 896, x, 1)))


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_0", "F16", "BF16", "F32"])
def test_nonfinite_activations_match_ggml(G, dtype):
    """NaN / inf in x: ggml's q8_0 max can drop a NaN (max_ps keeps its second operand), turning
    the block's other weights into finite garbage and the NaN itself into -128; the float types
    propagate. Whatever ggml makes of it, the bytes must be its bytes."""
    rng = np.random.default_rng(7)
    cols = 640
    for rows in (8, 13):
        q = raw(dtype, rng.standard_normal((rows, cols)).astype(np.float32))
        for T in (1, 2, 4, 5, 8):
            x = rng.standard_normal((T, cols)).astype(np.float32)
            x[0, 3] = np.nan  # first vector of a block: max_ps drops it
            if T > 1:
                x[1, 40] = np.inf
            if T > 2:
                x[2, 100] = -np.inf
                x[2, 200] = np.nan  # last vector's lane: kept
            if T > 3:
                x[3, 33] = np.float32(3e38)  # finite, overflows the f16 conversion
            check(G, q, dtype, cols, x)


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32"])
def test_nonfinite_float_weights_match_ggml(G, dtype):
    rng = np.random.default_rng(8)
    w = rng.standard_normal((16, 96)).astype(np.float32)
    w[1, 5] = np.nan
    w[2, 7] = np.inf
    w[3, 9] = -np.inf
    if dtype == "F32":  # lmtail.quantize refuses non-finite weights: the bytes are built here
        q = w.view(np.uint8)
    elif dtype == "F16":
        q = w.astype(np.float16).view(np.uint8)
    else:
        q = (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)  # truncation: NaN stays NaN
    for T in (1, 2, 8):
        check(G, q, dtype, 96, rng.standard_normal((T, 96)).astype(np.float32))


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32"])
def test_denormals_match_ggml(G, dtype):
    """Tiny weights and activations: denormal products and denormal inputs (vdpbf16ps flushes
    both in ggml's AVX512_BF16 build; the other paths keep them), at every path."""
    rng = np.random.default_rng(14)
    for rows, cols in ((16, 96), (13, 128), (8, 1024)):
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        w[: rows // 2] *= np.float32(1e-20 if dtype != "F16" else 1e-6)  # f16: denormal weights
        w[rows // 2 : rows // 2 + 2] *= np.float32(1e-39 if dtype != "F16" else 1e-7)
        if dtype == "F32":
            q = w.view(np.uint8)
        elif dtype == "F16":
            q = w.astype(np.float16).view(np.uint8)
        else:
            q = (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        for T in (1, 2, 8):
            x = rng.standard_normal((T, cols)).astype(np.float32)
            x[0] *= np.float32(1e-20)
            x[-1, : cols // 2] *= np.float32(1e-39)
            check(G, q, dtype, cols, x)


@pytest.mark.oracle
def test_q8_0_extreme_weight_bytes_match_ggml(G):
    """Raw Q8_0 bytes no quantiser writes: q = -128 (ggml's sign trick: |-128| = 128 unsigned),
    zero and huge scales."""
    rng = np.random.default_rng(9)
    rows, cols = 16, 256
    blocks = np.zeros((rows, cols // 32), dtype=[("d", "<f2"), ("qs", "i1", 32)])
    blocks["d"] = rng.standard_normal(blocks.shape).astype(np.float16)
    blocks["d"][0, 0] = 0
    blocks["d"][1, 1] = np.float16(60000)
    blocks["qs"] = rng.integers(-128, 128, blocks["qs"].shape)
    blocks["qs"][2] = -128
    q = np.ascontiguousarray(blocks).view(np.uint8).reshape(rows, -1)
    for T in (1, 2, 8):
        check(G, q, "Q8_0", cols, rng.standard_normal((T, cols)).astype(np.float32))


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_0", "F16", "BF16", "F32"])
def test_head_publishes_ggml_bytes_after_scale_and_cap(G, dtype):
    """Head(precision="ggml"): llama.cpp's output graph = mul_mat, then ggml_scale and the
    four-node soft cap (tests/oracle/graph.py softcap_four_nodes)."""
    rng = np.random.default_rng(11)
    rows, cols = 64, 640
    q = raw(dtype, rng.standard_normal((rows, cols)).astype(np.float32))
    G.need(dtype)
    if G.isa != _core.ggml_native_build():
        pytest.skip(f"Head reproduces the native {_core.ggml_native_build()} build; the oracle is {G.isa}")
    head = lmtail.Head(q, dtype=dtype, logit_scale=0.125, softcap=30.0, precision="ggml")
    assert head.precision == "ggml"
    for T in (1, 8):
        x = (rng.standard_normal((T, cols)) * 4).astype(np.float32)
        ref = G.softcap_four_nodes(oracle(G, q, dtype, cols, x, 2), 0.125, 30.0)
        assert np.array_equal(bits(head.logits(x)), bits(ref))


def big_q8_0(rows, cols, seed=0):
    """Random Q8_0 bytes (f16 scales ~1e-2, q in [-127, 127]) built directly: no 1.3e9-weight
    quantisation."""
    rng = np.random.default_rng(seed)
    nb = cols // 32
    q = np.empty((rows, nb * 34), np.uint8)
    v = q.reshape(rows, nb, 34)
    v[:, :, :2] = (rng.random((rows, nb), np.float32) * 0.02 + 1e-3).astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
    v[:, :, 2:] = rng.integers(-127, 128, (rows, nb, 32), dtype=np.int8).view(np.uint8)
    return q


@pytest.mark.oracle
@pytest.mark.slow
def test_q8_0_full_head_202048x6656_equals_ggml(G):
    G.need("Q8_0")
    rows, cols = 202048, 6656
    q = G.aligned_empty((rows, cols // 32 * 34), np.uint8)
    q[...] = big_q8_0(rows, cols)
    rng = np.random.default_rng(12)
    for T in (1, 8):
        x = rng.standard_normal((T, cols)).astype(np.float32)
        for th in (1, 2):
            ref = oracle(G, q, "Q8_0", cols, x, th)  # on an AMX build: the AMX buffer (rows % 32 == 0)
            for lt in (1, 2):
                got = lmtail.ops.matvec(q, x, "Q8_0", precision="ggml", threads=lt, isa=G.isa)
                assert np.array_equal(bits(got), bits(ref)), (T, th, lt)


@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_0", "F16", "BF16", "F32"])
def test_thread_count_never_changes_bytes(dtype):
    """No oracle needed (so it also runs under tools/sanitize.sh): 1, 2 and 3 threads give the same
    bytes on every path (vec_dot, sgemm, repack gemv/gemm, float leftovers) of every reproduced
    build, each within float error of float64."""
    need_offered(dtype)
    rng = np.random.default_rng(13)
    for rows, cols in ((8, 64), (13, 96), (72, 640), (12, 37 if dtype[0] in "FB" else 32), (8, 208 if dtype[0] in "FB" else 224)):
        q = raw(dtype, rng.standard_normal((rows, cols)).astype(np.float32))
        w = lmtail.dequantize(q, dtype, cols).astype(np.float64)
        for T in (1, 2, 4, 5, 9):
            x = rng.standard_normal((T, cols)).astype(np.float32)
            for b in BUILDS[dtype]:
                a = lmtail.ops.matvec(q, x, dtype, precision="ggml", threads=1, isa=b)
                assert np.isfinite(a).all()
                ref = x.astype(np.float64) @ w.T
                assert np.linalg.norm(a - ref) <= 2e-2 * np.linalg.norm(ref), (dtype, b, rows, cols, T)
                for th in (2, 3):
                    got = lmtail.ops.matvec(q, x, dtype, precision="ggml", threads=th, isa=b)
                    assert np.array_equal(bits(a), bits(got)), (dtype, b, rows, cols, T, th)


# ---- what is not claimed / bad use -------------------------------------------------------------


@needs_x86
@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_0", "F16", "BF16", "F32"])
def test_capability_table_lists_ggml_where_the_native_build_is_reproduced(dtype):
    expect = _core.ggml_native_build() in BUILDS[dtype] and _core.isa_available("avx2")
    assert ("ggml" in lmtail.capabilities()["cpu"]["matvec"]["by_dtype"][dtype]["precisions"]) == expect


def _cpu_flag(flag):
    try:
        with open("/proc/cpuinfo") as f:
            return any(flag in line.split() for line in f if line.startswith("flags"))
    except OSError:  # pragma: no cover
        return False


@needs_x86
def test_reproduced_builds():
    """Q8_0 / Q4_0: ggml's AVX-512 build gives the AVX2 build's bytes (its 512-bit and VNNI code
    changes exact integer sums only); the float types have an emulation of its 16-lane sums (F16's
    AVX512_FP16 build still accumulates in f32: the same bytes), BF16 only on an AVX512_BF16 CPU
    (vdpbf16ps; the AVX512F-only variant is not verified)."""
    both = ["avx2", "avx512", "amx"]  # AMX: F32 / BF16 never go to its buffer (its AVX-512 bytes)
    bf16 = both if _cpu_flag("avx512_bf16") else ["avx2"]
    assert BUILDS == {"F32": both, "F16": both, "Q4_0": both, "Q8_0": both, "BF16": bf16}


@needs_x86
@pytest.mark.parametrize("isa", ["avx2", "avx512", "amx", "scalar"])
@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_0", "F16", "BF16", "F32"])
def test_unclaimed_ggml_builds_are_unsupported(dtype, isa):
    """A build the type does not reproduce (scalar builds take other orders; F16 / BF16 AVX-512
    variants, see test_reproduced_builds) is refused, not guessed; where "ggml" is not offered at all
    every isa is refused."""
    if isa in BUILDS[dtype] and dtype in OFFERED:
        pytest.skip(f"ggml's {isa} build is reproduced for {dtype} (compared in the byte tests)")
    q = raw(dtype, np.ones((8, 64), np.float32))
    with pytest.raises(errors.UnsupportedError, match="reproduce"):
        lmtail.ops.matvec(q, np.ones(64, np.float32), dtype, precision="ggml", isa=isa)


def test_bad_use_is_typed():
    need_offered("Q8_0")
    q = raw("Q8_0", np.ones((8, 64), np.float32))
    with pytest.raises(errors.ShapeError):
        lmtail.ops.matvec(q, np.ones(63, np.float32), "Q8_0", precision="ggml")
    with pytest.raises(errors.DTypeError):
        lmtail.ops.matvec(q, np.ones(64, np.float64), "Q8_0", precision="ggml")
    with pytest.raises(errors.ShapeError):
        lmtail.ops.matvec(q[:, :33], np.ones(32, np.float32), "Q8_0", precision="ggml")
    with pytest.raises(lmtail.ParameterError):
        lmtail.ops.matvec(q, np.ones(64, np.float32), "Q8_0", precision="ggml2")


_AMX_CASES = """
import hashlib, sys
import numpy as np
import lmtail
rng = np.random.default_rng(7)
out = []
for dtype, bb in (("Q4_0", 18), ("Q8_0", 34), ("Q4_K", 144), ("Q5_K", 176), ("F16", None)):
    for rows, cols in ((32, 256), (64, 512), (96, 2816), (160, 1024), (37, 512)):  # 37: the K rows' group of 4 and its tail
        qk = 256 if dtype in ("Q4_K", "Q5_K") else 32
        if bb is None:
            w = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float16)
            w[3, :7] = [np.inf, -np.inf, np.nan, 65504, -0.0, 6e-8, 1e-5]  # specials, subnormals
            w = w.view(np.uint8).reshape(rows, 2 * cols)
        else:
            # raw random bytes (every code, Q8_0's -128 too; NaN / inf / subnormal scales in rows
            # 0-1), sane fp16 scales in the other rows
            # (the K types: d and dmin, the first 4 bytes of each block)
            nb, sb = cols // qk, 2 if qk == 32 else 4
            w = rng.integers(0, 256, (rows, nb, bb), dtype=np.uint8)
            d = (rng.standard_normal((rows - 2, nb, sb // 2)) * 0.01).astype(np.float16)
            w[2:, :, :sb] = d.view(np.uint8).reshape(rows - 2, nb, sb)
            w = w.reshape(rows, -1)
        for T in (1, 2, 5, 9):
            x = (rng.standard_normal((T, cols)) * 3).astype(np.float32)
            x[-1, 1] = 3e4  # an outlier that sets its block's activation scale
            y = lmtail.ops.matvec(w, x, dtype, precision="ggml", isa="amx", threads=2)
            out.append(hashlib.sha256(y.tobytes()).hexdigest())
print(" ".join(out))
"""


@needs_x86
def test_amx_build_512_bit_rows_equal_the_avx2_rows():
    """The AMX build's Q4_0 / Q8_0 / Q4_K / Q5_K / F16 kernels run 512-bit code where lmtail's ISA is avx512
    (ggml_amx_avx512.cpp) and AVX2 code otherwise (LMTAIL_ISA=avx2 here): the same bytes on raw
    random blocks (every code byte, non-finite and subnormal scales), special F16 weights and
    activation outliers, T = 1 .. 9. The AVX2 rows are the ones compared with the oracle on AVX2
    hosts; on this host the oracle byte tests above run the 512-bit rows."""
    import os
    import subprocess
    import sys

    if not (_core.isa_available("avx512") and _core.isa_available("avx2")):
        pytest.skip("needs lmtail's avx512 tier (the 512-bit rows) and avx2 on this CPU")

    def run(isa):
        env = dict(os.environ, LMTAIL_ISA=isa)
        return subprocess.run([sys.executable, "-c", _AMX_CASES], env=env, check=True, capture_output=True,
                              text=True).stdout.split()

    wide, narrow = run("avx512"), run("avx2")
    assert len(wide) == 5 * 5 * 4 and wide == narrow
