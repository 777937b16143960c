#!/usr/bin/env python3
"""CUDA Head routes at the seed's shape (202048 x 6656 Q5_K) as a Python user sees them: host wall
time per call for route A (full rows back), B (greedy, 4 B/row) and C (top-40, 8*40 B/row).
Kernel-level device times (CUDA events) come from bench/cuda/cuda_check.cu (lmtail_cuda_check).
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
    for T in (1, 8):
        h = (np.random.default_rng(T).standard_normal((T, 6656)) * 2).astype(np.float32)
        for name, fn in (("A full rows", lambda: head.logits(h)), ("B greedy", lambda: head.greedy(h)),
                         ("C top-40", lambda: head.topk(h, 40))):
            for _ in range(3):
                fn()
            ts = []
            for _ in range(30):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            print(f"T={T} route {name:12s} host wall median {statistics.median(ts) * 1e3:8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
