"""lmtail.ShardedHead and lmtail.sharding: a head split by rows over N shards equals the unsharded
Head byte for byte (greedy, top-k, logits, row), fails closed as a whole, and the merge of
per-shard / per-rank candidates is exact (pure function; torch.distributed over gloo)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import lmtail
from lmtail.errors import BackendError, NonFiniteLogitsError, ParameterError, ShapeError
from lmtail.sampling import TopKRows, common_chain, topk_needed
from lmtail.sampling.topk_route import STATS
from lmtail.sharding import merge_greedy, merge_topk, selection_keys

ROWS, COLS = 1000, 256
KW = dict(logit_scale=0.196116, softcap=20.0)

# N = 1, 2, 3, 7; uneven; a one-row shard; a shard smaller than the k tested (40).
SPLITS = [
    [0, ROWS],
    [0, 500, ROWS],
    [0, 1, 999, ROWS],
    [0, 3, 200, 201, 640, 641, 997, ROWS],
    [0, 17, ROWS],
]


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def weight(dtype: str, rows: int = ROWS, cols: int = COLS, seed: int = 0) -> np.ndarray:
    w = (np.random.default_rng(seed).standard_normal((rows, cols)) * 0.05).astype(np.float32)
    return lmtail.quantize(w, dtype)


def gamma(cols: int = COLS) -> np.ndarray:
    return np.random.default_rng(1).uniform(0.5, 1.5, cols).astype(np.float32)


def hidden(T: int, seed: int = 0, cols: int = COLS) -> np.ndarray:
    return (np.random.default_rng(100 + seed).standard_normal((T, cols)) * 4).astype(np.float32)


def pair(dtype="Q5_K", splits=(0, 500, ROWS), q=None, norm="gamma", **kw):
    q = weight(dtype) if q is None else q
    g = gamma(q.shape[1] if q.dtype != np.uint8 else COLS) if norm == "gamma" else None
    kw = {**KW, **kw}
    return lmtail.Head(q, g, dtype=dtype, **kw), lmtail.ShardedHead(q, g, splits=list(splits), dtype=dtype, **kw), q


def assert_same(H, S, h, ks=(1, 10, 40)):
    T = h.shape[0] if h.ndim == 2 else 1
    assert np.array_equal(H.greedy(h), S.greedy(h))
    for k in ks:
        ia, va = H.topk(h, k)
        ib, vb = S.topk(h, k)
        assert ib.dtype == np.uint32 and vb.dtype == np.float32 and ib.shape == (T, k)
        assert np.array_equal(ia, ib) and np.array_equal(bits(va), bits(vb)), k
        for t in range(T):
            assert np.array_equal(bits(H.row(t)), bits(S.row(t)))
    la, lb = H.logits(h), S.logits(h)
    assert np.array_equal(bits(la), bits(lb))


@pytest.mark.parametrize("splits", SPLITS, ids=lambda s: f"N{len(s) - 1}")
@pytest.mark.parametrize("dtype", ["Q5_K", "Q6_K", "Q8_0", "F16"])
def test_equals_unsharded_head(dtype, splits):
    H, S, _ = pair(dtype, splits)
    assert (S.rows, S.cols, S.dtype, len(S.shards)) == (ROWS, COLS, dtype, len(splits) - 1)
    assert S.splits == tuple(splits) and S.backends == ("cpu",) * (len(splits) - 1)
    for T in (1, 5):
        assert_same(H, S, hidden(T, seed=T))
    assert_same(H, S, hidden(1, seed=9)[0])  # a 1-D hidden row


def test_precision_and_no_norm_pass_through():
    for prec in ("f32", "i16"):
        H, S, _ = pair("Q5_K", SPLITS[2], precision=prec)
        assert S.precision == prec
        assert_same(H, S, hidden(3, seed=4), ks=(7,))
    H, S, _ = pair("Q8_0", SPLITS[3], norm=None)
    assert_same(H, S, hidden(2, seed=5), ks=(7,))


def test_byte_counters_per_shard():
    H, S, _ = pair("Q8_0", SPLITS[2])
    h = hidden(4)
    S.greedy(h)
    # greedy: each shard's token (4 bytes per row); its logit is read from the shard's own rows
    assert S.last_shard_bytes_read_back == (16, 16, 16)
    S.topk(h, 40)
    assert S.last_shard_bytes_read_back == (8 * 4 * 1, 8 * 4 * 40, 8 * 4 * 1)  # min(k, shard rows)
    assert S.last_bytes_read_back == sum(S.last_shard_bytes_read_back)
    S.row(2)
    assert S.last_shard_bytes_read_back == (4, 4 * 998, 4)
    assert S.bytes_read_back == sum(S.shard_bytes_read_back) == 48 + 8 * 4 * 42 + 4 * ROWS
    t = S.last_timings
    assert set(t) >= {"shards", "merge", "per_shard"} and len(t["per_shard"]) == 3


def tie_weight(rows=ROWS, cols=COLS, at=(98, 99, 100, 101), seed=0):
    """F16 rows where the rows ``at`` are identical and hold every row's largest logit for the
    hidden row of tie_hidden (no norm): an exact tie."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float16)
    x = tie_hidden(cols)
    for r in at:
        w[r] = (np.sign(x) * 0.5).astype(np.float16)
    return w


