"""Every public member of the public API has a docstring.

Walked: the modules below, their public names (``__all__``, else names without a leading
underscore), and for every public class defined in lmtail its public methods, properties,
class and static methods (those of its lmtail base classes included). An override without a
docstring counts as documented when the lmtail base class it overrides documents it (as
``inspect.getdoc`` and ``help()`` show it).
"""

from __future__ import annotations

import importlib
import inspect

import pytest

MODULES = ("lmtail", "lmtail.ops", "lmtail.sampling", "lmtail.grammar", "lmtail.speculative", "lmtail.serving",
           "lmtail.serving_params", "lmtail.sharding")


def _has_doc(obj) -> bool:
    d = getattr(obj, "__doc__", None)
    return isinstance(d, str) and bool(d.strip())


def _public_names(mod):
    names = getattr(mod, "__all__", None)
    return list(names) if names is not None else [n for n in vars(mod) if not n.startswith("_")]


def _ours(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "lmtail"


def _members(cls):
    """(qualified name, member) for the public methods and properties of cls and its lmtail bases."""
    seen = set()
    for klass in cls.__mro__:
        if not _ours(klass):
            continue
        for name, raw in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            member = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            if not (inspect.isfunction(member) or isinstance(member, property) or inspect.isroutine(member)):
                continue
            seen.add(name)
            yield f"{klass.__module__}.{klass.__qualname__}.{name}", klass, name, member


def _inherited_doc(cls, name) -> bool:
    for base in cls.__mro__[1:]:
        if _ours(base) and name in vars(base):
            raw = vars(base)[name]
            member = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            if _has_doc(member):
                return True
    return False


def missing_docstrings() -> list[str]:
    missing: set[str] = set()
    done: set[int] = set()
    for mod_name in MODULES:
        mod = importlib.import_module(mod_name)
        if not _has_doc(mod):
            missing.add(mod_name)
        for name in _public_names(mod):
            obj = getattr(mod, name)
            if inspect.ismodule(obj) or not callable(obj) or not _ours(obj) or id(obj) in done:
                continue
            done.add(id(obj))
            if not _has_doc(obj):
                missing.add(f"{obj.__module__}.{getattr(obj, '__qualname__', name)}")
            if inspect.isclass(obj):
                for qual, klass, mname, member in _members(obj):
                    if not _has_doc(member) and not _inherited_doc(klass, mname):
                        missing.add(qual)
    return sorted(missing)


def test_the_walk_sees_the_api():
    # A walk that found nothing would pass vacuously: check it reaches the members named in issue 19.
    import lmtail

    seen = set()
    for mod_name in MODULES:
        mod = importlib.import_module(mod_name)
        for name in _public_names(mod):
            obj = getattr(mod, name)
            if inspect.isclass(obj) and _ours(obj):
                seen.update(q for q, *_ in _members(obj))
    for want in ("lmtail.head.Head.rows", "lmtail.head.Head.logits", "lmtail.grammar.matcher.GrammarMatcher.snapshot",
                 "lmtail.sampling.samplers.Sampler.apply", "lmtail.grammar.lazy.LazyGrammarMatcher.mask"):
        assert want in seen, want
    assert lmtail.Head in [getattr(lmtail, n) for n in lmtail.__all__]


def test_every_public_member_has_a_docstring():
    missing = missing_docstrings()
    assert not missing, f"{len(missing)} public members without a docstring:\n  " + "\n  ".join(missing)


if __name__ == "__main__":  # list them: python tests/test_docstrings.py
    for m in missing_docstrings():
        print(m)
