"""llama.cpp's own Metal kernels through lmtail's Metal host code, under metal-emu (issue 15).

The kernels are llama.cpp's sources from the oracle sdist (llama-cpp-python 0.3.36), translated
and compiled once per session into the emulator's shared-object library; nothing of llama.cpp is
in the repository. Checks: (a) the four cap nodes as llama.cpp's kernel_unary give the CPU cap's
bytes (lmtail's CPU cap is ggml's); (b) kernel_mul_mv_<type>_f32 of every supported head type is
within ggml's own Metal-vs-CPU tolerance (test-backend-ops: NMSE 5e-4 for mul_mat) of the CPU;
(c) the hazard checker catches a missing barrier between the cap nodes on llama.cpp's kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

import lmtail
from lmtail import ops
from lmtail._types import ggml_type
from lmtail.errors import HazardError, ParameterError, UnsupportedError

import _metal_testing
from oracle._lib import llama_sdist

EMU = "metal-emu"
GGML_METAL = llama_sdist() / "vendor" / "llama.cpp" / "ggml" / "src" / "ggml-metal"
pytestmark = pytest.mark.skipif(
    not (GGML_METAL / "kernels" / "mul_mv.metal").is_file(),
    reason=f"llama.cpp's Metal sources not found at {GGML_METAL} (the oracle sdist)",
)
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K"]
NMSE_MUL_MAT = 5e-4  # tests/test-backend-ops.cpp, test_mul_mat::max_nmse_err


@pytest.fixture(scope="session")
def ggml_metal(tmp_path_factory):
    """llama.cpp's ggml-metal directory, its kernels compiled once for the session."""
    from lmtail import _core, _ggml_metal

    _ggml_metal.emu_library(GGML_METAL, _core.metal_emu.ggml_kernel_names(), str(tmp_path_factory.mktemp("ggml-emu")))
    return str(GGML_METAL)


def _nmse(got, want):
    want = want.astype(np.float64)
    return float(np.sum((got.astype(np.float64) - want) ** 2) / np.sum(want**2))