def tie_hidden(cols=COLS):
    return np.random.default_rng(7).standard_normal((1, cols)).astype(np.float32)


@pytest.mark.parametrize("splits", [[0, 100, ROWS], [0, 99, 101, ROWS], [0, 98, 99, 100, 101, 102, ROWS]])
def test_tie_across_a_boundary_goes_to_the_lowest_global_id(splits):
    w = tie_weight()
    H = lmtail.Head(w, None, dtype="F16", **KW)
    S = lmtail.ShardedHead(w, None, splits=splits, dtype="F16", **KW)
    x = tie_hidden()
    assert H.greedy(x)[0] == S.greedy(x)[0] == 98
    ids, vals = S.topk(x, 3)
    assert ids.tolist() == [[98, 99, 100]] and len(set(bits(vals[0]).tolist())) == 1
    assert_same(H, S, x, ks=(1, 2, 3, 4, 5, 50))
    # the tied ids in the first shard excluded: the tie resolves inside the next one
    for ex in ([98, 99], [98, 99, 100]):
        assert H.greedy(x, ex)[0] == S.greedy(x, ex)[0] == ex[-1] + 1


def test_eog_on_a_boundary():
    w = tie_weight(at=(499, 500))
    eog = [499, 500]
    H = lmtail.Head(w, None, dtype="F16", eog_ids=eog, **KW)
    S = lmtail.ShardedHead(w, None, splits=[0, 500, ROWS], dtype="F16", eog_ids=eog, **KW)
    assert S.eog_ids == (499, 500)
    assert S.shards[0].eog_ids == (499,) and S.shards[1].eog_ids == (0,)  # mapped to local ids
    x = np.concatenate([tie_hidden(), hidden(2)[:, :COLS]])
    assert S.greedy(x)[0] == 499
    assert np.array_equal(H.greedy(x, exclude=H.eog_ids), S.greedy(x, exclude=S.eog_ids))
    assert S.greedy(x, exclude=S.eog_ids)[0] not in eog
    # every row of one shard excluded: that shard offers no candidate
    ex = list(range(0, 500)) + [500]
    assert np.array_equal(H.greedy(x, exclude=ex), S.greedy(x, exclude=ex))
    with pytest.raises(ParameterError, match="excludes all"):
        S.greedy(x, exclude=range(ROWS))


def test_k_larger_than_shards_and_whole_vocabulary():
    H, S, _ = pair("Q5_K", [0, 3, 5, ROWS])
    h = hidden(2)
    assert_same(H, S, h, ks=(4, 6, 40, ROWS))
    with pytest.raises(ParameterError):
        S.topk(h, ROWS + 1)
    with pytest.raises(ParameterError):
        S.topk(h, 0)


def _poison(q, r):
    q[r, 0:2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)  # +inf block scale: row r non-finite


