"""ctypes driver for ggml's CPU graph API (llama-cpp-python 0.3.36's libggml-base / libggml-cpu).

This is the oracle side of the parity tests and of ``bench/bench_head.py``: every function here
builds the same ggml graph llama.cpp builds, runs it with ``ggml_graph_plan`` +
``ggml_graph_compute`` (what ``ggml_graph_compute_with_ctx`` and the CPU backend do), and copies
the result back into numpy.  Only ggml's public C API is declared here; no ggml code is copied.

Declarations follow ``ggml.h`` / ``ggml-cpu.h`` / ``ggml-backend.h`` of the vendored llama.cpp in
the 0.3.36 sdist.  ggml reports misuse with ``GGML_ASSERT`` (``abort()``), which would kill the
Python process, so every wrapper checks shapes and dtypes before it calls into the library.

Memory: a context holds only what the graph needs.  ``MatMulQ5K`` binds the weight tensor to the
caller's numpy buffer (``ggml_backend_cpu_buffer_from_ptr`` + ``ggml_backend_tensor_alloc``, zero
copy) when the buffer is 32-byte aligned, and otherwise copies it once into the context.
"""

from __future__ import annotations

import ctypes
import functools
import time
from ctypes import POINTER, Structure, c_bool, c_float, c_int, c_int64, c_size_t, c_void_p
from typing import Optional

import numpy as np

from ._lib import OracleUnavailable, load  # noqa: F401  (re-exported for callers)

# enum ggml_type (ggml.h)
GGML_TYPE_F32 = 0
GGML_TYPE_Q5_K = 13
GGML_TYPE_Q8_K = 15
GGML_TYPE_I32 = 26

GGML_STATUS = {-2: "GGML_STATUS_ALLOC_FAILED", -1: "GGML_STATUS_FAILED", 0: "GGML_STATUS_SUCCESS", 1: "GGML_STATUS_ABORTED"}

QK_K = 256
Q5_K_BLOCK_BYTES = 176
TENSOR_ALIGNMENT = 32  # ggml-backend's TENSOR_ALIGNMENT; ggml_backend_cpu_buffer_from_ptr asserts it
_CTX_SLACK = 1 << 16  # per-context headroom for object headers and GGML_MEM_ALIGN padding


class ggml_init_params(Structure):
    _fields_ = [
        ("mem_size", c_size_t),
        ("mem_buffer", c_void_p),
        ("no_alloc", c_bool),
    ]


class ggml_cplan(Structure):
    _fields_ = [
        ("work_size", c_size_t),
        ("work_data", c_void_p),  # uint8_t *
        ("n_threads", c_int),
        ("threadpool", c_void_p),  # struct ggml_threadpool *
        ("abort_callback", c_void_p),  # ggml_abort_callback (bool (*)(void *))
        ("abort_callback_data", c_void_p),
        ("use_ref", c_bool),
    ]