@pytest.mark.parametrize("n", [1, 7, 1000, 4096, 40001, 40004])
@pytest.mark.parametrize("scale,cap", [(0.7, 30.0), (1.0, 0.0), (0.0625, 15.0)])
def test_cap_nodes_give_the_cpu_bytes(ggml_metal, n, scale, cap):
    x = (np.random.default_rng(n).standard_normal(n) * 40).astype(np.float32)
    x[: min(n, 3)] = [0.0, -0.0, 1e-38][: min(n, 3)]
    got = ops.softcap(x, scale, cap, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    want = ops.softcap(x, scale, cap, backend="cpu")
    # One documented difference between llama.cpp's backends: its Metal kernel computes
    # scale*x + bias with bias 0, the CPU (b == 0) x*scale, so -0 comes out +0 on Metal.
    neg_zero = np.signbit(want) & (want == 0)
    assert got[~neg_zero].tobytes() == want[~neg_zero].tobytes()
    assert np.all(got[neg_zero].view(np.uint32) == 0)


def _shapes(dtype):
    blk = {"F32": 1, "F16": 1, "BF16": 1, "Q8_0": 32, "Q4_0": 32}.get(dtype, 256)
    if blk == 256:
        cols = [256, 768, 1280]
    elif blk == 32:
        cols = [32, 640, 896]
    else:
        cols = [7, 30, 250, 640, 896]  # the _short kernel (< 32), the scalar one (% 4 != 0), the _4 one
    return [(rows, c) for rows in (1, 9, 13) for c in cols]


@pytest.mark.parametrize("dtype", TYPES)
def test_mul_mv_every_type_within_ggml_tolerance(ggml_metal, dtype):
    for rows, cols in _shapes(dtype):
        w = (np.random.default_rng(rows * cols).standard_normal((rows, cols)) * 0.05).astype(np.float32)
        q = lmtail.quantize(w, dtype)
        x = np.random.default_rng(cols).standard_normal(cols).astype(np.float32)
        want = ops.matvec(q, x, dtype, precision="f32")
        got = ops.matvec(q, x, dtype, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
        assert got.shape == (rows,) and np.all(np.isfinite(got)), (dtype, rows, cols)
        assert _nmse(got, want) <= NMSE_MUL_MAT, (dtype, rows, cols, _nmse(got, want))
        # Under the emulator (f32, lane-order simd_sum) it is rounding-level: ~1e-13 here.
        assert _nmse(got, want) <= 1e-10, (dtype, rows, cols, _nmse(got, want))


def _batch_shapes(dtype):
    # cols % 256 == 0 (kernel_mul_mv_ext with nxpsg 16 at T = 2), % 128 only (nxpsg 8), and cols
    # llama.cpp sends to kernel_mul_mv with ne11 = T (not a multiple of 128).
    blk = {"F32": 1, "F16": 1, "BF16": 1, "Q8_0": 32, "Q4_0": 32}.get(dtype, 256)
    if blk == 256:
        return [(13, 256), (9, 768)]
    if blk == 32:
        return [(13, 256), (9, 384), (7, 96)]
    return [(13, 256), (9, 384), (7, 250), (5, 30)]


@pytest.mark.parametrize("dtype", TYPES)
def test_batches_2_to_8_every_type_within_ggml_tolerance(ggml_metal, dtype):
    # 2 <= T <= 8: kernel_mul_mv_ext_<type>_f32_r1_<2..5> where llama.cpp takes it (cols % 128 == 0;
    # the K types from T = 4), else kernel_mul_mv over T rows; each row against the CPU's f32.
    # Weights of unit scale: the ext Q4_K dequantizer computes d/16 in half, which for small
    # super-block scales (d < ~1e-3) is a half subnormal (llama.cpp's own rounding, ~1e-6 NMSE:
    # still within ggml's tolerance, checked at 0.05 below); elsewhere the emulator is at rounding level.
    for scale in (1.0, 0.05):
        for rows, cols in _batch_shapes(dtype):
            w = (np.random.default_rng(rows + cols).standard_normal((rows, cols)) * scale).astype(np.float32)
            q = lmtail.quantize(w, dtype)
            for T in range(2, 9):
                x = np.random.default_rng(T).standard_normal((T, cols)).astype(np.float32)
                want = ops.matvec(q, x, dtype, precision="f32")
                got = ops.matvec(q, x, dtype, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
                assert got.shape == (T, rows) and np.all(np.isfinite(got)), (dtype, rows, cols, T)
                for t in range(T):
                    e = _nmse(got[t], want[t])
                    assert e <= NMSE_MUL_MAT, (dtype, scale, rows, cols, T, t, e)
                    if scale == 1.0 or dtype != "Q4_K":
                        assert e <= 1e-10, (dtype, scale, rows, cols, T, t, e)


def test_batch_above_8_runs_mul_mv_only_for_short_rows(ggml_metal):
    # T > 8 with cols < 64: llama.cpp still runs kernel_mul_mv (no matmul below 64 columns).
    q = lmtail.quantize(np.random.default_rng(0).standard_normal((5, 30)).astype(np.float32), "F16")
    x = np.random.default_rng(1).standard_normal((12, 30)).astype(np.float32)
    got = ops.matvec(q, x, "F16", backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    assert _nmse(got, ops.matvec(q, x, "F16", precision="f32")) <= 1e-10


def test_mul_mv_batch_and_bad_library_are_typed_errors(ggml_metal, tmp_path):
    q = lmtail.quantize(np.ones((4, 256), np.float32), "Q4_K")
    with pytest.raises(UnsupportedError, match="T = 9.*kernel_mul_mm"):
        ops.matvec(q, np.ones((9, 256), np.float32), "Q4_K", backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    with pytest.raises(UnsupportedError, match="ggml-metal"):
        ops.matvec(q, np.ones(256, np.float32), "Q4_K", backend=EMU, precision="ggml", ggml_metal=str(tmp_path))
    with pytest.raises(UnsupportedError, match="ggml"):  # the capability table's answer without a library
        ops.matvec(q, np.ones(256, np.float32), "Q4_K", backend=EMU, precision="ggml")
    with pytest.raises(ParameterError, match="ggml_metal"):
        ops.matvec(q, np.ones(256, np.float32), "Q4_K", ggml_metal=ggml_metal)


@pytest.fixture(scope="module")
def tm():
    why = _metal_testing.unavailable()
    if why:
        pytest.skip(why)
    return _metal_testing.load().metal_emu


@pytest.mark.parametrize("missing", ["softcap_inv", "softcap_tanh", "softcap_cap"])
def test_missing_cap_barrier_is_caught_on_llama_cpp_kernels(ggml_metal, tm, missing):
    from lmtail import _ggml_metal

    lib = _ggml_metal.emu_library(ggml_metal, tm.ggml_kernel_names())
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    try:
        tm.set_debug(skip_barriers=[missing])
        with pytest.raises(HazardError, match="RAW hazard.*kernel_unary_f32_f32_4"):
            tm.ggml_softcap(lib, x.copy(), 0.5, 30.0)
    finally:
        tm.set_debug(skip_barriers=[])
    y = x.copy()
    tm.ggml_softcap(lib, y, 0.5, 30.0)  # every barrier in place: no hazard, the CPU's bytes
    assert y.tobytes() == ops.softcap(x, 0.5, 30.0).tobytes()


# ---- Head(..., precision="ggml", ggml_metal=...) on the Metal backends ----------------------------

HEAD_COLS = {"F32": 96, "F16": 96, "BF16": 96, "Q8_0": 128, "Q4_0": 128}  # the K types: 256


def _head_case(dtype, rows=37, seed=0):
    cols = HEAD_COLS.get(dtype, 256)
    rng = np.random.default_rng(seed)
    q = lmtail.quantize((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32), dtype)
    gamma = rng.uniform(0.5, 1.5, cols).astype(np.float32)
    h = (rng.standard_normal((1, cols)) * 3).astype(np.float32)
    return q, gamma, h


@pytest.mark.parametrize("dtype", TYPES)
def test_head_publishes_the_ggml_ops_bytes(ggml_metal, dtype):
    q, gamma, h = _head_case(dtype)
    head = lmtail.Head(q, gamma, dtype=dtype, logit_scale=0.5, softcap=3.0, eps=1e-6, backend=EMU, precision="ggml",
                       ggml_metal=ggml_metal, eog_ids=[0])
    assert head.precision == "ggml"
    got = head.logits(h)
    # The same nodes one op at a time: lmtail's Metal RMSNorm, llama.cpp's matvec, its cap nodes.
    normed = ops.rms_norm(h, gamma, 1e-6, backend=EMU)
    pre = ops.matvec(q, normed, dtype, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    want = ops.softcap(pre, 0.5, 3.0, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    assert got.tobytes() == want.tobytes()
    # Against the CPU's own tail (f32): ggml's Metal tolerance, and the same greedy token where
    # the top two are apart by more than that.
    cpu = lmtail.Head(q, gamma, dtype=dtype, logit_scale=0.5, softcap=3.0, eps=1e-6, precision="f32")
    ref = cpu.logits(h)
    assert _nmse(got, ref) <= NMSE_MUL_MAT
    top2 = np.sort(ref[0])[-2:]
    tok = head.greedy(h)
    assert tok[0] == int(np.argmax(got[0]))
    if top2[1] - top2[0] > 1e-3:
        assert tok[0] == cpu.greedy(h)[0]
    # The other routes read the same published logits.
    assert head.row(0).tobytes() == got[0].tobytes()
    ids, vals = head.topk(h, 5)
    assert vals.tobytes() == np.sort(got[0])[::-1][:5].tobytes()
    excl = head.greedy(h, exclude=head.eog_ids)
    assert excl[0] == int(np.argmax(np.where(np.arange(got.shape[1]) == 0, -np.inf, got[0])))


@pytest.mark.parametrize("dtype,T", [("Q5_K", 4), ("Q8_0", 3), ("BF16", 8)])
def test_head_batch_publishes_the_ggml_ops_bytes(ggml_metal, dtype, T):
    q, gamma, _ = _head_case(dtype, seed=T)
    head = lmtail.Head(q, gamma, dtype=dtype, logit_scale=0.5, softcap=3.0, backend=EMU, precision="ggml",
                       ggml_metal=ggml_metal)
    h = (np.random.default_rng(T).standard_normal((T, head.cols)) * 3).astype(np.float32)
    pre = ops.matvec(q, ops.rms_norm(h, gamma, backend=EMU), dtype, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    want = ops.softcap(pre, 0.5, 3.0, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    assert head.logits(h).tobytes() == want.tobytes()
    assert np.array_equal(head.greedy(h), np.argmax(want, axis=1))


def test_head_without_norm_or_cap(ggml_metal):
    q, _, h = _head_case("Q6_K", seed=3)
    head = lmtail.Head(q, None, dtype="Q6_K", logit_scale=0.25, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    pre = ops.matvec(q, h, "Q6_K", backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    want = ops.softcap(pre, 0.25, 0.0, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    assert head.logits(h[0]).tobytes() == want[0].tobytes()


def test_head_fails_closed(ggml_metal):
    q, gamma, h = _head_case("F32", seed=5)
    w = q.view(np.float32).copy()
    w[7, 3] = np.inf  # one row's logit overflows; the cap would map it to +-cap
    head = lmtail.Head(w, gamma, dtype="F32", softcap=30.0, backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    out = np.full((1, w.shape[0]), 7.0, np.float32)
    with pytest.raises(lmtail.NonFiniteLogitsError, match="before the soft cap.*7"):
        head.logits(h, out=out)
    assert np.all(out == 7.0)  # the published buffer is untouched
    with pytest.raises(lmtail.NonFiniteLogitsError):
        head.greedy(h)
    with pytest.raises(ParameterError, match="row"):
        head.row(0)  # a failed compute leaves no row
    ok = lmtail.Head(q, gamma, dtype="F32", backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    with pytest.raises(lmtail.NonFiniteLogitsError, match="rms_norm.*overflow"):
        ok.logits(np.full((1, h.shape[1]), 3e19, np.float32))
    with pytest.raises(lmtail.NonFiniteLogitsError, match="hidden"):
        ok.logits(np.full((1, h.shape[1]), np.nan, np.float32))


def test_head_errors_are_typed(ggml_metal, tmp_path):
    q, gamma, h = _head_case("Q4_K")
    with pytest.raises(ParameterError, match="ggml_metal"):
        lmtail.Head(q, gamma, dtype="Q4_K", backend=EMU, ggml_metal=ggml_metal)  # no precision="ggml"
    with pytest.raises(ParameterError, match="ggml_metal"):
        lmtail.Head(q, gamma, dtype="Q4_K", backend=EMU, precision="f32", ggml_metal=ggml_metal)
    with pytest.raises(ParameterError, match="ggml_metal"):
        lmtail.Head(q, gamma, dtype="Q4_K", precision="ggml", ggml_metal=ggml_metal)  # the CPU
    with pytest.raises(UnsupportedError, match="ggml-metal"):
        lmtail.Head(q, gamma, dtype="Q4_K", backend=EMU, precision="ggml", ggml_metal=str(tmp_path))
    head = lmtail.Head(q, gamma, dtype="Q4_K", backend=EMU, precision="ggml", ggml_metal=ggml_metal)
    with pytest.raises(UnsupportedError, match="T = 9"):
        head.logits(np.repeat(h, 9, axis=0))


@pytest.mark.parametrize("missing", ["norm_head", "head_scale", "softcap_tanh"])
def test_missing_head_graph_barrier_is_caught(ggml_metal, tm, missing):
    from lmtail import _ggml_metal

    lib = _ggml_metal.emu_library(ggml_metal, tm.ggml_kernel_names())
    q, gamma, h = _head_case("Q5_K", rows=300, seed=9)
    args = (lib, q, ggml_type("Q5_K").id, q.shape[1] // 176 * 256, gamma, h, 1e-5, 0.5, 30.0)
    try:
        tm.set_debug(skip_barriers=[missing])
        with pytest.raises(HazardError, match="RAW hazard"):
            tm.ggml_head(*args, np.empty((1, 300), np.float32))
    finally:
        tm.set_debug(skip_barriers=[])
    out = np.empty((1, 300), np.float32)
    assert tm.ggml_head(*args, out) == -1  # every barrier in place: no hazard
