"""``lmtail`` (or ``python -m lmtail``): ``demo`` runs the LM-head tail on an embedded default or
a real GGUF head; ``bench`` measures this machine's read bandwidth and the tail per stage.

The default head is shaped like the seed model's (202048 x 6656 Q5_K, 924.6 MB). Quantising
1.3e9 floats would take minutes, so a 4096-row slab of seeded N(0, 0.02) weights is quantised
and tiled to 202048 rows; every call still streams all 924.6 MB from memory.

User errors (a bad option value, an unreadable or unsupported GGUF file) print one line naming
the typed error, with a hint, and exit with status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# The speculative part reads the top 40 (draft and p/q rows) and the chain's top-k + 1 (41).
_SPEC_MIN_ROWS = 41


def _build_default(rows: int, cols: int, seed: int, precision=None, threads=None):
    from .bench import synthetic_head, synthetic_weights

    weight, gamma, rng, dt = synthetic_weights(rows, cols, seed)
    print(f"built synthetic head {rows} x {cols} Q5_K ({weight.nbytes / 1e6:.1f} MB): quantised a "
          f"{min(rows, 4096)}-row slab and tiled it ({dt:.2f} s)")
    return synthetic_head(weight, gamma, threads=threads, precision=precision), rng


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gguf", help="use output.weight (or the tied token_embd.weight; any supported weight type) of "
                                  "this GGUF model instead of the synthetic head")
    p.add_argument("--rows", type=int, default=None, help="synthetic head rows (default 202048)")
    p.add_argument("--cols", type=int, default=None, help="synthetic head cols, a multiple of 256 (default 6656)")
    p.add_argument("--tokens", type=int, default=1, help="T: hidden rows per step (speculative verify width)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--topk", type=int, default=40)
    p.add_argument("--threads", type=int, default=None, help="head threads (default: all)")
    p.add_argument("--precision", choices=["i24", "f32", "i16"], default=None,
                   help="head matvec activation precision (CPU default i24: 24-bit block fixed point, "
                        "f32-grade; f32: f32 arithmetic; i16: fastest, ~3e-5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-seed", type=int, default=42,
                   help="seed of the llama.cpp-exact common sampler chain (lmtail.sampling.common_chain)")
    p.add_argument("--temp", type=float, default=0.8, help="common_chain temperature")
    p.add_argument("--draft", type=int, default=4, help="drafts per speculative step (0: skip that part)")
    p.add_argument("--spec-steps", type=int, default=3, help="speculative verification steps")


def _check_demo_args(a) -> None:
    """Refuse bad option values with the option's name, before the head is built."""
    from .errors import ParameterError

    for name, lo in (("rows", 1), ("cols", 256), ("tokens", 1), ("steps", 1), ("topk", 1), ("threads", 1),
                     ("draft", 0), ("spec_steps", 0)):
        v = getattr(a, name)
        if v is not None and v < lo:
            raise ParameterError(f"--{name.replace('_', '-')}: expected an integer >= {lo}; found {v}")
    if a.cols is not None and a.cols % 256:
        raise ParameterError(f"--cols: expected a multiple of 256 (a Q5_K row is made of 256-wide blocks); "
                             f"found {a.cols}")
    if a.gguf and (a.rows is not None or a.cols is not None):
        raise ParameterError("--rows/--cols shape the synthetic head; a --gguf head has the file's shape")
    if not np.isfinite(a.temp):
        raise ParameterError(f"--temp: expected a finite number; found {a.temp}")


