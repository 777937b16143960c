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


# The oracle's sdist: the very archive pip builds the oracle from (PyPI), pinned by SHA-256.
SDIST_NAME = f"llama_cpp_python-{ORACLE_VERSION}"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
REPO = Path(__file__).resolve().parents[2]
# Fetch failures of this session, {what: message}: conftest.py prints them and appends them to
# the skip reasons they cause, so an offline run says why its tests skipped.
FETCH_ERRORS: dict[str, str] = {}


def _announce(msg: str) -> None:
    """Progress of a fetch; conftest.py routes it past pytest's output capture."""
    import sys

    print(msg, file=sys.stderr, flush=True)


ANNOUNCE = _announce


def _why(r) -> str:
    """The line of a failed pip run that says why (pip's last ERROR line, else its last line)."""
    lines = [ln.strip() for ln in ((r.stderr or "") + "\n" + (r.stdout or "")).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return ((errors or lines or [f"exit status {r.returncode}"])[-1])[:300]
# A stalled download must not hang collection (pytest-timeout covers tests, not collection).
FETCH_TIMEOUT_S = 600


def _no_fetch() -> bool:
    return os.environ.get("LMTAIL_TEST_NO_FETCH", "") not in ("", "0")


def _fetch_llama_sdist(dest: Path) -> None:
    """``pip download`` the sdist (no build), check its digest, unpack it atomically at ``dest``."""
    import hashlib
    import subprocess
    import sys
    import tarfile
    import tempfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    ANNOUNCE(f"lmtail tests: fetching the llama.cpp sources ({SDIST_NAME} sdist, ~77 MB, from PyPI) "
             f"into {dest.parent} (once; LMTAIL_TEST_NO_FETCH=1 skips this) ...")
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        r = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary=llama-cpp-python",
             f"llama-cpp-python=={ORACLE_VERSION}", "-d", tmp],
            capture_output=True, text=True, timeout=FETCH_TIMEOUT_S,
        )
        archive = Path(tmp) / f"{SDIST_NAME}.tar.gz"
        if r.returncode != 0 or not archive.is_file():
            raise OracleUnavailable(f"pip download llama-cpp-python=={ORACLE_VERSION}: {_why(r)}")
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != SDIST_SHA256:
            raise OracleUnavailable(f"{archive.name} has SHA-256 {digest}, expected {SDIST_SHA256}")
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():  # the archive is pinned, but never write outside tmp
                parts = Path(m.name).parts
                if Path(m.name).is_absolute() or ".." in parts or not parts or parts[0] != SDIST_NAME \
                        or not (m.isfile() or m.isdir()):
                    raise OracleUnavailable(f"{archive.name}: unexpected member {m.name!r}")
            tar.extractall(tmp)
        try:
            os.rename(Path(tmp) / SDIST_NAME, dest)
        except OSError:
            if not dest.is_dir():  # else another process unpacked it first: same pinned bytes
                raise


@functools.lru_cache(maxsize=None)
def llama_sdist() -> Path:
    """Root of the unpacked llama-cpp-python 0.3.36 sdist (grammars, vocab files, parser tests).

    LMTAIL_LLAMA_SDIST if set; else .oracle-src/ in the repo, fetched there from PyPI on first use
    (the sdist pip builds the oracle from; unless LMTAIL_TEST_NO_FETCH=1); else /tmp/oracle/.
    When it cannot be had the default path is returned (absent): the tests that need it skip with
    the reason, and FETCH_ERRORS says why the fetch failed.
    """
    env = os.environ.get("LMTAIL_LLAMA_SDIST")
    if env:
        return Path(env)
    default = REPO / ".oracle-src" / SDIST_NAME
    for cand in (default, Path("/tmp/oracle") / SDIST_NAME):
        if cand.is_dir():
            return cand
    if _no_fetch():
        FETCH_ERRORS["llama.cpp sources"] = "not fetched: LMTAIL_TEST_NO_FETCH is set"
        return default
    try:
        _fetch_llama_sdist(default)
    except Exception as e:  # noqa: BLE001 - any failure is reported, then its tests skip
        FETCH_ERRORS["llama.cpp sources"] = f"fetching the {SDIST_NAME} sdist failed: {e}"
    return default


@functools.lru_cache(maxsize=None)
def metal_cpp_dir() -> Path | None:
    """Apple's metal-cpp headers: LMTAIL_METAL_CPP_DIR, else .metal-cpp/ in the repo, fetched
    there on first use by tools/fetch_metal_cpp.py (PyPI, SHA-256-pinned). None if unavailable."""
    import subprocess
    import sys

    env = os.environ.get("LMTAIL_METAL_CPP_DIR")
    default = REPO / ".metal-cpp"
    for d in ([Path(env)] if env else []) + [default]:
        if (d / "Metal" / "Metal.hpp").is_file():
            return d
    if _no_fetch():
        FETCH_ERRORS["metal-cpp"] = "not fetched: LMTAIL_TEST_NO_FETCH is set"
        return None
    ANNOUNCE(f"lmtail tests: fetching Apple's metal-cpp headers (mlx-metal wheel, from PyPI) into {default} "
             "(once; LMTAIL_TEST_NO_FETCH=1 skips this) ...")
    try:
        r = subprocess.run([sys.executable, str(REPO / "tools" / "fetch_metal_cpp.py"), str(default)],
                           capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        FETCH_ERRORS["metal-cpp"] = f"tools/fetch_metal_cpp.py took over {FETCH_TIMEOUT_S} s"
        return None
    if r.returncode != 0 or not (default / "Metal" / "Metal.hpp").is_file():
        FETCH_ERRORS["metal-cpp"] = f"python tools/fetch_metal_cpp.py failed: {_why(r)}"
        return None
    return default


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
