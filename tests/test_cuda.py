"""CUDA backend against the CPU backend (runs only where lmtail was built with LMTAIL_CUDA=ON and a
GPU is present: on the lent H200 through the device tool; skips visibly elsewhere)."""

import numpy as np
import pytest

import lmtail
from lmtail import ops
from _util import bits, q5k_matrix, slab, tiled_head

pytestmark = pytest.mark.skipif(
    "cuda" not in lmtail.backends(),
    reason="CUDA backend not available (build with LMTAIL_CUDA=ON on a machine with an NVIDIA GPU)",
)

# Per-op bounds against the CPU backend: the matvec sums in a different order (warp tree vs
# 16-lane chains), relative L2 <= 2e-6; CUDA's tanhf differs from glibc's by at most 2 ulp.
MATVEC_REL = 2e-6


@pytest.mark.parametrize(
    "rows,cols,T",
    [(1, 256, 1), (7, 256, 3), (99, 6656, 8), (4097, 6656, 1), (4097, 1536, 9), (13, 768, 1), (9, 1280, 1)],
)
def test_matvec_and_norm(rows, cols, T):
    q = q5k_matrix(rows, cols, seed=rows)
    x = np.random.default_rng(T).standard_normal((T, cols)).astype(np.float32)
    a = ops.matvec_q5_k(q, x, precision="f32")  # the CPU reference CUDA reproduces
    b = ops.matvec_q5_k(q, x, backend="cuda")
    assert np.linalg.norm(a - b) <= MATVEC_REL * np.linalg.norm(a) + 1e-30
    g = np.random.default_rng(0).uniform(0.5, 1.5, cols).astype(np.float32)
    assert np.allclose(ops.rms_norm(x, g), ops.rms_norm(x, g, backend="cuda"), rtol=1e-6, atol=1e-7)


def _close_elementwise(a, b, q, x):
    # |a - b| <= MATVEC_REL * (|W| @ |x|) per logit: the normwise bound is meaningless on a handful
    # of rows, where one cancelling dot product (|sum w x| << sum |w x|) dominates the norm.
    scale = np.abs(lmtail.dequantize_q5_k(q).astype(np.float64)) @ np.abs(x.astype(np.float64)).T
    return bool(np.all(np.abs(a.astype(np.float64) - b).T <= MATVEC_REL * scale))


@pytest.mark.parametrize("variant", ["i16p2", "i16b1", "s16b1", "a", "v1"])
@pytest.mark.parametrize("rows,cols", [(1, 256), (13, 768), (9, 1280), (1003, 6656)])
def test_matvec_t1_variants(monkeypatch, variant, rows, cols):
    # T = 1 has its own kernels (v4 i16p2 default, v3 s16b1: 2-row streams walked 4 blocks per step,
    # ragged when 2 * cols / 256 is not a multiple of 4 or rows not of 8); every variant must stay
    # within the same bound of the CPU's f32 result, and give the same bytes twice.
    monkeypatch.setenv("LMTAIL_CUDA_MMV", variant)
    q = q5k_matrix(rows, cols, seed=rows + cols)
    x = (np.random.default_rng(cols).standard_normal((1, cols)) * 3).astype(np.float32)
    x[0, ::17] *= 50  # a few large activations: per-block scales on the integer path
    a = ops.matvec_q5_k(q, x, precision="f32")
    b = ops.matvec_q5_k(q, x, backend="cuda")
    assert _close_elementwise(a, b, q, x)
    if rows >= 1000:
        assert np.linalg.norm(a - b) <= MATVEC_REL * np.linalg.norm(a)
    assert np.array_equal(bits(b), bits(ops.matvec_q5_k(q, x, backend="cuda")))


