"""GGUF reader for the LM-head stage: final norm, head weight, logit scale, soft cap, EOG ids.

Split by concept; every name is importable from here as before:

* :mod:`.container` -- the strict container reader (header, KV, tensor infos, the memory map):
  :class:`GGUFFile`, :class:`TensorInfo`, :class:`StringArray`, :data:`GGML_TYPES`;
* :mod:`.arch` -- the architecture rules (head tensor, final norm, epsilon, logit scale / soft
  cap, refusals with reasons): :data:`ARCH_RULES`, :class:`ArchRule`, :func:`output_transform`;
* :mod:`.vocab` -- vocabulary keys and end-of-generation ids: :func:`eog_ids_from_kv`,
  :func:`vocab_tokens`, :func:`token_types`;
* :mod:`.head_spec` -- :func:`load_head_spec` / :class:`HeadSpec`, which combines the three;
  :func:`head_types` reads the head weight types lmtail runs from the C++ core's type table.

Every file problem raises :class:`lmtail.errors.GGUFError` saying what was expected, what was
found and where.  The semantics mirror llama.cpp as vendored in llama-cpp-python 0.3.36 (each
module names its sources).
"""

from .arch import ARCH_RULES, ArchRule, output_transform
from .container import (
    _T_STRING,
    GGML_TYPES,
    GGUF_VALUE_TYPES,
    Q5_K,
    GGUFFile,
    StringArray,
    TensorInfo,
    _c_str,
)
from .head_spec import HeadSpec, head_types, load_head_spec
from .vocab import eog_ids_from_kv, token_types, vocab_tokens

# _T_STRING and _c_str are not public; lmtail.grammar.vocab reads them from here.
__all__ = [
    "GGUFFile",
    "TensorInfo",
    "StringArray",
    "HeadSpec",
    "ArchRule",
    "ARCH_RULES",
    "load_head_spec",
    "head_types",
    "output_transform",
    "eog_ids_from_kv",
    "vocab_tokens",
    "token_types",
    "GGML_TYPES",
    "GGUF_VALUE_TYPES",
    "Q5_K",
]
