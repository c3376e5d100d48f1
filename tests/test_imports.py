"""No import cycle among the modules of the ``autotune`` package.

The graph is read from the source with ``ast``: module-level imports only (also inside a module-level ``try`` or
``if``), absolute and relative (``from . import x``), never an import under ``if TYPE_CHECKING:`` or inside a
function or class body. An edge goes to the module imported (``from a import b`` names the module ``a.b`` when
there is one, else ``a``) and to each package above it whose ``__init__`` the import runs first, except the
importer's own packages (they are already being imported when it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "autotune"


def module_names(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package: dotted name -> file (a package is its ``__init__.py``)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(body: list[ast.stmt]):
    """Import statements that run when the module is imported (not under TYPE_CHECKING, not in a def/class)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level_imports(node.body)
            yield from _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _module_level_imports(block)
        elif isinstance(node, ast.With):
            yield from _module_level_imports(node.body)


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _with_packages(target: str, importer: str, modules: dict[str, Path]) -> set[str]:
    """``target`` and the packages above it that importing it runs, minus the importer's own packages."""
    own = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 2)}
    parts = target.split(".")
    found = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return {m for m in found if m in modules and m not in own}


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the package modules it imports at module level."""
    modules = modules if modules is not None else module_names()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _module_level_imports(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(node, name, is_package)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                edges |= _with_packages(target, name, modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_a_cycle(graph, set(c)) for c in components]


def _a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A closed path through the component's first module (breadth-first: the shortest one)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"not a cycle: {sorted(component)}")  # pragma: no cover


def test_the_package_has_no_import_cycle():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_graph_sees_what_matters(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
        "def f():\n    from pkg import a\ntry:\n    from pkg.sub import c\nexcept ImportError:\n    pass\n"
    )
    (pkg / "sub" / "__init__.py").write_text("from .c import C\n")
    (pkg / "sub" / "c.py").write_text("import pkg.a\nC = 1\n")
    graph = import_graph(module_names(pkg))
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.sub", "pkg.sub.c"}  # not a (TYPE_CHECKING, function); the package runs first
    assert graph["pkg.sub"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.a"}  # its own packages are not edges
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
