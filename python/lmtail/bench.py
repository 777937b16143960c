"""``lmtail bench``: this machine's read bandwidth and the LM-head tail's time per stage.

The LM head streams its whole weight matrix once per step, so the figure that matters is how
close the head matvec comes to the machine's read bandwidth. This command measures both in one
process: the bandwidth probe reads a buffer well above the last-level cache (best of several
runs, with 1 thread and with all threads), then every backend present runs the tail (final
norm -> head matvec -> scale/soft cap -> greedy or top-k) on the seed model's head shape
(202048 x 6656 Q5_K, synthetic weights: a quantised slab tiled to every row, so all 924.6 MB are
streamed on every call) or on ``--gguf PATH``'s head. Stage times come from ``Head.last_timings``.

GB/s is the weight bytes divided by the stage's time (the head matvec, and the whole tail); % bw
is that figure over the bandwidth measured with the same thread count.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .errors import LmtailError, ParameterError

# The seed model's head and the demo's synthetic-head constants.
SEED_ROWS, SEED_COLS = 202048, 6656
SLAB_ROWS = 4096
SYNTH_LOGIT_SCALE, SYNTH_SOFTCAP, SYNTH_EPS = 0.196116, 20.0, 1e-5
# Emulators run the real kernels on CPU fibers for correctness; their timings say nothing about the
# hardware they emulate, and a full-size head takes minutes there. Benched only when named.
EMULATED = frozenset({"metal-emu"})
STAGES = ("norm", "head", "cap", "select_greedy", "select_topk", "total_greedy", "total_topk",
          "wall_greedy", "wall_topk")
STAGE_LABELS = {
    "norm": "norm", "head": "head matvec", "cap": "scale + cap", "select_greedy": "select greedy",
    "select_topk": "select top-k", "total_greedy": "total greedy", "total_topk": "total top-k",
    "wall_greedy": "greedy() call", "wall_topk": "topk() call",
}
# Stages that stream the weights: the ones a GB/s of the weight bytes describes.
WEIGHT_STAGES = frozenset({"head", "total_greedy", "total_topk", "wall_greedy", "wall_topk"})


class MissingExtraError(LmtailError, ImportError):
    """An optional dependency of a command is not installed (e.g. matplotlib for ``--plot``)."""


def progress(msg: str) -> None:
    """One progress line on stderr (stdout stays machine-readable under ``--json``)."""
    print(f"lmtail: {msg}", file=sys.stderr, flush=True)


# ---- the synthetic head (shared with ``lmtail demo``) ---------------------------------------------
def synthetic_weights(rows: int, cols: int, seed: int, log: Callable[[str], None] = progress):
    """A (rows, cols) Q5_K weight and a gamma shaped like the seed model's head.

    Quantising rows x cols floats would take minutes at the seed's size, so a 4096-row slab of
    seeded N(0, 0.02) weights is quantised and tiled to every row. Returns (weight, gamma, rng,
    seconds): rng has drawn the slab and gamma, so callers continue its sequence.
    """
    from .quant import quantize_q5_k

    rng = np.random.default_rng(seed)
    slab_rows = min(rows, SLAB_ROWS)
    nbytes = rows * (cols // 256) * 176
    if nbytes > 50e6:  # ~6 s at the seed's size on a small machine
        log(f"building a synthetic {rows} x {cols} Q5_K head ({nbytes / 1e6:.1f} MB) ...")
    t0 = time.perf_counter()
    slab = quantize_q5_k((rng.standard_normal((slab_rows, cols)) * 0.02).astype(np.float32))
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
    return weight, gamma, rng, time.perf_counter() - t0


def synthetic_head(weight, gamma, *, backend: str = "cpu", threads=None, precision=None):
    """A Head over :func:`synthetic_weights` with the seed model's scale, soft cap and epsilon."""
    from .head import Head

    return Head(weight, gamma, logit_scale=SYNTH_LOGIT_SCALE, softcap=SYNTH_SOFTCAP, eps=SYNTH_EPS,
                backend=backend, threads=threads, precision=precision)


# ---- the machine -----------------------------------------------------------------------------------
def _read_probe():
    """The read-bandwidth probe of the extension (``read_bytes_checksum(buf, threads)``), or None.

    The one place that names the binding: it may move to an internal name."""
    from . import _core

    for name in ("read_bytes_checksum", "_read_bytes_checksum"):
        fn = getattr(_core, name, None)
        if fn is not None:
            return fn
    sub = getattr(_core, "_bench", None)
    return getattr(sub, "read_bytes_checksum", None)


