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


CUDA_TYPES = lmtail.capabilities()["cuda"]["matvec"]["dtypes"]
BLOCK = {r["name"]: r["block_elems"] for r in lmtail._core.cpu_types()}


def test_type_table_is_the_kernel_table():
    # The capability table's cuda column lists exactly the types csrc/cuda/mul_mv.cu runs.
    ids = {r["name"]: r["id"] for r in lmtail._core.cpu_types()}
    assert sorted(ids[n] for n in CUDA_TYPES) == sorted(lmtail._core.cuda.types())
    assert set(CUDA_TYPES) == {"Q6_K", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "F16", "BF16", "F32"}
    assert lmtail.capabilities()["cuda"]["matvec"]["batch_invariant"] is True


def _weights(dtype, rows, cols, seed):
    w = (np.random.default_rng(seed).standard_normal((rows, cols)) * 0.02).astype(np.float32)
    return lmtail.quantize(w, dtype)


def _reference(q, dtype, x):
    w = lmtail.dequantize(q, dtype).astype(np.float64)
    x64 = x.astype(np.float64)
    return x64 @ w.T, np.abs(x64) @ np.abs(w).T


def _awkward_cols(dtype):
    return (768, 1280, 6656) if BLOCK[dtype] == 256 else (640, 896, 6688)


@pytest.mark.parametrize("dtype", CUDA_TYPES)
def test_matvec_every_type_awkward_shapes_batch_invariant(dtype):
    # Every type against float64 of its dequantised weights: per logit within 4e-6 of sum |w x|
    # (a handful of rows can cancel), normwise <= 1e-6 on 1000+ rows; T = 1 .. 15 alone give the
    # T = 16 batch's rows byte for byte (batch invariance), on awkward rows and cols.
    for cols in _awkward_cols(dtype):
        for rows in (1, 9, 13, 1003):
            q = _weights(dtype, rows, cols, seed=rows + cols)
            x = (np.random.default_rng(cols).standard_normal((16, cols)) * 2).astype(np.float32)
            x[:, ::97] *= 40  # a few large activations
            y = ops.matvec(q, x, dtype, backend="cuda")
            ref, mag = _reference(q, dtype, x)
            assert np.all(np.abs(y - ref) <= 4e-6 * mag + 1e-30), (dtype, rows, cols)
            if rows >= 1000:
                assert np.linalg.norm(y - ref) <= 1e-6 * np.linalg.norm(ref), (dtype, rows, cols)
            for n in (1, 2, 3, 5, 8, 9, 15):
                assert np.array_equal(bits(ops.matvec(q, x[:n], dtype, backend="cuda")), bits(y[:n])), (dtype, n)
            assert np.array_equal(bits(ops.matvec(q, x[11], dtype, backend="cuda")), bits(y[11]))
            assert np.array_equal(bits(ops.matvec(q, x, dtype, backend="cuda")), bits(y))  # deterministic


