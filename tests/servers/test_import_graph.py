"""servers/ sits below plan/ and spec/: no import cycle runs through it, neither at import time nor through the
imports a function defers (a deferred import only hides a cycle from the interpreter, not from the reader)."""

from __future__ import annotations

import ast
from pathlib import Path

import deployctl

PACKAGE = Path(deployctl.__file__).parent


def _name(path: Path) -> str:
    parts = ("deployctl",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(path): path for path in PACKAGE.rglob("*.py")}


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(body: list, deferred: bool):
    """The import statements that run: at module level (class bodies, if/try/with blocks included), and with
    `deferred` those in function bodies too; never those under `if TYPE_CHECKING:`."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if deferred:
                yield from _imports(node.body, deferred)
        elif isinstance(node, ast.If):
            if not _type_checking(node.test):
                yield from _imports(node.body, deferred)
            yield from _imports(node.orelse, deferred)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _imports(block, deferred)
        elif isinstance(node, (ast.ClassDef, ast.With, ast.For, ast.While)):
            yield from _imports(node.body, deferred)


def _targets(importer: str, node) -> set[str]:
    """The deployctl modules an import statement runs: the module, each package above it (its __init__ runs
    first; deployctl.servers' loads every flavour) and, for `from p import m`, the submodule m."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif node.level == 0 and node.module:
        names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    else:
        names = []
    found = set()
    for name in names:
        parts = name.split(".")
        for end in range(2, len(parts) + 1):
            module = ".".join(parts[:end])
            # a module's own packages are already being imported when it runs: no edge back to them
            if module in MODULES and module != importer and not importer.startswith(module + "."):
                found.add(module)
    return found


def import_graph(deferred: bool) -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        nodes = _imports(ast.parse(path.read_text()).body, deferred)
        graph[name] = set().union(set(), *(_targets(name, node) for node in nodes))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _through_servers(graph: dict[str, set[str]]) -> list[list[str]]:
    return [c for c in cycles(graph) if any(m == "deployctl.servers" or m.startswith("deployctl.servers.")
                                            for m in c)]


def _through_fronts(graph: dict[str, set[str]]) -> list[list[str]]:
    return [c for c in cycles(graph) if any(m == "deployctl.fronts" or m.startswith("deployctl.fronts.") for m in c)]


def test_the_graph_sees_a_cycle():
    """The finder itself: a cycle it is shown, it reports."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_module_level_import_cycle_through_servers():
    assert _through_servers(import_graph(deferred=False)) == []


def test_no_import_cycle_through_servers_counting_deferred_imports():
    """A flavour that calls back into plan/ or spec/ code which asks the flavours is one cycle: what a flavour
    owns lives in its package, and servers/ takes only plan/'s neutral types (plan/container_types.py)."""
    assert _through_servers(import_graph(deferred=True)) == []


def test_no_import_cycle_through_fronts_counting_deferred_imports():
    """fronts/ sits below spec/ and plan/ as servers/ does: both ask it, it asks neither back."""
    assert _through_fronts(import_graph(deferred=True)) == []


NEUTRAL = {"deployctl.plan.container_types"}


def test_servers_take_only_the_neutral_types_of_plan_at_module_level():
    graph = import_graph(deferred=False)
    taken = {f"{m} -> {t}" for m in graph if m.startswith("deployctl.servers") for t in graph[m]
             if t.startswith("deployctl.plan") and t not in NEUTRAL}
    assert sorted(taken) == []
