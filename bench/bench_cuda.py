#!/usr/bin/env python3
"""lmtail's CUDA tail against llama.cpp's CUDA backend, measured in the same run on the same GPU.

Builds bench/cuda/anchor (ggml from the llama-cpp-python 0.3.36 sdist's vendored ggml/, CUDA arch 90,
flash attention off, CUDA graphs on, plus lmtail's csrc/cuda kernels) and runs ggml_anchor, which
prints device time (CUDA events on each engine's stream, gated so launch cost is excluded) and host
wall time (submit + synchronise) for: the head matvec at T = 1 and 8 (each lmtail variant), the
greedy tail (norm, head, soft cap, argmax, 4 B back), tail + top-40, argmax and top-40 of one
202048 row; the ratios; % of the device-to-device copy bandwidth measured in the same run; and the
logits' error of both engines against an f64 reference.

--ggml-types: builds and runs ggml_types instead (bench/cuda/ggml_types.cu): every weight type's
head matvec at 202048 x 6656, T = 1, 2, 4, 8, 16, ggml_mul_mat in one ggml graph against lmtail's
launch_mul_mv on the same weight bytes (lmtail's quantiser, as --types), host wall of both engines
interleaved, lmtail's device time as % of the copy bandwidth of the same run, and the two engines'
logits agreement at T = 1 and 8.

--types (no ggml build): every weight type's head matvec at 202048 x 6656 for T = 1, 2, 4, 8, 16
from lmtail_cuda_check (CUDA events, the copy bandwidth measured in the same run), next to
cuBLAS F16/BF16 through PyTorch when it is importable, and otherwise the published ggml/cuBLAS
figures of issue 20 (same GPU model, an earlier run: a reference, not a same-run anchor).

The ggml sources are not part of lmtail: pass --ggml-src, or set LMTAIL_GGML_SRC, or keep an
(untracked) copy in .anchor/ggml, or let the script unpack vendor/llama.cpp/ggml from the sdist
given by --sdist (default /tmp/oracle/llama_cpp_python-0.3.36.tar.gz). Needs nvcc, cmake, ninja
and a GPU. --python-routes also times lmtail.Head(backend="cuda") routes A/B/C from Python.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SDIST_MEMBER = "llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/"


def locate_ggml(args: argparse.Namespace) -> Path:
    for cand in (args.ggml_src, os.environ.get("LMTAIL_GGML_SRC"), ROOT / ".anchor" / "ggml"):
        if cand and (Path(cand) / "CMakeLists.txt").exists():
            return Path(cand)
    sdist = Path(args.sdist)
    if not sdist.exists():
        sys.exit(f"no ggml sources: pass --ggml-src or --sdist (looked for {sdist})")
    dest = Path(tempfile.mkdtemp(prefix="lmtail-ggml-"))
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(SDIST_MEMBER)]
        tf.extractall(dest, members=members)  # noqa: S202 - a known sdist, benchmark only
    return dest / SDIST_MEMBER


def run(cmd: list[str], log) -> None:
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if log:
        log.write(p.stdout)
    if p.returncode != 0:
        print(p.stdout[-6000:])
        sys.exit(f"command failed ({p.returncode})")


# Issue 20's measurements on an H200 (2026-12-01, host wall of one ggml graph, median of 51; cuBLAS
# via PyTorch): ms at T = 1 / T = 8, 202048 x 6656.
PUBLISHED = {"Q6_K": (0.514, 1.145), "Q8_0": (0.523, 0.851), "Q4_0": (0.298, 0.668), "Q4_K": (0.365, 1.030),
             "Q5_K": (0.394, 1.064), "F16": (0.666, 0.702), "BF16": (0.671, 0.709)}


def cublas_same_run(reps: int) -> dict:
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    out = {}
    for name, dt in (("F16", torch.float16), ("BF16", torch.bfloat16)):
        w = torch.randn(202048, 6656, device="cuda", dtype=dt)
        for T in (1, 8):
            x = torch.randn(T, 6656, device="cuda", dtype=dt)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ts = []
            for i in range(reps + 3):
                e0.record()
                x @ w.T
                e1.record()
                e1.synchronize()
                if i >= 3:
                    ts.append(e0.elapsed_time(e1))
            out[(name, T)] = sorted(ts)[len(ts) // 2]
        del w
    return out


def types_table(args: argparse.Namespace) -> int:
    p = subprocess.run([args.check_bin, "202048", "6656", str(args.reps), "bench-types"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    print(p.stdout)
    cub = cublas_same_run(args.reps)
    if cub:
        print("cuBLAS via PyTorch, same run (ms, T=1 / T=8): " +
              ", ".join(f"{n} {cub[(n, 1)]:.3f} / {cub[(n, 8)]:.3f}" for n in ("F16", "BF16")))
    else:
        print("PyTorch is not importable here: no same-run cuBLAS; the published figures below are the reference.")
    print("ggml CUDA backend / cuBLAS, published in issue 20 (H200, ms, T=1 / T=8): " +
          ", ".join(f"{n} {a:.3f} / {b:.3f}" for n, (a, b) in PUBLISHED.items()))
    return p.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ggml-src")
    ap.add_argument("--sdist", default="/tmp/oracle/llama_cpp_python-0.3.36.tar.gz")
    ap.add_argument("--build-dir", default="/tmp/lmtail-anchor-build")
    ap.add_argument("--reps", type=int, default=51)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--log", help="write the build log here")
    ap.add_argument("--python-routes", action="store_true")
    ap.add_argument("--build-only", action="store_true", help="configure and build, do not run")
    ap.add_argument("--types", action="store_true", help="the per-type table (lmtail_cuda_check bench-types)")
    ap.add_argument("--ggml-types", action="store_true",
                    help="build (if needed) and run ggml_types (every type's matvec, ggml vs lmtail), "
                         "not ggml_anchor")
    ap.add_argument("--check-bin", default="/tmp/skb/lmtail_cuda_check", help="lmtail_cuda_check for --types")
    args = ap.parse_args()
    if args.types:
        return types_table(args)

    ggml = locate_ggml(args)
    build = Path(args.build_dir)
    log = open(args.log, "w") if args.log else None
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    run(["cmake", "-S", str(ROOT / "bench" / "cuda" / "anchor"), "-B", str(build), *gen, "-DCMAKE_BUILD_TYPE=Release",
         f"-DGGML_SRC={ggml}", "-DCMAKE_CUDA_ARCHITECTURES=90"], log)
    target = "ggml_types" if args.ggml_types else "ggml_anchor"
    run(["cmake", "--build", str(build), "--target", target, "-j", str(args.jobs)], log)
    print(f"ggml sources: {ggml}", flush=True)
    if args.build_only:
        return 0
    p = subprocess.run([str(build / target), str(args.reps)])
    if p.returncode != 0:
        return p.returncode
    if args.python_routes:
        return subprocess.run([sys.executable, str(ROOT / "bench" / "bench_cuda_head.py")]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
