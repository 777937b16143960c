"""Q4_0 matvec vs ggml's mul_mat on the same bytes, interleaved, medians (relative figures).

    python bench/kernels_q4_0.py [rows] [cols] [threads] [reps]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0] + "/tests")
from lmtail import _core  # noqa: E402
from oracle import graph  # noqa: E402

Q4_0 = 2


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    cols = int(sys.argv[2]) if len(sys.argv) > 2 else 6656
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 15
    precs = sys.argv[5].split(",") if len(sys.argv) > 5 else ["f32"]
    rng = np.random.default_rng(0)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    q = graph.aligned_empty((rows, cols // 32 * 18), np.uint8)
    _core.quantize(Q4_0, w, q, 0)
    del w
    for T in (1, 8):
        x = rng.standard_normal((T, cols)).astype(np.float32)
        out = np.empty((T, rows), np.float32)
        mm = graph.MatMul(q, Q4_0, cols, T)
        mm.set_x(x)
        ts = {p: [] for p in precs}
        tg = []
        for _ in range(reps):
            tg.append(mm.time_once(threads))
            for p in precs:
                t0 = time.perf_counter()
                _core.matvec(q, Q4_0, cols, x, out, threads, "auto", p)
                ts[p].append(time.perf_counter() - t0)
        g = statistics.median(tg)
        line = f"T={T} {rows}x{cols} threads={threads}: ggml {g * 1e3:.2f} ms ({q.nbytes / g / 1e9:.1f} GB/s)"
        for p in precs:
            m = statistics.median(ts[p])
            line += f" | {p} {m * 1e3:.2f} ms = {m / g:.2f}x"
        print(line, flush=True)
        mm.close()


if __name__ == "__main__":
    main()