def _decl(lib, name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


class _Api:
    """The declared subset of ggml's C API (one instance per process)."""

    def __init__(self) -> None:
        base = load("ggml-base")
        cpu = load("ggml-cpu")
        P = c_void_p
        # ggml.h (libggml-base)
        self.init = _decl(base, "ggml_init", P, ggml_init_params)
        self.free = _decl(base, "ggml_free", None, P)
        self.set_no_alloc = _decl(base, "ggml_set_no_alloc", None, P, c_bool)
        self.tensor_overhead = _decl(base, "ggml_tensor_overhead", c_size_t)
        self.graph_overhead = _decl(base, "ggml_graph_overhead", c_size_t)
        self.row_size = _decl(base, "ggml_row_size", c_size_t, c_int, c_int64)
        self.new_tensor_1d = _decl(base, "ggml_new_tensor_1d", P, P, c_int, c_int64)
        self.new_tensor_2d = _decl(base, "ggml_new_tensor_2d", P, P, c_int, c_int64, c_int64)
        self.get_data = _decl(base, "ggml_get_data", P, P)
        self.get_name = _decl(base, "ggml_get_name", P, P)
        self.nbytes = _decl(base, "ggml_nbytes", c_size_t, P)
        self.set_input = _decl(base, "ggml_set_input", None, P)
        self.set_output = _decl(base, "ggml_set_output", None, P)
        self.mul_mat = _decl(base, "ggml_mul_mat", P, P, P, P)
        self.scale = _decl(base, "ggml_scale", P, P, P, c_float)
        self.tanh = _decl(base, "ggml_tanh", P, P, P)
        self.rms_norm = _decl(base, "ggml_rms_norm", P, P, P, c_float)
        self.norm = _decl(base, "ggml_norm", P, P, P, c_float)
        self.mul = _decl(base, "ggml_mul", P, P, P, P)
        self.argmax = _decl(base, "ggml_argmax", P, P, P)
        self.top_k = _decl(base, "ggml_top_k", P, P, P, c_int)
        self.new_graph = _decl(base, "ggml_new_graph", P, P)
        self.build_forward_expand = _decl(base, "ggml_build_forward_expand", None, P, P)
        self.quantize_chunk = _decl(
            base, "ggml_quantize_chunk", c_size_t, c_int, P, P, c_int64, c_int64, c_int64, P
        )
        # ggml-backend.h (libggml-base)
        self.cpu_buffer_from_ptr = _decl(base, "ggml_backend_cpu_buffer_from_ptr", P, P, c_size_t)
        self.buft_name = _decl(base, "ggml_backend_buft_name", ctypes.c_char_p, P)
        self.buft_alloc_buffer = _decl(base, "ggml_backend_buft_alloc_buffer", P, P, c_size_t)
        self.buft_get_alloc_size = _decl(base, "ggml_backend_buft_get_alloc_size", c_size_t, P, P)
        self.buffer_get_base = _decl(base, "ggml_backend_buffer_get_base", P, P)
        self.tensor_set = _decl(base, "ggml_backend_tensor_set", None, P, P, c_size_t, c_size_t)
        self.reg_dev_get = _decl(base, "ggml_backend_reg_dev_get", P, P, c_size_t)
        self.reg_get_proc_address = _decl(base, "ggml_backend_reg_get_proc_address", P, P, ctypes.c_char_p)
        self.tensor_alloc = _decl(base, "ggml_backend_tensor_alloc", c_int, P, P, P)
        self.buffer_free = _decl(base, "ggml_backend_buffer_free", None, P)
        # ggml-cpu.h (libggml-cpu)
        self.cpu_init = _decl(cpu, "ggml_cpu_init", None)
        self.graph_plan = _decl(cpu, "ggml_graph_plan", ggml_cplan, P, c_int, P)
        self.graph_compute = _decl(cpu, "ggml_graph_compute", c_int, P, POINTER(ggml_cplan))
        self.cpu_has_avx512 = _decl(cpu, "ggml_cpu_has_avx512", c_int)
        self.cpu_has_avx2 = _decl(cpu, "ggml_cpu_has_avx2", c_int)
        self.cpu_has_llamafile = _decl(cpu, "ggml_cpu_has_llamafile", c_int)
        self.cpu_has_neon = _decl(cpu, "ggml_cpu_has_neon", c_int)
        self.cpu_reg = _decl(cpu, "ggml_backend_cpu_reg", P)
        self.cpu_init()  # fp16 tables, GGML_CPU_DISABLE_FUSION; idempotent


@functools.lru_cache(maxsize=None)
def api() -> _Api:
    """Load the oracle libraries (raises OracleUnavailable when llama-cpp-python is missing)."""
    return _Api()


def available() -> bool:
    try:
        api()
    except OracleUnavailable:
        return False
    return True


def oracle_build_isa() -> str:
    """The ISA the oracle's ggml-cpu was compiled for ("amx", "avx512", "avx2", "neon" or
    "scalar"): the build whose bytes precision="ggml" must reproduce on this machine
    (ggml_cpu_has_* report the compile-time flags of that library; "amx" is an AVX-512 build
    whose AMX extra buffer exists here, which llama.cpp then loads the weights it supports into)."""
    a = api()
    if a.cpu_has_avx512():
        return "amx" if extra_buffer_type("AMX") is not None else "avx512"
    if a.cpu_has_avx2():
        return "avx2"
    if a.cpu_has_neon():
        return "neon"
    return "scalar"


@functools.lru_cache(maxsize=None)
def extra_buffer_type(name: str) -> Optional[int]:
    """ggml-cpu's extra buffer type ``name`` ("AMX", "CPU_REPACK": what llama.cpp loads weights
    into by default, use_extra_bufts, in that order of preference), or None when this build (or
    this machine, for AMX) has none."""
    a = api()
    dev = a.reg_dev_get(a.cpu_reg(), 0)
    fn = a.reg_get_proc_address(a.cpu_reg(), b"ggml_backend_dev_get_extra_bufts")
    if not dev or not fn:
        return None
    get = ctypes.CFUNCTYPE(POINTER(c_void_p), c_void_p)(fn)
    lst = get(dev)
    i = 0
    while lst and lst[i]:
        if a.buft_name(lst[i]) == name.encode():
            return int(lst[i])
        i += 1
    return None


# The weights llama.cpp puts in the AMX buffer (ggml-cpu/amx/amx.cpp supports_op): a type with
# AMX kernels (qtype_has_amx_kernels; the ones lmtail runs) or F16, its alignment, rows % 32.
AMX_TYPES = {1: 16, 2: 32, 8: 32, 12: 256, 13: 256, 14: 256}  # F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K
AMX_TILE_TYPES = {2, 8, 12, 13, 14}  # F16 runs an AVX-512 kernel there, no tiles


def amx_takes(type_id: int, rows: int, cols: int) -> bool:
    return (extra_buffer_type("AMX") is not None and type_id in AMX_TYPES and rows % 32 == 0
            and cols % AMX_TYPES[type_id] == 0)


_AMX_PROBE = """
import numpy as np, sys
sys.path.insert(0, sys.argv[1])
from oracle import graph as g
w = np.zeros((32, 34), np.uint8)
g.MatMul(w, 8, 32, 2, repack=True).run(np.ones((2, 32), np.float32))
"""


@functools.lru_cache(maxsize=None)
def amx_tiles_broken() -> Optional[str]:
    """Why the oracle's AMX tile kernel (mul_mat with T > 1 on a weight in the AMX buffer) cannot
    run here, or None when it runs (or there is no AMX buffer). Probed in a child process: with
    llama-cpp-python 0.3.36 built by GCC 12, ggml's ggml_tile_config_init loads a tile
    configuration whose rows / colsb stores the compiler dropped, and the first tile instruction
    raises SIGILL (seen on an Intel Xeon with AMX, 2026-12-06), which would kill the caller."""
    if extra_buffer_type("AMX") is None:
        return None
    import os
    import signal
    import subprocess
    import sys

    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, LMTAIL_ORACLE_AMX_PROBE="1")
    r = subprocess.run([sys.executable, "-c", _AMX_PROBE, tests_dir], capture_output=True, timeout=120, env=env)
    if r.returncode == 0:
        return None
    how = f"signal {signal.Signals(-r.returncode).name}" if r.returncode < 0 else f"exit {r.returncode}"
    return (f"the oracle's AMX tile kernel (ggml mul_mat, T > 1, weight in the AMX buffer) dies here "
            f"({how}): its build drops the tile configuration; llama.cpp itself crashes on such weights")


