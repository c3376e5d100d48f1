"""The ``autotune`` package's import graph: no import circle, and server names only where servers live.

The graph is read from the source with ``ast``, counted as Python executes imports: every import at any depth
(module level, inside a function, a class, a ``try`` or under ``if TYPE_CHECKING:``, whose types are part of the
design), absolute and relative (``from . import x``). An edge goes to the module imported (``from a import b`` names
``a.b`` when that is a module, else ``a``) and to every package above it that the importer is not inside of: Python
runs a package's ``__init__`` before its submodules, so ``from autotune.space import Space`` depends on all that
``autotune/space/__init__.py`` imports. A package's ``__init__`` has an edge to each submodule it imports, like any
module. A circle A -> B -> A through function-level imports counts as much as one at module level.
"""

from __future__ import annotations

import ast
import re
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


def _imports(tree: ast.AST):
    """Every import statement at any depth (under ``if TYPE_CHECKING:`` too)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        else:
            yield from _imports(node)


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _deepest_module(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules:
            return ".".join(parts[:i])
    return None


def _packages_above(module: str, modules: dict[str, Path]) -> list[str]:
    """The packages whose ``__init__`` Python runs before ``module`` (``a``, ``a.b`` for ``a.b.c``)."""
    parts = module.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in modules]


def _reexports(modules: dict[str, Path]) -> dict[str, dict[str, str]]:
    """Package -> {name: the submodule its ``__init__`` imports that name from}."""
    out: dict[str, dict[str, str]] = {}
    for name, path in modules.items():
        if path.name != "__init__.py":
            continue
        names: dict[str, str] = {}
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(node, name, True)
                if source.startswith(name + ".") and source in modules:
                    for alias in node.names:
                        names[alias.asname or alias.name] = source
        out[name] = names
    return out


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in it but under TYPE_CHECKING)."""
    modules = modules if modules is not None else module_names()
    facades = _reexports(modules)

    def through_facade(package: str, attr: str) -> str:
        seen = set()
        while attr in facades.get(package, {}) and package not in seen:
            seen.add(package)
            package = facades[package][attr]
        return package

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [_deepest_module(alias.name, modules) for alias in node.names]
            else:
                base = _resolve(node, name, is_package)
                targets = []
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in modules:
                        targets.append(full)
                    elif base in modules:
                        targets.append(through_facade(base, alias.name))
            edges |= {t for t in targets if t is not None}
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}  # the importer's packages
        edges |= {a for t in list(edges) for a in _packages_above(t, modules) if a not in own}
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
    (pkg / "a.py").write_text("from . import b\nfrom pkg.sub import C\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
        "def f():\n    from pkg.sub import d\ntry:\n    import pkg.sub\nexcept ImportError:\n    pass\n"
    )
    (pkg / "sub" / "__init__.py").write_text("from .c import C\nfrom . import d\n")
    (pkg / "sub" / "c.py").write_text("X = 1\n")
    (pkg / "sub" / "d.py").write_text("class K:\n    def m(self):\n        from pkg import b\n")
    graph = import_graph(module_names(pkg))
    # a re-exported name: the module it comes from, and the package whose __init__ runs first
    assert graph["pkg.a"] == {"pkg.b", "pkg.sub", "pkg.sub.c"}
    assert graph["pkg.b"] == {"pkg.a", "pkg.sub", "pkg.sub.d"}  # under TYPE_CHECKING; inside a function and a try
    assert graph["pkg.sub"] == {"pkg.sub.c", "pkg.sub.d"}  # the facade imports its submodules
    assert graph["pkg.sub.d"] == {"pkg.b"}  # inside a method; not its own package
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]  # one per circle: the TYPE_CHECKING one counts
    without_types = {**graph, "pkg.b": {"pkg.sub", "pkg.sub.d"}, "pkg.a": {"pkg.b", "pkg.sub.c"}}
    assert find_cycles(without_types) == [["pkg.b", "pkg.sub.d", "pkg.b"]]


#: a server or a server's knob named as a string literal
SERVER_NAMES = re.compile(
    r"""["'](sglang|vllm|llamacpp|llama\.cpp)["']|["'](num_steps|draft_n_max|num_speculative_tokens|speculative_algorithm)["']"""
)
#: where servers and their knobs are the subject (``servers.py``: the table of servers)
SERVER_HOMES = ("backends", "sim", "servers.py")


def server_names_outside_backends(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in SERVER_HOMES:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SERVER_NAMES.search(line):
                found.append(f"autotune/{rel}:{number}: {line.strip()}")
    return found


def test_only_the_backends_and_the_simulator_name_servers():
    found = server_names_outside_backends()
    assert not found, "server names outside autotune/backends and autotune/sim:\n" + "\n".join(found)


def test_the_server_name_check_sees_them(tmp_path):
    pkg = tmp_path / "autotune"
    (pkg / "backends").mkdir(parents=True)
    (pkg / "backends" / "x.py").write_text('NAME = "sglang"\n')
    (pkg / "y.py").write_text("KNOB = 'num_steps'\nOK = 'sglang-like'\n")
    assert server_names_outside_backends(pkg) == ["autotune/y.py:1: KNOB = 'num_steps'"]