@pytest.mark.parametrize("threads", [None, 1], ids=["pool", "concurrent"])
@pytest.mark.parametrize("method", ["greedy", "topk", "logits"])
def test_nonfinite_on_one_shard_fails_closed(method, threads):
    q = weight("Q5_K").copy()
    H, S, _ = pair("Q5_K", [0, 300, 700, ROWS], q=q, threads=threads)
    assert S._concurrent == (threads == 1)
    h_ok, h2 = hidden(3, 1), hidden(3, 2)
    call = {"greedy": lambda o, x: o.greedy(x), "topk": lambda o, x: o.topk(x, 12), "logits": lambda o, x: o.logits(x)}[method]
    call(S, h_ok)
    before = [S.row(t).copy() for t in range(3)]
    pub = [[bits(st.staging[:3]).copy() for st in S._caller.pub]]
    saved = q[800, 0:2].copy()
    _poison(q, 800)  # the weights are used in place: shard 2 now yields a non-finite logit
    with pytest.raises(NonFiniteLogitsError) as ei:
        call(H, h2)
    with pytest.raises(NonFiniteLogitsError, match="shard 2") as es:
        call(S, h2)
    assert type(es.value) is type(ei.value)
    # nothing published: every shard's rows are the last successful call's
    for t in range(3):
        assert np.array_equal(bits(S.row(t)), bits(before[t]))
    assert [[bits(st.staging[:3]) for st in S._caller.pub][s].tolist() for s in range(3)] == [p.tolist() for p in pub[0]]
    out = np.full((3, ROWS), 7.0, np.float32)
    with pytest.raises(NonFiniteLogitsError):
        S.logits(h2, out=out)
    assert (out == 7.0).all()  # out= untouched
    q[800, 0:2] = saved
    call(S, h2)  # usable again, and the new rows are published
    assert_same(H, S, h2, ks=(12,))


def test_nonfinite_hidden_fails_closed():
    H, S, _ = pair("Q8_0", SPLITS[2])
    S.topk(hidden(2), 5)
    r0 = S.row(1).copy()
    bad = hidden(2)
    bad[1, 3] = np.nan
    with pytest.raises(NonFiniteLogitsError):
        S.greedy(bad)
    assert np.array_equal(bits(S.row(1)), bits(r0))


def test_route_c_same_tokens_and_rng_as_the_whole_row():
    H, S, _ = pair("Q5_K", [0, 250, 251, ROWS])
    chains_a = [common_chain(ROWS, seed=s, top_k=10, penalty_repeat=1.2, penalty_last_n=4) for s in range(3)]
    chains_b = [common_chain(ROWS, seed=s, top_k=10, penalty_repeat=1.2, penalty_last_n=4) for s in range(3)]
    k = max(topk_needed(c) for c in chains_b)
    assert k == 14
    for step in range(6):
        h = hidden(3, 10 + step)
        full = H.logits(h).copy()
        ids, vals = S.topk(h, k + 1)
        assert S.last_bytes_read_back == 8 * 3 * (min(k + 1, 250) + 1 + (k + 1))
        src = TopKRows(ids, vals, S.row)
        for t in range(3):
            ta = chains_a[t].sample(full[t])
            tb = src.sample(chains_b[t], t)
            assert ta == tb
            chains_a[t].accept(ta)
            chains_b[t].accept(tb)
    # RNG streams advanced alike: the next draws from the same row agree
    row = H.logits(hidden(1, 99))[0]
    assert [c.sample(row) for c in chains_a] == [c.sample(row) for c in chains_b]


def test_route_c_fallback_gathers_the_row_across_shards():
    w = tie_weight()
    S = lmtail.ShardedHead(w, None, splits=[0, 100, ROWS], dtype="F16", **KW)
    H = lmtail.Head(w, None, dtype="F16", **KW)
    x = tie_hidden()
    a, b = common_chain(ROWS, seed=3, top_k=2), common_chain(ROWS, seed=3, top_k=2)
    ids, vals = S.topk(x, topk_needed(b) + 1)
    before = STATS.fallback
    tb = TopKRows(ids, vals, S.row).sample(b, 0)
    assert STATS.fallback == before + 1  # the tie reaches the top k: the whole row is read
    assert S.last_shard_bytes_read_back == (400, 3600)
    assert tb == a.sample(H.logits(x)[0])


