"""The LM-head tail kernels on plain numpy arrays.

Every op takes ``backend=`` (default ``"cpu"``) so the same call runs on any backend in
:func:`lmtail.backends`. Inputs are never modified unless an ``out=`` array is passed; inputs
must already be float32 (nothing is silently converted). Any float32 array is accepted as it is
(a ctypes-backed view such as llama-cpp-python's logits, ``np.frombuffer``, a memoryview, a
read-only or memory-mapped array); a byte-swapped one raises :class:`lmtail.DTypeError`.
``threads`` is None (the core's default) or an integer in [1, 1024].

Semantics shared by all backends:

* ``argmax``: the lowest index among equal maxima; NaN never wins (a row of only NaN gives 0).
* ``greedy_argmax``: fail closed. Any NaN/+-Inf in the row, excluded ids included, raises
  :class:`lmtail.NonFiniteLogitsError`; ids in ``exclude`` are masked inside the reduction only
  (the logits are not modified); excluding every id raises :class:`lmtail.ParameterError`.
* ``topk``: value descending, index ascending among equal values; NaN ranks below -inf.
* ``softcap(x, s, cap)``: ``cap * tanh(x * s / cap)`` evaluated as llama.cpp's graph does:
  ``x*s``, ``*(1/cap)`` with ``1/cap`` rounded to float32 once, ``tanhf``, ``*cap``. On the CPU the
  four-pass and fused routes give identical bytes, equal to ggml's CPU graph. ``cap <= 0``
  means scale only.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from . import _backend, _core, _ggml_metal
from ._validate import cuda_tensor, finite_float, float32_array, is_cuda_tensor, threads_arg, token_ids, weight_array
from .errors import NonFiniteLogitsError, ParameterError, ShapeError

__all__ = ["rms_norm", "layer_norm", "matvec", "matvec_q5_k", "default_precision", "scale", "tanh", "softcap", "argmax", "greedy_argmax", "topk"]


def _out_like(x: np.ndarray, out: Optional[np.ndarray], name: str = "out") -> np.ndarray:
    if out is None:
        return x.copy()
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != x.shape or not out.flags.c_contiguous:
        raise ShapeError(f"{name}: expected a C-contiguous float32 array of shape {x.shape}")
    if out is not x:
        np.copyto(out, x)
    return out


def _norm(kind: str, x, gamma, eps, backend: str) -> np.ndarray:
    """Shared checks of the row norms; ``kind`` names the backend entry point."""
    impl = _backend.require_op(kind, backend)
    x = float32_array(x, "x")
    x2 = x.reshape(-1, x.shape[-1])
    g = None
    if gamma is not None:
        g = float32_array(gamma, "gamma", ndims=(1,))
        if g.shape[0] != x.shape[-1]:
            raise ShapeError(f"gamma: expected length {x.shape[-1]} (the row length of x); found {g.shape[0]}")
    eps = finite_float(eps, "eps")
    if eps < 0:
        raise ParameterError(f"eps: expected >= 0; found {eps}")
    out = np.empty_like(x2)
    getattr(impl, kind)(x2, g, out, eps)
    if _backend.row(backend).norm_poisons_overflow and not _core.all_finite(out, 0):
        # The device kernels poison a row whose mean of squares overflowed with NaN (the CPU
        # kernels and metal-emu's host code raise themselves): a finite input row with a
        # non-finite output is that overflow.
        for t in range(x2.shape[0]):
            if not np.isfinite(out[t]).all() and np.isfinite(x2[t]).all():
                raise NonFiniteLogitsError(f"{kind}: row {t}: the mean of the squares overflowed float32 (max |x| = "
                                           f"{float(np.max(np.abs(x2[t]))):g}); the row would normalise to all zeros")
    return out.reshape(x.shape)


def rms_norm(x: np.ndarray, gamma: Optional[np.ndarray] = None, eps: float = 1e-5, *, backend: str = "cpu") -> np.ndarray:
    """RMSNorm of each row: ``x / sqrt(mean(x^2) + eps) * gamma`` (ggml's CPU arithmetic).

    Fails closed where ggml is silent: a finite row whose float squares or mean overflow float32
    (any ``|x| >~ 1.8e19``: ggml's scale becomes 0 and the row all zeros), or whose
    ``mean(x^2) + eps`` is 0 (an all-zero row with ``eps=0``), raises
    :class:`lmtail.NonFiniteLogitsError` naming the row. On metal-emu the sum of squares is a
    float sum, so it overflows sooner (a row of ``|x| >~ 1e17`` at 6656 columns) and raises the
    same. Rows that already hold NaN/Inf give NaN/Inf (the caller's finite checks own them);
    every other row's bytes are unchanged.
    """
    return _norm("rms_norm", x, gamma, eps, backend)


def layer_norm(x: np.ndarray, gamma: Optional[np.ndarray] = None, eps: float = 1e-5, *, backend: str = "cpu") -> np.ndarray:
    """LayerNorm of each row without bias: ``(x - mean) / sqrt(var + eps) * gamma`` (sums in double).

    Fails closed as :func:`rms_norm` does: a finite row whose variance overflows float32 (the
    row would normalise to zeros) or whose ``var + eps`` is 0 (a constant row with ``eps=0``)
    raises :class:`lmtail.NonFiniteLogitsError`; rows holding NaN/Inf propagate them.
    """
    return _norm("layer_norm", x, gamma, eps, backend)


def default_precision(backend: str = "cpu", dtype="Q5_K") -> str:
    """The matvec activation precision ``backend`` uses for weight type ``dtype`` when none is
    given (Q5_K: "i24" on the CPU, "f32" elsewhere); see :func:`lmtail.capabilities`."""
    return _backend.row(backend).matvec[_backend.weight_type(dtype, backend).name][0]


def matvec(
    weight: np.ndarray,
    x: np.ndarray,
    dtype,
    *,
    backend: str = "cpu",
    threads: Optional[int] = None,
    precision: Optional[str] = None,
    isa: str = "auto",
    ggml_metal: Optional[str] = None,
) -> np.ndarray:
    """``dequantize(weight) @ x`` for a weight matrix of ggml type ``dtype`` and f32 ``x``.

    ``dtype``: a ggml type name in any case ("Q6_K", "q8_0", "BF16") or its id (e.g. a
    ``gguf.GGMLQuantizationType`` member). ``weight``: the raw GGUF bytes, uint8 (rows, row_bytes)
    whose rows are contiguous bytes (a memory map or a slice of one works), used without a copy;
    F16 also as float16 (rows, cols), BF16 as uint16 (rows, cols), F32 as float32 (rows, cols)
    (viewed as their bytes, no copy). cols must be a multiple of the type's block (32 for
    Q8_0/Q4_0, 256 for the K types, 1 for the floats). ``x``: (cols,) or (T, cols) float32.
    Returns (rows,) or (T, rows) float32; the weights are read once for all T rows. On
    ``backend="cuda"`` ``x`` may be a CUDA tensor (``__cuda_array_interface__`` / ``__dlpack__``,
    float32, C-contiguous): it is read on the device and the result is a
    ``lmtail._core.cuda.DeviceArray`` (DLPack / CUDA array interface).

    ``precision``: the activation precision (``lmtail.capabilities()[backend]["matvec"]["by_dtype"]``
    lists what each type runs; None is that type's default there, whose normwise error against
    float64 is <= 1e-6). For Q5_K on the CPU: "i24" (the default) carries each 256-block of x as
    s*(a + b/255), a int16 and b uint8, summed exactly in integers (~2e-7 normwise); "f32" f32
    arithmetic (~4e-7; every backend); "i16" the int16 piece alone (~2.7e-5, fastest). The bytes
    are identical for every thread count and SIMD path (``isa`` forces one: "scalar", "avx2",
    "avx_vnni" (AVX2 + AVX-VNNI), "avx512", "neon", "neon_dotprod" (arm64 with the ARMv8.2 dot
    product: the integer kernels use sdot / udot); "auto" picks the best), and row t of a batch
    equals that row computed alone. A forced path this CPU or build does not have raises
    ``ParameterError``. A non-finite x gives non-finite results in its row.

    ``precision="ggml"`` (CPU; the types whose ``precisions`` list it) returns the bytes of ggml's
    own CPU ``mul_mat`` (llama.cpp's logits), following the path llama.cpp takes for that type and
    T (for the K types: vec_dot for T < 8, the tiled matmul for T >= 8, CPU_REPACK's gemv/gemm for
    a Q4_K weight with rows % 8 == 0; on ggml's AMX build, its AMX kernels for the Q4_0, Q8_0 and
    K-quant weights with rows % 32 == 0). It is independent of the thread count but NOT batch
    invariant (except on the AMX build's own kernels): a verify batch can differ from one-by-one
    decoding exactly as in llama.cpp. ``isa`` then names the ggml build reproduced ("avx2",
    "avx512", "amx"; "auto": the one ggml compiles natively on this CPU); a build lmtail does not
    reproduce for that type raises UnsupportedError.

    ``precision="ggml"`` on ``backend="metal"`` / ``"metal-emu"`` dispatches llama.cpp's own
    ``kernel_mul_mv_<type>_f32`` or, for 2 <= T <= 8 where llama.cpp selects it (cols % 128 == 0;
    the K types from T = 4), ``kernel_mul_mv_ext_<type>_f32_r1_<n>`` (its argument structs, function
    constants and launch geometry; T > 8, llama.cpp's simdgroup matmul, raises UnsupportedError) from
    the library ``ggml_metal`` names: a llama.cpp ``.metallib`` on ``metal``, llama.cpp's
    ``ggml/src/ggml-metal`` source directory on ``metal-emu`` (translated and compiled at first use,
    cached). Supported is the llama.cpp of llama-cpp-python 0.3.36; anything else raises
    UnsupportedError. Bytes: those of llama.cpp's Metal kernel (under metal-emu: with the
    emulator's lane-order simd_sum, within ggml's Metal-vs-CPU tolerance of the CPU).

    Errors: a name or id that is not a ggml type: :class:`lmtail.ParameterError`; a ggml type
    (or precision) this backend does not run: :class:`lmtail.UnsupportedError` naming the
    backends that do; a wrong array dtype or non-contiguous rows: :class:`lmtail.DTypeError`;
    shapes, cols not a multiple of the block: :class:`lmtail.ShapeError`.
    """
    t = _backend.weight_type(dtype, backend, "matvec")
    r = _backend.row(backend)
    impl = _backend.get(backend)
    if precision == "ggml" and backend in _ggml_metal.BACKENDS and ggml_metal is not None:
        lib = _ggml_metal.library_path(backend, impl, ggml_metal)
        w, rows, cols = weight_array(weight, t, "weight")
        x = float32_array(x, "x")
        if x.shape[-1] != cols:
            raise ShapeError(f"x: expected rows of length {cols} (the {t.name} weight's cols); found {x.shape}")
        x2 = np.ascontiguousarray(x.reshape(-1, cols))
        out = np.empty((x2.shape[0], rows), dtype=np.float32)
        impl.ggml_matvec(lib, w, t.id, cols, x2, out)
        return out[0] if x.ndim == 1 else out
    if ggml_metal is not None:
        raise ParameterError("ggml_metal= names llama.cpp's library for precision='ggml' on backend 'metal' or 'metal-emu'")
    prec = _backend.precision(precision, t, backend)
    w, rows, cols = weight_array(weight, t, "weight")
    if backend == "cuda" and is_cuda_tensor(x):
        # A CUDA tensor stays on the device: read in place, the result a DeviceArray.
        ct = cuda_tensor(x, "x", impl)
        if ct.shape[-1] != cols:
            raise ShapeError(f"x: expected rows of length {cols} (the {t.name} weight's cols); found {ct.shape}")
        _backend.cuda_check_cols(t, cols)
        return impl.matvec_device(w, t.id, cols, ct.ptr, 1 if len(ct.shape) == 1 else ct.shape[0], len(ct.shape) == 1)
    x = float32_array(x, "x")
    if x.shape[-1] != cols:
        raise ShapeError(f"x: expected rows of length {cols} (the {t.name} weight's cols); found {x.shape}")
    x2 = x.reshape(-1, cols)
    threads = threads_arg(threads)
    if r.matvec_view is not None:
        out = r.matvec_view(impl, t, w, cols, x2, isa)
        return out[0] if x.ndim == 1 else out
    out = np.empty((x2.shape[0], rows), dtype=np.float32)
    r.run_matvec(impl, t, w, cols, x2, out, threads, isa, prec)
    return out[0] if x.ndim == 1 else out


def matvec_q5_k(
    w: np.ndarray,
    x: np.ndarray,
    *,
    threads: Optional[int] = None,
    backend: str = "cpu",
    isa: str = "auto",
    precision: Optional[str] = None,
) -> np.ndarray:
    """``matvec(w, x, "Q5_K", ...)``: Q5_K ``w`` (rows, cols/256*176) uint8 and f32 ``x`` (cols,)
    or (T, cols); see :func:`matvec`."""
    return matvec(w, x, "Q5_K", backend=backend, threads=threads, precision=precision, isa=isa)


def scale(x: np.ndarray, s: float, *, out: Optional[np.ndarray] = None, threads: Optional[int] = None, backend: str = "cpu") -> np.ndarray:
    """``x * s`` elementwise (ggml_scale with zero bias: one rounding per element)."""
    impl = _backend.require_op("scale", backend)
    x = float32_array(x, "x")
    y = _out_like(x, out)
    impl.scale(y, finite_float(s, "s"), threads_arg(threads))
    return y


def tanh(x: np.ndarray, *, out: Optional[np.ndarray] = None, threads: Optional[int] = None, backend: str = "cpu") -> np.ndarray:
    """``tanh(x)`` elementwise with the platform libm's ``tanhf`` (as ggml's CPU backend)."""
    impl = _backend.require_op("tanh", backend)
    x = float32_array(x, "x")
    y = _out_like(x, out)
    impl.tanh(y, threads_arg(threads))
    return y


def softcap(
    x: np.ndarray,
    scale: float,
    cap: float,
    *,
    four_pass: bool = True,
    out: Optional[np.ndarray] = None,
    threads: Optional[int] = None,
    backend: str = "cpu",
    precision: Optional[str] = None,
    ggml_metal: Optional[str] = None,
) -> np.ndarray:
    """``cap * tanh(x * scale / cap)``, or ``x * scale`` when ``cap <= 0``.

    ``four_pass=True`` runs the four barrier-separated nodes (x*s, x*(1/cap), tanh, x*cap);
    ``False`` the fused single pass. Identical bytes on the CPU.

    ``precision="ggml"`` on ``backend="metal"`` / ``"metal-emu"`` runs the four nodes as
    llama.cpp's own ``kernel_unary_f32_f32[_4]`` (scale / tanh by function constant) from the
    library ``ggml_metal`` names (see :func:`matvec`), with a resource barrier between nodes.
    """
    impl = _backend.require_op("softcap", backend)
    x = float32_array(x, "x")
    s = finite_float(scale, "scale")
    c = finite_float(cap, "cap")
    y = _out_like(x, out)
    if precision == "ggml" and backend in _ggml_metal.BACKENDS:
        impl.ggml_softcap(_ggml_metal.library_path(backend, impl, ggml_metal), y, s, c)
        return y
    if precision is not None or ggml_metal is not None:
        raise ParameterError("softcap: precision='ggml' with ggml_metal= is the llama.cpp-kernel route of 'metal'/'metal-emu'")
    impl.softcap(y, s, c, bool(four_pass), threads_arg(threads))
    return y


def _rows(x: np.ndarray) -> np.ndarray:
    x = float32_array(x, "x")
    if x.shape[-1] >= 2**31 - 1:
        raise ShapeError(f"x: rows must be shorter than 2^31-1; found {x.shape[-1]}")
    return x


def argmax(x: np.ndarray, *, threads: Optional[int] = None, backend: str = "cpu") -> Union[int, np.ndarray]:
    """Index of the maximum (lowest index among ties; NaN never wins). int for 1-D, uint32 per row for 2-D."""
    impl = _backend.require_op("argmax", backend)
    x = _rows(x)
    x2 = x.reshape(-1, x.shape[-1])
    out = np.empty(x2.shape[0], dtype=np.uint32)
    impl.argmax_rows(x2, out, threads_arg(threads))
    return int(out[0]) if x.ndim == 1 else out


def greedy_argmax(
    x: np.ndarray, exclude=None, *, threads: Optional[int] = None, backend: str = "cpu"
) -> Union[int, np.ndarray]:
    """Fail-closed greedy argmax with ``exclude`` (e.g. the EOG ids for ignore-eos) masked in the reduction only."""
    impl = _backend.require_op("greedy_argmax", backend)
    x = _rows(x)
    n = x.shape[-1]
    excl = token_ids(exclude, n, "exclude")
    if excl.size >= n:
        raise ParameterError(f"exclude: excludes all {n} token ids; nothing left to choose")
    x2 = x.reshape(-1, n)
    out = np.empty(x2.shape[0], dtype=np.uint32)
    impl.greedy_argmax_rows(x2, excl, out, threads_arg(threads))
    check_greedy(out, n, excl.size)
    return int(out[0]) if x.ndim == 1 else out


def check_greedy(out: np.ndarray, n: int, n_excluded: int) -> None:
    """Turn the kernels' sentinel results into typed errors (shared by ops and Head)."""
    bad = out >= n
    if not bad.any():
        return
    t = int(np.argmax(bad))
    v = int(out[t])
    if v == 0xFFFFFFFF:
        raise NonFiniteLogitsError(f"greedy argmax: row {t} contains NaN or Inf (non-finite latch set)")
    if v == 0xFFFFFFFE and n_excluded:
        raise ParameterError(f"greedy argmax: row {t} has no candidate left after excluding {n_excluded} ids")
    raise NonFiniteLogitsError(f"greedy argmax: row {t} returned invalid token {v} (vocabulary {n})")


def topk(x: np.ndarray, k: int, *, threads: Optional[int] = None, backend: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Top-k per row: (ids uint32, values float32), value descending, id ascending on ties."""
    impl = _backend.require_op("topk", backend)
    x = _rows(x)
    n = x.shape[-1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise ParameterError(f"k: expected an integer in [1, {n}]; found {k!r}")
    x2 = x.reshape(-1, n)
    ids = np.empty((x2.shape[0], int(k)), dtype=np.uint32)
    vals = np.empty((x2.shape[0], int(k)), dtype=np.float32)
    impl.topk_rows(x2, int(k), ids, vals, threads_arg(threads))
    if x.ndim == 1:
        return ids[0], vals[0]
    return ids, vals