@pytest.mark.parametrize("dtype", ["Q4_0", "Q6_K", "BF16"])
def test_matvec_full_vocabulary_rows(dtype):
    # 202048 rows (a tiled 4096-row slab): the grid's last CTA and the row clamp.
    cols = 256
    s = _weights(dtype, 4096, cols, seed=1)
    q = np.tile(s, (-(-202048 // 4096), 1))[:202048]
    x = np.random.default_rng(2).standard_normal((3, cols)).astype(np.float32)
    y = ops.matvec(q, x, dtype, backend="cuda")
    ref, _ = _reference(s, dtype, x)
    want = np.tile(ref, (1, -(-202048 // 4096)))[:, :202048]
    assert np.linalg.norm(y - want) <= 1e-6 * np.linalg.norm(want)
    assert np.array_equal(bits(ops.matvec(q, x[2], dtype, backend="cuda")), bits(y[2]))


@pytest.mark.parametrize("dtype", CUDA_TYPES)
def test_matvec_nonfinite(dtype):
    # A non-finite activation gives non-finite logits in its row (so the greedy latch fires), and
    # only in its row.
    cols = 1280 if BLOCK[dtype] == 256 else 640
    q = _weights(dtype, 37, cols, seed=5)
    x = np.random.default_rng(6).standard_normal((2, cols)).astype(np.float32)
    for col, val in ((cols // 2 + 3, np.inf), (3, -np.inf), (cols - 1, np.nan)):
        xb = x.copy()
        xb[1, col] = val
        b = ops.matvec(q, xb, dtype, backend="cuda")
        assert not np.isfinite(b[1]).any() and np.isfinite(b[0]).all()


def test_matvec_nonfinite_block_scale():
    q = q5k_matrix(37, 1280, seed=5)
    x = np.random.default_rng(6).standard_normal((1, 1280)).astype(np.float32)
    qb = q.copy()
    qb[11, 176 * 2 : 176 * 2 + 2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)  # d of row 11, block 2
    a = ops.matvec_q5_k(qb, x, precision="f32")
    b = ops.matvec_q5_k(qb, x, backend="cuda")
    assert np.array_equal(np.isfinite(a), np.isfinite(b)) and not np.isfinite(b[0, 11])


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32"])
def test_float_cols_not_multiple_of_8_refused(dtype):
    # The cuda kernels read 8 float weights per lane: other cols are a ShapeError (matvec and Head),
    # never a wrong result.
    w = np.zeros((3, 12), {"F16": np.float16, "BF16": np.uint16, "F32": np.float32}[dtype])
    with pytest.raises(lmtail.ShapeError, match="multiple of 8"):
        ops.matvec(w, np.ones(12, np.float32), dtype, backend="cuda")
    with pytest.raises(lmtail.ShapeError, match="multiple of 8"):
        lmtail.Head(w, None, dtype=dtype, backend="cuda")


@pytest.mark.parametrize("dtype", CUDA_TYPES)
def test_head_every_type(dtype):
    # Head(backend="cuda", dtype=...) against the CPU head at f32 on every route, the exclusion
    # (ignore-eos) path, the latch on a non-finite hidden value, and batch invariance of greedy.
    cols = 768 if BLOCK[dtype] == 256 else 640
    q = _weights(dtype, 3001, cols, seed=7)
    g = np.random.default_rng(1).uniform(0.8, 1.2, cols).astype(np.float32)
    prec = "f32" if "f32" in lmtail.capabilities()["cpu"]["matvec"]["by_dtype"][dtype]["precisions"] else None
    cpu = lmtail.Head(q, g, logit_scale=0.25, softcap=15.0, dtype=dtype, precision=prec)
    gpu = lmtail.Head(q, g, logit_scale=0.25, softcap=15.0, dtype=dtype, backend="cuda", eog_ids=[5, 17])
    h = (np.random.default_rng(3).standard_normal((5, cols)) * 3).astype(np.float32)
    la, lb = cpu.logits(h).copy(), gpu.logits(h).copy()
    assert np.max(np.abs(la - lb)) <= 1e-4
    top2 = np.sort(la, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-3
    gb = gpu.greedy(h)
    assert np.array_equal(cpu.greedy(h)[clear], gb[clear])
    assert np.array_equal(gb, np.argmax(lb, axis=1))
    for t in range(5):  # one token alone = its row of the batch
        assert gpu.greedy(h[t : t + 1])[0] == gb[t]
        assert np.array_equal(bits(gpu.logits(h[t : t + 1])[0]), bits(lb[t]))
    excl = [int(i) for i in gb[:2]] + [5, 17]
    ge = gpu.greedy(h, exclude=excl)
    masked = lb.copy()
    masked[:, excl] = -np.inf
    assert np.array_equal(ge, np.argmax(masked, axis=1)) and not set(ge.tolist()) & set(excl)
    ib, vb = gpu.topk(h, 40)
    assert np.array_equal(ib[:, 0], gb)
    bad = h.copy()
    bad[2, 5] = np.inf
    for route in (lambda: gpu.greedy(bad), lambda: gpu.topk(bad, 5), lambda: gpu.logits(bad)):
        with pytest.raises(lmtail.NonFiniteLogitsError):
            route()


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


def _topk_ref(logits, k):
    order = np.lexsort((np.arange(logits.shape[1])[None, :].repeat(len(logits), 0), -logits), axis=1)[:, :k]
    return order.astype(np.uint32), np.take_along_axis(logits, order, 1)


@pytest.mark.parametrize("softcap", [15.0, 0.0])
def test_routes_follow_shapes_masks_and_growth(softcap):
    # Routes B and C on one head over calls whose T, k and exclusion change (buffers that grow,
    # top-k scratch resized, the fused cap path and the scale-only path): each call equals the
    # argmax / canonical top-k of route A's rows for the same hidden rows.
    q = _weights("Q6_K", 2001, 512, seed=11)
    g = np.random.default_rng(2).uniform(0.8, 1.2, 512).astype(np.float32)
    head = lmtail.Head(q, g, logit_scale=0.5, softcap=softcap, dtype="Q6_K", backend="cuda")
    rng = np.random.default_rng(5)
    for T, k, excl in ((1, 5, None), (3, 40, [7]), (1, 5, [7, 9]), (9, 5, None), (2, 300, None), (1, 40, None),
                       (9, 300, [1, 2, 3]), (3, 40, [7])):
        h = (rng.standard_normal((T, 512)) * 3).astype(np.float32)
        full = head.logits(h).copy()
        masked = full.copy()
        if excl:
            masked[:, excl] = -np.inf
        assert np.array_equal(head.greedy(h, exclude=excl), np.argmax(masked, axis=1))
        assert np.array_equal(bits(head.row(T - 1)), bits(full[T - 1]))  # greedy left the capped rows
        ids, vals = head.topk(h, k)
        want_ids, want_vals = _topk_ref(full, k)
        assert np.array_equal(ids, want_ids) and np.array_equal(bits(vals), bits(want_vals))


def test_heads_on_concurrent_streams_select_like_alone():
    # The selection kernels count arriving blocks in device globals: heads used from two threads on
    # two streams must still give what each gives alone (lmt::cuda::selection_lock serialises them).
    torch = pytest.importorskip("torch", reason="needs PyTorch for two CUDA streams")
    import threading

    heads, want = [], []
    for seed in (1, 2):
        q = _weights("Q5_K", 3001, 768, seed=seed)
        heads.append(lmtail.Head(q, dtype="Q5_K", backend="cuda", softcap=10.0))
    hs = [(np.random.default_rng(t).standard_normal((4, 768)) * 3).astype(np.float32) for t in range(6)]
    for hd in heads:
        want.append([(hd.greedy(h), *hd.topk(h, 40)) for h in hs])
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                for j, h in enumerate(hs):
                    g = heads[i].greedy(h, stream=streams[i].cuda_stream)
                    ids, vals = heads[i].topk(h, 40, stream=streams[i].cuda_stream)
                    w = want[i][j]
                    assert np.array_equal(g, w[0]) and np.array_equal(ids, w[1]) and np.array_equal(vals, w[2])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


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