def test_zero_copy_views_of_a_memory_mapped_weight(tmp_path):
    q = weight("Q6_K")
    path = tmp_path / "w.npy"
    np.save(path, q)
    mm = np.load(path, mmap_mode="r")
    S = lmtail.ShardedHead(mm, gamma(), splits=[0, 123, 800, ROWS], dtype="Q6_K", **KW)
    base = mm.__array_interface__["data"][0]
    for s, sh in enumerate(S.shards):
        assert np.shares_memory(sh.weight, mm)
        assert sh.weight.__array_interface__["data"][0] == base + S.splits[s] * mm.shape[1]
        assert sh.rows == S.splits[s + 1] - S.splits[s]
    assert S.weight_bytes == q.nbytes
    H = lmtail.Head(q, gamma(), dtype="Q6_K", **KW)
    assert_same(H, S, hidden(2), ks=(5,))
    # float16 arrays are sliced as their bytes, in place as well
    w16 = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float16)
    S16 = lmtail.ShardedHead(w16, None, splits=[0, 10, ROWS], dtype="F16")
    assert all(np.shares_memory(sh.weight, w16) for sh in S16.shards)


@pytest.mark.parametrize("threads", [None, 1], ids=["pool", "concurrent"])
def test_threads_have_their_own_rows(threads):
    H, S, _ = pair("Q8_0", SPLITS[3], threads=threads)
    hs = [hidden(2, 20 + i) for i in range(4)]
    want = [H.logits(h).copy() for h in hs]
    errs = []

    def work(i):
        try:
            for _ in range(3):
                S.topk(hs[i], 9)
                for t in range(2):
                    assert np.array_equal(bits(S.row(t)), bits(want[i][t]))
        except Exception as e:  # pragma: no cover - reported below
            errs.append(e)

    ths = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert not errs, errs


def test_one_thread_per_shard_option():
    H, S, _ = pair("Q5_K", SPLITS[3], threads=1)
    assert_same(H, S, hidden(3), ks=(20,))


def test_bad_arguments_are_typed():
    q = weight("Q8_0")
    mk = lambda **kw: lmtail.ShardedHead(q, None, dtype="Q8_0", **kw)  # noqa: E731
    for splits, what in [([0, 500, 500, ROWS], "strictly increasing"), ([0, 600, 500, ROWS], "strictly increasing"),
                         ([1, ROWS], "start at 0"), ([0, 999], "end at"), ([0], "at least two"),
                         ("0,1000", "sequence"), ([0, 1.5, ROWS], "integer"), ([0, True, ROWS], "integer")]:
        with pytest.raises(ParameterError, match=what):
            mk(splits=splits)
    with pytest.raises(ParameterError, match="expected 2 names"):
        mk(splits=[0, 5, ROWS], backends=["cpu"])
    with pytest.raises(ParameterError, match="list of"):
        mk(splits=[0, 5, ROWS], backends="cpu")
    with pytest.raises(BackendError):
        mk(splits=[0, 5, ROWS], backends=["cpu", "nope"])
    with pytest.raises(BackendError, match="several GPUs"):
        mk(splits=[0, 5, ROWS], backends=["cuda:0", "cuda:1"])
    with pytest.raises(ParameterError, match="backends="):
        mk(splits=[0, ROWS], backend="cpu")
    with pytest.raises(ParameterError, match="unknown keyword"):
        mk(splits=[0, ROWS], temperature=1.0)
    with pytest.raises(ParameterError, match="streams"):
        mk(splits=[0, 5, ROWS], streams=[0])
    with pytest.raises(lmtail.UnsupportedError):
        mk(splits=[0, 5, ROWS], streams=[0, 12345])
    with pytest.raises(lmtail.UnsupportedError, match="ggml"):
        mk(splits=[0, 5, ROWS], precision="ggml")
    with pytest.raises(ParameterError, match="eog_ids"):
        mk(splits=[0, ROWS], eog_ids=[ROWS])
    S = mk(splits=[0, 5, ROWS])
    with pytest.raises(ShapeError):
        S.greedy(np.zeros((1, COLS + 1), np.float32))
    with pytest.raises(ParameterError, match="row index"):
        S.row(0)  # nothing computed yet
    S.greedy(hidden(2))
    with pytest.raises(ParameterError, match="row index"):
        S.row(2)
    with pytest.raises(ShapeError):
        S.logits(hidden(2), out=np.empty((2, ROWS - 1), np.float32))
    with pytest.raises(lmtail.DTypeError):
        S.logits(hidden(2), out=np.empty((2, ROWS), np.float64))


