#!/usr/bin/env python3
"""A vocabulary-sharded head (lmtail.ShardedHead) against the unsharded Head, in the same run.

Per (dtype, T, shards): median host wall of ``greedy`` and ``topk(k)`` on the unsharded Head and on
N shards, the sharded call split into the shards' concurrent tails and the host merge
(``last_timings``), and the bytes read back per call (per shard). Shards are CPU shards
(``--backend cpu``) or N shards on one GPU, each on its own stream (``--backend cuda``, streams
from PyTorch when importable). Weights: seeded N(0, 1) * 0.02 quantised with lmtail.quantize.

``--dist N`` (needs PyTorch) also spawns N processes (gloo, or NCCL with ``--backend cuda`` and N
GPUs) and times, in the same run, ``merge_topk_distributed`` (k candidates per rank and row,
8 bytes each) against all-gathering the full logits (4 bytes * rows / N per rank and row).

    python bench/bench_sharded.py --quick                       # CPU shards, small head, seconds
    python bench/bench_sharded.py --rows 202048 --cols 6656 --dtype Q5_K,Q6_K --T 1,8 --shards 1,2,4
    python bench/bench_sharded.py --backend cuda --rows 202048 --cols 6656 --dist 2
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lmtail  # noqa: E402
from _timing import median_time  # noqa: E402


def weights(dtype: str, rows: int, cols: int) -> np.ndarray:
    slab = min(rows, 4096)
    w = (np.random.default_rng(0).standard_normal((slab, cols)) * 0.02).astype(np.float32)
    q = lmtail.quantize(w, dtype)
    return np.ascontiguousarray(np.tile(q, (-(-rows // slab), 1))[:rows])


def splits_of(rows: int, n: int) -> list[int]:
    return [int(x) for x in np.linspace(0, rows, n + 1)]


def streams_for(n: int, backend: str):
    if backend != "cuda":
        return None
    try:
        import torch

        return [torch.cuda.Stream() for _ in range(n)]
    except ImportError:
        return None


def sharded_parts(S, fn, reps: int) -> dict:
    tails, merges, walls = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        t = S.last_timings
        tails.append(t["shards"])
        merges.append(t["merge"])
    return {"wall_ms": 1e3 * statistics.median(walls), "tail_ms": 1e3 * statistics.median(tails),
            "merge_us": 1e6 * statistics.median(merges), "bytes": list(S.last_shard_bytes_read_back)}


def bench_one(dtype, T, n, args) -> list[dict]:
    q = weights(dtype, args.rows, args.cols)
    g = np.random.default_rng(1).uniform(0.5, 1.5, args.cols).astype(np.float32)
    h = (np.random.default_rng(2).standard_normal((T, args.cols)) * 4).astype(np.float32)
    kw = dict(logit_scale=0.196116, softcap=20.0, dtype=dtype, threads=args.threads)
    H = lmtail.Head(q, g, backend=args.backend, **kw)
    S = lmtail.ShardedHead(q, g, splits=splits_of(args.rows, n), backends=[args.backend] * n,
                           streams=streams_for(n, args.backend), **kw)
    out = []
    for op, fa, fb in (("greedy", lambda: H.greedy(h), lambda: S.greedy(h)),
                       (f"topk{args.k}", lambda: H.topk(h, args.k), lambda: S.topk(h, args.k))):
        single = median_time(fa, args.reps, warmup=2)
        single_bytes = H.last_bytes_read_back
        fb()
        fb()
        r = sharded_parts(S, fb, args.reps)
        out.append({"dtype": dtype, "T": T, "shards": n, "op": op, "single_ms": 1e3 * single,
                    "single_bytes": single_bytes, **r})
    return out


# ---- the multi-process part ----
def _rank(rank, world, port, args, res_path):
    import torch
    import torch.distributed as dist

    from lmtail.sharding import merge_topk_distributed

    cuda = args.backend == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    dev = "cuda" if cuda else "cpu"
    rows_r = args.rows // world
    rows = {}
    for T in args.T:
        logits = torch.randn(T, rows_r, device=dev)
        vals, ids = torch.topk(logits, args.k, dim=1)
        ids = ids + rank * rows_r

        def sync():
            if cuda:
                torch.cuda.synchronize()

        def cand():
            merge_topk_distributed(ids, vals, args.k)
            sync()

        parts = [torch.empty_like(logits) for _ in range(world)]

        def full():
            dist.all_gather(parts, logits)
            torch.cat(parts, dim=1).argmax(dim=1)
            sync()

        rows[T] = {"candidates_ms": 1e3 * median_time(cand, args.reps, warmup=3),
                   "full_logits_ms": 1e3 * median_time(full, args.reps, warmup=3),
                   "candidate_bytes_per_rank": 8 * args.k * T, "full_bytes_per_rank": 4 * rows_r * T}
    if rank == 0:
        Path(res_path).write_text(json.dumps(rows))
    dist.destroy_process_group()


def bench_dist(args) -> dict:
    import tempfile

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = os.path.join(tempfile.mkdtemp(), "dist.json")
    mp.spawn(_rank, args=(args.dist, port, args, res), nprocs=args.dist, join=True)
    return json.loads(Path(res).read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="Q5_K,Q6_K")
    ap.add_argument("--T", default="1,8")
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--rows", type=int, default=32768)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--k", type=int, default=41)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dist", type=int, default=0, help="ranks for the torch.distributed part (0: skip)")
    ap.add_argument("--quick", action="store_true", help="small head, few reps (a smoke run)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.quick:
        args.rows, args.cols, args.reps = 8192, 1024, 5
    args.T = [int(x) for x in args.T.split(",")]
    results = []
    print(f"{'dtype':6} {'T':>2} {'N':>2} {'op':7} {'single ms':>9} {'shards ms':>9} {'tail ms':>8} "
          f"{'merge us':>8}  bytes single / per shard")
    for dtype in args.dtype.split(","):
        for T in args.T:
            for n in (int(x) for x in args.shards.split(",")):
                for r in bench_one(dtype, T, n, args):
                    results.append(r)
                    print(f"{r['dtype']:6} {r['T']:>2} {r['shards']:>2} {r['op']:7} {r['single_ms']:9.3f} "
                          f"{r['wall_ms']:9.3f} {r['tail_ms']:8.3f} {r['merge_us']:8.1f}  "
                          f"{r['single_bytes']} / {r['bytes']}", flush=True)
    dist = bench_dist(args) if args.dist else None
    if dist:
        for T, r in dist.items():
            print(f"dist N={args.dist} T={T}: candidates {r['candidates_ms']:.3f} ms "
                  f"({r['candidate_bytes_per_rank']} B/rank), full logits {r['full_logits_ms']:.3f} ms "
                  f"({r['full_bytes_per_rank']} B/rank)")
    if args.json:
        Path(args.json).write_text(json.dumps({"local": results, "dist": dist}, indent=1))


if __name__ == "__main__":
    main()
