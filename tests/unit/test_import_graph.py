"""The package's import graph is a DAG: no module reaches itself through imports, module-level or
inside functions. Read with ``ast`` (nothing is imported); a negative control shows a circle is seen."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fedforget"


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name → file, for every module of ``package`` (``__init__`` names its package)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name | ast.Attribute) and \
        "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST) -> Iterator[str]:
    """Every absolute name an import statement reaches, skipping ``if TYPE_CHECKING:`` blocks (never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))


def import_graph(files: Mapping[str, Path]) -> dict[str, set[str]]:
    """module → the package modules it imports (a ``from pkg import name`` reaches ``pkg.name`` if a module)."""
    def owner(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = {owner(n) for n in _imports(ast.parse(path.read_text(encoding="utf-8")))}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_fedforget_has_no_import_cycle():
    files = module_files(PACKAGE)
    assert "fedforget.store.ledger" in files and "fedforget.client_app" in files
    assert cycles(import_graph(files)) == []


def test_a_cycle_is_detected():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_function_level_imports_count(tmp_path: Path):
    """A circle closed by an import inside a function is still a circle; a TYPE_CHECKING import is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n")
    (pkg / "d.py").write_text("from pkg.c import x\n")
    graph = import_graph(module_files(pkg))
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert graph["pkg.c"] == set() and graph["pkg.d"] == {"pkg.c"}