def describe() -> str:
    a = api()
    from ._lib import lib_dir

    return (
        f"ggml CPU oracle at {lib_dir()} (avx2={a.cpu_has_avx2()}, avx512={a.cpu_has_avx512()}, "
        f"llamafile={a.cpu_has_llamafile()})"
    )


# --------------------------------------------------------------------------------------------
# context / graph plumbing
# --------------------------------------------------------------------------------------------


def _f32(v) -> float:
    """The float ggml will see: round to binary32 first, so ctypes' double->float is exact."""
    return float(np.float32(v))


class _Graph:
    """One ggml context plus one graph, computed with ggml_graph_plan + ggml_graph_compute.

    The work buffer is a numpy array kept across runs (ggml_graph_compute_with_ctx would carve a
    new one out of the context on every call, so it cannot be re-run indefinitely).
    """

    def __init__(self, data_bytes: int, n_tensors: int) -> None:
        self.a = api()
        size = data_bytes + n_tensors * (self.a.tensor_overhead() + 64) + self.a.graph_overhead() + _CTX_SLACK
        self.ctx = self.a.init(ggml_init_params(size, None, False))
        if not self.ctx:
            raise MemoryError(f"ggml_init failed for a {size}-byte context")
        self.graph = None
        self._buffers: list = []  # ggml_backend_buffer_t bound to caller memory
        self._keep: list = []  # numpy arrays those buffers point into
        self._work = np.empty(0, np.uint8)

    # tensors ---------------------------------------------------------------------------------
    def new_1d(self, typ: int, n: int):
        t = self.a.new_tensor_1d(self.ctx, typ, n)
        if not t:
            raise MemoryError("ggml_new_tensor_1d failed (context too small)")
        return t

    def new_2d(self, typ: int, ne0: int, ne1: int):
        t = self.a.new_tensor_2d(self.ctx, typ, ne0, ne1)
        if not t:
            raise MemoryError("ggml_new_tensor_2d failed (context too small)")
        return t

    def bind_2d(self, typ: int, ne0: int, ne1: int, arr: np.ndarray):
        """A tensor whose data is arr's memory (zero copy); arr must be C-contiguous, 32-B aligned."""
        assert arr.flags.c_contiguous and arr.ctypes.data % TENSOR_ALIGNMENT == 0
        self.a.set_no_alloc(self.ctx, True)
        try:
            t = self.new_2d(typ, ne0, ne1)
        finally:
            self.a.set_no_alloc(self.ctx, False)
        nb = self.a.nbytes(t)
        if nb != arr.nbytes:
            raise ValueError(f"tensor needs {nb} bytes, array has {arr.nbytes}")
        buf = self.a.cpu_buffer_from_ptr(arr.ctypes.data, arr.nbytes)
        if not buf:
            raise MemoryError("ggml_backend_cpu_buffer_from_ptr failed")
        self._buffers.append(buf)
        self._keep.append(arr)
        st = self.a.tensor_alloc(buf, t, arr.ctypes.data)
        if st != 0:
            raise RuntimeError(f"ggml_backend_tensor_alloc: {GGML_STATUS.get(st, st)}")
        return t

    def write(self, t, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr)
        nb = self.a.nbytes(t)
        if nb != arr.nbytes:
            raise ValueError(f"tensor holds {nb} bytes, got {arr.nbytes}")
        ctypes.memmove(self.a.get_data(t), arr.ctypes.data, nb)

    def read(self, t, dtype, shape) -> np.ndarray:
        out = np.empty(shape, dtype)
        nb = self.a.nbytes(t)
        if nb != out.nbytes:
            raise ValueError(f"tensor holds {nb} bytes, expected {out.nbytes} for {shape} {np.dtype(dtype)}")
        ctypes.memmove(out.ctypes.data, self.a.get_data(t), nb)
        return out

    # graph -----------------------------------------------------------------------------------
    def build(self, *outputs) -> None:
        self.graph = self.a.new_graph(self.ctx)
        if not self.graph:
            raise MemoryError("ggml_new_graph failed (context too small)")
        for t in outputs:
            self.a.set_output(t)
            self.a.build_forward_expand(self.graph, t)

    def compute(self, n_threads: int = 1) -> None:
        if self.graph is None:
            raise RuntimeError("build() the graph first")
        if n_threads < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        plan = self.a.graph_plan(self.graph, int(n_threads), None)
        if plan.work_size > self._work.nbytes:
            self._work = np.empty(plan.work_size + 4096, np.uint8)
        plan.work_data = self._work.ctypes.data if plan.work_size else None
        st = self.a.graph_compute(self.graph, ctypes.byref(plan))
        if st != 0:
            raise RuntimeError(f"ggml_graph_compute: {GGML_STATUS.get(st, st)}")

    def close(self) -> None:
        if self.ctx:
            self.a.free(self.ctx)
            self.ctx = None
        for b in self._buffers:
            self.a.buffer_free(b)
        self._buffers.clear()
        self._keep.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


