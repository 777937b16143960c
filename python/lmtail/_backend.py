"""Backend registry: one set of op names, one implementation module per backend."""

from __future__ import annotations

from . import _core
from .errors import BackendError

# Backends this build can run. `metal` joins on Apple GPUs, `metal-emu` with the emulator,
# `cuda` with LMTAIL_CUDA=ON and a GPU; each provides the same _core-style entry points.
_IMPLS = {"cpu": _core}


def backends() -> list[str]:
    """Names of the backends available in this build on this machine."""
    return list(_IMPLS)


def get(name: str):
    if not isinstance(name, str):
        raise BackendError(f"backend must be a string such as 'cpu'; found {type(name).__name__}")
    impl = _IMPLS.get(name)
    if impl is None:
        raise BackendError(f"backend {name!r} is not available here; available: {', '.join(_IMPLS)}")
    return impl
