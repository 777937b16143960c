"""Typed errors. Every message says what was expected, what was found, and where."""

from __future__ import annotations


class LmtailError(Exception):
    """Base class of every error lmtail raises on purpose."""


class NonFiniteLogitsError(LmtailError, ArithmeticError):
    """A NaN or +/-Inf reached a fail-closed stage (logits, hidden state, greedy reduction).

    When raised by ``Head``, the previously published distribution is left intact.
    """


class ResourceError(LmtailError, MemoryError):
    """Memory (or another resource) could not be allocated. The object that raised it is left as
    it was before the call, fully usable (e.g. a ``Head`` whose buffers could not grow)."""


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


class UnsupportedError(LmtailError, ValueError):
    """A real combination lmtail does not run: a ggml weight type (e.g. ``Q3_K``) or a precision
    that no backend, or not the requested backend, runs. The message names the backend, the type
    and the backends that do run it (``lmtail.capabilities()`` lists them all)."""


class HazardError(LmtailError):
    """metal-emu: two dispatches of a concurrent compute encoder touch one buffer, at least one
    writing it, with no covering ``memoryBarrier`` in between. The message names both dispatches
    (index and kernel) and the buffer (its label and binding)."""


class GrammarError(LmtailError, ValueError):
    """A GBNF grammar llama.cpp would refuse, or a token a grammar matcher cannot accept.

    ``line`` and ``column`` (1-based, column counted in code points) locate the problem in the
    grammar text; both are None when it has no single location (e.g. a token rejected by a matcher).
    ``message`` is the bare description without the location.
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(where + message)


class JSONSchemaError(GrammarError):
    """A JSON schema llama.cpp's ``json_schema_to_grammar`` refuses: not JSON, outside the
    supported subset (unknown ``type``, a ``$ref`` outside the document or unresolvable, a bad
    ``minItems``/``enum``/``format``), or an invalid ``pattern``. No line/column."""


__all__ = [
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
    "JSONSchemaError",
]
