"""The real-Metal build of the host code, type-checked on Linux against Apple's metal-cpp.

No machine here has an Apple GPU or SDK. metal-emu runs csrc/metal against the emulator's
look-alike of metal-cpp; these tests compile the very same files (and the bindings of backend
"metal") against Apple's real metal-cpp headers, so a call the look-alike accepts but metal-cpp
lacks, or a wrong signature, fails here instead of on a user's Mac. clang++ -fsyntax-only: the
headers use Objective-C blocks (clang only), and the Apple system headers they include are
replaced by declaration-only stand-ins (tests/data/apple_sdk_stubs). Nothing is linked or run.

metal-cpp comes from `python tools/fetch_metal_cpp.py` (into .metal-cpp/, SHA-256-pinned; .ci/run
does this) or LMTAIL_METAL_CPP_DIR.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUBS = ROOT / "tests" / "data" / "apple_sdk_stubs"
HOST_SOURCES = sorted((ROOT / "csrc" / "metal").glob("*.cpp"))


def _metal_cpp_dir() -> Path | None:
    env = os.environ.get("LMTAIL_METAL_CPP_DIR")
    for d in ([Path(env)] if env else []) + [ROOT / ".metal-cpp"]:
        if (d / "Metal" / "Metal.hpp").is_file():
            return d
    return None


def _clang() -> str | None:
    for name in ["clang++"] + [f"clang++-{v}" for v in range(25, 10, -1)]:
        path = shutil.which(name)
        if path:
            return path
    return None


METAL_CPP = _metal_cpp_dir()
CLANG = _clang()


def needs_metal_cpp(f):
    f = pytest.mark.skipif(METAL_CPP is None, reason="metal-cpp headers absent: run python tools/fetch_metal_cpp.py")(f)
    return pytest.mark.skipif(CLANG is None, reason="clang++ not found (metal-cpp uses blocks; apt-get install clang)")(f)


def _syntax_check(source: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        CLANG, "-std=c++17", "-fsyntax-only", "-fblocks", "-Wall", "-Wextra", "-Werror",
        "-isystem", str(STUBS), "-isystem", str(METAL_CPP),
        "-I", str(ROOT / "csrc"), "-I", str(ROOT / "csrc" / "include"),
        *extra, str(source),
    ]
    return subprocess.run(cmd, capture_output=True, text=True)


@needs_metal_cpp
def test_metal_cpp_is_the_pinned_release():
    readme = (METAL_CPP / "README.md").read_text(encoding="utf-8")
    newest = next(line for line in readme.splitlines() if line.startswith("| macOS"))
    assert newest.startswith("| macOS 15, iOS 18 |"), newest
    cmake = (ROOT / "CMakeLists.txt").read_text(encoding="utf-8")
    assert "metal-cpp_macOS15_iOS18.zip" in cmake
    assert re.search(r"URL_HASH SHA256=[0-9a-f]{64}", cmake), "the metal-cpp download must be pinned"


@needs_metal_cpp
@pytest.mark.parametrize("source", HOST_SOURCES, ids=lambda p: p.name)
def test_host_code_compiles_against_metal_cpp(source):
    assert len(HOST_SOURCES) >= 7  # context, head, matvec, argmax, unary, rms_norm, topk
    r = _syntax_check(source, "-DLMT_METAL_NS=metal")
    assert r.returncode == 0, r.stderr[-4000:]


@needs_metal_cpp
def test_device_bindings_compile_against_metal_cpp():
    pybind11 = pytest.importorskip("pybind11")
    r = _syntax_check(
        ROOT / "csrc" / "bindings" / "metal_device.cpp", "-DLMTAIL_HAVE_METAL=1",
        "-isystem", pybind11.get_include(), "-isystem", sysconfig.get_paths()["include"],
    )
    assert r.returncode == 0, r.stderr[-4000:]


@needs_metal_cpp
def test_the_check_catches_an_api_metal_cpp_lacks(tmp_path):
    # A negative control: the same compile of a file calling something only a wrong look-alike
    # would offer must fail, so a pass above means metal-cpp accepted the host code.
    bad = tmp_path / "bad.cpp"
    bad.write_text(
        '#include "metal/context.hpp"\n'
        "namespace lmt::metal {\n"
        "void f(MTL::ComputeCommandEncoder *enc, MTL::Buffer *b) { enc->memoryBarrierOnBuffer(b); }\n"
        "}\n"
    )
    r = _syntax_check(bad, "-DLMT_METAL_NS=metal")
    assert r.returncode != 0
    assert "memoryBarrierOnBuffer" in r.stderr
    good = tmp_path / "good.cpp"
    good.write_text(
        '#include "metal/context.hpp"\n'
        "namespace lmt::metal {\n"
        "void f(MTL::ComputeCommandEncoder *enc, MTL::Buffer *b) {\n"
        "    const MTL::Resource *r[1] = {b};\n"
        "    enc->memoryBarrier(r, 1);\n"
        "}\n"
        "}\n"
    )
    r = _syntax_check(good, "-DLMT_METAL_NS=metal")
    assert r.returncode == 0, r.stderr[-4000:]


def test_python_registers_the_device_backend_only_where_it_runs():
    import lmtail
    from lmtail import _core

    if hasattr(_core, "metal"):  # an Apple build
        ok, why = _core.metal.probe()
        expected = ok and os.environ.get("LMTAIL_DISABLE_METAL") != "1"
        assert ("metal" in lmtail.backends()) == expected, why
    else:
        assert sys.platform != "darwin", "an Apple build must have the metal backend compiled in"
        assert "metal" not in lmtail.backends()


class _FakeMetalModule:
    def __init__(self, ok: bool):
        self.ok = ok
        self.library = None

    def set_library_path(self, path: str) -> None:
        self.library = path

    def probe(self):
        return (True, "Apple M2 Max") if self.ok else (False, "Metal: no device")

    def argmax_rows(self, *args):
        return "ran"


def test_device_backend_registration_logic(tmp_path, monkeypatch):
    # The Python half of backend "metal", exercised here with a stand-in for _core.metal: the
    # library path handed to the host code is lmtail.metallib next to the extension module,
    # a failed probe leaves the backend out, and a missing op is a BackendError, not a CPU run.
    import types

    from lmtail import BackendError
    from lmtail._metal import device_backend

    core = types.SimpleNamespace(__file__=str(tmp_path / "_core.so"))
    assert device_backend(core) is None  # a build without the metal module
    core.metal = _FakeMetalModule(ok=True)
    monkeypatch.setenv("LMTAIL_DISABLE_METAL", "1")
    assert device_backend(core) is None
    monkeypatch.delenv("LMTAIL_DISABLE_METAL")
    core.metal = _FakeMetalModule(ok=False)
    assert device_backend(core) is None
    assert core.metal.library == str(tmp_path / "lmtail.metallib")
    core.metal = _FakeMetalModule(ok=True)
    be = device_backend(core)
    assert be is not None and be.name == "metal" and "Apple GPU" in repr(be)
    assert be.argmax_rows() == "ran"
    with pytest.raises(BackendError, match="'metal' has no 'layer_norm'"):
        be.layer_norm
