#!/usr/bin/env python3
"""precision="ggml" (llama.cpp's bytes) against ggml's own mul_mat, full-size K-quant heads.

For each (dtype, T, threads): lmtail.ops.matvec(w, x, dtype, precision="ggml") and the oracle's
ggml_mul_mat (tests/oracle/graph.py MatMul, weight where llama.cpp puts it: the AMX buffer on an
AMX build, else CPU_REPACK for Q4_K / Q4_0, whose 202048 rows are a multiple of 8) run interleaved on the same bytes, so machine noise hits
both alike. Reported: median ms of each and the median of the per-pair ratios lmtail / ggml; the
bytes are checked equal once per config. Goal (issue 15): ratio <= 1.1 at T = 1.

Weights: random block bytes with moderate fp16 scales (the kernels have no data-dependent
branches; the whole head is streamed from DRAM on every call).

    python bench/bench_ggml_exact.py                       # Q6_K, Q5_K, Q4_K; T 1, 8; 1 and 2 threads
    python bench/bench_ggml_exact.py --dtype Q6_K --T 1 --threads 2 --reps 20
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import lmtail  # noqa: E402
from oracle import graph as G  # noqa: E402

ROWS, COLS = 202048, 6656
TYPES = {"Q4_K": (12, 144), "Q5_K": (13, 176), "Q6_K": (14, 210), "Q8_0": (8, 34), "Q4_0": (2, 18)}


def random_blocks(dtype: str, rows: int, cols: int, seed: int = 11) -> np.ndarray:
    _, bb = TYPES[dtype]
    rng = np.random.default_rng(seed)
    nb = cols // (32 if dtype in ("Q8_0", "Q4_0") else 256)
    q = np.frombuffer(rng.bytes(rows * nb * bb), np.uint8).reshape(rows, nb, bb).copy()
    scale = (rng.random((rows, nb, 2), np.float32) * 1e-3 + 1e-4).astype(np.float16).view(np.uint8)
    if dtype in ("Q8_0", "Q4_0"):
        q[:, :, 0:2] = scale[:, :, 0:2]
    elif dtype == "Q6_K":
        q[:, :, 208:210] = scale[:, :, 0:2]
    else:
        q[:, :, 0:4] = scale
    return q.reshape(rows, nb * bb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="Q6_K,Q5_K,Q4_K")
    ap.add_argument("--T", default="1,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=15, help="pairs per config at T = 1 (T > 1: a third, >= 5)")
    a = ap.parse_args()
    print(f"# bench_ggml_exact: {ROWS} x {COLS}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, {G.describe()}")
    print(f"{'dtype':5} {'T':>2} {'thr':>3} {'lmtail ms':>10} {'ggml ms':>9} {'ratio':>6}  path")
    for dtype in a.dtype.split(","):
        tid = TYPES[dtype][0]
        w = random_blocks(dtype, ROWS, COLS)
        for T in map(int, a.T.split(",")):
            x = np.random.default_rng(T).standard_normal((T, COLS)).astype(np.float32)
            try:
                mm = G.MatMul(w, tid, COLS, T, repack=True)
            except G.OracleUnavailable as e:  # the oracle's AMX tile kernel dies on this machine
                print(f"{dtype:5} {T:>2} skipped: {e}")
                continue
            mm.set_x(x)
            reps = a.reps if T == 1 else max(5, a.reps // 3)
            for nt in map(int, a.threads.split(",")):
                got = lmtail.ops.matvec(w, x, dtype, precision="ggml", threads=nt)
                if not np.array_equal(got.view(np.uint32), mm.run(x, threads=nt).view(np.uint32)):
                    raise SystemExit(f"{dtype} T={T} threads={nt}: bytes differ from ggml")
                tl, tg = [], []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    lmtail.ops.matvec(w, x, dtype, precision="ggml", threads=nt)
                    tl.append(time.perf_counter() - t0)
                    tg.append(mm.time_once(threads=nt))
                ratio = statistics.median(l / g for l, g in zip(tl, tg))
                path = ("amx " + ("gemv" if T == 1 else "tiles")) if mm.placement == "AMX" else \
                    ("repack " + ("gemv" if T < 4 else "gemm")) if mm.repacked else ("vec_dot" if T < 8 else "tiled")
                print(f"{dtype:5} {T:>2} {nt:>3} {statistics.median(tl) * 1e3:>10.1f} {statistics.median(tg) * 1e3:>9.1f} "
                      f"{ratio:>6.2f}  {path} ({reps} pairs, bytes equal)", flush=True)
            mm.close()
        del w


if __name__ == "__main__":
    main()
