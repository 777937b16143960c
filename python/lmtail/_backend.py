"""Backend registry: one set of op names, one implementation module per backend."""

from __future__ import annotations

from typing import Any

from . import _core
from .errors import BackendError

# Backends this build can run. `metal` joins on Apple GPUs, `metal-emu` with the emulator,
# `cuda` with LMTAIL_CUDA=ON and a GPU; each provides the same _core-style entry points.
_IMPLS: dict[str, Any] = {"cpu": _core}
# metal: the Metal kernels (metal/*.metal) and host code (csrc/metal) on an Apple GPU, built on
# Apple (LMTAIL_METAL) and listed only where a device and lmtail.metallib load.
# metal-emu: the same kernels and host code on the CPU emulator, built by default (LMTAIL_EMU).
# Both have the same entry points as the CPU functions of _core.
from ._metal import MetalBackend, device_backend

_metal = device_backend(_core)
if _metal is not None:
    _IMPLS["metal"] = _metal
if hasattr(_core, "metal_emu"):
    _IMPLS["metal-emu"] = MetalBackend(_core.metal_emu, "metal-emu")


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