def _as_rows_f32(x, name: str) -> tuple[np.ndarray, tuple]:
    """x as a C-contiguous float32 2-D (rows, n) array, and the shape to give back."""
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise TypeError(f"{name} must be float32, got {a.dtype}")
    if a.ndim not in (1, 2) or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D or 2-D array, got shape {a.shape}")
    return np.ascontiguousarray(a.reshape(1, -1) if a.ndim == 1 else a), a.shape


def _unary_chain(x, steps, threads: int) -> np.ndarray:
    """Apply a chain of unary nodes, each a separate ggml op, as one graph."""
    a2, shape = _as_rows_f32(x, "x")
    rows, n = a2.shape
    with _Graph(data_bytes=(len(steps) + 1) * (a2.nbytes + 64), n_tensors=len(steps) + 1) as g:
        t = g.new_2d(GGML_TYPE_F32, n, rows)
        g.a.set_input(t)
        g.write(t, a2)
        for op, arg in steps:
            if op == "scale":
                t = g.a.scale(g.ctx, t, _f32(arg))
            elif op == "tanh":
                t = g.a.tanh(g.ctx, t)
            else:  # pragma: no cover
                raise ValueError(op)
        g.build(t)
        g.compute(threads)
        return g.read(t, np.float32, shape)


# --------------------------------------------------------------------------------------------
# ops
# --------------------------------------------------------------------------------------------


