"""``python -m lmtail demo``: the LM-head tail on an embedded default or a real GGUF head.

The default head is shaped like the seed model's (202048 x 6656 Q5_K, 924.6 MB). Quantising
1.3e9 floats would take minutes, so a 4096-row slab of seeded N(0, 0.02) weights is quantised
and tiled to 202048 rows; every call still streams all 924.6 MB from memory.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _build_default(rows: int, cols: int, seed: int, precision=None):
    import lmtail

    rng = np.random.default_rng(seed)
    slab_rows = min(rows, 4096)
    t0 = time.perf_counter()
    slab = lmtail.quantize_q5_k((rng.standard_normal((slab_rows, cols)) * 0.02).astype(np.float32))
    reps = -(-rows // slab_rows)
    weight = np.ascontiguousarray(np.tile(slab, (reps, 1))[:rows])
    gamma = rng.uniform(0.8, 1.2, cols).astype(np.float32)
    dt = time.perf_counter() - t0
    print(f"built synthetic head {rows} x {cols} Q5_K ({weight.nbytes / 1e6:.1f} MB): quantised a "
          f"{slab_rows}-row slab and tiled it ({dt:.2f} s)")
    head = lmtail.Head(weight, gamma, logit_scale=0.196116, softcap=20.0, eps=1e-5, precision=precision)
    return head, rng


def demo(argv=None) -> int:
    import lmtail

    p = argparse.ArgumentParser(prog="python -m lmtail demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", help="use output.weight of this GGUF model instead of the synthetic head")
    p.add_argument("--rows", type=int, default=202048)
    p.add_argument("--cols", type=int, default=6656)
    p.add_argument("--tokens", type=int, default=1, help="T: hidden rows per step (speculative verify width)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--topk", type=int, default=40)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--precision", choices=["f32", "i16"], default=None,
                   help="head matvec activation precision (default: the backend's, i16 on the CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-seed", type=int, default=42,
                   help="seed of the llama.cpp-exact common sampler chain (lmtail.sampling.common_chain)")
    p.add_argument("--temp", type=float, default=0.8, help="common_chain temperature")
    a = p.parse_args(argv)

    if a.gguf:
        head = lmtail.Head.from_gguf(a.gguf, threads=a.threads, precision=a.precision)
        rng = np.random.default_rng(a.seed)
        print(f"loaded {a.gguf}: {head!r}")
    else:
        head, rng = _build_default(a.rows, a.cols, a.seed, a.precision)
    print(f"backend={head.backend} simd={lmtail._core.isa_name()} threads={a.threads or lmtail._core.default_threads()} "
          f"precision={head.precision} logit_scale={head.logit_scale} softcap={head.softcap} "
          f"eog_ids={list(head.eog_ids)[:8]}")
    wbytes = head.weight.nbytes
    T = a.tokens
    stats: dict[str, list] = {"norm": [], "head": [], "cap": [], "greedy": [], "topk": [], "sample": []}
    from lmtail.sampling import common_chain

    sampler = common_chain(head.rows, seed=a.sample_seed, temp=a.temp)
    print(f"sampler: {sampler!r} seed={a.sample_seed}")
    sampled: list[int] = []
    for step in range(a.steps):
        h = (rng.standard_normal((T, head.cols)) * 2).astype(np.float32)
        tok = head.greedy(h)
        tm = dict(head.last_timings)
        for k in ("norm", "head", "cap"):
            stats[k].append(tm[k])
        stats["greedy"].append(tm["select"])
        ids, vals = head.topk(h, a.topk)
        stats["topk"].append(head.last_timings["select"])
        row = head.logits(h)[0]  # the full row of the first hidden state -> seeded sampling
        t0 = time.perf_counter()
        tok_s = sampler.sample(np.ascontiguousarray(row))
        stats["sample"].append(time.perf_counter() - t0)
        sampler.accept(tok_s)
        sampled.append(tok_s)
        print(f"step {step}: greedy={tok.tolist()} top{a.topk}[:3]={ids[0, :3].tolist()} "
              f"values={np.round(vals[0, :3], 4).tolist()} sampled={sampled[-1]}")
    med = {k: float(np.median(v)) * 1e3 for k, v in stats.items() if v}
    print("\nper-stage median ms (T=%d): " % T + "  ".join(f"{k}={v:.3f}" for k, v in med.items()))
    print(f"head matvec: {wbytes / (med['head'] / 1e3) / 1e9:.1f} GB/s effective "
          f"({wbytes / 1e6:.1f} MB of Q5_K weights per step)")
    total = med["norm"] + med["head"] + med["cap"] + med["greedy"]
    print(f"greedy tail total: {total:.2f} ms/step; bytes read back per greedy row: 4")
    if sampled:
        print(f"seeded sampling (llama.cpp common chain, seed {a.sample_seed}): tokens {sampled} — the same "
              f"seed and logits give the same tokens in llama.cpp")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m lmtail demo [--gguf PATH] [--tokens T] [--steps N] [--threads N]")
        return 0 if argv else 2
    if argv[0] == "demo":
        return demo(argv[1:])
    print(f"unknown command {argv[0]!r}; try: python -m lmtail demo", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
