"""Typed errors. Every message says what was expected, what was found, and where."""

from __future__ import annotations


class LmtailError(Exception):
    """Base class of every error lmtail raises on purpose."""


class NonFiniteLogitsError(LmtailError, ArithmeticError):
    """A NaN or +/-Inf reached a fail-closed stage (logits, hidden state, greedy reduction).

    When raised by ``Head``, the previously published distribution is left intact.
    """


class GGUFError(LmtailError):
    """A GGUF file is unreadable: truncated, missing a tensor or key, wrong type or shape."""


class ShapeError(LmtailError, ValueError):
    """An array has the wrong number of dimensions or the wrong size."""


class DTypeError(LmtailError, ValueError):
    """An array has the wrong dtype (or is not C-contiguous where a view is required)."""


class ParameterError(LmtailError, ValueError):
    """A scalar parameter or token id is out of range."""


class BackendError(LmtailError, ValueError):
    """An unknown backend name, or a backend not available on this machine/build."""


__all__ = [
    "LmtailError",
    "NonFiniteLogitsError",
    "GGUFError",
    "ShapeError",
    "DTypeError",
    "ParameterError",
    "BackendError",
]
