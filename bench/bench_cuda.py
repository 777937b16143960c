#!/usr/bin/env python3
"""lmtail's CUDA tail against llama.cpp's CUDA backend, measured in the same run on the same GPU.

Builds bench/cuda/anchor (ggml from the llama-cpp-python 0.3.36 sdist's vendored ggml/, CUDA arch 90,
flash attention off, CUDA graphs on, plus lmtail's csrc/cuda kernels) and runs ggml_anchor, which
prints device time (CUDA events on each engine's stream, gated so launch cost is excluded) and host
wall time (submit + synchronise) for: the head matvec at T = 1 and 8 (each lmtail variant), the
greedy tail (norm, head, soft cap, argmax, 4 B back), tail + top-40, argmax and top-40 of one
202048 row; the ratios; % of the device-to-device copy bandwidth measured in the same run; and the
logits' error of both engines against an f64 reference.

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
    args = ap.parse_args()

    ggml = locate_ggml(args)
    build = Path(args.build_dir)
    log = open(args.log, "w") if args.log else None
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    run(["cmake", "-S", str(ROOT / "bench" / "cuda" / "anchor"), "-B", str(build), *gen, "-DCMAKE_BUILD_TYPE=Release",
         f"-DGGML_SRC={ggml}", "-DCMAKE_CUDA_ARCHITECTURES=90"], log)
    run(["cmake", "--build", str(build), "--target", "ggml_anchor", "-j", str(args.jobs)], log)
    print(f"ggml sources: {ggml}", flush=True)
    if args.build_only:
        return 0
    p = subprocess.run([str(build / "ggml_anchor"), str(args.reps)])
    if p.returncode != 0:
        return p.returncode
    if args.python_routes:
        return subprocess.run([sys.executable, str(ROOT / "bench" / "bench_cuda_head.py")]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