def scale(x, s, threads: int = 1) -> np.ndarray:
    """ggml_scale(x, s): one node."""
    return _unary_chain(x, [("scale", s)], threads)


def tanh(x, threads: int = 1) -> np.ndarray:
    """ggml_tanh(x): one node (ggml-cpu calls libm's tanhf per element)."""
    return _unary_chain(x, [("tanh", None)], threads)


def softcap_four_nodes(logits, scale, cap, threads: int = 1) -> np.ndarray:
    """llama.cpp's output graph for a soft-capped model, as four nodes of one graph.

    ggml_scale(s) -> ggml_scale(1.0f/cap) -> ggml_tanh -> ggml_scale(cap), where 1.0f/cap is the
    binary32 division llama.cpp does on its float hparam (np.float32(1) / np.float32(cap)).
    """
    cap32 = np.float32(cap)
    inv = np.float32(1) / cap32
    return _unary_chain(logits, [("scale", scale), ("scale", inv), ("tanh", None), ("scale", cap32)], threads)


def rms_norm_mul(x, gamma, eps: float = 1e-5, threads: int = 1, fuse: bool = True) -> np.ndarray:
    """ggml_mul(ggml_rms_norm(x, eps), gamma) over the rows of x (T, cols).

    ggml-cpu in this build fuses RMS_NORM+MUL into one kernel when the norm's output has no other
    use (fuse=True, llama.cpp's case).  fuse=False marks the norm as a graph output, which keeps
    the two nodes separate; both compute x*scale*gamma[i] left to right.
    """
    return _norm_mul(x, gamma, eps, threads, "rms_norm", fuse)


def norm_mul(x, gamma, eps: float = 1e-5, threads: int = 1) -> np.ndarray:
    """ggml_mul(ggml_norm(x, eps), gamma): llama.cpp's LLM_NORM final norm without bias."""
    return _norm_mul(x, gamma, eps, threads, "norm", True)


