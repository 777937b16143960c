"""Q4_K CPU matvec against ggml's mul_mat on the same bytes, interleaved in one process.

    python bench/kernels_q4_k.py [--rows 16384] [--cols 6656] [--threads 1] [--T 1 8] [--reps 15]

Prints per (T, precision) the median lmtail/ggml time ratio over interleaved pairs (< 1: faster)
and lmtail's weight-read rate. Relative numbers only: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import lmtail  # noqa: E402
from oracle import graph  # noqa: E402

Q4_K = 12


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--cols", type=int, default=6656)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--T", type=int, nargs="+", default=[1, 8])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--precisions", nargs="+", default=["i24", "f32"])
    a = p.parse_args()
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((a.rows, a.cols)) * 0.02).astype(np.float32)
    q = np.zeros((a.rows, a.cols // 256 * 144), np.uint8)
    lmtail._core.quantize(Q4_K, w, q, 0)
    del w
    for T in a.T:
        x = rng.standard_normal((T, a.cols)).astype(np.float32)
        out = np.empty((T, a.rows), np.float32)
        mm = graph.MatMul(q, Q4_K, a.cols, T)
        mm.set_x(x)
        for prec in a.precisions:
            ratios, ts = [], []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                lmtail._core.matvec(q, Q4_K, a.cols, x, out, a.threads, "auto", prec)
                t1 = time.perf_counter() - t0
                tg = mm.time_once(a.threads)
                ratios.append(t1 / tg)
                ts.append(t1)
            med = float(np.median(ratios))
            print(f"T={T} {prec}: lmtail/ggml median {med:.3f} (min {min(ratios):.3f}); "
                  f"lmtail {np.median(ts) * 1e3:.2f} ms, {q.nbytes / np.median(ts) / 1e9:.2f} GB/s", flush=True)
        mm.close()


if __name__ == "__main__":
    main()
