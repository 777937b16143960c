"""llama.cpp's own Metal kernels for ``precision="ggml"`` on the Metal backends (issue 15).

The user points lmtail at llama.cpp's library (``ggml_metal=PATH``, an explicit argument; no
environment variable selects this route); lmtail never ships llama.cpp's code:

* ``backend="metal"``: PATH is a llama.cpp ``.metallib``; its pipelines are built by name with
  llama.cpp's function constants.
* ``backend="metal-emu"``: PATH is llama.cpp's ``ggml/src/ggml-metal`` source directory. Its
  ``kernels/unary.metal`` and ``kernels/mul_mv.metal`` (with the headers they include) are
  translated by the emulator's generator (``msl_trampolines.py``, library mode: only the kernels
  lmtail dispatches are compiled), built with the system C++ compiler into a shared object cached
  under ``cache_dir`` by content hash, and run by the same host code (csrc/metal/ggml.cpp).

Supported is the llama.cpp vendored by llama-cpp-python 0.3.36: its kernel-argument structs,
function constants and launch geometry are what csrc/metal/ggml.cpp re-states. A library without
the expected kernel names or function constants raises :class:`lmtail.UnsupportedError`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import threading
from typing import Optional

from .errors import BackendError, UnsupportedError

SUPPORTED = "llama.cpp as vendored by llama-cpp-python 0.3.36"
BACKENDS = ("metal", "metal-emu")
# The translated sources, relative to the ggml-metal directory, and where their includes live.
_SOURCES = ("kernels/unary.metal", "kernels/mul_mv.metal")
# Flags of the emulated library: IEEE float (no contraction: MSL with fast math off rounds each
# operation), llama.cpp's bf16 kernels on (an Apple GPU with Metal 3.1 has them).
_CXXFLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off", "-fno-fast-math",
             "-DGGML_METAL_HAS_BF16", "-D__METAL_VERSION__=310", "-w")

_lock = threading.Lock()
_built: dict = {}


def _kit() -> str:
    """The emulator's translation kit installed next to the package (CMake: lmtail/_emu)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_emu")
    if os.path.isfile(os.path.join(here, "msl_trampolines.py")):
        return here
    raise BackendError("metal-emu: the translation kit (lmtail/_emu) is not installed with this build")


def _generator(kit: str):
    spec = importlib.util.spec_from_file_location("lmtail_msl_trampolines", os.path.join(kit, "msl_trampolines.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _default_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lmtail", "metal-emu")


def emu_library(ggml_metal: str, kernels, cache_dir: Optional[str] = None) -> str:
    """The shared object holding ``kernels`` of llama.cpp's Metal sources at ``ggml_metal``
    (translated and compiled once per content; later calls reuse the cached file)."""
    root = os.path.abspath(os.fspath(ggml_metal))
    missing = [s for s in (*_SOURCES, "ggml-metal-impl.h") if not os.path.isfile(os.path.join(root, s))]
    if missing:
        raise UnsupportedError(
            f"ggml_metal={ggml_metal!r}: expected llama.cpp's ggml/src/ggml-metal directory ({SUPPORTED}); "
            f"missing {', '.join(missing)}"
        )
    with _lock:
        key = (root, tuple(kernels), cache_dir)
        if key in _built and os.path.isfile(_built[key]):
            return _built[key]
        kit = _kit()
        gen = _generator(kit)
        src_root = os.path.dirname(root)  # ggml/src: ggml-common.h
        tmp = tempfile.mkdtemp(prefix="lmtail-ggml-metal-")
        try:
            cpp = os.path.join(tmp, "ggml_metal_emu.cpp")
            try:
                gen.generate_library(
                    [os.path.join(root, s) for s in _SOURCES], cpp, [root, src_root], list(kernels),
                    lambda p: os.path.relpath(p, src_root),
                )
            except gen.GenError as e:
                raise UnsupportedError(f"ggml_metal={ggml_metal!r} is not the supported {SUPPORTED}: {e}") from None
            h = hashlib.sha256()
            for p in (cpp, os.path.join(kit, "emu", "msl", "msl_compat.hpp"), os.path.join(kit, "emu", "lane_abi.hpp")):
                with open(p, "rb") as f:
                    h.update(f.read())
            cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
            if cxx is None:
                raise BackendError("metal-emu: llama.cpp's kernels are compiled at run time; no C++ compiler (c++) found")
            h.update(" ".join((cxx, *_CXXFLAGS)).encode())
            out_dir = cache_dir or _default_cache()
            os.makedirs(out_dir, exist_ok=True)
            so = os.path.join(out_dir, f"ggml-metal-{h.hexdigest()[:24]}.so")
            if not os.path.isfile(so):
                part = os.path.join(tmp, "lib.so")
                cmd = [cxx, *_CXXFLAGS, "-I", kit, "-I", os.path.join(kit, "emu", "msl"), cpp, "-o", part]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    raise UnsupportedError(
                        f"metal-emu: llama.cpp's kernels at {ggml_metal!r} do not compile under the emulator "
                        f"({SUPPORTED} is supported):\n{r.stderr[-4000:]}"
                    )
                os.replace(part, so) if os.path.dirname(part) == out_dir else shutil.move(part, so)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _built[key] = so
        return so


def missing_library_message(backend: str, what: str = "") -> str:
    """Why precision "ggml" on a Metal backend needs ``ggml_metal=`` (capabilities' ``requires``)."""
    lib = "a llama.cpp .metallib" if backend == "metal" else "llama.cpp's ggml/src/ggml-metal source directory"
    of = f" for {what}" if what else ""
    return (f"precision 'ggml'{of} on the {backend} backend runs llama.cpp's own Metal kernels, which lmtail does "
            f"not ship: it requires a llama.cpp library, ggml_metal=PATH ({lib}; {SUPPORTED})")


def library_path(backend: str, impl, ggml_metal, cache_dir: Optional[str] = None) -> str:
    """The library the host code loads for ``backend``: a metallib, or the emulator's object."""
    if ggml_metal is None:
        raise UnsupportedError(missing_library_message(backend))
    if backend == "metal":
        path = os.path.abspath(os.fspath(ggml_metal))
        if not (path.endswith(".metallib") and os.path.isfile(path)):
            raise UnsupportedError(f"ggml_metal={ggml_metal!r}: backend 'metal' needs llama.cpp's .metallib file")
        return path
    return emu_library(ggml_metal, impl.ggml_kernel_names(), cache_dir)