# ---- the merge, as a pure function -------------------------------------------------------------
def canonical_topk(row: np.ndarray, m: int):
    order = np.lexsort((np.arange(len(row)), -row.astype(np.float64)))[:m]
    return order.astype(np.uint32), row[order]


def test_merge_topk_property():
    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(1, 60))
        # few distinct values: many ties, across shards too; -0 and +0 both present
        row = rng.choice(np.array([-0.0, 0.0, 1.5, -2.0, 3.25, 1e-30, -1e30], np.float32), size=n)
        cuts = np.sort(rng.choice(np.arange(1, n), size=min(int(rng.integers(0, 6)), n - 1), replace=False)) if n > 1 else []
        sp = [0, *cuts.tolist(), n] if len(cuts) else [0, n]
        k = int(rng.integers(1, n + 1))
        I, V = [], []
        for a, b in zip(sp[:-1], sp[1:]):
            i, v = canonical_topk(row[a:b], min(k, b - a))
            perm = rng.permutation(len(i))  # the merge does not need the shards' order
            I.append(i.astype(np.int64)[perm][None] + a)
            V.append(v[perm][None])
        ids, vals = merge_topk(I, V, k)
        wi, wv = canonical_topk(row, k)
        # lexsort on float64 puts -0 and +0 together (equal), the rule the merge follows
        assert np.array_equal(ids[0], wi) and np.array_equal(bits(vals[0]), bits(wv)), (trial, row, sp, k)


def test_merge_signed_zero_and_values_pass_through():
    ids, vals = merge_topk([np.array([[5]]), np.array([[3]])], [np.array([[-0.0]], np.float32),
                                                               np.array([[0.0]], np.float32)], 2)
    assert ids.tolist() == [[3, 5]] and bits(vals).tolist() == [[0, 0x80000000]]
    assert merge_greedy([np.array([7]), np.array([2])], [np.array([-0.0], np.float32), np.array([0.0], np.float32)]).tolist() == [2]
    k = selection_keys(np.array([1, 2, 1]), np.array([1.0, 1.0, np.float32(-3.0)], np.float32))
    assert k[0] > k[1] > k[2]


def test_merge_errors():
    with pytest.raises(ParameterError, match="appears in two"):
        merge_topk([np.array([[1]]), np.array([[1]])], [np.ones((1, 1), np.float32)] * 2, 1)
    with pytest.raises(NonFiniteLogitsError):
        merge_topk([np.array([[1, 2]])], [np.array([[1.0, np.nan]], np.float32)], 1)
    with pytest.raises(ParameterError, match="k:"):
        merge_topk([np.array([[1, 2]])], [np.ones((1, 2), np.float32)], 3)
    with pytest.raises(ParameterError, match="float32"):
        merge_topk([np.array([[1]])], [np.ones((1, 1))], 1)
    with pytest.raises(ParameterError, match="2\\^31"):
        merge_topk([np.array([[2**31]])], [np.ones((1, 1), np.float32)], 1)
    with pytest.raises(ShapeError):
        merge_topk([np.array([[1]]), np.array([[2], [3]])], [np.ones((1, 1), np.float32), np.ones((2, 1), np.float32)], 1)


