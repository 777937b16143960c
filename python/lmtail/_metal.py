"""Python glue of the Metal path: the backend objects registered in ``_backend``.

Both Metal backends run the same host code (csrc/metal) and kernels (metal/*.metal), with entry
points of the same signatures as the CPU functions of ``lmtail._core``:

* ``metal``: ``lmtail._core.metal``, built on Apple against metal-cpp; the kernels come from
  ``lmtail.metallib`` next to the extension module. Registered only when a Metal device and the
  library load (``_core.metal.probe()``).
* ``metal-emu``: ``lmtail._core.metal_emu``, the same code on the CPU emulator (every platform).

An op the Metal path does not implement raises :class:`lmtail.BackendError` when called, never
falls back to the CPU silently.
"""

from __future__ import annotations

import os

from .errors import BackendError

_DESCRIPTIONS = {
    "metal": "metal/*.metal on an Apple GPU",
    "metal-emu": "metal/*.metal on the CPU emulator",
}


class MetalBackend:
    """Forwards to one of the Metal extension submodules; unknown ops raise BackendError."""

    def __init__(self, module, name: str) -> None:
        self._mod = module
        self.name = name

    def __getattr__(self, op: str):
        try:
            return getattr(self._mod, op)
        except AttributeError:
            raise BackendError(
                f"backend {self.name!r} has no '{op}' kernel yet (metal/*.metal); use backend='cpu' for this op"
            ) from None

    def __repr__(self) -> str:
        return f"<lmtail {self.name} backend: {_DESCRIPTIONS.get(self.name, self.name)}>"


def _checkout_sources() -> "tuple[str, str] | None":
    """(metal/, csrc/include/) of the source checkout this package runs from, if it does."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    kernels, include = os.path.join(root, "metal"), os.path.join(root, "csrc", "include")
    if os.path.isfile(os.path.join(include, "lmtail", "kernel_abi.h")) and os.path.isdir(kernels):
        return kernels, include
    return None


def device_backend(core) -> "MetalBackend | None":
    """The ``metal`` backend when this build has it and a device with the kernel library loads.

    ``LMTAIL_DISABLE_METAL=1`` leaves it out (CI runs its trusted tests that way on hosted macOS
    runners, whose paravirtual GPU is not trusted; the device tests run separately).
    """
    mod = getattr(core, "metal", None)
    if mod is None or os.environ.get("LMTAIL_DISABLE_METAL") == "1":
        return None
    library = os.path.join(os.path.dirname(os.path.abspath(core.__file__)), "lmtail.metallib")
    mod.set_library_path(library)
    checkout = _checkout_sources()
    if not os.path.isfile(library) and checkout is not None:
        # Development (an in-tree build without the metallib): compile metal/*.metal at run time.
        mod.set_source_dir(*checkout)
    ok, _why = mod.probe()
    return MetalBackend(mod, "metal") if ok else None
