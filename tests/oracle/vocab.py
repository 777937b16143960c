"""llama.cpp's own view of a vocabulary: load a GGUF with ``vocab_only`` and ask ``llama_vocab_is_eog``.

Driven through llama-cpp-python's low-level ctypes bindings (``llama_cpp.llama_model_load_from_file``
with ``vocab_only = True``, ``llama_model_get_vocab``, ``llama_vocab_n_tokens``,
``llama_vocab_is_eog``, ``llama_model_free``).  Tests call :func:`require` first so a missing oracle
is a visible skip, never an error.
"""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import os
import pickle
import tempfile
from pathlib import Path

from ._lib import OracleUnavailable, llama_cpp_module, require  # noqa: F401  (re-exported for tests)


class OracleLoadError(RuntimeError):
    """llama.cpp refused to load the file (llama_model_load_from_file returned NULL)."""


def _llama_cpp():
    return llama_cpp_module()


_quiet_cb = None


def _silence(lc) -> None:
    """Route llama.cpp's log lines to nowhere (they would flood pytest's captured output)."""
    global _quiet_cb
    if _quiet_cb is None:
        _quiet_cb = lc.llama_log_callback(lambda level, text, user: None)
    lc.llama_log_set(_quiet_cb, ctypes.c_void_p(0))


class Vocab:
    """A vocab-only llama_model; use as a context manager so the model is freed."""

    def __init__(self, path: str | os.PathLike):
        lc = _llama_cpp()
        _silence(lc)
        params = lc.llama_model_default_params()
        params.vocab_only = True
        self._lc = lc
        self._model = lc.llama_model_load_from_file(os.fsencode(Path(path)), params)
        if not self._model:
            raise OracleLoadError(f"llama.cpp could not load {path} (vocab_only)")
        self._vocab = lc.llama_model_get_vocab(self._model)

    def __enter__(self) -> "Vocab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._model:
            self._lc.llama_model_free(self._model)
            self._model = None

    @property
    def n_tokens(self) -> int:
        return int(self._lc.llama_vocab_n_tokens(self._vocab))

    def is_eog(self, token: int) -> bool:
        return bool(self._lc.llama_vocab_is_eog(self._vocab, token))

    def eog_ids(self) -> tuple[int, ...]:
        f = self._lc.llama_vocab_is_eog
        v = self._vocab
        return tuple(i for i in range(self.n_tokens) if f(v, i))


def _isolated(fn, *args):
    """Run ``fn(*args)`` in a forked child: llama.cpp answers some bad files with GGML_ASSERT /
    abort(), which must fail one test, not kill the test run."""
    if not hasattr(os, "fork"):  # pragma: no cover - Windows: no isolation
        return fn(*args)
    _llama_cpp()  # import and init once, in the parent, so children start warm
    r, w = os.pipe()
    err = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            faulthandler.disable()  # an abort() here is an expected answer, not a crash to dump
            os.environ["GGML_NO_BACKTRACE"] = "1"  # else ggml runs gdb on abort (slow)
            os.dup2(err.fileno(), 2)  # keep llama.cpp's assertion text for the parent's message
            try:
                payload = pickle.dumps(("ok", fn(*args)))
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                payload = pickle.dumps(("err", f"{type(e).__name__}: {e}"))
            with os.fdopen(w, "wb") as f:
                f.write(payload)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    err.seek(0)
    tail = err.read()[-400:].decode("utf-8", "replace").strip()
    err.close()
    if os.WIFSIGNALED(status):
        raise OracleLoadError(
            f"llama.cpp killed the process with signal {os.WTERMSIG(status)} ({fn.__name__}{args!r}): {tail}"
        )
    if not data:
        raise OracleLoadError(f"the oracle child exited with status {status} without an answer ({fn.__name__}{args!r})")
    kind, val = pickle.loads(data)
    if kind == "err":
        raise OracleLoadError(val)
    return val


def _eog_ids(path) -> tuple[int, ...]:
    with Vocab(path) as v:
        return v.eog_ids()


def _n_tokens(path) -> int:
    with Vocab(path) as v:
        return v.n_tokens


def _summary(path) -> tuple[int, tuple[int, ...]]:
    with Vocab(path) as v:
        return v.n_tokens, v.eog_ids()


def eog_ids(path: str | os.PathLike) -> tuple[int, ...]:
    """Sorted ids ``t`` with ``llama_vocab_is_eog(vocab, t)`` for the vocab in ``path``.

    Raises OracleLoadError when llama.cpp refuses (or aborts on) the file.
    """
    return _isolated(_eog_ids, os.fspath(path))


def n_tokens(path: str | os.PathLike) -> int:
    return _isolated(_n_tokens, os.fspath(path))


def summary(path: str | os.PathLike) -> tuple[int, tuple[int, ...]]:
    """``(llama_vocab_n_tokens, eog ids)`` from one load."""
    return _isolated(_summary, os.fspath(path))