@pytest.mark.parametrize("variant", ["i16p2", "s16b1", "a"])
def test_matvec_t1_nonfinite(monkeypatch, variant):
    # Non-finite activations (any block) or block scales must give non-finite logits where the CPU's
    # are, so the greedy latch fires; the integer path carries them through its per-block scale.
    monkeypatch.setenv("LMTAIL_CUDA_MMV", variant)
    q = q5k_matrix(37, 1280, seed=5)
    x = np.random.default_rng(6).standard_normal((1, 1280)).astype(np.float32)
    for col, val in ((700, np.inf), (3, -np.inf), (1279, np.nan)):
        xb = x.copy()
        xb[0, col] = val
        a = ops.matvec_q5_k(q, xb, precision="f32")
        b = ops.matvec_q5_k(q, xb, backend="cuda")
        assert np.array_equal(np.isfinite(a), np.isfinite(b)) and not np.isfinite(b).any()
    qb = q.copy()
    qb[11, 176 * 2 : 176 * 2 + 2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)  # d of row 11, block 2
    a = ops.matvec_q5_k(qb, x, precision="f32")
    b = ops.matvec_q5_k(qb, x, backend="cuda")
    assert np.array_equal(np.isfinite(a), np.isfinite(b)) and not np.isfinite(b[0, 11])
    keep = np.arange(37) != 11
    assert _close_elementwise(a[:, keep], b[:, keep], qb[keep], x)


