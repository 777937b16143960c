"""The package's import graph has no cycles; in particular sampling and grammar are independent.

llama.cpp layers ``common/sampling.cpp`` (``common_sampler_sample``) above both its samplers and
its grammar; lmtail does the same: :mod:`lmtail.common_sampling` imports :mod:`lmtail.sampling` and
takes a grammar by its protocol, and neither lower package imports the other or it. A lazy import
inside a function is still an edge here (it is a cycle in disguise), so the static check reads
every import statement, wherever it is.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import lmtail

PKG = Path(lmtail.__file__).resolve().parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    mods = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
    for p in PKG.glob("*.so"):  # compiled modules (lmtail._core): imported, never importing lmtail
        mods.setdefault(f"lmtail.{p.name.split('.')[0]}", p)
    return mods


def _is_module(name: str, mods: dict[str, Path]) -> bool:
    return name in mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Every lmtail module ``name`` imports, at any depth of the file (functions included)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "lmtail")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = here[: len(here) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != "lmtail":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if _is_module(sub, mods) else base)
    return {m for m in out if m != name}


def _unit(mod: str) -> str:
    """lmtail.sampling.chain -> lmtail.sampling: the unit a layering rule talks about."""
    return ".".join(mod.split(".")[:2])


def _unit_graph() -> dict[str, set[str]]:
    mods = _modules()
    g: dict[str, set[str]] = {}
    for name, path in mods.items():
        if path.suffix != ".py":
            continue
        if name == "lmtail":
            continue  # the package root re-exports everything by design; no submodule imports it
        u = _unit(name)
        g.setdefault(u, set())
        for dep in _imports(name, path, mods):
            if _unit(dep) != u:
                g[u].add(_unit(dep))
    return g


def _reach(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for d in g.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def test_static_graph_finds_the_known_edges():
    # The checker itself: it must see relative, absolute and function-level imports.
    g = _unit_graph()
    assert "lmtail.sampling" in g["lmtail.common_sampling"]
    assert "lmtail.common_sampling" in g["lmtail.serving"]
    assert "lmtail.common_sampling" in g["lmtail.speculative"]  # a function-level import
    assert "lmtail.gguf_model" in g["lmtail.grammar"]  # Vocab.from_gguf: a function-level import
    assert "lmtail.errors" in g["lmtail.sampling"]
    assert "lmtail._core" in g["lmtail.sampling"]  # `from .. import _core`: the compiled module


def test_sampling_and_grammar_do_not_import_each_other():
    g = _unit_graph()
    assert not _reach(g, "lmtail.sampling") & {"lmtail.grammar", "lmtail.common_sampling", "lmtail.serving"}
    assert not _reach(g, "lmtail.grammar") & {"lmtail.sampling", "lmtail.common_sampling", "lmtail.serving"}


def test_serving_sits_above_sampling_and_takes_grammars_by_protocol():
    # lmtail.serving (the batch) is where common_sampler_sample's caller sits: above both layers;
    # like common_sampling it takes a grammar by its protocol, so it never imports lmtail.grammar.
    g = _unit_graph()
    assert {"lmtail.sampling", "lmtail.common_sampling"} <= _reach(g, "lmtail.serving")
    assert "lmtail.grammar" not in _reach(g, "lmtail.serving")
    assert not [u for u in g if u != "lmtail.serving" and "lmtail.serving" in g[u]]


def test_unit_graph_is_acyclic():
    g = _unit_graph()
    cycles = sorted(u for u in g if u in _reach(g, u))
    assert not cycles, {u: sorted(g[u]) for u in cycles}


_FRESH = r"""
import importlib.util, sys, types
# A bare 'lmtail' package object: the real root __init__ imports every subpackage on purpose,
# which would hide what {target} itself pulls in.
spec = importlib.util.find_spec("lmtail")
root = types.ModuleType("lmtail")
root.__path__ = list(spec.submodule_search_locations)
sys.modules["lmtail"] = root
import {target}
print(sorted(m for m in sys.modules if m.startswith("lmtail.")))
"""


@pytest.mark.parametrize("target,forbidden", [
    ("lmtail.sampling", ("lmtail.grammar", "lmtail.common_sampling", "lmtail.serving")),
    ("lmtail.grammar", ("lmtail.sampling", "lmtail.common_sampling", "lmtail.serving")),
    ("lmtail.serving", ("lmtail.grammar",)),
])
def test_fresh_interpreter_loads_no_forbidden_module(target, forbidden):
    r = subprocess.run([sys.executable, "-c", _FRESH.format(target=target)], capture_output=True, text=True,
                       timeout=120, cwd=PKG.parent.parent)
    assert r.returncode == 0, r.stderr
    loaded = eval(r.stdout.strip().splitlines()[-1])
    assert not [m for m in loaded if m.split(".")[:2] in [f.split(".") for f in forbidden]], loaded


def test_common_sample_has_one_home():
    import lmtail.common_sampling as cs
    import lmtail.grammar
    import lmtail.sampling

    assert callable(cs.common_sample) and callable(cs.common_sample_row)
    assert not hasattr(lmtail.sampling, "common_sample")
    assert not hasattr(lmtail.grammar, "common_sample")
    with pytest.raises(ImportError):
        import lmtail.grammar.sampling  # noqa: F401
