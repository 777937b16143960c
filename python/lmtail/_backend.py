"""Backend registry: one set of op names, one implementation module per backend."""

from __future__ import annotations

from typing import Any

from . import _core
from .errors import BackendError

# Backends this build can run. `metal` joins on Apple GPUs, `metal-emu` with the emulator,
# `cuda` with LMTAIL_CUDA=ON and a GPU; each provides the same _core-style entry points.
_IMPLS: dict[str, Any] = {"cpu": _core}
# metal-emu: the Metal kernels (metal/*.metal) and host code (csrc/metal) on the CPU emulator,
# built by default (LMTAIL_EMU); same entry points as the CPU functions of _core.
if hasattr(_core, "metal_emu"):
    from ._metal import MetalEmuBackend

    _IMPLS["metal-emu"] = MetalEmuBackend(_core.metal_emu)


# cuda: built with LMTAIL_CUDA=ON; listed only when a device is present.
if hasattr(_core, "cuda") and _core.cuda.available():
    _IMPLS["cuda"] = _core.cuda


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
