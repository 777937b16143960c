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


def test_mul_mv_batch_and_bad_library_are_typed_errors(ggml_metal, tmp_path):
    q = lmtail.quantize(np.ones((4, 256), np.float32), "Q4_K")
    with pytest.raises(UnsupportedError, match="T = 2"):
        ops.matvec(q, np.ones((2, 256), np.float32), "Q4_K", backend=EMU, precision="ggml", ggml_metal=ggml_metal)
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