def test_importing_lmtail_does_not_import_torch():
    r = subprocess.run([sys.executable, "-c", "import sys, lmtail, lmtail.sharding; print('torch' in sys.modules)"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# ---- torch.distributed: the multi-process merge (gloo here; NCCL on a GPU machine) --------------
def _rank_worker(rank, world, port, k, rows, out_dir, device):
    import torch
    import torch.distributed as dist

    from lmtail.sharding import merge_topk_distributed

    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        if device == "cuda":
            torch.cuda.set_device(rank)
        data = np.load(os.path.join(out_dir, "rows.npy"))
        sp = np.linspace(0, rows, world + 1).astype(int)
        a, b = int(sp[rank]), int(sp[rank + 1])
        I, V = [], []
        for r in data:
            i, v = canonical_topk(r[a:b], min(k, b - a))
            I.append(i.astype(np.int64) + a)
            V.append(v)
        ids, vals = np.stack(I), np.stack(V)
        if device == "cuda":
            ids, vals = torch.from_numpy(ids).cuda(), torch.from_numpy(vals).cuda()
        mi, mv = merge_topk_distributed(ids, vals, k)
        if device == "cuda":
            mi, mv = mi.cpu().numpy(), mv.cpu().numpy()
        np.save(os.path.join(out_dir, f"ids{rank}.npy"), np.asarray(mi))
        np.save(os.path.join(out_dir, f"vals{rank}.npy"), np.asarray(mv))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(world, k, tmp_path, device="cpu", rows=50):
    torch = pytest.importorskip("torch", reason="torch.distributed merge: PyTorch is optional (not installed in CI)")
    import torch.multiprocessing as mp

    rng = np.random.default_rng(world * 100 + k)
    data = rng.choice(np.array([-0.0, 0.0, 1.0, 2.5, -3.0, 7.0], np.float32), size=(3, rows))
    np.save(tmp_path / "rows.npy", data)
    mp.spawn(_rank_worker, args=(world, _free_port(), k, rows, str(tmp_path), device), nprocs=world, join=True)
    for r in range(world):
        ids, vals = np.load(tmp_path / f"ids{r}.npy"), np.load(tmp_path / f"vals{r}.npy")
        for t in range(3):
            wi, wv = canonical_topk(data[t], k)
            assert np.array_equal(ids[t].astype(np.int64), wi) and np.array_equal(bits(vals[t]), bits(wv))
    del torch


@pytest.mark.parametrize("world,k", [(2, 5), (3, 20), (4, 1)])
def test_merge_topk_distributed_gloo(world, k, tmp_path):
    _run_ranks(world, k, tmp_path)


def test_torch_device_merge_equals_the_pure_merge():
    # The CUDA path's on-device merge (torch.topk over the same keys), run on CPU tensors.
    torch = pytest.importorskip("torch", reason="PyTorch is optional (not installed in CI)")
    from lmtail.sharding.distributed import _merge_packed, _pack

    rng = np.random.default_rng(11)
    for trial in range(50):
        S, T, k = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 8))
        I, V = [], []
        base = 0
        for s in range(S):
            m = int(rng.integers(0, k + 1))
            I.append(np.broadcast_to(np.arange(base, base + m), (T, m)).copy())
            V.append(rng.choice(np.array([-0.0, 0.0, 1.0, -2.0, 4.0], np.float32), size=(T, m)))
            base += 20
        if sum(i.shape[1] for i in I) < k:
            continue
        g = torch.cat([_pack(torch, torch.from_numpy(i), torch.from_numpy(v), k) for i, v in zip(I, V)], dim=1)
        ti, tv = _merge_packed(torch, g, k)
        wi, wv = merge_topk(I, V, k)
        assert np.array_equal(ti.numpy().astype(np.uint32), wi) and np.array_equal(bits(tv.numpy()), bits(wv)), trial


# ---- CUDA (runs on a GPU machine) ------------------------------------------------------------------
cuda = pytest.mark.skipif("cuda" not in lmtail.backends(), reason="no CUDA device in this build/machine")


