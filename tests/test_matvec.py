"""Q5_K matvec: accuracy against a float64 reference, and byte-level determinism contracts."""

import numpy as np
import pytest

import lmtail
from _util import bits, q5k_matrix, reference_matvec, slab, tiled_head

# Error bound, elementwise: |y - ref| <= 3e-5 * (|W| @ |x|). An f32 sum of n = 6656 terms has a
# worst case of ~n*eps = 4e-4 relative to sum|w||x|; the 16-lane tree keeps chains to n/16
# terms, whose worst case is 2.5e-5 + tree depth. Measured: ~4e-7 normwise.
BOUND = 3e-5
PRECISIONS = ["f32", "i16", "i24"]


def i24_bound(q, x):
    """Elementwise error bound of precision="i24" beyond the f32 BOUND. x is carried as
    s*(a + b/255) per 256-block (s = max|x|/32767): at most s/510 per element, plus the f32
    roundings of the two scales (2^-24 relative each; 2^-150 absolute when subnormal, covered by
    the caller's 1e-30), times |w| (the dmin*m term uses the same represented x)."""
    T, cols = x.shape
    step = np.abs(x.astype(np.float64)).reshape(T, cols // 256, 256).max(axis=2) / 32767.0
    e = np.repeat(step / 508, 256, axis=1) + np.abs(x.astype(np.float64)) * 2.0**-22
    return (dequant_abs(q) @ e.T).T * (1 + 1e-6)


def dequant_abs(q):
    import gguf

    w = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q5_K).astype(np.float64)
    return np.abs(w).reshape(q.shape[0], -1)


def extra_bound(q, x, precision):
    """Elementwise bound of the activation representation error (0 for f32)."""
    if precision == "f32":
        return 0.0
    return {"i16": i16_bound, "i24": i24_bound}[precision](q, x)


