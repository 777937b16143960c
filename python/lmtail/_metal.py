"""Python glue of the Metal path: the ``metal-emu`` backend object registered in ``_backend``.

The op entry points live in the extension (``lmtail._core.metal_emu``, same signatures as the CPU
functions of ``lmtail._core``). An op the Metal path does not implement yet raises
:class:`lmtail.BackendError` when called, never falls back to the CPU silently.
"""

from __future__ import annotations

from .errors import BackendError


class MetalEmuBackend:
    """Forwards to ``lmtail._core.metal_emu``; unknown ops raise BackendError."""

    name = "metal-emu"

    def __init__(self, module) -> None:
        self._mod = module

    def __getattr__(self, op: str):
        try:
            return getattr(self._mod, op)
        except AttributeError:
            raise BackendError(
                f"backend 'metal-emu' has no '{op}' kernel yet (metal/*.metal); use backend='cpu' for this op"
            ) from None

    def __repr__(self) -> str:
        return "<lmtail metal-emu backend: metal/*.metal on the CPU emulator>"
