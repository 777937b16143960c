"""Build and import ``_lmtail_testing``: the Metal emulator with its test hooks (test-only).

The planted bugs (tests/metal/debug.metal) and the host-code hooks (``set_debug``: remove a named
barrier or all of them, plant a NaN in the head graph; ``dispatch``: run one kernel raw) are kept
out of everything lmtail installs. This helper configures the checkout with CMake
``-DLMTAIL_TESTING=ON`` in a build tree of its own (``build/testing-<python tag>/``, incremental:
the first build takes about a minute, later ones only rebuild what changed) and builds only the
module target, which links its own copy of the emulator, host code and kernels.

Environment: ``LMTAIL_TESTING_CMAKE_ARGS`` (extra configure arguments, e.g. ``-DLMTAIL_SANITIZE=ON``
from tools/sanitize.sh; they select their own build tree), ``LMTAIL_TESTING_BUILD_DIR``.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_cache: dict[str, object] = {}


def _tool(name: str) -> str | None:
    """A build tool from this interpreter's environment (pip's cmake/ninja) or from PATH."""
    scripts = Path(sysconfig.get_path("scripts"))
    for cand in (scripts / name, Path(sys.executable).parent / name):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which(name)


def unavailable() -> str | None:
    """Why the module cannot be built here (None when it can)."""
    if not (ROOT / "CMakeLists.txt").is_file() or not (ROOT / "tests" / "metal" / "debug.metal").is_file():
        return "not run from a source checkout (the test-only module builds from the sources)"
    if _tool("cmake") is None:
        return "cmake not found (pip install '.[test]' provides it)"
    if not any(shutil.which(c) for c in (os.environ.get("CXX", "c++"), "c++", "g++", "clang++")):
        return "no C++ compiler on PATH"
    try:
        import pybind11  # noqa: F401
    except ImportError:
        return "pybind11 not installed (pip install '.[test]' provides it)"
    return None


def build_dir() -> Path:
    env = os.environ.get("LMTAIL_TESTING_BUILD_DIR")
    if env:
        return Path(env)
    extra = os.environ.get("LMTAIL_TESTING_CMAKE_ARGS", "")
    tag = hashlib.sha1(f"{sys.executable}\0{extra}".encode()).hexdigest()[:10]
    return ROOT / "build" / f"testing-{sysconfig.get_config_var('SOABI') or 'py'}-{tag}"


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "a") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.flush()
        # Not under a preloaded sanitizer runtime (tools/sanitize.sh runs pytest with LD_PRELOAD).
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    if r.returncode != 0:
        tail = log.read_text(errors="replace")[-6000:]
        raise RuntimeError(f"building the test-only module _lmtail_testing failed ({shlex.join(cmd)}); log {log}:\n{tail}")


def load():
    """The built and imported ``_lmtail_testing`` module (built on first use, then cached)."""
    if "mod" in _cache:
        return _cache["mod"]
    import pybind11

    d = build_dir()
    d.mkdir(parents=True, exist_ok=True)
    log = d / "lmtail-testing-build.log"
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per tree (parallel pytest runs)
        if not (d / "CMakeCache.txt").is_file():
            cmd = [_tool("cmake"), "-S", str(ROOT), "-B", str(d), "-DLMTAIL_TESTING=ON", "-DLMTAIL_PYTHON=ON",
                   "-DLMTAIL_EMU=ON", "-DLMTAIL_METAL=OFF", "-DCMAKE_BUILD_TYPE=Release",
                   f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"]
            ninja = _tool("ninja")
            if ninja:
                cmd += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
            cmd += shlex.split(os.environ.get("LMTAIL_TESTING_CMAKE_ARGS", ""))
            _run(cmd, log)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
        _run([_tool("cmake"), "--build", str(d), "--target", "_lmtail_testing", "--parallel", jobs], log)
    built = sorted(d.glob("_lmtail_testing*" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")))
    if not built:
        raise RuntimeError(f"_lmtail_testing: no module file in {d} after the build; log {log}")
    spec = importlib.util.spec_from_file_location("_lmtail_testing", built[0])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _cache["mod"] = mod
    return mod


def backend_name() -> str:
    return "metal-emu-testing"


def register(monkeypatch) -> str:
    """Make the test module's emulator a backend of lmtail (for this test), so lmtail.ops and
    lmtail.Head run on it; returns the backend name."""
    from lmtail import _backend
    from lmtail._metal import MetalBackend

    import dataclasses

    monkeypatch.setitem(_backend._IMPLS, backend_name(), MetalBackend(load().metal_emu, backend_name()))
    # Its capability row: metal-emu's (the same kernels and host code).
    monkeypatch.setitem(_backend._ROWS, backend_name(), dataclasses.replace(_backend._ROWS["metal-emu"], name=backend_name()))
    return backend_name()