def i16_bound(q, x):
    """Elementwise error bound of precision="i16": the activation rounding (at most half a step,
    max|x_block|/65534, per element, times |w|) plus the f32 BOUND for the float arithmetic."""
    T, cols = x.shape
    step = np.abs(x.astype(np.float64)).reshape(T, cols // 256, 256).max(axis=2) / 32767.0
    e = np.repeat(step / 2, 256, axis=1)  # (T, cols)
    return (dequant_abs(q) @ e.T).T * (1 + 1e-6)


@pytest.mark.parametrize("rows", [1, 7, 99, 4097])
@pytest.mark.parametrize("cols", [256, 6656])
@pytest.mark.parametrize("T", [1, 3, 8])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_matches_float64_reference(rows, cols, T, precision):
    q = q5k_matrix(rows, cols, seed=rows * 31 + cols)
    x = np.random.default_rng(T).standard_normal((T, cols)).astype(np.float32)
    y = lmtail.ops.matvec_q5_k(q, x, precision=precision)
    assert y.shape == (T, rows) and y.dtype == np.float32
    ref, mag = reference_matvec(q, x)
    assert np.all(np.abs(y - ref) <= extra_bound(q, x, precision) + BOUND * mag + 1e-30)
    # Normwise, measured: f32 ~4e-7, i24 ~2e-7 (f32-grade), i16 ~2.7e-5; ggml's q8_K: ~7e-3.
    assert np.linalg.norm(y - ref) <= (1e-4 if precision == "i16" else 1e-5) * np.linalg.norm(ref)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_1d_input_gives_1d_output(precision):
    q = q5k_matrix(5, 512)
    x = np.ones(512, np.float32)
    y = lmtail.ops.matvec_q5_k(q, x, precision=precision)
    assert y.shape == (5,)
    assert np.array_equal(bits(y), bits(lmtail.ops.matvec_q5_k(q, x[None], precision=precision)[0]))


def available_isas():
    out = []
    for isa in ("scalar", "avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"):
        if lmtail._core.isa_available(isa):
            out.append(isa)
    return out


def awkward_activations(T, cols, seed):
    """Gaussian rows plus blocks that stress the i16 quantiser: all zero, one spike, subnormal,
    huge (near f32 max / 32767 steps), exact ties at half steps, negative maximum."""
    x = np.random.default_rng(seed).standard_normal((T, cols)).astype(np.float32)
    nb = cols // 256
    for t in range(T):
        b = (t * 7) % nb
        kind = t % 6
        blk = x[t, 256 * b : 256 * (b + 1)]
        if kind == 0:
            blk[:] = 0
        elif kind == 1:
            blk[:] = 0
            blk[17] = -3.5
        elif kind == 2:
            blk *= np.float32(1e-41)
        elif kind == 3:
            blk *= np.float32(1e37)
        elif kind == 4:
            blk[:] = (np.arange(256) % 5 - 2) * np.float32(0.5 / 32767)  # ties at half steps
            blk[0] = 1.0
        else:
            blk[3] = -np.abs(blk).max() * 2
    return x


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("isa", ["avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"])
def test_simd_paths_equal_scalar_bytes(isa, precision):
    if not lmtail._core.isa_available(isa):
        pytest.skip(f"{isa} is not available on this CPU/build (path compiled but not run here)")
    q = q5k_matrix(333, 1536, seed=7)
    for T in (1, 2, 5, 8, 11):
        x = np.random.default_rng(T).standard_normal((T, 1536)).astype(np.float32)
        for xx in (x, awkward_activations(T, 1536, T)):
            a = lmtail.ops.matvec_q5_k(q, xx, isa="scalar", precision=precision)
            b = lmtail.ops.matvec_q5_k(q, xx, isa=isa, precision=precision)
            assert np.array_equal(bits(a), bits(b)), (isa, T)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_thread_count_and_batch_invariance(precision):
    q = q5k_matrix(1000, 2048, seed=3)
    x = np.random.default_rng(0).standard_normal((8, 2048)).astype(np.float32)
    mv = lambda xx, **kw: lmtail.ops.matvec_q5_k(q, xx, precision=precision, **kw)  # noqa: E731
    base = mv(x, threads=1)
    for th in (2, 3, 7):
        assert np.array_equal(bits(base), bits(mv(x, threads=th)))
    for t in range(8):  # row t of a T=8 batch == the same row computed alone
        assert np.array_equal(bits(base[t]), bits(mv(x[t])))
    for t0, t1 in ((0, 3), (3, 8), (1, 6)):  # and of any sub-batch
        assert np.array_equal(bits(base[t0:t1]), bits(mv(x[t0:t1])))
    for _ in range(3):  # run to run
        assert np.array_equal(bits(base), bits(mv(x)))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_strided_weight_rows_without_copy(precision):
    q = q5k_matrix(64, 512, seed=5)
    wide = np.zeros((64, q.shape[1] + 176), np.uint8)
    wide[:, : q.shape[1]] = q
    view = wide[:, : q.shape[1]]  # row stride > row bytes
    x = np.random.default_rng(1).standard_normal(512).astype(np.float32)
    assert np.array_equal(bits(lmtail.ops.matvec_q5_k(view, x, precision=precision)),
                          bits(lmtail.ops.matvec_q5_k(q, x, precision=precision)))


@pytest.mark.parametrize("precision", ["i16", "i24"])
def test_integer_paths_awkward_blocks_accuracy(precision):
    # Zero, spike, subnormal, huge and tie blocks: still within the rounding bound of each block.
    q = q5k_matrix(99, 1536, seed=8)
    x = awkward_activations(12, 1536, 4)
    y = lmtail.ops.matvec_q5_k(q, x, precision=precision)
    ref, mag = reference_matvec(q, x)
    assert np.isfinite(y).all()
    assert np.all(np.abs(y - ref) <= extra_bound(q, x, precision) + BOUND * mag + 1e-30)


@pytest.mark.parametrize("precision", ["i16", "i24"])
def test_integer_paths_zero_activation_row_gives_exact_zeros(precision):
    q = q5k_matrix(7, 512, seed=1)
    y = lmtail.ops.matvec_q5_k(q, np.zeros((2, 512), np.float32), precision=precision)
    assert np.array_equal(bits(y), np.zeros_like(bits(y)))


def test_i24_is_f32_grade():
    # The default CPU precision must be at least as accurate as f32 arithmetic (normwise, against
    # float64, on quantised Gaussian weights and Gaussian x; both on the same data here).
    q = q5k_matrix(600, 6656, seed=12)
    x = np.random.default_rng(13).standard_normal((3, 6656)).astype(np.float32)
    ref, _ = reference_matvec(q, x)
    err = {p: np.linalg.norm(lmtail.ops.matvec_q5_k(q, x, precision=p) - ref) / np.linalg.norm(ref)
           for p in PRECISIONS}
    assert err["i24"] <= err["f32"], err
    assert err["i24"] < 1e-6 and err["i16"] > 1e-5, err
    assert lmtail.ops.default_precision("cpu") == "i24"


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_activation_poisons_only_its_row(bad, precision):
    # Head and greedy rely on this: a non-finite x makes every logit of its row non-finite
    # (i16: the block's scale becomes NaN), and the other rows are unchanged.
    q = q5k_matrix(40, 768, seed=2)
    x = np.random.default_rng(5).standard_normal((3, 768)).astype(np.float32)
    clean = lmtail.ops.matvec_q5_k(q, x, precision=precision)
    x[1, 300] = bad
    for isa in available_isas():
        y = lmtail.ops.matvec_q5_k(q, x, precision=precision, isa=isa)
        assert not np.isfinite(y[1]).any()
        assert np.array_equal(bits(y[[0, 2]]), bits(clean[[0, 2]]))


def test_i16_close_to_f32():
    q = q5k_matrix(500, 6656, seed=4)
    x = np.random.default_rng(9).standard_normal((4, 6656)).astype(np.float32)
    a = lmtail.ops.matvec_q5_k(q, x, precision="f32")
    b = lmtail.ops.matvec_q5_k(q, x, precision="i16")
    assert np.linalg.norm(a - b) <= 1e-4 * np.linalg.norm(a)


@pytest.mark.slow
def test_full_size_head_202048x6656():
    s = slab()
    w = tiled_head(202048, s)
    x = np.random.default_rng(11).standard_normal((3, 6656)).astype(np.float32)
    ref, mag = reference_matvec(s, x)  # the head is the slab tiled, so is its reference
    reps = -(-202048 // s.shape[0])
    ref = np.tile(ref, (1, reps))[:, :202048]
    mag = np.tile(mag, (1, reps))[:, :202048]
    for precision in PRECISIONS:
        y = lmtail.ops.matvec_q5_k(w, x, precision=precision)
        extra = np.tile(extra_bound(s, x, precision), (1, reps))[:, :202048] if precision != "f32" else 0.0
        assert np.all(np.abs(y - ref) <= extra + BOUND * mag + 1e-30)
        assert np.array_equal(bits(y[1]), bits(lmtail.ops.matvec_q5_k(w, x[1], precision=precision)))


def test_errors():
    q = q5k_matrix(4, 256)
    with pytest.raises(lmtail.ShapeError):
        lmtail.ops.matvec_q5_k(q, np.ones(512, np.float32))
    with pytest.raises(lmtail.DTypeError):
        lmtail.ops.matvec_q5_k(q, np.ones(256, np.float64))
    with pytest.raises(lmtail.DTypeError):
        lmtail.ops.matvec_q5_k(q.view(np.int8), np.ones(256, np.float32))
    with pytest.raises(lmtail.ShapeError):
        lmtail.ops.matvec_q5_k(q[:, :100], np.ones(256, np.float32))
    with pytest.raises(lmtail.ShapeError):
        lmtail.ops.matvec_q5_k(q, np.ones((2, 2, 256), np.float32))
    with pytest.raises(lmtail.BackendError):
        lmtail.ops.matvec_q5_k(q, np.ones(256, np.float32), backend="nope")
    with pytest.raises(lmtail.ParameterError):
        lmtail.ops.matvec_q5_k(q, np.ones(256, np.float32), threads=0)
    with pytest.raises(ValueError):
        lmtail.ops.matvec_q5_k(q, np.ones(256, np.float32), isa="sse9")
    with pytest.raises(lmtail.ParameterError):
        lmtail.ops.matvec_q5_k(q, np.ones(256, np.float32), precision="f16")
    with pytest.raises(ValueError):
        lmtail._core.matvec_q5_k(q, 256, np.ones((1, 256), np.float32), np.empty((1, 4), np.float32), 1, "auto", "i8")
    for backend in lmtail.backends():
        if backend != "cpu":  # the other backends implement f32 activations only
            assert lmtail.ops.default_precision(backend) == "f32"
            for p in ("i16", "i24"):
                with pytest.raises(lmtail.UnsupportedError):
                    lmtail.ops.matvec_q5_k(q, np.ones(256, np.float32), backend=backend, precision=p)


# ---- i24 with activation outliers ----------------------------------------------------------
# i24 holds x to ~max|x_block| * 2^-24 per element: with a few 100-1000x elements per block the
# ordinary elements keep few significant bits, and weights large where x is ordinary (outlier
# channels of W and x in different columns) reached 1.5e-5 normwise. Such elements are taken out
# and added back in f32, or the row takes the f32 kernel (cpu/i24_outliers.hpp); the decision reads
# only that row of x.
SPIKE_RATIOS = [1, 10, 30, 100, 300, 1000, 10000]


def spike_case(ratio, spiky_w, per_block, rows=96, cols=1024, T=3, seed=21):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)) * 0.02
    if spiky_w:
        w[:, ::97] *= 300.0
    x = rng.standard_normal((T, cols))
    # ~per_block spikes per 256-block, never on a spiky weight column (::97): the logits are then
    # dominated by ordinary x elements, whose relative precision is what i24 loses.
    x[:, 37 :: (256 if per_block == 1 else 61)] *= ratio
    return lmtail.quantize_q5_k(w.astype(np.float32)), x.astype(np.float32)