@pytest.mark.parametrize("n", [1, 7, 99, 1024, 4097, 202048])
def test_selection_identical_on_identical_inputs(n):
    rng = np.random.default_rng(n)
    x = rng.integers(-30, 30, (3, n)).astype(np.float32)  # ties everywhere
    assert np.array_equal(ops.argmax(x), ops.argmax(x, backend="cuda"))
    assert np.array_equal(ops.greedy_argmax(x), ops.greedy_argmax(x, backend="cuda"))
    if n > 1:
        excl = [int(ops.argmax(x[0]))]
        assert np.array_equal(ops.greedy_argmax(x, exclude=excl), ops.greedy_argmax(x, exclude=excl, backend="cuda"))
    k = min(n, 40)
    ia, va = ops.topk(x, k)
    ib, vb = ops.topk(x, k, backend="cuda")
    assert np.array_equal(ia, ib) and np.array_equal(bits(va), bits(vb))
    x[1, n // 2] = np.nan
    with pytest.raises(lmtail.NonFiniteLogitsError):
        ops.greedy_argmax(x, backend="cuda")


@pytest.mark.parametrize(
    "rows,n,k",
    [(3, 1, 1), (3, 5, 5), (3, 4097, 1), (3, 4097, 2048), (3, 8193, 300), (2, 202047, 41), (3, 202048, 1),
     (3, 202048, 40), (2, 202048, 459), (2, 202048, 460), (2, 202048, 2048), (1030, 300, 5)],
)
def test_topk_range_identical(rows, n, k):
    # The radix-select path (k up to 459 at n = 202048), the bitonic fallback above it, and more
    # rows than one launch's arrival counters: ids and value bits equal the CPU's on distinct
    # values, ties, and rows mixing NaN, +-inf and -0.0.
    rng = np.random.default_rng(rows * 7 + n + k)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x[1::3] = np.round(x[1::3] * 4)
    if rows > 2:
        x[2::3, ::7] = np.nan
        x[2::3, 1::11] = -0.0
        x[2::3, 3::13] = np.inf
        x[2::3, 5::17] = -np.inf
    if rows > 2 and n > 2:  # a row whose k-th key is -inf or NaN (value byte 0 in the radix passes)
        x[0, :] = np.nan
        x[0, 1::3] = -np.inf
        x[0, 2 : min(n, k // 2 + 1)] = 1.0
    for _ in range(2):  # twice: the per-row arrival counters must be left at zero
        ia, va = ops.topk(x, k)
        ib, vb = ops.topk(x, k, backend="cuda")
        assert np.array_equal(ia, ib) and np.array_equal(bits(va), bits(vb))


def test_softcap_within_bound():
    x = (np.random.default_rng(1).standard_normal(202048) * 100).astype(np.float32)
    a = ops.softcap(x, 0.196116, 20.0)
    b = ops.softcap(x, 0.196116, 20.0, backend="cuda")
    assert np.max(np.abs(a - b)) <= 4 * np.spacing(np.float32(20.0))


def test_head_routes_full_size():
    s = slab()
    w = tiled_head(202048, s)
    g = np.random.default_rng(2).uniform(0.8, 1.2, 6656).astype(np.float32)
    cpu = lmtail.Head(w, g, logit_scale=0.196116, softcap=20.0, precision="f32")
    gpu = lmtail.Head(w, g, logit_scale=0.196116, softcap=20.0, backend="cuda")
    h = (np.random.default_rng(3).standard_normal((4, 6656)) * 2).astype(np.float32)
    la = cpu.logits(h).copy()
    lb = gpu.logits(h).copy()
    assert np.max(np.abs(la - lb)) <= 1e-4
    # greedy / top-k must agree wherever the top margin exceeds the logit bound
    top2 = np.sort(la, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-3
    ga, gb = cpu.greedy(h), gpu.greedy(h)
    assert np.array_equal(ga[clear], gb[clear])
    ia, _ = cpu.topk(h, 40)
    ib, _ = gpu.topk(h, 40)
    assert np.array_equal(ia[clear, 0], ib[clear, 0])
    bad = h.copy()
    bad[2, 5] = np.inf
    with pytest.raises(lmtail.NonFiniteLogitsError):
        gpu.greedy(bad)


def test_routes_count_bytes_and_row_on_the_device():
    # Head.row(t) reads one row back from the device; every route's count equals the device's own.
    from lmtail.sampling import TopKRows, common_chain, topk_needed

    q = q5k_matrix(5000, 512, seed=3)
    g = np.random.default_rng(0).uniform(0.5, 1.5, 512).astype(np.float32)
    head = lmtail.Head(q, g, logit_scale=0.25, softcap=15.0, backend="cuda")
    h = (np.random.default_rng(1).standard_normal((3, 512)) * 4).astype(np.float32)
    dev = head._device
    full = head.logits(h).copy()
    # greedy: 4 bytes per row (the kernel latches, caps and reduces); top-k and whole rows also
    # read the 4-byte pre-cap latch of each row
    for call, want in ((lambda: head.greedy(h), 4 * 3), (lambda: head.topk(h, 41), 8 * 41 * 3 + 4 * 3),
                       (lambda: head.logits(h), 4 * 5000 * 3 + 4 * 3), (lambda: head.row(2), 4 * 5000)):
        before = dev.bytes_read_back
        call()
        assert head.last_bytes_read_back == want == dev.bytes_read_back - before
    assert np.array_equal(head.row(1), full[1])
    head.greedy(h)
    assert np.array_equal(head.row(0), full[0])  # the greedy route leaves capped logits behind
    # A non-finite pre-cap logit (an fp16 +inf block scale; tanh would hide it) fails the greedy
    # route in its one kernel, and leaves no row to hand out.
    qb = q.copy()
    qb[7, 0:2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)
    hb = lmtail.Head(qb, g, logit_scale=0.25, softcap=15.0, backend="cuda")
    for route in (lambda: hb.greedy(h), lambda: hb.topk(h, 5), lambda: hb.logits(h)):
        with pytest.raises(lmtail.NonFiniteLogitsError):
            route()
        with pytest.raises(lmtail.ParameterError):
            hb.row(0)
    a, b = common_chain(5000, seed=4), common_chain(5000, seed=4)
    ids, vals = head.topk(h, topk_needed(b) + 1)
    src = TopKRows(ids, vals, head.row)
    for t in range(3):
        ta, tb = a.sample(full[t]), src.sample(b, t)
        assert ta == tb
        a.accept(ta)
        b.accept(tb)


def test_route_a_lands_in_pinned_memory_and_results_are_fresh():
    # Route A's D2H copy targets the calling thread's page-locked staging rows (the same rows call
    # after call); what the caller gets is a fresh array (or its out= buffer), never those rows,
    # and growing T reallocates them, still pinned.
    from lmtail import _core

    q = q5k_matrix(3000, 512, seed=5)
    head = lmtail.Head(q, None, logit_scale=0.5, softcap=10.0, backend="cuda", max_tokens=2)
    cpu = lmtail.Head(q, None, logit_scale=0.5, softcap=10.0, precision="f32")
    assert _core.cuda.host_memory_kind(head._tls.staging) == "pinned"
    assert _core.cuda.host_memory_kind(np.empty(1024, np.float32)) == "pageable"
    rng = np.random.default_rng(6)
    h1, h2 = (rng.standard_normal((2, 2, 512)) * 3).astype(np.float32)
    v1 = head.logits(h1)
    addr = head._tls.staging.ctypes.data
    want1 = cpu.logits(h1)
    assert np.linalg.norm(v1 - want1) <= MATVEC_REL * np.linalg.norm(want1)
    keep = v1.copy()
    out = np.empty((2, 3000), np.float32)
    v2 = head.logits(h2, out=out)
    assert v2 is out and head._tls.staging.ctypes.data == addr
    assert np.array_equal(v1, keep) and not np.shares_memory(v1, v2)  # v1 was not refilled
    want2 = cpu.logits(h2)
    assert np.linalg.norm(v2 - want2) <= MATVEC_REL * np.linalg.norm(want2)
    head.logits(np.concatenate([h1, h2]))  # T = 4 > max_tokens: new buffers, still pinned
    assert _core.cuda.host_memory_kind(head._tls.staging) == "pinned"
    pinned = _core.cuda.pinned_empty(3, 5)
    assert pinned.shape == (3, 5) and pinned.dtype == np.float32 and pinned.flags.writeable
    with pytest.raises(lmtail.ParameterError):
        _core.cuda.pinned_empty(-1, 5)


def test_norm_overflow_fails_closed_on_the_device():
    # issue 18 item 1: one huge finite hidden value overflows the mean of squares; the kernel
    # poisons the row with NaN (it would otherwise normalise to zeros: every logit 0, greedy 0),
    # so every route's latch refuses it, and the host names the overflow.
    q = q5k_matrix(2000, 512, seed=8)
    g = np.random.default_rng(1).uniform(0.5, 1.5, 512).astype(np.float32)
    for cap in (15.0, 0.0):
        head = lmtail.Head(q, g, logit_scale=0.25, softcap=cap, backend="cuda")
        h = (np.random.default_rng(2).standard_normal((3, 512)) * 2).astype(np.float32)
        ok = head.greedy(h)
        for v in (1e21, 3e38, -2e19):
            bad = h.copy()
            bad[1, 40] = v
            for route in (lambda: head.greedy(bad), lambda: head.topk(bad, 5), lambda: head.logits(bad)):
                with pytest.raises(lmtail.NonFiniteLogitsError, match="overflowed"):
                    route()
            with pytest.raises(lmtail.NonFiniteLogitsError, match="row 1"):
                ops.rms_norm(bad, g, backend="cuda")
        assert np.array_equal(head.greedy(h), ok)  # the head still works
        big = h.copy()
        big[1, 40] = 1e18  # squares finite: no overflow, same result as the CPU
        assert np.allclose(ops.rms_norm(big, g, backend="cuda"), ops.rms_norm(big, g), rtol=1e-6, atol=1e-7)


def test_bindings_reject_wrong_operands():
    # The CUDA bindings check every array they copy to or from (one set of checks with the CPU
    # and Metal bindings): a wrong output shape or an out-of-range id raises, never writes past.
    from lmtail import _core

    c = _core.cuda
    x = np.ones((2, 5), np.float32)
    with pytest.raises(lmtail.ParameterError, match="out: expected shape"):
        c.argmax_rows(x, np.zeros(3, np.uint32), 0)
    with pytest.raises(lmtail.ParameterError, match="out of range"):
        c.greedy_argmax_rows(x, np.array([7], np.uint32), np.zeros(2, np.uint32), 0)
    with pytest.raises(lmtail.ParameterError, match="ids: expected shape"):
        c.topk_rows(x, 2, np.zeros((2, 3), np.uint32), np.zeros((2, 2), np.float32), 0)