def demo(a) -> int:
    """``lmtail demo`` on parsed arguments."""
    import lmtail
    from .errors import ParameterError

    _check_demo_args(a)
    if a.gguf:
        head = lmtail.Head.from_gguf(a.gguf, threads=a.threads, precision=a.precision)
        rng = np.random.default_rng(a.seed)
        print(f"loaded {a.gguf}: {head!r}")
    else:
        head, rng = _build_default(a.rows if a.rows is not None else 202048,
                                   a.cols if a.cols is not None else 6656, a.seed, a.precision, a.threads)
    if a.topk > head.rows:
        raise ParameterError(f"--topk: expected at most the head's {head.rows} rows; found {a.topk}")
    if a.draft > 0 and a.spec_steps > 0 and head.rows < _SPEC_MIN_ROWS:
        raise ParameterError(f"the speculative part reads the top {_SPEC_MIN_ROWS} candidates, more than this "
                             f"head's {head.rows} rows; pass --draft 0 to skip it")
    print(f"backend={head.backend} simd={lmtail._core.isa_name()} threads={a.threads or lmtail._core.default_threads()} "
          f"precision={head.precision} logit_scale={head.logit_scale} softcap={head.softcap} "
          f"eog_ids={list(head.eog_ids)[:8]}")
    wbytes = head.weight_bytes
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
          f"({wbytes / 1e6:.1f} MB of {head.dtype} weights per step)")
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


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``PROG: error: ...; see PROG --help``), exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _prog_name() -> str:
    # The console script runs with argv[0] = .../bin/lmtail; `python -m lmtail` with .../__main__.py.
    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if not base or base in ("__main__.py", "-c", "-m"):
        return "python -m lmtail"
    return base[:-3] if base.endswith(".py") else base


def _parser(prog: str) -> argparse.ArgumentParser:
    from . import __version__
    from .bench import __doc__ as bench_doc
    from .bench import add_arguments as bench_arguments

    debug = _Parser(add_help=False)
    # SUPPRESS: a subcommand's default must not overwrite `lmtail --debug demo`.
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the full traceback of an error instead of one line")
    p = _Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"lmtail {__version__}")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error instead of one line")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    d = sub.add_parser("demo", parents=[debug], help="run the LM-head tail on a synthetic or a GGUF head",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _demo_arguments(d)
    b = sub.add_parser("bench", parents=[debug], help="measure read bandwidth and the tail per stage",
                       description=bench_doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_arguments(b)
    return p


def _hint(e: BaseException, command: str) -> str:
    from .errors import BackendError, GGUFError, NonFiniteLogitsError, UnsupportedError

    if isinstance(e, GGUFError):
        return ("--gguf takes a llama.cpp GGUF model whose output.weight (or tied token_embd.weight) is of a type "
                "lmtail.capabilities() lists for the backend")
    if isinstance(e, UnsupportedError):
        return "lmtail.capabilities() lists the weight types each backend runs"
    if isinstance(e, BackendError):
        import lmtail

        return f"backends here: {', '.join(lmtail.backends())}"
    if isinstance(e, NonFiniteLogitsError):
        return "the head produced a non-finite value: check the model's weights and norm"
    if isinstance(e, MemoryError):
        return "not enough memory: try a smaller --rows"
    return f"see {command} --help"


def main(argv=None, prog=None) -> int:
    """The ``lmtail`` command: ``demo``, ``bench``, ``--version``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or _prog_name()
    p = _parser(prog)
    if not argv:
        p.print_usage(sys.stderr)
        print(f"{prog}: a command is required: demo or bench (see {prog} --help)", file=sys.stderr)
        return 2
    a = p.parse_args(argv)
    if a.command is None:
        p.print_usage(sys.stderr)
        print(f"{prog}: a command is required: demo or bench (see {prog} --help)", file=sys.stderr)
        return 2
    command = f"{prog} {a.command}"
    if getattr(a, "debug", False):
        return _run(a)
    from .errors import LmtailError

    try:
        return _run(a)
    except BrokenPipeError:
        # stdout closed early (`lmtail bench --json | head`): not an error of ours; silence the
        # interpreter's flush at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (LmtailError, OSError, MemoryError) as e:
        # A user error (bad value, bad or missing file): one line; a bug keeps its traceback.
        print(f"{command}: error: {type(e).__name__}: {e} (hint: {_hint(e, command)}; --debug shows the "
              f"traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130


def _run(a) -> int:
    if a.command == "demo":
        return demo(a)
    from . import bench

    return bench.main(a)


if __name__ == "__main__":
    sys.exit(main())
