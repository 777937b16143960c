"""F32 / F16 / BF16 matvec: lmtail against ggml's mul_mat on the same bytes, in one process,
interleaved, medians. Usage: python bench/kernels_floats.py [rows] [cols] [threads] [reps] [types...]"""

import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tests")
import lmtail  # noqa: E402
from oracle import graph  # noqa: E402

TYPES = {"F32": (0, 4), "F16": (1, 2), "BF16": (30, 2)}


def main():
    a = sys.argv[1:]
    rows = int(a[0]) if a else 8192
    cols = int(a[1]) if len(a) > 1 else 6656
    threads = int(a[2]) if len(a) > 2 else 1
    reps = int(a[3]) if len(a) > 3 else 9
    names = a[4:] or list(TYPES)
    rng = np.random.default_rng(0)
    for name in names:
        tid, eb = TYPES[name]
        w = graph.aligned_empty((rows, cols * eb), np.uint8)
        for r0 in range(0, rows, 1024):
            src = (rng.standard_normal((min(1024, rows - r0), cols)) * 0.05).astype(np.float32)
            lmtail._core.quantize(tid, src, w[r0 : r0 + src.shape[0]], 0)
        for T in (1, 8):
            x = rng.standard_normal((T, cols)).astype(np.float32)
            out = np.empty((T, rows), np.float32)
            with graph.MatMul(w, tid, cols, T) as mm:
                mm.set_x(x)
                lt, gt = [], []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    lmtail._core.matvec(w, tid, cols, x, out, threads, "auto", "default")
                    lt.append(time.perf_counter() - t0)
                    gt.append(mm.time_once(threads))
                y = mm.run(x, threads)
            n = min(rows, 1024)  # error on the first rows: a float64 copy of the whole head is large
            ref = x.astype(np.float64) @ lmtail_deq(w[:n], tid, cols).T
            el = np.linalg.norm(out[:, :n] - ref) / np.linalg.norm(ref)
            eg = np.linalg.norm(y[:, :n] - ref) / np.linalg.norm(ref)
            ml, mg = np.median(lt), np.median(gt)
            gbs = w.nbytes / ml / 1e9
            print(f"{name} {rows}x{cols} T={T} th={threads}: lmtail {ml*1e3:.2f} ms ({gbs:.1f} GB/s) ggml {mg*1e3:.2f} ms"
                  f" ratio {ml/mg:.3f}  err lmtail {el:.1e} ggml {eg:.1e}", flush=True)


def lmtail_deq(w, tid, cols):
    out = np.empty((w.shape[0], cols), np.float32)
    lmtail._core.dequantize(tid, w, out, 0)
    return out.astype(np.float64)


if __name__ == "__main__":
    main()
