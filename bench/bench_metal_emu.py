#!/usr/bin/env python3
"""metal-emu speed: every op of the tail on the emulator (Metal kernels compiled as C++, lanes as
fibers) against the native CPU backend, in the same run. The emulator exists to prove the Metal
host code and kernels on Linux, not to be fast; this records what a test on it costs.

    python bench/bench_metal_emu.py [--rows 20000] [--cols 6656] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import median_time  # noqa: E402

import lmtail
from lmtail import ops


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--cols", type=int, default=6656)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if "metal-emu" not in lmtail.backends():
        print("metal-emu is not built here (LMTAIL_EMU=OFF)")
        return 1
    g = np.random.default_rng(0)
    w = lmtail.quantize_q5_k((g.standard_normal((a.rows, a.cols)) * 0.02).astype(np.float32))
    gamma = g.uniform(0.8, 1.2, a.cols).astype(np.float32)
    h = (g.standard_normal((1, a.cols)) * 2).astype(np.float32)
    logits = ops.matvec_q5_k(w, ops.rms_norm(h, gamma))[0]
    cases = {
        f"rms_norm 1x{a.cols}": lambda b: ops.rms_norm(h, gamma, backend=b),
        f"mul_mv_q5_K {a.rows}x{a.cols}, T=1": lambda b: ops.matvec_q5_k(w, h, backend=b),
        f"softcap, four nodes, {a.rows}": lambda b: ops.softcap(logits, 0.2, 20.0, four_pass=True, backend=b),
        f"argmax {a.rows}": lambda b: ops.argmax(logits, backend=b),
        f"top-k 40 of {a.rows}": lambda b: ops.topk(logits, 40, backend=b),
    }
    print(f"# bench_metal_emu: {a.rows} x {a.cols} Q5_K, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"{'op':36s} {'cpu ms':>9s} {'metal-emu ms':>13s} {'emu/cpu':>8s}")
    for name, fn in cases.items():
        t_cpu = median_time(lambda: fn("cpu"), a.reps, warmup=1)
        t_emu = median_time(lambda: fn("metal-emu"), a.reps, warmup=1)
        print(f"{name:36s} {t_cpu * 1e3:9.3f} {t_emu * 1e3:13.1f} {t_emu / t_cpu:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
