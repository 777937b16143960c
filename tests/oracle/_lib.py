"""Locate and load llama-cpp-python's shared libraries (libggml*, libllama)."""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from pathlib import Path

ORACLE_VERSION = "0.3.36"


class OracleUnavailable(RuntimeError):
    pass


@functools.lru_cache(maxsize=None)
def lib_dir() -> Path:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise OracleUnavailable(
            f"llama-cpp-python=={ORACLE_VERSION} (the llama.cpp oracle) is not installed; "
            "install the test extras: pip install '.[test]'"
        )
    pkg = Path(list(spec.submodule_search_locations)[0])
    for cand in (pkg / "lib", pkg):
        if (cand / "libggml-base.so").exists() or (cand / "libggml-base.dylib").exists():
            return cand
    raise OracleUnavailable(f"llama_cpp is installed at {pkg} but its libggml-base was not found")


@functools.lru_cache(maxsize=None)
def load(name: str) -> ctypes.CDLL:
    """Load lib<name>.so from the oracle (RTLD_GLOBAL so ggml's backends resolve each other)."""
    d = lib_dir()
    for ext in (".so", ".dylib"):
        p = d / f"lib{name}{ext}"
        if p.exists():
            return ctypes.CDLL(os.fspath(p), mode=ctypes.RTLD_GLOBAL)
    raise OracleUnavailable(f"lib{name} not found in {d}")


def require():
    """pytest helper: skip the calling test with the reason when the oracle is missing."""
    import pytest

    try:
        lib_dir()
    except OracleUnavailable as e:  # pragma: no cover - depends on the environment
        pytest.skip(str(e))


def llama_sdist() -> Path:
    """Root of the unpacked llama-cpp-python 0.3.36 sdist (grammars, vocab files, parser tests).

    LMTAIL_LLAMA_SDIST if set; else .oracle-src/ in the repo (where .ci/run unpacks it); else
    /tmp/oracle/. Tests that need it skip with a visible reason when it is absent.
    """
    env = os.environ.get("LMTAIL_LLAMA_SDIST")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    for cand in (repo / ".oracle-src" / f"llama_cpp_python-{ORACLE_VERSION}",
                 Path("/tmp/oracle") / f"llama_cpp_python-{ORACLE_VERSION}"):
        if cand.is_dir():
            return cand
    return repo / ".oracle-src" / f"llama_cpp_python-{ORACLE_VERSION}"


# The vocab-only GGUF files of ../shared (present in this workplace and its CI, not in a user's
# clone) and of the sdist's models/ folder.
SHARED_VOCAB = Path(__file__).resolve().parents[3] / "shared" / "vocab"


def vocab_gguf(name: str) -> Path | None:
    """``ggml-vocab-{name}.gguf`` from ../shared/vocab or the sdist's models/, None if neither has it."""
    for d in (SHARED_VOCAB, llama_sdist() / "vendor" / "llama.cpp" / "models"):
        p = d / f"ggml-vocab-{name}.gguf"
        if p.exists():
            return p
    return None


@functools.lru_cache(maxsize=None)
def llama_cpp_module():
    """The oracle's Python package (llama_cpp), backend initialised once."""
    try:
        import llama_cpp  # the oracle package; never imported by lmtail itself
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise OracleUnavailable(f"llama_cpp cannot be imported: {e}") from e
    llama_cpp.llama_backend_init()
    return llama_cpp
