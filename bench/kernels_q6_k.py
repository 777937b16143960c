"""Q6_K matvec vs ggml's mul_mat on the same bytes, interleaved in one process (medians).

    python bench/kernels_q6_k.py [--rows 16384] [--cols 6656] [--T 1 8] [--threads 1] [--reps 15]

Prints ms per call for each lmtail precision and ggml, and the ratio lmtail / ggml.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from lmtail import _core  # noqa: E402
from oracle.graph import MatMul  # noqa: E402

TYPE = 14


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=6656)
    ap.add_argument("--T", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--precisions", nargs="+", default=None)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    # Random bytes with a finite f16 d: the timing does not depend on the values.
    w = rng.integers(0, 256, (a.rows, a.cols // 256 * 210), dtype=np.uint8)
    blk = w.reshape(a.rows, -1, 210)
    blk[:, :, 208] = 0
    blk[:, :, 209] = 0x1C
    (row,) = [t for t in _core.cpu_types() if t["id"] == TYPE]
    precs = a.precisions or row["precisions"]
    for T in a.T:
        x = rng.standard_normal((T, a.cols)).astype(np.float32)
        out = np.empty((T, a.rows), np.float32)
        mm = MatMul(w, TYPE, a.cols, T)
        mm.set_x(x)
        times = {p: [] for p in precs}
        times["ggml"] = []
        for _ in range(a.reps):
            times["ggml"].append(mm.time_once(a.threads))
            for p in precs:
                t0 = time.perf_counter()
                _core.matvec(w, TYPE, a.cols, x, out, a.threads, "auto", p)
                times[p].append(time.perf_counter() - t0)
        g = float(np.median(times["ggml"]))
        line = f"{a.rows}x{a.cols} T={T} threads={a.threads}: ggml {g * 1e3:.2f} ms"
        for p in precs:
            m = float(np.median(times[p]))
            line += f" | {p} {m * 1e3:.2f} ms ({m / g:.2f}x)"
        print(line, flush=True)
        mm.close()


if __name__ == "__main__":
    main()