def llc_bytes() -> Optional[int]:
    """Size of the largest CPU cache (the last level), or None when the OS does not say."""
    best = 0
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            s = (d / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
        try:
            best = max(best, int(s.rstrip("KkMmGg")) * mult)
        except ValueError:
            continue
    if not best:
        try:
            best = int(os.sysconf("SC_LEVEL3_CACHE_SIZE") or 0)
        except (ValueError, OSError, AttributeError):
            best = 0
    if not best and sys.platform == "darwin":
        best = _sysctl_int("hw.l2cachesize") or 0
    return best or None


def _sysctl(key: str) -> Optional[str]:
    import subprocess

    try:
        r = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    return r.stdout.strip() or None


def _sysctl_int(key: str) -> Optional[int]:
    v = _sysctl(key)
    try:
        return int(v) if v else None
    except ValueError:
        return None


def machine_info() -> dict:
    """CPU model, lmtail's SIMD path (``isa``), core counts and versions, recorded beside each figure."""
    from . import __version__, _core

    info: dict = {
        "cpu": None, "isa": _core.isa_name(), "cpu_flags": None, "machine": platform.machine(),
        "system": platform.system(), "nproc": os.cpu_count(), "default_threads": int(_core.default_threads()),
        "llc_bytes": llc_bytes(), "python": platform.python_version(), "numpy": np.__version__,
        "lmtail": __version__, "loadavg": None,
    }
    try:
        info["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        pass
    try:
        txt = Path("/proc/cpuinfo").read_text()
    except OSError:
        txt = ""
    for line in txt.splitlines():
        key, _, val = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "Hardware", "cpu model") and info["cpu"] is None:
            info["cpu"] = val.strip()
        elif key in ("flags", "Features") and info["cpu_flags"] is None:
            wanted = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512vbmi",
                      "avx_vnni", "asimd", "asimddp", "sve", "i8mm")
            have = set(val.split())
            info["cpu_flags"] = " ".join(f for f in wanted if f in have)
    if info["cpu"] is None and sys.platform == "darwin":
        info["cpu"] = _sysctl("machdep.cpu.brand_string")
    if info["cpu"] is None:
        info["cpu"] = platform.processor() or platform.machine() or "unknown"
    return info


def _aligned_buffer(nbytes: int, align: int = 4096) -> np.ndarray:
    raw = np.empty(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off: off + nbytes]


