"""Backend registry and the capability table: which backend runs which op, weight type and precision.

One table (``_ROWS``) declares every backend lmtail knows, present here or not; ops and Head
consult it instead of backend names or ``hasattr``. The CPU's weight types are not written here:
they are the C++ CPU type table (csrc/cpu/types/types.hpp, ``LMT_CPU_TYPES``) read through
``_core.cpu_types()``, so a type merged there appears in ``lmtail.capabilities()``, ops and Head
with no Python change. metal and metal-emu run every type of ``_METAL_TYPES`` (the Metal host
code's kernel table, csrc/metal/matvec.cpp; tests/test_metal_emu.py checks the two agree) at f32,
and at "ggml" with llama.cpp's own kernels when the caller names llama.cpp's library
(``ggml_metal=``: the row's ``requires``); cuda every type of ``_CUDA_TYPES`` (csrc/cuda/mul_mv.cu's
table), at f32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import _core, _ggml_metal
from ._types import GGMLType, ggml_type
from .errors import BackendError, ParameterError, ShapeError, UnsupportedError

# Every precision name any backend knows (lmt::cpu::Precision without "default").
PRECISION_NAMES = ("f32", "i16", "i24", "ggml")
# The ops on float32 rows (their only dtype is F32, their only precision f32).
FLOAT_OPS = ("rms_norm", "layer_norm", "scale", "tanh", "softcap", "argmax", "greedy_argmax", "topk")


@dataclass(frozen=True)
class TypeInfo:
    """A weight type a backend runs: block geometry (from the C++ table) and precisions."""

    name: str
    id: int
    block_elems: int
    block_bytes: int

    def row_bytes(self, cols: int) -> int:
        return cols // self.block_elems * self.block_bytes


def _cpu_types() -> tuple[dict[str, TypeInfo], dict[str, tuple[str, ...]]]:
    infos, precs = {}, {}
    for r in _core.cpu_types():
        infos[r["name"]] = TypeInfo(r["name"], int(r["id"]), int(r["block_elems"]), int(r["block_bytes"]))
        # The default first: every consumer reads element 0 as the default.
        rest = tuple(p for p in r["precisions"] if p != r["default_precision"])
        precs[r["name"]] = (r["default_precision"],) + rest
    return infos, precs


# Block geometry of every type some backend runs. The CPU runs every type a device runs (it is
# the reference the device kernels are tested against), so the CPU rows are the source.
TYPES, _CPU_PRECISIONS = _cpu_types()


def _cpu_matvec(impl, t: TypeInfo, w, cols, x2, out, threads, isa, precision):
    impl.matvec(w, t.id, cols, x2, out, threads, isa, precision)


def _cuda_matvec(impl, t: TypeInfo, w, cols, x2, out, threads, isa, precision):
    cuda_check_cols(t, cols)
    impl.matvec(w, t.id, cols, x2, out, threads, isa)


def cuda_check_cols(t: TypeInfo, cols: int) -> None:
    """The cuda kernels read the float types 8 columns per lane: cols must be a multiple of 8."""
    if t.block_elems == 1 and cols % 8:
        raise ShapeError(f"{t.name} on the cuda backend needs cols a multiple of 8; found {cols}")


def _metal_matvec(impl, t: TypeInfo, w, cols, x2, out, threads, isa, precision):
    # One entry point for every type (the type id picks the kernel's table row); f32 only.
    impl.matvec(w, t.id, cols, x2, out, threads, isa)


def _metal_matvec_view(impl, t: TypeInfo, w, cols, x2, isa):
    # The logits stay in the shared buffer they were computed in: a zero-copy numpy view.
    return impl.matvec_view(w, t.id, cols, x2, isa)


@dataclass(frozen=True)
class Row:
    """One backend of the capability table."""

    name: str
    # dtype name -> precisions, the default first (matvec and head).
    matvec: dict
    # float32 ops this backend implements.
    ops: tuple
    # How lmtail.Head runs here: "core" (the C++ lmt::Head, _core.CpuHead), "device" (the
    # backend's DeviceHead: weights resident, only the route's bytes come back) or "ops" (the
    # ops one by one from Python).
    head: str
    # Head's final norms on this backend ("none" = no norm applied).
    head_norms: tuple
    run_matvec: Callable
    # A zero-copy view-returning matvec (Metal's shared buffer), or None.
    matvec_view: Optional[Callable] = None
    # The norm kernels mark a row whose mean of squares overflowed with NaN instead of raising
    # (the device kernels); ops checks for that on the host.
    norm_poisons_overflow: bool = False
    # Row t of a T-row matvec equals that activation row computed alone (the same bytes).
    batch_invariant: bool = True
    # Precisions usable only with an argument naming an outside library: precision -> argument
    # ("ggml" on the Metal backends runs llama.cpp's kernels from ggml_metal=PATH).
    requires: tuple = ()


_DEVICE_OPS = ("rms_norm", "scale", "tanh", "softcap", "argmax", "greedy_argmax", "topk")
# csrc/cuda/mul_mv.cu's kTypes (tests/test_cuda.py checks they agree): f32 accumulation only.
_CUDA_TYPES = {n: ("f32",) for n in ("Q6_K", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "F16", "BF16", "F32")}
# The types of metal/matvec.metal (one kernel family; f32 products; batch invariant), and of
# llama.cpp's kernel_mul_mv_<type>_f32 (precision "ggml": csrc/metal/ggml.cpp's table), which
# needs the caller's llama.cpp library (_METAL_REQUIRES).
_METAL_TYPES = {d: ("f32", "ggml") for d in ("F32", "F16", "Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "BF16")}
_METAL_REQUIRES = (("ggml", "ggml_metal"),)

# THE capability table. `available` is decided below, where each backend registers.
_ROWS: dict[str, Row] = {
    "cpu": Row("cpu", _CPU_PRECISIONS, FLOAT_OPS, "core", ("none", "rms", "layer"), _cpu_matvec),
    "metal": Row("metal", _METAL_TYPES, _DEVICE_OPS, "ops", ("none", "rms"), _metal_matvec, _metal_matvec_view, True,
                 requires=_METAL_REQUIRES),
    "metal-emu": Row("metal-emu", _METAL_TYPES, _DEVICE_OPS, "ops", ("none", "rms"), _metal_matvec, _metal_matvec_view,
                     True, requires=_METAL_REQUIRES),
    "cuda": Row("cuda", _CUDA_TYPES, _DEVICE_OPS, "device", ("none", "rms"), _cuda_matvec, None, True),
}
for _r in _ROWS.values():  # a device type the CPU lacks would have no block geometry
    assert set(_r.matvec) <= set(TYPES), (_r.name, _r.matvec)

# Backends this build can run, in table order: `metal` on Apple GPUs, `metal-emu` with the
# emulator, `cuda` with LMTAIL_CUDA=ON and a GPU; each provides the same _core-style entry points.
_IMPLS: dict[str, Any] = {"cpu": _core}
# metal: the Metal kernels (metal/*.metal) and host code (csrc/metal) on an Apple GPU, built on
# Apple (LMTAIL_METAL) and listed only where a device and lmtail.metallib load.
# metal-emu: the same kernels and host code on the CPU emulator, built by default (LMTAIL_EMU).
# Both have the same entry points as the CPU functions of _core.
from ._metal import MetalBackend, device_backend  # noqa: E402

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
        known = "" if name in _ROWS else f" (lmtail knows: {', '.join(_ROWS)})"
        raise BackendError(f"backend {name!r} is not available here; available: {', '.join(_IMPLS)}{known}")
    return impl


def row(name: str) -> Row:
    """The table row of an available backend (BackendError otherwise)."""
    get(name)
    return _ROWS[name]


def _where(pred) -> str:
    names = [n for n, r in _ROWS.items() if pred(r)]
    return ", ".join(names) if names else "none"


def _type_summary() -> str:
    return "; ".join(f"{n}: {', '.join(r.matvec) or 'none'}" for n, r in _ROWS.items())


def weight_type(dtype, backend: str, op: str = "matvec") -> TypeInfo:
    """``dtype`` resolved against ``backend``'s row: the TypeInfo to run, or ParameterError (not a
    ggml type) / UnsupportedError (a ggml type this backend does not run, naming those that do)."""
    t = ggml_type(dtype)
    r = row(backend)
    if t.name not in r.matvec:
        raise UnsupportedError(unsupported_type_message(t, backend, op))
    return TYPES[t.name]


def unsupported_type_message(t: GGMLType, backend: str, op: str) -> str:
    runs = _where(lambda r: t.name in r.matvec)
    if runs == "none":
        return (f"{op}: weight type {t.name} (ggml id {t.id}) is not run by any lmtail backend "
                f"(types run: {_type_summary()})")
    return f"{op}: weight type {t.name} is not run by the {backend} backend; backends that run it: {runs}"


def precision(value, t: TypeInfo, backend: str) -> str:
    """The precision to run ``t`` with on ``backend``: None picks that type's default there."""
    allowed = _ROWS[backend].matvec[t.name]
    if value is None:
        return allowed[0]
    needs = dict(_ROWS[backend].requires).get(value)
    if needs is not None and value in allowed:
        # Listed, but only usable with its library: callers that have one never get here.
        raise UnsupportedError(_ggml_metal.missing_library_message(backend, t.name))
    if not isinstance(value, str) or value not in PRECISION_NAMES:
        raise ParameterError(f"precision: expected {', '.join(map(repr, PRECISION_NAMES))} or None; found {value!r}")
    if value not in allowed:
        runs = _where(lambda r: value in r.matvec.get(t.name, ()))
        why = ""
        if value == "ggml" and backend == "cpu":
            builds = next((r.get("ggml_builds", []) for r in _core.cpu_types() if r["name"] == t.name), [])
            why = (f"; precision='ggml' for {t.name} reproduces ggml's x86 build(s) {', '.join(builds) or 'none'} "
                   f"(emulated with AVX2 code), and a native llama.cpp on this CPU is ggml's "
                   f"{_core.ggml_native_build()} build")
        raise UnsupportedError(f"precision {value!r} is not run for {t.name} on the {backend} backend (it has: "
                               f"{', '.join(allowed)}); backends that run {t.name} at {value}: {runs}{why}")
    return value


