"""GBNF grammars with llama.cpp's exact accept/reject decisions.

* :class:`Grammar` -- ``Grammar.parse(text, root="root")``: llama.cpp's GBNF dialect and errors
  (:mod:`.parser`);
* :class:`Vocab` -- token pieces / EOG ids as llama.cpp's grammar sampler sees them
  (``Vocab.from_gguf``, :mod:`.vocab`);
* :class:`GrammarMatcher` -- ``allows``/``mask``/``accept``/``is_complete``/``snapshot``/
  ``restore``/``explain`` on an Earley recognizer over code points (:mod:`.earley`,
  :mod:`.matcher`, :mod:`.mask`), with llama.cpp's lenient UTF-8 and partial-code-point rules
  (:mod:`.utf8`);
* :class:`LazyGrammarMatcher` -- trigger tokens / words / patterns (:mod:`.lazy`), matched in
  linear time by :mod:`.regex`'s automaton;
* :class:`GrammarSnapshot` / :class:`LazySnapshot` -- what ``snapshot()`` returns and
  ``restore()`` validates;
* :func:`apply_bitmask` / :func:`fill_bitmasks` / ``GrammarMatcher.fill_bitmask`` -- masks in
  the int32 bitmask layout of XGrammar / llguidance (:mod:`.bitmask`);
* :func:`json_schema_to_gbnf` -- llama.cpp's JSON schema -> GBNF text, byte for byte
  (:mod:`.json_schema`; :class:`GBNFBuilder` for several schemas in one grammar).

llama-server's sample-check-resample discipline, which drives a grammar and a sampler chain
together, is :func:`lmtail.common_sampling.common_sample` (above both packages).

lmtail never calls llama.cpp; llama.cpp is only the tests' oracle.
"""

from ..errors import GrammarError, JSONSchemaError
from .bitmask import allocate_bitmask, apply_bitmask, bitmask_words, fill_bitmasks
from .json_schema import GBNFBuilder, JSONSchemaWarning, json_schema_to_gbnf
from .lazy import LazyGrammarMatcher, LazySnapshot
from .matcher import Grammar, GrammarMatcher, GrammarSnapshot
from .parser import parse_gbnf
from .vocab import Vocab

__all__ = [
    "allocate_bitmask",
    "apply_bitmask",
    "bitmask_words",
    "fill_bitmasks",
    "GBNFBuilder",
    "Grammar",
    "GrammarMatcher",
    "GrammarSnapshot",
    "GrammarError",
    "JSONSchemaError",
    "JSONSchemaWarning",
    "LazyGrammarMatcher",
    "LazySnapshot",
    "Vocab",
    "json_schema_to_gbnf",
    "parse_gbnf",
]
