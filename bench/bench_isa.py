#!/usr/bin/env python3
"""Two lmtail SIMD tiers A/B on the full LM head (202048 x 6656), one process, lmtail only.

bench_head.py --isa a,b times the tiers next to ggml and a bandwidth probe (3-4 calls a round);
this script times only the two tiers, in ABBA rounds (the order alternates, so a drift in machine
state within a round hits both alike), which buys more rounds in the same time on a noisy shared
VM. Weights as bench_head.py (a 4096-row N(0, 0.02) slab quantised by lmtail, tiled). x Gaussian,
or with --outlier-channels n, n channels x100 (real hidden states; lmtail's i24 takes them out).
Reported per (type, T): each tier's median ms, the median over rounds of the per-round ratio B/A,
and the ratio of the best times (robust to other jobs' bursts).

    python bench/bench_isa.py --isa avx2,avx_vnni --dtype Q4_0,Q4_K,Q5_K,Q6_K,Q8_0 --T 1,8 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_head import COLS, ROWS, build_weights, loadavg  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--isa", default="avx2,avx_vnni", help="the two tiers, A,B (default avx2,avx_vnni)")
    ap.add_argument("--dtype", default="Q4_0,Q4_K,Q5_K,Q6_K,Q8_0")
    ap.add_argument("--T", default="1,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8, help="ABBA rounds (2 calls of each tier per round)")
    ap.add_argument("--outlier-channels", type=int, default=0)
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)

    import lmtail
    import lmtail.ops

    A, B = [s.strip() for s in args.isa.split(",")]
    out = {"isa": [A, B], "threads": args.threads, "rounds": args.rounds, "outlier_channels": args.outlier_channels,
           "loadavg_start": loadavg(), "start_utc": time.strftime("%H:%M:%S", time.gmtime()), "results": []}
    print(f"tiers {A} vs {B}, threads {args.threads}, {args.rounds} ABBA rounds, outlier channels "
          f"{args.outlier_channels}, load {out['loadavg_start']}, {out['start_utc']} UTC")
    rng = np.random.default_rng(args.seed + 1)
    for dtype in [d.strip().upper() for d in args.dtype.split(",") if d.strip()]:
        w = build_weights(lambda a, d=dtype: lmtail.quantize(a, d), args.rows, args.seed)
        for T in [int(t) for t in args.T.split(",")]:
            x = rng.standard_normal((T, COLS), dtype=np.float32)
            x[:, np.linspace(77, COLS - 77, args.outlier_channels, dtype=np.int64)] *= np.float32(100.0)
            ya = lmtail.ops.matvec(w, x, dtype, threads=args.threads, isa=A)
            yb = lmtail.ops.matvec(w, x, dtype, threads=args.threads, isa=B)
            same = bool(np.array_equal(ya.view(np.uint32), yb.view(np.uint32)))
            ta, tb = [], []
            for i in range(args.rounds):
                order = (A, B, B, A) if i % 2 == 0 else (B, A, A, B)
                for isa in order:
                    t0 = time.perf_counter()
                    lmtail.ops.matvec(w, x, dtype, threads=args.threads, isa=isa)
                    (ta if isa == A else tb).append(time.perf_counter() - t0)
            # per-round ratio: the round's two B calls over its two A calls
            ratios = [(tb[2 * i] + tb[2 * i + 1]) / (ta[2 * i] + ta[2 * i + 1]) for i in range(args.rounds)]
            r = {"dtype": dtype, "T": T, "bytes_equal": same, "a_s": ta, "b_s": tb,
                 "a_ms": statistics.median(ta) * 1e3, "b_ms": statistics.median(tb) * 1e3,
                 "ratio_median": statistics.median(ratios), "ratio_best": min(tb) / min(ta),
                 "ratio_q1q3": [float(v) for v in np.percentile(ratios, [25, 75])]}
            out["results"].append(r)
            print(f"  {dtype} T={T}: {A} {r['a_ms']:7.1f} ms  {B} {r['b_ms']:7.1f} ms  {B}/{A} per-round median "
                  f"{r['ratio_median']:.3f} (IQR {r['ratio_q1q3'][0]:.3f}-{r['ratio_q1q3'][1]:.3f}), best/best "
                  f"{r['ratio_best']:.3f}  bytes equal: {same}", flush=True)
        del w
    out["loadavg_end"] = loadavg()
    out["end_utc"] = time.strftime("%H:%M:%S", time.gmtime())
    print(f"load {out['loadavg_end']}, {out['end_utc']} UTC")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