def _norm_mul(x, gamma, eps: float, threads: int, op: str, fuse: bool) -> np.ndarray:
    """ggml_mul(ggml_<op>(x, eps), gamma) over the rows of x (T, cols)."""
    x2, shape = _as_rows_f32(x, "x")
    g_ = np.ascontiguousarray(np.asarray(gamma))
    if g_.dtype != np.float32 or g_.ndim != 1 or g_.shape[0] != x2.shape[1]:
        raise ValueError(f"gamma must be float32 ({x2.shape[1]},), got {g_.dtype} {g_.shape}")
    rows, n = x2.shape
    with _Graph(data_bytes=3 * x2.nbytes + g_.nbytes + 256, n_tensors=4) as g:
        tx = g.new_2d(GGML_TYPE_F32, n, rows)
        tg = g.new_1d(GGML_TYPE_F32, n)
        g.a.set_input(tx)
        g.a.set_input(tg)
        g.write(tx, x2)
        g.write(tg, g_)
        tn = getattr(g.a, op)(g.ctx, tx, _f32(eps))
        ty = g.a.mul(g.ctx, tn, tg)
        if fuse:
            g.build(ty)
        else:
            g.build(tn, ty)  # tn flagged OUTPUT -> ggml_can_fuse refuses
        g.compute(threads)
        return g.read(ty, np.float32, shape)


def argmax(x, threads: int = 1) -> np.ndarray:
    """ggml_argmax over each row of x (T, n) -> int32 (T,) (a 1-D x gives shape (1,))."""
    x2, _ = _as_rows_f32(x, "x")
    rows, n = x2.shape
    with _Graph(data_bytes=x2.nbytes + 4 * rows + 128, n_tensors=2) as g:
        tx = g.new_2d(GGML_TYPE_F32, n, rows)
        g.write(tx, x2)
        ti = g.a.argmax(g.ctx, tx)
        g.build(ti)
        g.compute(threads)
        return g.read(ti, np.int32, (rows,))


def top_k(x, k: int, threads: int = 1) -> np.ndarray:
    """ggml_top_k over each row of x (T, n) -> int32 (T, k), in ggml's (unspecified) order."""
    x2, _ = _as_rows_f32(x, "x")
    rows, n = x2.shape
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    with _Graph(data_bytes=x2.nbytes + 4 * rows * k + 128, n_tensors=2) as g:
        tx = g.new_2d(GGML_TYPE_F32, n, rows)
        g.write(tx, x2)
        ti = g.a.top_k(g.ctx, tx, int(k))
        g.build(ti)
        g.compute(threads)
        return g.read(ti, np.int32, (rows, k))


