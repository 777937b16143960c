"""Weight types: every ggml type name and id, and the ``dtype=`` argument of ops and Head.

The ids are ggml's ``enum ggml_type`` (ggml.h), which gguf-py mirrors as the IntEnum
``gguf.GGMLQuantizationType``: an enum member is accepted by its integer value, so gguf is never
imported here. Which of these types a backend runs, with its block sizes and precisions, is the
capability table in ``_backend`` (block sizes come from the C++ table through
``_core.cpu_types()``, never from here).
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

from .errors import ParameterError

# enum ggml_type of the pinned llama.cpp (ggml/include/ggml.h). Gaps are ids ggml removed
# (4, 5: Q4_2/Q4_3; 31-33, 36-38: the repacked Q4_0_x_y / IQ4_NL_x_y, never in GGUF files).
GGML_TYPE_IDS: dict[str, int] = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q5_0": 6,
    "Q5_1": 7,
    "Q8_0": 8,
    "Q8_1": 9,
    "Q2_K": 10,
    "Q3_K": 11,
    "Q4_K": 12,
    "Q5_K": 13,
    "Q6_K": 14,
    "Q8_K": 15,
    "IQ2_XXS": 16,
    "IQ2_XS": 17,
    "IQ3_XXS": 18,
    "IQ1_S": 19,
    "IQ4_NL": 20,
    "IQ3_S": 21,
    "IQ2_S": 22,
    "IQ4_XS": 23,
    "I8": 24,
    "I16": 25,
    "I32": 26,
    "I64": 27,
    "F64": 28,
    "IQ1_M": 29,
    "BF16": 30,
    "TQ1_0": 34,
    "TQ2_0": 35,
    "MXFP4": 39,
    "NVFP4": 40,
    "Q1_0": 41,
    "Q2_0": 42,
}
GGML_TYPE_NAMES: dict[int, str] = {v: k for k, v in GGML_TYPE_IDS.items()}


class GGMLType(NamedTuple):
    """A ggml type: its canonical (upper-case) name and its id."""

    name: str
    id: int


def ggml_type(dtype, name: str = "dtype") -> GGMLType:
    """``dtype`` (a ggml type name in any case, or its integer id, e.g. a
    ``gguf.GGMLQuantizationType`` member) as a :class:`GGMLType`; anything that is not a ggml
    type raises :class:`lmtail.ParameterError`. Whether a backend runs it is not checked here."""
    if isinstance(dtype, str):
        key = dtype.upper()
        if key in GGML_TYPE_IDS:
            return GGMLType(key, GGML_TYPE_IDS[key])
        raise ParameterError(f"{name}: {dtype!r} is not a ggml type name (expected one of {', '.join(GGML_TYPE_IDS)})")
    # bool is an Integral; True is not a type id.
    if isinstance(dtype, numbers.Integral) and not isinstance(dtype, bool):
        i = int(dtype)
        if i in GGML_TYPE_NAMES:
            return GGMLType(GGML_TYPE_NAMES[i], i)
        raise ParameterError(f"{name}: {i} is not a ggml type id (ggml.h defines {', '.join(map(str, GGML_TYPE_NAMES))})")
    raise ParameterError(f"{name}: expected a ggml type name (e.g. 'Q6_K') or id (e.g. a gguf.GGMLQuantizationType); "
                         f"found {type(dtype).__name__} {dtype!r}")