def probe_buffer_bytes(llc: Optional[int]) -> int:
    """16x the last-level cache, at least 512 MiB, at most 2 GiB and half the free memory."""
    n = max(512 << 20, 16 * (llc or 0))
    n = min(n, 2 << 30)
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        n = min(n, max(64 << 20, avail // 2))
    except (ValueError, OSError, AttributeError):
        pass
    return n


def measure_bandwidth(thread_counts, runs: int, nbytes: int, log=progress) -> Optional[dict]:
    """Best-of-``runs`` read bandwidth per thread count over an ``nbytes`` buffer, or None when
    this build has no probe."""
    probe = _read_probe()
    if probe is None:
        return None
    log(f"measuring read bandwidth: best of {runs} reads of a {nbytes / 2**20:.0f} MiB buffer with "
        f"{', '.join(map(str, thread_counts))} thread(s) ...")
    buf = _aligned_buffer(nbytes)
    buf[:] = 1  # touch every page so the timed reads see resident memory
    out = []
    for nt in thread_counts:
        probe(buf, nt)  # warm-up: the thread pool, the TLB
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            probe(buf, nt)
            times.append(time.perf_counter() - t0)
        best = min(times)
        out.append({"threads": int(nt), "gbps": nbytes / best / 1e9, "best_s": best, "samples_s": times})
    del buf
    return {"buffer_bytes": int(nbytes), "runs": int(runs), "results": out}


# ---- the head --------------------------------------------------------------------------------------
def time_head(head, hidden: np.ndarray, topk: int, repeat: int) -> dict:
    """Median (and every sample of) each stage's time in seconds, over ``repeat`` greedy and
    ``repeat`` top-k calls after one warm-up call of each."""
    head.greedy(hidden)
    head.topk(hidden, topk)
    samples: dict[str, list] = {s: [] for s in STAGES if not s.startswith("total_")}
    for _ in range(repeat):
        t0 = time.perf_counter()
        head.greedy(hidden)
        wall = time.perf_counter() - t0
        tm = dict(head.last_timings)
        for s in ("norm", "head", "cap"):
            samples[s].append(tm[s])
        samples["select_greedy"].append(tm["select"])
        samples["wall_greedy"].append(wall)
        t0 = time.perf_counter()
        head.topk(hidden, topk)
        wall = time.perf_counter() - t0
        tm = dict(head.last_timings)
        for s in ("norm", "head", "cap"):
            samples[s].append(tm[s])
        samples["select_topk"].append(tm["select"])
        samples["wall_topk"].append(wall)
    return samples


def _stage_rows(samples: dict, wbytes: int, bw_gbps: Optional[float]) -> list:
    med = {s: statistics.median(v) for s, v in samples.items() if v}
    # A total is the sum of its stages' medians, so the table adds up; the call rows are medians
    # of measured wall times.
    for sel in ("greedy", "topk"):
        med[f"total_{sel}"] = med["norm"] + med["head"] + med["cap"] + med[f"select_{sel}"]
    rows = []
    for s in STAGES:
        v = samples.get(s)
        gbps = wbytes / med[s] / 1e9 if s in WEIGHT_STAGES and med[s] > 0 else None
        row = {"stage": s, "ms": med[s] * 1e3, "gbps": gbps,
               "pct_bw": 100.0 * gbps / bw_gbps if gbps is not None and bw_gbps else None}
        if v:
            row.update(min_ms=min(v) * 1e3, samples_ms=[x * 1e3 for x in v])
        rows.append(row)
    return rows


# ---- the command -----------------------------------------------------------------------------------
def _positive(name: str, v, lo: int = 1):
    if v is not None and v < lo:
        raise ParameterError(f"--{name}: expected an integer >= {lo}; found {v}")


def check_args(a) -> None:
    """Refuse bad option values with the option's name (before anything slow runs)."""
    for name in ("rows", "cols", "tokens", "threads", "repeat", "topk", "bw_runs"):
        _positive(name.replace("_", "-"), getattr(a, name, None))
    if a.cols is not None and a.cols % 256:
        raise ParameterError(f"--cols: expected a multiple of 256 (a Q5_K row is made of 256-wide blocks); "
                             f"found {a.cols}")
    if a.gguf and (a.rows is not None or a.cols is not None):
        raise ParameterError("--rows/--cols shape the synthetic head; a --gguf head has the file's shape")
    rows = a.rows if a.rows is not None else SEED_ROWS
    if not a.gguf and a.topk > rows:
        raise ParameterError(f"--topk: expected at most --rows ({rows}); found {a.topk}")
    if getattr(a, "bw_mib", None) is not None and a.bw_mib < 1:
        raise ParameterError(f"--bw-mib: expected an integer >= 1; found {a.bw_mib}")


def add_arguments(p) -> None:
    p.add_argument("--gguf", metavar="PATH", help="bench this GGUF model's head instead of the synthetic one")
    p.add_argument("--rows", type=int, default=None, help=f"synthetic head rows (default {SEED_ROWS})")
    p.add_argument("--cols", type=int, default=None, help=f"synthetic head cols, a multiple of 256 (default {SEED_COLS})")
    p.add_argument("--tokens", type=int, default=1, help="T: hidden rows per call (speculative verify width; default 1)")
    p.add_argument("--threads", type=int, default=None, help="head threads (default: all, lmtail's default)")
    p.add_argument("--repeat", type=int, default=5, help="timed calls per stage and backend (default 5; medians reported)")
    p.add_argument("--topk", type=int, default=40, help="k of the top-k selection (default 40)")
    p.add_argument("--precision", choices=["i24", "f32", "i16"], default=None,
                   help="CPU head matvec activation precision (default: the backend's)")
    p.add_argument("--backend", action="append", metavar="NAME",
                   help="bench only this backend (repeatable; default: every backend present, emulators aside)")
    p.add_argument("--bw-runs", type=int, default=5, help="bandwidth probe runs per thread count (best kept; default 5)")
    p.add_argument("--bw-mib", type=int, default=None,
                   help="bandwidth probe buffer in MiB (default 16x the last-level cache, at least 512)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic weights and hidden states")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout instead of the table")
    p.add_argument("--plot", metavar="FILE.png", help="plot time per stage and bandwidth use (needs matplotlib)")


def _matplotlib():
    try:
        import matplotlib
    except ImportError as e:
        raise MissingExtraError("--plot needs matplotlib, which is not installed here; install it with "
                                "pip install 'lmtail[plot]' (or pip install matplotlib)") from e
    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    return plt


def _backends(a) -> tuple[list, list]:
    from . import backends as available
    from ._backend import get

    present = available()
    if a.backend:
        for name in a.backend:
            get(name)  # BackendError naming the available ones
        return list(dict.fromkeys(a.backend)), []
    run = [b for b in present if b not in EMULATED]
    skipped = [{"backend": b, "reason": "an emulator (correctness, not speed); name it with --backend to run it"}
               for b in present if b in EMULATED]
    return run, skipped


def run(a) -> dict:
    """Everything ``lmtail bench`` measures, as the JSON document it prints."""
    from . import _core
    from .head import Head

    check_args(a)
    if a.plot:
        _matplotlib()  # fail before the slow part, not after it
    run_backends, skipped = _backends(a)
    info = machine_info()
    all_threads = int(_core.default_threads())
    head_threads = a.threads if a.threads is not None else all_threads
    bw_threads = sorted({1, all_threads, head_threads})
    nbytes = a.bw_mib << 20 if a.bw_mib is not None else probe_buffer_bytes(info["llc_bytes"])
    bw = measure_bandwidth(bw_threads, a.bw_runs, nbytes)
    bw_at = {r["threads"]: r["gbps"] for r in bw["results"]} if bw else {}

    weight = gamma = None
    rng = np.random.default_rng(a.seed)
    if a.gguf:
        source = os.fspath(a.gguf)
    else:
        rows = a.rows if a.rows is not None else SEED_ROWS
        cols = a.cols if a.cols is not None else SEED_COLS
        weight, gamma, rng, dt = synthetic_weights(rows, cols, a.seed)
        source = "synthetic"
    results = []
    head_info: dict = {"source": source}
    if weight is not None:
        head_info["build_s"] = dt
    for b in run_backends:
        if a.gguf:
            head = Head.from_gguf(a.gguf, backend=b, threads=a.threads, precision=a.precision)
        else:
            head = synthetic_head(weight, gamma, backend=b, threads=a.threads, precision=a.precision)
        if a.topk > head.rows:
            raise ParameterError(f"--topk: expected at most the head's {head.rows} rows; found {a.topk}")
        wbytes = int(head.weight_bytes)
        head_info.update(rows=head.rows, cols=head.cols, weight_type=head.dtype, weight_bytes=wbytes,
                         logit_scale=head.logit_scale, softcap=head.softcap)
        hidden = (rng.standard_normal((a.tokens, head.cols)) * 2).astype(np.float32)
        if wbytes * (2 * a.repeat + 2) > 2e9:  # over ~1 s at tens of GB/s
            progress(f"timing backend {b}: {a.repeat} greedy + {a.repeat} top-k calls (T={a.tokens}) ...")
        samples = time_head(head, hidden, a.topk, a.repeat)
        results.append({
            "backend": b, "precision": head.precision, "threads": head_threads, "tokens": a.tokens, "topk": a.topk,
            "bw_gbps": bw_at.get(head_threads), "stages": _stage_rows(samples, wbytes, bw_at.get(head_threads)),
        })
        del head
    head_info.update(tokens=a.tokens, threads=head_threads, repeat=a.repeat, topk=a.topk)
    # A head that fits in the last-level cache is not streamed from memory: its GB/s can exceed the
    # read probe's, and says nothing about the bandwidth-bound full-size case.
    llc = info["llc_bytes"]
    head_info["cache_resident"] = bool(llc and "weight_bytes" in head_info and head_info["weight_bytes"] < 2 * llc)
    doc = {"schema": "lmtail-bench/1", "machine": info, "bandwidth": bw, "head": head_info,
           "results": results, "skipped": skipped}
    return doc


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(doc: dict) -> str:
    """The results as llama-bench-style markdown tables."""
    m, h, bw = doc["machine"], doc["head"], doc["bandwidth"]
    out = [f"cpu: {m['cpu']} | lmtail {m['lmtail']} isa {m['isa']} | {m['nproc']} cpus | "
           f"LLC {_fmt(m['llc_bytes'] and m['llc_bytes'] / 2**20, '.0f')} MiB"]
    load = m.get("loadavg")
    if load and m["nproc"] and load[0] > 0.5 * m["nproc"]:
        out.append(f"WARNING: load average {load[0]:.1f} on {m['nproc']} cpus: other processes share the CPU, "
                   f"so the figures below are not this machine's best")
    if bw is None:
        out.append("read bandwidth: no probe in this build (the % bw column is empty)")
    else:
        out.append(f"\nread bandwidth (best of {bw['runs']} reads of {bw['buffer_bytes'] / 2**20:.0f} MiB):\n")
        out.append("| threads |    GB/s |")
        out.append("| ------: | ------: |")
        for r in bw["results"]:
            out.append(f"| {r['threads']:7d} | {r['gbps']:7.2f} |")
    src = "synthetic weights" if h["source"] == "synthetic" else h["source"]
    if "rows" in h:
        out.append(f"\nhead: {h['rows']} x {h['cols']} {h['weight_type']} ({h['weight_bytes'] / 1e6:.1f} MB, {src}), "
                   f"T={h['tokens']}, top-k {h['topk']}, median of {h['repeat']} calls\n")
        out.append("| backend   | precision | threads |  T | stage          |       ms |    GB/s |  % bw |")
        out.append("| --------- | --------- | ------: | -: | -------------- | -------: | ------: | ----: |")
        for r in doc["results"]:
            for s in r["stages"]:
                out.append(f"| {r['backend']:9s} | {r['precision']:9s} | {r['threads']:7d} | {r['tokens']:2d} | "
                           f"{STAGE_LABELS[s['stage']]:14s} | {s['ms']:8.3f} | {_fmt(s['gbps'], '7.2f'):>7s} | "
                           f"{_fmt(s['pct_bw'], '5.1f'):>5s} |")
        if h.get("cache_resident"):
            out.append(f"\nnote: the {h['weight_bytes'] / 1e6:.1f} MB head fits in the last-level cache, so it is not "
                       f"streamed from memory and % bw can exceed 100; bench the default shape for the real case.")
        out.append("\nGB/s: weight bytes / time, for the stages that stream the weights; % bw: of the read "
                   "bandwidth at the same thread count. The call rows add the argument checks and the "
                   "fail-closed finite scans to the stages.")
    for s in doc["skipped"]:
        out.append(f"skipped backend {s['backend']}: {s['reason']}")
    return "\n".join(out)


def plot(doc: dict, path: str) -> None:
    """Time per stage (stacked, per backend and selection) and bandwidth use, as one PNG."""
    plt = _matplotlib()
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels: list = []
    parts: dict[str, list] = {s: [] for s in ("norm", "head", "cap", "select")}
    for r in doc["results"]:
        st = {s["stage"]: s["ms"] for s in r["stages"]}
        for sel in ("greedy", "topk"):
            labels.append(f"{r['backend']} {sel}")
            for s in ("norm", "head", "cap"):
                parts[s].append(st[s])
            parts["select"].append(st[f"select_{sel}"])
    y = np.arange(len(labels))
    left = np.zeros(len(labels))
    for s, name in (("norm", "norm"), ("head", "head matvec"), ("cap", "scale + cap"), ("select", "select")):
        ax_t.barh(y, parts[s], left=left, label=name)
        left += np.asarray(parts[s])
    ax_t.set_yticks(y, labels)
    ax_t.set_xlabel("ms per call (median)")
    ax_t.set_title("time per stage")
    ax_t.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=4, fontsize="small")
    names, vals, colors = [], [], []
    for r in (doc["bandwidth"] or {}).get("results", []):
        names.append(f"read probe\n{r['threads']} thr")
        vals.append(r["gbps"])
        colors.append("tab:gray")
    for r in doc["results"]:
        st = {s["stage"]: s for s in r["stages"]}
        for key, lab in (("head", "head matvec"), ("total_greedy", "tail greedy")):
            names.append(f"{r['backend']} {lab}\n{r['threads']} thr")
            vals.append(st[key]["gbps"] or 0.0)
            colors.append("tab:blue" if key == "head" else "tab:orange")
    bars = ax_b.bar(range(len(vals)), vals, color=colors)
    for bar, n in zip(bars, names):
        bar.set_label(n)
    pct = [None] * len(doc["bandwidth"]["results"] if doc["bandwidth"] else [])
    for r in doc["results"]:
        st = {s["stage"]: s for s in r["stages"]}
        pct += [st["head"]["pct_bw"], st["total_greedy"]["pct_bw"]]
    for i, (v, pc) in enumerate(zip(vals, pct)):
        if pc is not None:
            ax_b.text(i, v, f"{pc:.0f}%", ha="center", va="bottom", fontsize="small")
    ax_b.set_xticks(range(len(vals)), names, fontsize="x-small")
    ax_b.set_ylabel("GB/s (weight bytes / time)")
    ax_b.set_title("bandwidth use (% of the read probe)")
    m, h = doc["machine"], doc["head"]
    shape = f"{h['rows']} x {h['cols']} {h['weight_type']}, T={h['tokens']}" if "rows" in h else ""
    fig.suptitle(f"lmtail bench: {m['cpu']} ({m['isa']}); {shape}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(a) -> int:
    """``lmtail bench`` on parsed arguments: the table (or ``--json``) on stdout, ``--plot`` to a file."""
    doc = run(a)
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print(table(doc))
    if a.plot:
        plot(doc, a.plot)
        progress(f"wrote {a.plot}")
    return 0
