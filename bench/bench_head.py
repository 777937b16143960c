#!/usr/bin/env python3
"""Full-size LM head (202048 x 6656) of each weight type: lmtail vs llama.cpp's ggml, one process.

For each (dtype, T, threads) the two implementations run interleaved on the same GGUF bytes
(lmtail at each --precision, ggml, read-bandwidth probe, lmtail ..., ggml, probe, ...), so
machine noise (a 2-vCPU VM
whose memory bandwidth changes mode from minute to minute) hits both alike.  Reported per
config: median ms of each, GB/s = weight bytes / time, the median of the per-pair ratios
lmtail/ggml, and lmtail's GB/s as a fraction of the read bandwidth measured in the same loop
(``lmtail._core.read_bytes_checksum`` over a 1 GiB buffer with the same thread count).

ggml side: ``ggml_mul_mat`` through ctypes (tests/oracle/graph.py), each call one
``ggml_graph_plan`` + ``ggml_graph_compute``, which includes ggml's conversion of x to the type's
vec_dot type (q8_K for the K types, q8_0 for Q8_0/Q4_0, f16/bf16 for the float heads; as in
shared/research/perf-anchors.md).  lmtail side: ``lmtail.ops.matvec(w, x, dtype, threads=n,
precision=p)`` as a user calls it (argument checks, the output allocation and any activation
preparation included), for p in --precision ("default" = the type's default precision).

Weights: a 4096-row slab of seeded N(0,1)*0.02 is quantised with lmtail.quantize and tiled to
202048 rows; the whole head (0.5-5.4 GB by type) is still streamed from DRAM on every call, and the
kernels have no data-dependent branches, so real weights run at the same speed.  The SIMD tier
can be forced with LMTAIL_ISA=avx2 (ggml's build is whatever the oracle compiled).

    python bench/bench_head.py                          # Q5_K, ~1 min on 2 cores
    python bench/bench_head.py --dtype all --T 1,8 --threads 2
    python bench/bench_head.py --dtype Q6_K,Q8_0 --quick   # CI smoke: 3 reps per config
    python bench/bench_head.py --T 1 --threads 2 --reps 50 --json out.json
    LMTAIL_ISA=avx2 python bench/bench_head.py --dtype all   # the AVX2 tier on an AVX-512 machine
    python bench/bench_head.py --dtype all --T 1,8 --threads 2 --isa avx2,avx_vnni   # tiers A/B, interleaved
    python bench/bench_head.py --ggml-only              # oracle alone (weights from ggml_quantize_chunk)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

ROWS, COLS = 202048, 6656
SLAB_ROWS = 4096
ALL_DTYPES = ("Q5_K", "Q6_K", "Q8_0", "Q4_0", "Q4_K", "F16", "BF16", "F32")
BW_BYTES = 1 << 30
DEFAULT_REPS = {1: 30, 4: 16, 8: 10}  # ggml T=8 1 thread is ~360 ms a call
GOALS = {
    1: "lmtail <= ggml time at equal threads, and >= 80% of measured read bandwidth",
    8: "lmtail <= 0.8x ggml time",
}


def machine_info() -> dict:
    info = {"python": platform.python_version(), "numpy": np.__version__, "nproc": os.cpu_count()}
    try:
        txt = Path("/proc/cpuinfo").read_text()
        for key, name in (("model name", "cpu"), ("cpu family", "family"), ("model", "model")):
            for line in txt.splitlines():
                if line.split(":")[0].strip() == key:
                    info[name] = line.split(":", 1)[1].strip()
                    break
        flags = next((ln.split(":", 1)[1].split() for ln in txt.splitlines() if ln.startswith("flags")), [])
        info["isa_flags"] = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512vbmi") if f in flags)
        mem = next((ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")), "")
        info["mem_total"] = " ".join(mem.split()[1:])
        info["thp"] = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        info["cpu"] = platform.processor()
    return info


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def aligned_empty(nbytes: int, align: int = 4096) -> np.ndarray:
    raw = np.empty(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off : off + nbytes]


def build_weights(quantize, rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    slab_rows = min(SLAB_ROWS, rows)
    w = (rng.standard_normal((slab_rows, COLS), dtype=np.float32) * np.float32(0.02)).astype(np.float32)
    q = np.asarray(quantize(w), np.uint8)
    rb = q.shape[1]
    out = aligned_empty(rows * rb).reshape(rows, rb)
    for r0 in range(0, rows, slab_rows):
        n = min(slab_rows, rows - r0)
        out[r0 : r0 + n] = q[:n]
    return out


def med(v):
    return statistics.median(v) if v else float("nan")


def run_dtype(args, lm, core, G, dtype, type_id, w, Ts, precs, threads_list, warmup, gap, bw_buf, bw_sum,
              results, sanity) -> None:
    """Interleaved timing of one weight type at every (T, threads); appends to results."""
    rng = np.random.default_rng(args.seed + 1)
    what = "interleaved lmtail / ggml / 1 GiB read" if lm is not None else "ggml only"
    print(f"\n== timing: {what}, {args.gap_ms:g} ms idle gap before each call, {warmup} warm-up round(s)")
    for T in Ts:
        x = rng.standard_normal((T, COLS), dtype=np.float32)
        # Hidden states of real models have a few outlier channels (lmtail's i24 takes them out).
        x[:, np.linspace(77, COLS - 77, args.outlier_channels, dtype=np.int64)] *= np.float32(100.0)
        # --ggml-repack: the weight where llama.cpp loads it (CPU_REPACK, use_extra_bufts) for the
        # types/shapes ggml repacks on this CPU; ggml's own choice, so the anchor is llama.cpp's path.
        mm = G.MatMul(w, type_id, COLS, T, repack=args.ggml_repack)
        mm.set_x(x)
        if lm is not None:  # agreement of the two on the full head (ggml uses q8_K activations)
            mm.time_once(max(threads_list))
            y_gg = mm.result()
            for prec in precs:
                y_lm = lm.ops.matvec(w, x, dtype, threads=max(threads_list), precision=None if prec == "default" else prec,
                                     isa=args.isas[0])
                rel = float(np.linalg.norm(y_lm.astype(np.float64) - y_gg) / np.linalg.norm(y_gg.astype(np.float64)))
                agree = float(np.mean(np.argmax(y_lm, 1) == np.argmax(y_gg, 1)))
                same = bool(np.array_equal(y_lm.view(np.uint32), y_gg.view(np.uint32)))
                sanity[f"{dtype}/{T}/{prec}"] = {"rel_l2_lmtail_vs_ggml": rel, "argmax_agree": agree, "bytes_equal": same}
                if prec == "ggml":
                    print(f"  T={T} ggml: bytes equal to ggml's: {same}")
                print(f"  T={T} {prec}: lmtail vs ggml rel L2 {rel:.2e} (ggml's quantised activations for the integer types), "
                      f"argmax agreement {agree:.0%}")
        for nt in threads_list:
            reps = args.reps if args.reps is not None else (3 if args.quick else DEFAULT_REPS.get(T, 10))
            variants = [(p, isa) for p in precs for isa in args.isas]
            t_lms: dict = {v: [] for v in variants}
            t_gg, t_bw = [], []
            for i in range(warmup + reps):
                dts = {}
                if lm is not None:
                    for prec, isa in variants:
                        time.sleep(gap)
                        a = time.perf_counter()
                        lm.ops.matvec(w, x, dtype, threads=nt, precision=None if prec == "default" else prec, isa=isa)
                        dts[(prec, isa)] = time.perf_counter() - a
                time.sleep(gap)
                dt_gg = mm.time_once(nt)
                if lm is not None:
                    time.sleep(gap)
                    c = time.perf_counter()
                    s = core.read_bytes_checksum(bw_buf, nt)
                    d = time.perf_counter()
                    if s != bw_sum:
                        raise RuntimeError(f"read_bytes_checksum changed: {s} != {bw_sum}")
                if i >= warmup:
                    t_gg.append(dt_gg)
                    if lm is not None:
                        for v in variants:
                            t_lms[v].append(dts[v])
                        t_bw.append(d - c)
            for prec, isa in variants if lm is not None else [(None, None)]:
                r = {"dtype": dtype, "T": T, "threads": nt, "reps": reps, "ggml_s": t_gg, "precision": prec, "isa": isa,
                     "outlier_channels": args.outlier_channels}
                r["ggml_ms"] = med(t_gg) * 1e3
                r["ggml_GBps"] = w.nbytes / med(t_gg) / 1e9
                if lm is not None:
                    t_lm = t_lms[(prec, isa)]
                    if isa != args.isas[0]:  # per-round ratio to the first tier (same round, same machine state)
                        r["isa_ratio_median"] = med([p / q for p, q in zip(t_lm, t_lms[(prec, args.isas[0])])])
                        r["isa_ratio_vs"] = args.isas[0]
                    r.update(lmtail_s=t_lm, bw_s=t_bw)
                    r["lmtail_ms"] = med(t_lm) * 1e3
                    r["lmtail_GBps"] = w.nbytes / med(t_lm) / 1e9
                    r["pair_ratio_median"] = med([p / q for p, q in zip(t_lm, t_gg)])
                    r["read_bw_GBps"] = BW_BYTES / med(t_bw) / 1e9
                    r["read_bw_best_GBps"] = BW_BYTES / min(t_bw) / 1e9
                    r["lmtail_frac_of_bw"] = med([(w.nbytes / p) / (BW_BYTES / q) for p, q in zip(t_lm, t_bw)])
                    print(f"  {dtype} T={T} threads={nt} {prec} isa={isa}: lmtail {r['lmtail_ms']:7.1f} ms  ggml {r['ggml_ms']:7.1f} ms  "
                          f"pair ratio {r['pair_ratio_median']:.3f}  read BW {r['read_bw_GBps']:.1f} GB/s  ({reps} pairs)")
                else:
                    print(f"  {dtype} T={T} threads={nt}: ggml {r['ggml_ms']:7.1f} ms  ({reps} runs, best {min(t_gg)*1e3:.1f})")
                results.append(r)
        mm.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", default="1,4,8", help="comma list of batch sizes (default 1,4,8)")
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts (default 1,2)")
    ap.add_argument("--reps", type=int, default=None, help="timed pairs per config (default 30/16/10 for T=1/4/8)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed pairs per config (default 2, --quick 1)")
    ap.add_argument("--quick", action="store_true", help="CI smoke: 3 timed pairs per config, 1 warm-up")
    ap.add_argument("--gap-ms", type=float, default=20.0,
                    help="idle gap before each timed call, so neither side's spinning threads (libgomp "
                         "spins for ms after a parallel region) steal the 2 cores from the other (default 20)")
    ap.add_argument("--rows", type=int, default=ROWS, help=f"head rows (default {ROWS}; smaller only for smoke tests)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--isa", default="auto",
                    help="comma list of lmtail SIMD tiers, each timed in every round next to the others (e.g. "
                         "avx2,avx_vnni); with two or more, the summary adds each tier's median per-round ratio "
                         "to the first")
    ap.add_argument("--outlier-channels", type=int, default=0,
                    help="multiply this many fixed channels of x by 100 (outlier channels, as real hidden states have)")
    ap.add_argument("--dtype", default="Q5_K", help=f"comma list of head weight types, or 'all' ({','.join(ALL_DTYPES)}); default Q5_K")
    ap.add_argument("--precision", default="default", help="comma list of lmtail precisions ('default' = the type's own; e.g. default,f32)")
    ap.add_argument("--ggml-repack", action="store_true",
                    help="ggml's weight in the CPU_REPACK buffer (llama.cpp's default; repacks Q4_0/Q4_K rows%%8==0 on AVX2)")
    ap.add_argument("--ggml-only", action="store_true", help="skip lmtail (weights from ggml_quantize_chunk, no bandwidth probe)")
    ap.add_argument("--json", metavar="PATH", help="write all raw timings and summaries as JSON")
    args = ap.parse_args(argv)

    Ts = [int(t) for t in args.T.split(",")]
    args.isas = [s.strip() for s in args.isa.split(",") if s.strip()]
    precs = [p for p in args.precision.split(",") if p]
    threads_list = [int(t) for t in args.threads.split(",")]
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    gap = args.gap_ms / 1000.0

    from oracle import graph as G

    info = machine_info()
    info["ggml"] = G.describe()
    lm = None
    if not args.ggml_only:
        import lmtail
        import lmtail._core as core
        import lmtail.ops

        lm = lmtail
        info["lmtail_isa"] = ",".join(core.isa_name(i) for i in args.isas)
        info["lmtail_version"] = getattr(lmtail, "__version__", "?")

    info["loadavg_start"] = loadavg()
    print("== machine")
    for k, v in info.items():
        print(f"  {k:15s} {v}")
    if float(info["loadavg_start"].split()[0] if info["loadavg_start"] != "?" else 0) > 0.5:
        print("  WARNING: other processes are using the CPU (load average above); on a 2-core box the timings "
              "below are then not representative")

    bw_buf = None
    bw_sum = None
    if lm is not None:
        bw_buf = aligned_empty(BW_BYTES)
        bw_buf[:] = 1  # touch every page
        bw_sum = core.read_bytes_checksum(bw_buf, 1)

    from oracle import quant as OQ

    dtypes = list(ALL_DTYPES) if args.dtype == "all" else [d.strip().upper() for d in args.dtype.split(",") if d.strip()]
    results = []
    sanity = {}
    for dtype in dtypes:
        type_id = OQ.GGML_TYPES[dtype]
        if lm is None:
            quantizer = lambda a, t=type_id: OQ.quantize(t, a)  # noqa: E731
        else:
            quantizer = lambda a, d=dtype: lm.quantize(a, d)  # noqa: E731
        t0 = time.perf_counter()
        w = build_weights(quantizer, args.rows, args.seed)
        print(f"\n== weights: {dtype} {args.rows} x {COLS} = {w.nbytes:,} B; a {min(SLAB_ROWS, args.rows)}-row slab of "
              f"N(0,1)*0.02 (seed {args.seed}) quantised with "
              f"{'ggml_quantize_chunk' if lm is None else 'lmtail.quantize'} and tiled to {args.rows} rows "
              f"({time.perf_counter() - t0:.1f} s). Both sides read these same bytes (ggml binds them zero-copy).")
        run_dtype(args, lm, core if lm is not None else None, G, dtype, type_id, w, Ts, precs, threads_list, warmup,
                  gap, bw_buf, bw_sum, results, sanity)
        del w

    info["loadavg_end"] = loadavg()
    # ------------------------------------------------------------------ summary
    print("\n== results (medians; GB/s = weight bytes / time; ratio = median over pairs of lmtail/ggml)")
    if lm is not None:
        hdr = (f"{'dtype':>5} {'T':>2} {'thr':>3} {'prec':>7} | {'lmtail ms':>9} {'GB/s':>6} | {'ggml ms':>8} {'GB/s':>6} | "
               f"{'lm/ggml':>7} | {'read BW':>7} {'lm/BW':>6} | goal")
        print(hdr)
        print("-" * len(hdr))
        for r in results:
            T = r["T"]
            if T == 1:
                ok = r["pair_ratio_median"] <= 1.0 and r["lmtail_frac_of_bw"] >= 0.8
                goal = f"{'MET ' if ok else 'MISS'} (<=1.00x ggml, >=80% BW)"
            elif T == 8:
                ok = r["pair_ratio_median"] <= 0.8
                goal = f"{'MET ' if ok else 'MISS'} (<=0.80x ggml)"
            else:
                ok, goal = None, "-"
            r["goal_met"] = ok
            tier = f" [{r['isa']}" + (f" {r['isa_ratio_median']:.3f}x {r['isa_ratio_vs']}]" if "isa_ratio_median" in r else "]")
            print(f"{r['dtype']:>5} {T:>2} {r['threads']:>3} {r['precision']:>7} | {r['lmtail_ms']:>9.1f} {r['lmtail_GBps']:>6.1f} | {r['ggml_ms']:>8.1f} "
                  f"{r['ggml_GBps']:>6.1f} | {r['pair_ratio_median']:>7.3f} | {r['read_bw_GBps']:>7.1f} "
                  f"{r['lmtail_frac_of_bw']:>6.0%} | {goal}{tier if len(args.isas) > 1 else ''}")
        best = max((r["read_bw_best_GBps"] for r in results), default=float("nan"))
        print(f"\nbest read-bandwidth probe of the run (any thread count): {best:.1f} GB/s; lmtail T=1 at that limit:")
        for r in results:
            if r["T"] == 1:
                print(f"  {r['dtype']:>5} threads={r['threads']} {r['precision']}: {r['lmtail_GBps'] / best:.0%} "
                      f"(ggml {r['ggml_GBps'] / best:.0%})")
        print("\ngoals:")
        for T, g in GOALS.items():
            print(f"  T={T}: {g}")
    else:
        print(f"{'dtype':>5} {'T':>2} {'thr':>3} | {'ggml ms':>8} {'best':>7} {'GB/s':>6}")
        for r in results:
            print(f"{r['dtype']:>5} {r['T']:>2} {r['threads']:>3} | {r['ggml_ms']:>8.1f} {min(r['ggml_s'])*1e3:>7.1f} {r['ggml_GBps']:>6.1f}")

    print(f"load average: start {info['loadavg_start']}, end {info['loadavg_end']} (1/5/15 min)")

    if args.json:
        out = {"machine": info, "rows": args.rows, "cols": COLS, "dtypes": dtypes, "bw_bytes": BW_BYTES,
               "seed": args.seed, "gap_ms": args.gap_ms, "warmup": warmup, "sanity": sanity, "results": results,
               "goals": {str(k): v for k, v in GOALS.items()}}
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
