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

import lmtail

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
        self.sources = None

    def set_library_path(self, path: str) -> None:
        self.library = path

    def set_source_dir(self, kernels: str, include: str) -> None:
        self.sources = (kernels, include)

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
    # No metallib next to the module: from a checkout, the kernels are compiled from source.
    from lmtail._metal import _checkout_sources

    assert core.metal.sources == _checkout_sources()
    (tmp_path / "lmtail.metallib").write_bytes(b"MTLB")
    core.metal = _FakeMetalModule(ok=True)
    device_backend(core)
    assert core.metal.sources is None  # a built metallib always wins
    assert be.argmax_rows() == "ran"
    with pytest.raises(BackendError, match="'metal' has no 'layer_norm'"):
        be.layer_norm


# ---- the compile-from-source fallback of the host code, run through metal-emu ----------------
# The device context is created once per process, so every case runs in a fresh interpreter.


def _emu_script(body: str) -> subprocess.CompletedProcess:
    code = (
        "import numpy as np, lmtail\n"
        "from lmtail import _core\n"
        "m = _core.metal_emu\n" + body
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


needs_emu = pytest.mark.skipif(not hasattr(lmtail._core, "metal_emu"), reason="built without LMTAIL_EMU")


@needs_emu
def test_source_fallback_compiles_every_kernel_file(tmp_path):
    r = _emu_script(
        f"m.set_library_path({str(tmp_path / 'absent.metallib')!r})\n"
        f"m.set_source_dir({str(ROOT / 'metal')!r}, {str(ROOT / 'csrc' / 'include')!r})\n"
        "x = np.random.default_rng(0).standard_normal((3, 4097)).astype(np.float32)\n"
        "assert (lmtail.ops.argmax(x, backend='metal-emu') == lmtail.ops.argmax(x)).all()\n"
        "w = lmtail.quantize_q5_k(np.random.default_rng(1).standard_normal((64, 512)).astype(np.float32))\n"
        "h = np.random.default_rng(2).standard_normal((1, 512)).astype(np.float32)\n"
        "y = lmtail.ops.matvec_q5_k(w, h, backend='metal-emu')\n"
        "assert np.allclose(y, lmtail.ops.matvec_q5_k(w, h, precision='f32'), rtol=1e-5, atol=1e-5)\n"
        "g = np.ones(4097, np.float32)\n"
        "assert np.allclose(lmtail.ops.rms_norm(x, g, backend='metal-emu'), lmtail.ops.rms_norm(x, g), rtol=1e-6)\n"
        "c = lmtail.ops.softcap(x, 0.5, 30.0, backend='metal-emu')\n"
        "assert np.allclose(c, lmtail.ops.softcap(x, 0.5, 30.0), rtol=1e-6, atol=1e-6)\n"
        "i, v = lmtail.ops.topk(x, 40, backend='metal-emu')\n"
        "assert (i == lmtail.ops.topk(x, 40)[0]).all()\n"
        "assert (lmtail.ops.greedy_argmax(x, backend='metal-emu') == lmtail.ops.greedy_argmax(x)).all()\n"
        "print(m.library_origin())\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    n = len(list((ROOT / "metal").glob("*.metal")))
    assert r.stdout.strip() == f"source:{n} files from {ROOT / 'metal'}"


@needs_emu
def test_source_fallback_offers_only_what_the_sources_declare(tmp_path):
    # A kernels directory holding argmax.metal alone: argmax runs, the matvec's pipeline is
    # missing, which shows each file becomes its own library and lookups search them all.
    (tmp_path / "k").mkdir()
    shutil.copy(ROOT / "metal" / "argmax.metal", tmp_path / "k" / "argmax.metal")
    r = _emu_script(
        f"m.set_source_dir({str(tmp_path / 'k')!r}, {str(ROOT / 'csrc' / 'include')!r})\n"
        "x = np.arange(10, dtype=np.float32)[None, :]\n"
        "assert lmtail.ops.argmax(x, backend='metal-emu')[0] == 9\n"
        "w = np.zeros((1, 176), np.uint8); h = np.zeros((1, 256), np.float32)\n"
        "try:\n"
        "    lmtail.ops.matvec_q5_k(w, h, backend='metal-emu')\n"
        "except lmtail.LmtailError as e:\n"
        "    print('missing:', e)\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "missing:" in r.stdout and "mul_mv_q5_K_f32" in r.stdout, r.stdout


@needs_emu
@pytest.mark.parametrize("case", ["no_headers", "no_sources"])
def test_source_fallback_fails_with_a_clear_error(tmp_path, case):
    kernels = ROOT / "metal" if case == "no_headers" else tmp_path
    r = _emu_script(
        f"m.set_source_dir({str(kernels)!r}, {str(tmp_path / 'nowhere')!r})\n"
        "try:\n"
        "    m.device_name()\n"
        "except lmtail.LmtailError as e:\n"
        "    print('error:', e)\n"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    want = "cannot read kernel source" if case == "no_headers" else "no *.metal in"
    assert "error:" in r.stdout and want in r.stdout, r.stdout
