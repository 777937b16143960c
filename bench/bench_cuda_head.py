#!/usr/bin/env python3
"""CUDA Head routes at the seed's shape (202048 x 6656 Q5_K) as a Python user sees them: host wall
time per call for route A (full rows back), B (greedy, 4 B/row) and C (top-40, 8*40 B/row).
Routes B and C replay one CUDA graph per call; "one by one" times the same work issued kernel by
kernel through the DeviceHead calls the graph replaced (interleaved with the graph route, same
run). --profile prints where a route B call's host time goes (cProfile). Kernel-level device
times (CUDA events) come from bench/cuda/cuda_check.cu (lmtail_cuda_check, "greedy tail graph").
Run on a machine with LMTAIL_CUDA=ON and a GPU."""

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import lmtail  # noqa: E402
from _util import slab, tiled_head  # noqa: E402


def main() -> int:
    if "cuda" not in lmtail.backends():
        print("cuda backend not available")
        return 1
    w = tiled_head(202048, slab())
    g = np.random.default_rng(2).uniform(0.8, 1.2, 6656).astype(np.float32)
    head = lmtail.Head(w, g, logit_scale=0.196116, softcap=20.0, backend="cuda")
    dev = head._device
    for T in (1, 8):
        h = (np.random.default_rng(T).standard_normal((T, 6656)) * 2).astype(np.float32)
        none = np.empty(0, np.uint32)
        out, ids, vals = np.empty(T, np.uint32), np.empty((T, 40), np.uint32), np.empty((T, 40), np.float32)

        def b_one_by_one():
            dev.run_tail(h, False)
            dev.greedy(none, out)

        def c_one_by_one():
            dev.run_tail(h, True)
            dev.topk(40, ids, vals)

        routes = (("A full rows", lambda: head.logits(h)), ("B greedy", lambda: head.greedy(h)),
                  ("B one by one", b_one_by_one), ("C top-40", lambda: head.topk(h, 40)),
                  ("C one by one", c_one_by_one))
        for _, fn in routes:
            for _ in range(3):
                fn()
        ts = {name: [] for name, _ in routes}
        for _ in range(30):  # interleaved
            for name, fn in routes:
                t0 = time.perf_counter()
                fn()
                ts[name].append(time.perf_counter() - t0)
        for name, _ in routes:
            print(f"T={T} route {name:12s} host wall median {statistics.median(ts[name]) * 1e3:8.3f} ms")
    if "--profile" in sys.argv:
        import cProfile
        import pstats

        h = (np.random.default_rng(1).standard_normal((1, 6656)) * 2).astype(np.float32)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            head.greedy(h)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(14)
    return 0


if __name__ == "__main__":
    sys.exit(main())
