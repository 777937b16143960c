"""lmtail: the last stage of LLM decoding, from the final hidden state to the chosen token.

Final norm -> LM head (Q5_K, and every weight type ``capabilities()`` lists) -> logit scale -> soft cap -> greedy / top-k / full row, on one
set of kernel names across backends, plus llama.cpp-exact policy layers.
"""

from __future__ import annotations

import os as _os

from . import ops, serving, sharding, speculative
from ._backend import backends
from ._backend import capabilities as _capabilities
from .errors import (
    BackendError,
    DTypeError,
    GGUFError,
    GrammarError,
    HazardError,
    LmtailError,
    NonFiniteLogitsError,
    ParameterError,
    ResourceError,
    ShapeError,
    UnsupportedError,
)
from .grammar import Grammar, GrammarMatcher, Vocab
from .head import Head
from .sharding import ShardedHead
from .quant import dequantize, dequantize_q5_k, quantize, quantize_q5_k


def capabilities() -> dict:
    """What each backend lmtail knows runs, present on this machine or not.

    ``{backend: {"available": bool, op: {"dtypes": [...], "precisions": [...]}}}`` for "cpu",
    "metal", "metal-emu" and "cuda". ``available`` says whether this build runs it on this
    machine (:func:`backends` lists those). The ops: "matvec" and "head" (weight types by ggml
    name, with ``"by_dtype": {name: {"precisions": [...], "default": name}}`` since precisions
    differ per type; "matvec" also says ``"batch_invariant"``: whether row t of a batch equals
    that row computed alone (true on every backend, never promised for precision "ggml", which
    follows ggml's path for each batch size as llama.cpp does); "head" lists its final ``"norms"``;
    both say ``"requires"``: {precision: argument} for a precision usable only with that argument,
    e.g. ``{"ggml": "ggml_metal"}`` on "metal" / "metal-emu", whose "ggml" runs llama.cpp's own
    kernels from the library the caller names; without it that precision raises
    :class:`UnsupportedError`), and the float32 ops "rms_norm",
    "layer_norm", "scale", "tanh", "softcap", "argmax", "greedy_argmax", "topk" (dtypes ["F32"],
    or [] where the backend lacks the op). Any other combination raises
    :class:`UnsupportedError`. The CPU column is the C++ type table (every type compiled in);
    a fresh dict each call.
    """
    return _capabilities()

__version__ = "0.1.0"


def _install_root() -> str:
    # The headers, static library and CMake package are installed next to the extension module
    # (in an editable install that is site-packages, not the source tree).
    from . import _core

    return _os.path.dirname(_os.path.abspath(_core.__file__))


def cmake_dir() -> str:
    """Directory holding lmtail-config.cmake, for ``find_package(lmtail)`` from C++ projects."""
    return _os.path.join(_install_root(), "lib", "cmake", "lmtail")


def include_dir() -> str:
    """Directory of the public C++ headers (``#include <lmtail/cpu.hpp>``)."""
    return _os.path.join(_install_root(), "include")


__all__ = [
    "Head",
    "ShardedHead",
    "ops",
    "sharding",
    "speculative",
    "backends",
    "capabilities",
    "quantize",
    "dequantize",
    "quantize_q5_k",
    "dequantize_q5_k",
    "cmake_dir",
    "include_dir",
    "LmtailError",
    "NonFiniteLogitsError",
    "ResourceError",
    "GGUFError",
    "ShapeError",
    "DTypeError",
    "ParameterError",
    "BackendError",
    "UnsupportedError",
    "GrammarError",
    "HazardError",
    "Grammar",
    "GrammarMatcher",
    "Vocab",
]
