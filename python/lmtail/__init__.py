"""lmtail: the last stage of LLM decoding, from the final hidden state to the chosen token.

Final RMSNorm -> Q5_K LM head -> logit scale -> soft cap -> greedy / top-k / full row, on one
set of kernel names across backends, plus llama.cpp-exact policy layers.
"""

from __future__ import annotations

import os as _os

from . import ops, speculative
from ._backend import backends
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
from .quant import dequantize_q5_k, quantize_q5_k

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
    "ops",
    "speculative",
    "backends",
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
