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
    # Tiled copies would give every logit a twin (exact ties at the top-k boundary, which the
    # exact top-k route must answer with a whole-row read). Nudge the first block scale (fp16) of
    # copy c by c ulps so copies differ.
    if reps > 1:
        d_bits = weight[:, 0:2].copy().view(np.uint16)[:, 0]
        copy_no = (np.arange(rows) // slab_rows).astype(np.uint16)
        weight[:, 0:2] = (d_bits + copy_no).astype(np.uint16).view(np.uint8).reshape(rows, 2)
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
    p.add_argument("--precision", choices=["i24", "f32", "i16"], default=None,
                   help="head matvec activation precision (CPU default i24: 24-bit block fixed point, "
                        "f32-grade; f32: f32 arithmetic; i16: fastest, ~3e-5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-seed", type=int, default=42,
                   help="seed of the llama.cpp-exact common sampler chain (lmtail.sampling.common_chain)")
    p.add_argument("--temp", type=float, default=0.8, help="common_chain temperature")
    p.add_argument("--draft", type=int, default=4, help="drafts per speculative step (0: skip that part)")
    p.add_argument("--spec-steps", type=int, default=3, help="speculative verification steps")
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
    if a.draft > 0 and a.spec_steps > 0:
        _speculative(head, rng, a)
    return 0


def _speculative(head, rng, a) -> None:
    """Speculative steps with a draft = the same head on perturbed hidden states, verified on
    every read-back route; prints acceptance and the bytes each route read back."""
    from lmtail.sampling import TopKRows, common_chain, topk_needed
    from lmtail.speculative import verify, verify_greedy, verify_sample_and_match

    n = a.draft
    print(f"\nspeculative verification: {n} drafts per step from a perturbed head (hidden + N(0, 0.5^2) noise)")
    chains = {r: common_chain(head.rows, seed=a.sample_seed, temp=a.temp) for r in ("rows", "topk")}
    k = topk_needed(chains["topk"])
    stream = common_chain(head.rows, seed=a.sample_seed).samplers[-1].rng  # a dist stream for verify()
    totals = {name: [0, 0, 0] for name in ("greedy", "sample-and-match rows", "sample-and-match top-k", "p/q rule")}

    def probs(vals):  # the chain's distribution over its top-k candidates (top-k, temperature)
        z = vals.astype(np.float64) / max(a.temp, 1e-6)
        e = np.exp(z - z.max())
        return (e / e.sum()).astype(np.float32)

    for step in range(a.spec_steps):
        h = (rng.standard_normal((n + 1, head.cols)) * 2).astype(np.float32)
        h_draft = h + (rng.standard_normal(h.shape) * 0.5).astype(np.float32)
        d_ids, d_vals = head.topk(h_draft[:n], 40)
        draft_greedy = d_ids[:, 0].astype(int).tolist()
        # 1. greedy target, greedy draft: 4 bytes per row
        dec = verify_greedy(head, h, draft_greedy)
        totals["greedy"][0] += dec.accepted
        totals["greedy"][1] += len(dec.tokens)
        totals["greedy"][2] += head.last_bytes_read_back
        # 2./3. llama-server's sample-and-match on whole rows and on the top-k route: same tokens
        full = head.logits(h)
        b_rows = head.last_bytes_read_back
        dec_rows = verify_sample_and_match(chains["rows"], full, draft_greedy)
        ids, vals = head.topk(h, k + 1)
        b_topk = head.last_bytes_read_back
        src = TopKRows(ids, vals, head.row)
        before = head.bytes_read_back
        dec_topk = verify_sample_and_match(chains["topk"], src, draft_greedy)
        b_topk += head.bytes_read_back - before  # whole rows fetched on a fallback, if any
        assert dec_rows == dec_topk, (dec_rows, dec_topk)
        for name, dec_, b in (("sample-and-match rows", dec_rows, b_rows), ("sample-and-match top-k", dec_topk, b_topk)):
            totals[name][0] += dec_.accepted
            totals[name][1] += len(dec_.tokens)
            totals[name][2] += b
        # 4. the p/q rule with draft probabilities (drafts sampled from q over the top 40)
        q_rows = [(d_ids[i].astype(np.int32), probs(d_vals[i])) for i in range(n)]
        drafts = []
        for ids_q, q in q_rows:
            qd = q.astype(np.float64)
            drafts.append(int(ids_q[rng.choice(len(ids_q), p=qd / qd.sum())]))
        t_ids, t_vals = head.topk(h, 40)
        p_rows = [(t_ids[i].astype(np.int32), probs(t_vals[i])) for i in range(n + 1)]
        dec_pq = verify(drafts, q_rows, p_rows, None, stream, n_vocab=head.rows)
        totals["p/q rule"][0] += dec_pq.accepted
        totals["p/q rule"][1] += len(dec_pq.tokens)
        totals["p/q rule"][2] += head.last_bytes_read_back
        print(f"spec step {step}: greedy accepted {dec.accepted}/{n} -> {list(dec.tokens)}; sample-and-match "
              f"accepted {dec_rows.accepted}/{n} (top-k route identical); p/q rule accepted {dec_pq.accepted}/{n}")
    print(f"{'route':26s} {'accepted/drafted':>17s} {'tokens/step':>12s} {'bytes read back/token':>22s}")
    for name, (acc, toks, nbytes) in totals.items():
        print(f"{name:26s} {acc:8d}/{n * a.spec_steps:<8d} {toks / a.spec_steps:12.2f} {nbytes / max(toks, 1):22.0f}")


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