def quantize_q5_k(w) -> np.ndarray:
    """ggml_quantize_chunk(GGML_TYPE_Q5_K, imatrix=NULL): f32 (rows, cols) -> uint8 (rows, cols/256*176).

    Slow (about 18 M weights/s on one thread); use it on slabs, not on the full head.
    """
    w = np.ascontiguousarray(np.asarray(w))
    if w.dtype != np.float32 or w.ndim != 2 or w.shape[1] % QK_K:
        raise ValueError(f"w must be float32 (rows, k*256), got {w.dtype} {w.shape}")
    rows, cols = w.shape
    a = api()
    out = np.empty((rows, cols // QK_K * Q5_K_BLOCK_BYTES), np.uint8)
    n = a.quantize_chunk(GGML_TYPE_Q5_K, w.ctypes.data, out.ctypes.data, 0, rows, cols, None)
    if n != out.nbytes:
        raise RuntimeError(f"ggml_quantize_chunk wrote {n} bytes, expected {out.nbytes}")
    return out


def aligned_empty(shape, dtype, align: int = 4096) -> np.ndarray:
    """An uninitialised C-contiguous array whose data pointer is a multiple of align."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off : off + nbytes].view(dtype).reshape(shape)


GGML_MAX_NAME = 64


@functools.lru_cache(maxsize=None)
def _tensor_extra_offset() -> int:
    """offsetof(struct ggml_tensor, extra): `extra` follows `char name[GGML_MAX_NAME]` in ggml.h;
    the name's offset is read from ggml_get_name on a scratch tensor rather than assumed."""
    a = api()
    with _Graph(data_bytes=256, n_tensors=1) as g:
        t = g.new_1d(GGML_TYPE_F32, 1)
        return int(a.get_name(t)) - int(t) + GGML_MAX_NAME


class MatMul:
    """ggml_mul_mat(W, x) for a weight W of ggml type `type_id` given as its raw bytes
    (rows, row_bytes) uint8, and f32 x (T, cols) -> f32 (T, rows).

    The graph is built once; each run() / time_once() re-plans and re-computes it.  Inside the
    graph ggml converts x to the type's vec_dot type (q8_K for the K types, q8_0 for Q8_0/Q4_0,
    f16/bf16 for the float types) and runs its vec_dot per row, its tiled mat-mul or llamafile's
    sgemm, exactly as llama.cpp's CPU backend does for a weight in a plain CPU buffer; the
    conversion of x is part of every timed call.

    copy=None binds W zero-copy when it is C-contiguous and 32-byte aligned (then W must not be
    modified or freed while this object lives; it keeps a reference), else copies it once into
    the context.  copy=True always copies.

    repack=True puts W where llama.cpp puts a model weight by default (use_extra_bufts): the AMX
    buffer where this build has one and supports W (``amx_takes``), else ggml-cpu's CPU_REPACK
    buffer, which repacks the types and shapes it has interleaved kernels for on this CPU (on
    AVX2: Q4_0 and Q4_K with rows % 8 == 0); other weights stay in a plain buffer.
    ``self.placement`` says which happened ("AMX", "CPU_REPACK" or "CPU"; ``self.repacked`` is
    placement == "CPU_REPACK"). An AMX weight with T > 1 raises OracleUnavailable where
    ``amx_tiles_broken()`` (the oracle would die).
    """

    def __init__(self, w: np.ndarray, type_id: int, cols: int, T: int, copy: Optional[bool] = None,
                 repack: bool = False) -> None:
        w = np.asarray(w)
        if w.dtype != np.uint8 or w.ndim != 2:
            raise ValueError(f"w must be uint8 (rows, row_bytes), got {w.dtype} {w.shape}")
        if T < 1:
            raise ValueError(f"T must be >= 1, got {T}")
        a = api()
        if a.row_size(type_id, cols) != w.shape[1]:
            raise ValueError(f"row size {w.shape[1]} disagrees with ggml_row_size(type {type_id}, {cols})")
        self.type_id = int(type_id)
        self.rows = int(w.shape[0])
        self.cols = int(cols)
        self.T = int(T)
        bindable = w.flags.c_contiguous and w.ctypes.data % TENSOR_ALIGNMENT == 0
        self.zero_copy = False if repack else (bool(bindable) if copy is None else (not copy))
        if self.zero_copy and not bindable:
            raise ValueError("copy=False needs a C-contiguous, 32-byte aligned weight buffer")
        xb = 4 * self.T * self.cols
        yb = 4 * self.T * self.rows
        wb = 0 if self.zero_copy else w.nbytes  # repack: room for the plain fallback
        self.g = _Graph(data_bytes=wb + xb + yb + 3 * 256, n_tensors=3)
        self.repacked = False
        self.placement = "CPU"
        if repack and amx_takes(self.type_id, self.rows, self.cols):
            import os

            if self.T > 1 and self.type_id in AMX_TILE_TYPES and not os.environ.get("LMTAIL_ORACLE_AMX_PROBE"):
                why = amx_tiles_broken()
                if why:
                    self.g.close()
                    raise OracleUnavailable(why)
            self.tw = self._extra_weight(w, "AMX")
        else:
            self.tw = self._extra_weight(w, "CPU_REPACK") if repack else None
        if self.tw is not None:
            pass
        elif self.zero_copy:
            self.tw = self.g.bind_2d(self.type_id, self.cols, self.rows, w)
        else:
            self.tw = self.g.new_2d(self.type_id, self.cols, self.rows)
            self.g.write(self.tw, w)
        self.tx = self.g.new_2d(GGML_TYPE_F32, self.cols, self.T)
        a.set_input(self.tx)
        self.ty = a.mul_mat(self.g.ctx, self.tw, self.tx)  # ne = [rows, T]
        self.g.build(self.ty)
        self.weight_bytes = int(w.nbytes)

    def _extra_weight(self, w: np.ndarray, name: str):
        """The weight tensor in the extra buffer ``name``, set through ggml_backend_tensor_set
        (which is where ggml repacks it); for CPU_REPACK None when ggml does not repack this
        type/shape on this CPU (llama.cpp then keeps the weight in a plain CPU buffer)."""
        a, g = self.g.a, self.g
        buft = extra_buffer_type(name)
        if buft is None:
            raise OracleUnavailable(f"this ggml-cpu build has no {name} buffer type")
        a.set_no_alloc(g.ctx, True)
        try:
            t = g.new_2d(self.type_id, self.cols, self.rows)
        finally:
            a.set_no_alloc(g.ctx, False)
        nb = a.nbytes(t)
        buf = a.buft_alloc_buffer(buft, max(nb, a.buft_get_alloc_size(buft, t)) + 4096)
        if not buf:
            raise MemoryError(f"{name} buffer of {nb} bytes")
        g._buffers.append(buf)
        st = a.tensor_alloc(buf, t, a.buffer_get_base(buf))
        if st != 0:
            raise RuntimeError(f"ggml_backend_tensor_alloc ({name}): {GGML_STATUS.get(st, st)}")
        # ggml_tensor.extra (the traits) is set by CPU_REPACK's init_tensor only for the
        # types/shapes it repacks (ggml_repack_get_optimal_repack_type); AMX sets it always.
        if not ctypes.c_void_p.from_address(t + _tensor_extra_offset()).value:
            return None
        self.placement = name
        self.repacked = name == "CPU_REPACK"
        wc = np.ascontiguousarray(w)
        a.tensor_set(t, wc.ctypes.data, 0, nb)
        return t

    def set_x(self, x) -> None:
        x = np.asarray(x)
        if x.dtype != np.float32 or x.shape != (self.T, self.cols):
            raise ValueError(f"x must be float32 {(self.T, self.cols)}, got {x.dtype} {x.shape}")
        self.g.write(self.tx, x)

    def result(self) -> np.ndarray:
        return self.g.read(self.ty, np.float32, (self.T, self.rows))

    def run(self, x, threads: int = 1) -> np.ndarray:
        self.set_x(x)
        self.g.compute(threads)
        return self.result()

    def time_once(self, threads: int = 1) -> float:
        """Seconds for one ggml_graph_plan + ggml_graph_compute on the current x."""
        t0 = time.perf_counter()
        self.g.compute(threads)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.g.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def mul_mat_llama(w: np.ndarray, type_id: int, cols: int, x, threads: int = 1) -> tuple[np.ndarray, str]:
    """ggml_mul_mat(W, x) with W where llama.cpp puts it (``MatMul(..., repack=True)``): returns
    (y (T, rows), placement). Where the oracle's AMX tile kernel cannot run (``amx_tiles_broken``)
    a T > 1 batch on an AMX weight is computed one activation row at a time (its T = 1 VNNI
    gemv), which gives the tile gemm's bytes: both apply the same per-block float update to exact
    integer sums (lmtail's cpu/ggml/ggml_amx.hpp; checked against a clang-built oracle whose tile
    kernel runs, bench/RESULTS.md)."""
    x = np.ascontiguousarray(x, np.float32)
    try:
        with MatMul(w, type_id, cols, x.shape[0], repack=True) as mm:
            return mm.run(x, threads), mm.placement
    except OracleUnavailable:
        if not (x.shape[0] > 1 and type_id in AMX_TILE_TYPES and amx_takes(type_id, w.shape[0], cols)
                and amx_tiles_broken()):
            raise
        rows = [mul_mat_llama(w, type_id, cols, x[t : t + 1], threads)[0] for t in range(x.shape[0])]
        return np.concatenate(rows, axis=0), "AMX"


class MatMulQ5K(MatMul):
    """MatMul for a Q5_K weight (rows, k*176) uint8: cols follow from the row bytes."""

    def __init__(self, w_q5k: np.ndarray, T: int, copy: Optional[bool] = None) -> None:
        w = np.asarray(w_q5k)
        if w.dtype != np.uint8 or w.ndim != 2 or w.shape[1] % Q5_K_BLOCK_BYTES:
            raise ValueError(f"w_q5k must be uint8 (rows, k*176), got {w.dtype} {w.shape}")
        super().__init__(w, GGML_TYPE_Q5_K, int(w.shape[1] // Q5_K_BLOCK_BYTES * QK_K), T, copy)
