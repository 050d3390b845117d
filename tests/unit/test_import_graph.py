"""The package's import graph is a DAG that runs down the floors: no module reaches itself through imports
(module-level, inside functions or under ``if TYPE_CHECKING:``), and no module imports one on a higher
floor (docs/architecture.md, "Floors"). Read with ``ast`` (nothing is imported); negative controls show a
circle and an upward import are seen."""

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


def _imports(tree: ast.AST) -> Iterator[str]:
    """Every absolute name an import statement reaches, ``if TYPE_CHECKING:`` blocks included: a type one
    module names from another is a dependency all the same (a circle of types is still a circle)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))


def _ancestors(module: str) -> list[str]:
    """``a.b.c`` → ``a.b``, ``a``: the packages whose ``__init__`` runs before ``module``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def import_graph(files: Mapping[str, Path]) -> dict[str, set[str]]:
    """module → the package modules it imports (a ``from pkg import name`` reaches ``pkg.name`` if a module).

    Importing ``p.q`` runs ``p``'s ``__init__`` first: that is an edge too, unless ``p`` encloses the importer
    (then it ran before the importer started), so a package whose ``__init__`` imports a module that imports one
    of its submodules is a circle, as it is when Python runs it."""
    def owner(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        named = {t for t in (owner(n) for n in _imports(ast.parse(path.read_text(encoding="utf-8")))) if t}
        enclosing = {module, *_ancestors(module)}
        run_first = {a for t in named for a in _ancestors(t) if a in files and a not in enclosing}
        graph[module] = (named | run_first) - {module}
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


#: The floors, lowest first: a module imports only modules on its own floor or below. A module's floor is
#: that of the longest prefix naming it. Why each floor sits where it does: docs/architecture.md, "Floors".
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("fedforget", "fedforget.core", "fedforget.flwr_config", "fedforget.process_tree",
              "fedforget.local_superlink")),
    ("store", ("fedforget.store",)),
    ("tasks and training", ("fedforget.tasks", "fedforget.training")),
    ("what methods share", ("fedforget.federation", "fedforget.cli_kit")),
    ("methods", ("fedforget.methods",)),
    ("apps", ("fedforget.strategies", "fedforget.server_app", "fedforget.client_app", "fedforget.client",
              "fedforget.inprocess", "fedforget.server_test_writer")),
    ("coordinator", ("fedforget.unlearning",)),
    ("service", ("fedforget.service",)),
    ("tools", ("fedforget.launch", "fedforget.faults", "fedforget.unlearning.cli")),
)


def floor_of(module: str, floors: tuple[tuple[str, tuple[str, ...]], ...] = FLOORS) -> int | None:
    """The index of ``module``'s floor (the longest prefix naming it), None for a module no floor names."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(floors):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return best[0] if best else None


def upward_imports(graph: Mapping[str, set[str]],
                   floors: tuple[tuple[str, tuple[str, ...]], ...] = FLOORS) -> list[str]:
    """Each import of a module on a higher floor, as ``source (floor) -> target (floor)``, sorted."""
    out = []
    for source, targets in graph.items():
        here = floor_of(source, floors)
        for target in targets:
            there = floor_of(target, floors)
            if here is not None and there is not None and there > here:
                out.append(f"{source} ({floors[here][0]}) -> {target} ({floors[there][0]})")
    return sorted(out)


def test_every_module_has_a_floor():
    assert [m for m in module_files(PACKAGE) if floor_of(m) is None] == []
    assert floor_of("fedforget.core.method") == 0 and floor_of("fedforget.methods.registry") == 4
    assert floor_of("fedforget") == 0 and floor_of("fedforget.faults.campaign") == len(FLOORS) - 1


def test_no_import_runs_up_a_floor():
    assert upward_imports(import_graph(module_files(PACKAGE))) == []


def test_an_upward_import_is_named(tmp_path: Path):
    """An import up a floor fails, named by its edge, whether at module level, in a function or for types only;
    imports down a floor and within one pass."""
    pkg = tmp_path / "pkg"
    for folder in ("low", "mid", "high"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("from pkg.low import b\n")
    (pkg / "low" / "b.py").write_text("def f():\n    from pkg.mid import c\n    return c\n")
    (pkg / "mid" / "c.py").write_text("from typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    from pkg.high.d import X\n")
    (pkg / "high" / "d.py").write_text("from pkg.low.a import b\nX = 1\n")
    floors = (("low", ("pkg", "pkg.low")), ("mid", ("pkg.mid",)), ("high", ("pkg.high",)))
    assert upward_imports(import_graph(module_files(pkg)), floors) == [
        "pkg.low.b (low) -> pkg.mid (mid)", "pkg.low.b (low) -> pkg.mid.c (mid)",
        "pkg.mid.c (mid) -> pkg.high (high)", "pkg.mid.c (mid) -> pkg.high.d (high)"]
    assert floor_of("pkg.high.d", floors) == 2 and floor_of("pkgx", floors) is None


def test_fedforget_has_no_import_cycle():
    files = module_files(PACKAGE)
    assert "fedforget.store.ledger" in files and "fedforget.client_app" in files
    assert cycles(import_graph(files)) == []


def test_a_cycle_is_detected():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_a_package_init_closes_a_circle(tmp_path: Path):
    """``m`` imports ``p.base``, whose package ``p`` imports ``m`` in its ``__init__``: importing ``m`` first
    fails at run time, so it is a circle; a package importing its own submodules is not."""
    pkg = tmp_path / "pkg"
    (pkg / "p").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "p" / "__init__.py").write_text("from pkg.m import Sub\nfrom pkg.p.base import Base\n")
    (pkg / "p" / "base.py").write_text("class Base:\n    pass\n")
    (pkg / "m.py").write_text("from pkg.p.base import Base\nclass Sub(Base):\n    pass\n")
    graph = import_graph(module_files(pkg))
    assert graph["pkg.m"] == {"pkg.p", "pkg.p.base"} and graph["pkg.p.base"] == set()
    assert cycles(graph) == [["pkg.m", "pkg.p"]]


def test_function_level_and_type_only_imports_count(tmp_path: Path):
    """A circle closed by an import inside a function, or by one under ``if TYPE_CHECKING:``, is still a circle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import f\n")
    (pkg / "d.py").write_text("from pkg.c import x\n")
    (pkg / "e.py").write_text("from pkg.d import y\n")
    graph = import_graph(module_files(pkg))
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
    assert graph["pkg.c"] == {"pkg.d"} and graph["pkg.e"] == {"pkg.d"}