def require_op(op: str, backend: str) -> Any:
    """The implementation of an available backend that runs the float32 op ``op``."""
    impl = get(backend)
    if op not in _ROWS[backend].ops:
        raise UnsupportedError(f"{op} is not run by the {backend} backend; backends that run it: "
                               f"{_where(lambda r: op in r.ops)}")
    return impl


def capabilities() -> dict:
    """What every backend lmtail knows runs, present on this machine or not."""
    out = {}
    for name, r in _ROWS.items():
        by_dtype = {d: {"precisions": list(p), "default": p[0]} for d, p in r.matvec.items()}
        precs = [p for p in PRECISION_NAMES if any(p in v for v in r.matvec.values())]
        col: dict[str, Any] = {"available": name in _IMPLS}
        for op in ("matvec", "head"):
            col[op] = {"dtypes": list(r.matvec), "precisions": list(precs),
                       "by_dtype": {d: dict(v, precisions=list(v["precisions"])) for d, v in by_dtype.items()},
                       "requires": dict(r.requires)}
        col["head"]["norms"] = list(r.head_norms)
        col["matvec"]["batch_invariant"] = r.batch_invariant
        for op in FLOAT_OPS:  # every op is listed; one a backend lacks has no dtypes
            col[op] = {"dtypes": ["F32"], "precisions": ["f32"]} if op in r.ops else {"dtypes": [], "precisions": []}
        out[name] = col
    return out
