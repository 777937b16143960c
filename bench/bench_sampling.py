"""Per-token time of sampler chains at vocab 202048: lmtail vs llama.cpp in the same run.

llama.cpp (llama-cpp-python 0.3.36, its own samplers through ctypes) is timed as
``llama_sampler_sample`` does the work: fill the {id, logit, p} array from the logits row, then
``llama_sampler_apply`` on the chain; both parts are reported (``ll_fill`` is numpy filling the
array, ``ll_apply`` the C chain alone). lmtail is timed as ``Chain.sample(logits)``, which includes
its own fill. Every chain is also checked to pick the same tokens as llama.cpp while timing.
Median over --iters calls after --warmup, per chain; ratio = lmtail / (llama.cpp fill + apply)
and lmtail / llama.cpp apply alone.

    python bench/bench_sampling.py [--vocab 202048] [--iters 50] [--only common_default]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from lmtail.sampling import Chain  # noqa: E402

CHAINS = {
    "greedy": [("greedy",)],
    "temp_dist": [("temp", 0.8), ("dist",)],
    "topk_topp_minp_temp_dist": [("top_k", 40), ("top_p", 0.95), ("min_p", 0.05), ("temp", 0.8), ("dist",)],
    "common_default": "common",
    "top_k40": [("top_k", 40), ("dist",)],
    "penalties_default": [("penalties", 64, 1.1, 0.1, 0.1), ("top_k", 40), ("top_p", 0.95), ("min_p", 0.05),
                          ("temp_ext", 0.8, 0.0, 1.0), ("dist",)],
    "min_p_temp_dist": [("min_p", 0.05), ("temp", 0.8), ("dist",)],
    "top_p_dist": [("top_p", 0.95), ("dist",)],
    "typical_dist": [("typical", 0.9), ("dist",)],
    "top_n_sigma_dist": [("top_n_sigma", 1.0), ("dist",)],
    "xtc_dist": [("xtc", 1.0, 0.1), ("dist",)],
    "temp_mirostat_v2": [("temp", 0.8), ("mirostat_v2", 5.0, 0.1)],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=202048)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--threads", type=int, default=1,
                    help="lmtail.sampling.set_threads (llama.cpp's samplers are single-threaded)")
    a = ap.parse_args(argv)

    from oracle import sampling as O  # the llama.cpp oracle (tests/oracle)
    from lmtail.sampling import common_chain, set_threads

    set_threads(a.threads)

    n = a.vocab
    rng = np.random.default_rng(0)
    rows = [(rng.standard_normal(n) * 3).astype(np.float32) for _ in range(8)]
    ids = np.arange(n, dtype=np.int32)
    print(f"vocab {n}, median of {a.iters} calls after {a.warmup} warm-ups; lmtail threads {a.threads}; "
          f"times in us/token")
    print(f"{'chain':28s} {'ll_fill':>8s} {'ll_apply':>9s} {'ll_total':>9s} {'lmtail':>9s} "
          f"{'lm/ll_tot':>9s} {'lm/ll_app':>9s}")
    for name, spec in CHAINS.items():
        if a.only and name not in a.only:
            continue
        seed = 1234
        if spec == "common":
            o = O.OracleCommonChain(n, seed=seed)
            m = common_chain(n, seed=seed)
        else:
            o = O.OracleChain(spec, n, seed)
            m = Chain(spec, n, seed)
        fill, app, lm = [], [], []
        mismatches = 0
        buf = o.buf
        for it in range(a.warmup + a.iters):
            x = rows[it % len(rows)]
            t0 = time.perf_counter()
            buf["id"] = ids
            buf["logit"] = x
            buf["p"] = 0.0
            t1 = time.perf_counter()
            off, size, sel, _ = o.apply_raw(buf)
            t2 = time.perf_counter()
            tok_ll = int(buf["id"][off + sel])
            t3 = time.perf_counter()
            tok_lm = m.sample(x)
            t4 = time.perf_counter()
            mismatches += tok_ll != tok_lm
            o.accept(tok_ll)
            m.accept(tok_ll)
            if it >= a.warmup:
                fill.append(t1 - t0)
                app.append(t2 - t1)
                lm.append(t4 - t3)
        f, p, mm = (float(np.median(v)) * 1e6 for v in (fill, app, lm))
        print(f"{name:28s} {f:8.0f} {p:9.0f} {f + p:9.0f} {mm:9.0f} {mm / (f + p):9.2f} {mm / p:9.2f}"
              + ("" if not mismatches else f"   TOKEN MISMATCHES: {mismatches}"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
