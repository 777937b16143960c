"""Q8_0 matvec vs ggml's mul_mat on the same bytes, interleaved in one process (medians).

    python bench/kernels_q8_0.py [rows] [cols] [threads] [reps]

Ratios are lmtail / ggml time (< 1: lmtail faster). ggml quantises x to q8_0 (int8
activations, ~5e-3 error); lmtail's default (f32) multiplies the exact weights by f32 x.
"""

import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from oracle import graph  # noqa: E402

from lmtail import _core  # noqa: E402


def main():
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    cols = int(sys.argv[2]) if len(sys.argv) > 2 else 6656
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 15
    rng = np.random.default_rng(0)
    w = graph.aligned_empty((rows, cols // 32 * 34), np.uint8)
    w32 = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
    _core.quantize(8, w32, w, 0)
    del w32
    for T in (1, 8):
        x = rng.standard_normal((T, cols)).astype(np.float32)
        out = np.zeros((T, rows), np.float32)
        mm = graph.MatMul(w, 8, cols, T)
        mm.set_x(x)
        ours, theirs = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            _core.matvec(w, 8, cols, x, out, threads, "auto", "default")
            ours.append(time.perf_counter() - t0)
            theirs.append(mm.time_once(threads))
        mo, mt = statistics.median(ours), statistics.median(theirs)
        gbs = w.nbytes / mo / 1e9
        print(f"{rows}x{cols} T={T} threads={threads}: lmtail {mo * 1e3:.2f} ms ({gbs:.1f} GB/s), "
              f"ggml {mt * 1e3:.2f} ms, ratio {mo / mt:.3f}")
        mm.close()


if __name__ == "__main__":
    main()
