"""The package's import structure: no module of ``sim`` imports another's private (``_name``)
symbol, and no two modules import each other, directly or through others.

Imports are read from the source (:mod:`ast`), wherever they stand (a function-level import is
a dependency too), except under ``if TYPE_CHECKING:``, which runs only for a type checker.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import sim

SIM = Path(sim.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SIM.rglob("*.py")):
        parts = path.relative_to(SIM.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """``(module imported, symbol or None)`` for each import of a ``sim`` module in ``name`` (the
    dotted name of ``path``, which relative imports start from)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.split(".")[0] != "sim":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((sub, None) if sub in modules else (target, alias.name))
        elif isinstance(node, ast.Import):
            out.extend((a.name, None) for a in node.names if a.name.split(".")[0] == "sim")
    return out


def test_no_module_imports_another_modules_private_name():
    modules = _modules()
    found = [f"{name} imports {target}.{symbol}"
             for name, path in modules.items()
             for target, symbol in _imports(name, path, modules)
             if symbol is not None and symbol.startswith("_") and not symbol.startswith("__") and target != name]
    assert found == []


def test_no_benchmark_imports_a_private_name_of_the_package():
    """Benchmarks measure the package through what it offers, as a user's script would."""
    modules = _modules()
    found = []
    for path in sorted((SIM.parent / "benchmarks").rglob("*.py")):
        for target, symbol in _imports("benchmarks." + path.stem, path, modules):
            if symbol is not None and symbol.startswith("_") and not symbol.startswith("__"):
                found.append(f"{path.name} imports {target}.{symbol}")
    assert found == []


def test_no_import_cycles():
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target, _ in _imports(name, path, modules):
            if target in modules and target != name:
                graph.add_edge(name, target)
    cycles = sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)
    assert cycles == []


def test_the_checks_see_a_cycle_and_a_private_import(tmp_path):
    """The reader itself: a package of two modules that import each other, one of them a
    private name, is caught by both checks' rules."""
    (tmp_path / "a.py").write_text("from sim.b import _hidden\n")
    (tmp_path / "b.py").write_text("def f():\n    from sim.a import g\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sim.a import _x\n")
    modules = {"sim.a": tmp_path / "a.py", "sim.b": tmp_path / "b.py", "sim.c": tmp_path / "c.py"}
    assert _imports("sim.a", modules["sim.a"], modules) == [("sim.b", "_hidden")]
    assert _imports("sim.b", modules["sim.b"], modules) == [("sim.a", "g")]
    assert _imports("sim.c", modules["sim.c"], modules) == []