@cuda
@pytest.mark.parametrize("dtype", ["Q5_K", "Q6_K", "Q8_0", "F16"])
def test_cuda_shards_on_one_gpu_equal_the_unsharded_cuda_head(dtype):
    splits = [0, 3, 500, 501, ROWS]
    q, g = weight(dtype), gamma()
    streams = None
    try:
        import torch

        streams = [torch.cuda.Stream() for _ in range(len(splits) - 1)]
    except ImportError:
        pass
    H = lmtail.Head(q, g, dtype=dtype, backend="cuda", **KW)
    S = lmtail.ShardedHead(q, g, splits=splits, dtype=dtype, backends=["cuda"] * 4, streams=streams, **KW)
    for T in (1, 8):
        h = hidden(T, seed=T)
        assert np.array_equal(H.greedy(h), S.greedy(h))
        eog = [2, 3, 499, 500]
        assert np.array_equal(H.greedy(h, exclude=eog), S.greedy(h, exclude=eog))
        for k in (1, 40):
            ia, va = H.topk(h, k)
            ib, vb = S.topk(h, k)
            assert np.array_equal(ia, ib) and np.array_equal(bits(va), bits(vb))
            for t in range(T):
                assert np.array_equal(bits(H.row(t)), bits(S.row(t)))
        assert np.array_equal(bits(H.logits(h)), bits(S.logits(h)))
    # mixed: a cuda shard next to cpu shards still merges exactly what each shard computed
    M = lmtail.ShardedHead(q, g, splits=[0, 500, ROWS], dtype=dtype, backends=["cuda", "cpu"], **KW)
    h = hidden(2)
    ids, vals = M.topk(h, 10)
    full = np.concatenate([M.shards[0].logits(h), M.shards[1].logits(h)], axis=1)
    for t in range(2):
        wi, wv = canonical_topk(full[t], 10)
        assert np.array_equal(ids[t], wi) and np.array_equal(bits(vals[t]), bits(wv))


@cuda
def test_merge_topk_distributed_nccl(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is optional (not installed in CI)")
    n = torch.cuda.device_count()
    if n < 2 or not torch.distributed.is_nccl_available():
        pytest.skip(f"NCCL merge needs >= 2 GPUs and NCCL; found {n} GPU(s)")
    for world in sorted({2, min(4, n)}):
        _run_ranks(world, 7, tmp_path, device="cuda")


def test_torch_device_merge_errors():
    torch = pytest.importorskip("torch", reason="PyTorch is optional (not installed in CI)")
    from lmtail.sharding.distributed import _merge_packed, _pack

    def packed(ids, vals, k):
        return _pack(torch, torch.tensor([ids], dtype=torch.int64), torch.tensor([vals], dtype=torch.float32), k)

    ok = packed([4], [1.0], 2)
    with pytest.raises(ParameterError, match="only 1 candidates"):
        _merge_packed(torch, ok, 2)
    with pytest.raises(NonFiniteLogitsError):
        _merge_packed(torch, torch.cat([ok, packed([5], [float("nan")], 2)], dim=1), 2)
    with pytest.raises(ParameterError, match="two ranks"):
        _merge_packed(torch, torch.cat([ok, packed([4], [2.0], 2)], dim=1), 2)
    ids, vals = _merge_packed(torch, torch.cat([ok, packed([3], [-0.0], 2), packed([2], [0.0], 2)], dim=1), 3)
    assert ids.tolist() == [[4, 2, 3]] and bits(vals.numpy()).tolist() == [[0x3F800000, 0, 0x80000000]]


def test_from_gguf_memory_mapped(tmp_path):
    from _gguf_util import f32, head_model

    path, arrays = head_model(tmp_path / "m.gguf", "gemma2", rows=300, cols=512, head="tied",
                              kv={"gemma2.final_logit_softcapping": f32(25.0)})
    H = lmtail.Head.from_gguf(path)
    S = lmtail.ShardedHead.from_gguf(path, shards=3)
    assert S.splits == (0, 100, 200, 300) and (S.softcap, S.eog_ids, S.dtype) == (25.0, H.eog_ids, H.dtype)
    import mmap

    b = S.weight
    while isinstance(b, np.ndarray) and b.base is not None:
        b = b.base
    assert isinstance(b, memoryview) and isinstance(b.obj, mmap.mmap)  # the file's mapping, not a copy
    assert all(np.shares_memory(sh.weight, S.weight) for sh in S.shards)
    h = (np.random.default_rng(3).standard_normal((2, 512)) * 4).astype(np.float32)
    assert_same(H, S, h, ks=(1, 5))
    assert np.array_equal(H.greedy(h, exclude=H.eog_ids), S.greedy(h, exclude=S.eog_ids))
    S2 = lmtail.ShardedHead.from_gguf(path, splits=[0, 2, 300])
    assert_same(H, S2, h, ks=(3,))
    with pytest.raises(ParameterError, match="exactly one"):
        lmtail.ShardedHead.from_gguf(path)
    with pytest.raises(ParameterError, match="shards"):
        lmtail.ShardedHead.from_gguf(path, shards=0)