@pytest.mark.parametrize("per_block", [1, 4])
@pytest.mark.parametrize("spiky_w", [False, True])
@pytest.mark.parametrize("ratio", SPIKE_RATIOS)
def test_i24_activation_spikes_normwise(ratio, spiky_w, per_block):
    q, x = spike_case(ratio, spiky_w, per_block)
    ref, _ = reference_matvec(q, x)
    for precision in ("i24", None):  # None: the default precision
        y = lmtail.ops.matvec_q5_k(q, x, precision=precision).astype(np.float64)
        err = np.linalg.norm(y - ref, axis=1) / np.linalg.norm(ref, axis=1)
        assert err.max() <= 1e-6, (precision, err)


def mixed_spike_batch(cols=1024):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, cols))
    x[1, ::61] *= 1e3
    x[4, 300] *= 1e4  # one outlier: taken out and added back (test_i24_outliers.py)
    return x.astype(np.float32)


def test_i24_spiky_rows_route_and_batch_stays_invariant():
    q = q5k_matrix(130, 1024, seed=9)
    x = mixed_spike_batch()
    f32 = lmtail.ops.matvec_q5_k(q, x, precision="f32")
    for threads in (1, 2):
        got = lmtail.ops.matvec_q5_k(q, x, precision="i24", threads=threads)
        for t in range(x.shape[0]):
            one = lmtail.ops.matvec_q5_k(q, x[t], precision="i24", threads=threads)
            assert np.array_equal(bits(got[t]), bits(one)), (threads, t)
        assert np.array_equal(bits(got[1]), bits(f32[1]))  # too many outliers in a block: f32
        assert not np.array_equal(bits(got[4]), bits(f32[4]))  # one outlier: taken out, i24
        assert not np.array_equal(bits(got[0]), bits(f32[0]))  # ordinary rows keep i24
    # Any subset / order of the batch gives each row the same bytes.
    sub = lmtail.ops.matvec_q5_k(q, x[[4, 0, 1]], precision="i24")
    assert np.array_equal(bits(sub), bits(got[[4, 0, 1]]))


@pytest.mark.parametrize("isa", ["avx2", "avx_vnni", "avx512", "neon", "neon_dotprod"])
def test_i24_mixed_spike_batch_simd_equals_scalar(isa):
    if not lmtail._core.isa_available(isa):
        pytest.skip(f"{isa} not available on this machine")
    q = q5k_matrix(130, 1024, seed=9)
    x = mixed_spike_batch()
    ref = lmtail.ops.matvec_q5_k(q, x, precision="i24", isa="scalar")
    got = lmtail.ops.matvec_q5_k(q, x, precision="i24", isa=isa, threads=2)
    assert np.array_equal(bits(got), bits(ref))
