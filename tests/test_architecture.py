"""The architecture in the tree: the layer contracts of pyproject.toml hold, no module imports itself
back through another, and no private name crosses a module boundary (DESIGN.md §2)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("forensics", "parsers")

grimp = pytest.importorskip("grimp")  # import-linter's graph library (a test dependency)


def _graph():
    sys.path.insert(0, str(ROOT))
    return grimp.build_graph(*PACKAGES)


def test_the_layer_contracts_hold(capsys) -> None:
    """``lint-imports`` over pyproject.toml's contracts: every one kept."""
    import os

    from importlinter.cli import lint_imports

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "BROKEN" not in out and out.count("KEPT") >= 3


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


#: Cycles still in the tree: none (issue 23 split the last, the input package's ``__init__`` and the
#: submodules that reached back into it, into ``limits``, ``files`` and ``tar`` they all import).
KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycles_but_the_known_ones() -> None:
    assert sorted(_cycles(_graph())) == sorted(KNOWN_CYCLES)


def _module_of(path: Path) -> tuple[str, str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    me = ".".join(parts)
    return me, (me if path.name == "__init__.py" else me.rsplit(".", 1)[0])


def test_no_private_name_is_imported_across_modules() -> None:
    """``from x import _name`` reaches into another module's inside; a private module (``_common``) is
    for its own package only."""
    graph = _graph()
    found = []
    for path in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        me, pkg = _module_of(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                mod = ".".join(base) + (f".{node.module}" if node.module else "")
            else:
                mod = node.module or ""
            if mod.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                name = alias.name
                full = f"{mod}.{name}"
                if name.startswith("_") and not name.startswith("__") and not (full in graph.modules and mod == pkg):
                    found.append(f"{me}: from {mod} import {name}")
            private = [seg for seg in mod.split(".") if seg.startswith("_") and not seg.startswith("__")]
            if private and mod.rsplit(".", 1)[0] != pkg:
                found.append(f"{me}: from {mod} import …")
    # the known cycles' packages reach their own __init__'s private helpers; nothing else may
    reaching_back = {m for cycle in KNOWN_CYCLES for m in cycle[1:]}
    found = [f for f in found if f.split(":", 1)[0] not in reaching_back]
    assert found == []
