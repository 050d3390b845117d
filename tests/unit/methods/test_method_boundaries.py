"""A method is one folder: no method imports another method's code, and shared machinery imports no
method (it calls methods only through the hooks they declare; that it names none is
``tests/unit/test_shared_code_names_no_method.py``). Read with ``ast``, nothing imported; a negative
control shows a crossing is seen."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.unit.test_import_graph import PACKAGE, import_graph, module_files


def method_of(module: str) -> str | None:
    """``fedforget.methods.<name>.…`` → ``<name>``; None for shared modules, the registry itself and the hooks
    several methods declare (``shared_hooks``)."""
    parts = module.split(".")
    if (len(parts) >= 3 and parts[:2] == ["fedforget", "methods"]
            and parts[2] not in ("registry", "method", "shared_hooks")):
        return parts[2]
    return None


#: the public lists of every method, which import each method's own declarations (its strategy classes; its
#: ``METHOD``, which the registry lists)
FACADES = frozenset({"fedforget.strategies", "fedforget.methods.registry"})


def crossings(graph: Mapping[str, set[str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(a method importing another method, a shared module importing a method), each sorted."""
    between, shared = [], []
    for source, targets in graph.items():
        if source in FACADES:
            continue
        mine = method_of(source)
        for target in targets:
            theirs = method_of(target)
            if theirs is None or theirs == mine:
                continue
            (between if mine else shared).append((source, target))
    return sorted(between), sorted(shared)


def test_no_method_imports_another_method():
    between, _ = crossings(import_graph(module_files(PACKAGE)))
    assert between == []


def test_shared_machinery_imports_no_method():
    _, shared = crossings(import_graph(module_files(PACKAGE)))
    assert shared == []


def test_a_crossing_is_seen(tmp_path: Path):
    root = tmp_path / "fedforget"
    for folder in ("methods/a", "methods/b", "federation"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "methods" / "__init__.py").write_text("")
    (root / "methods" / "a" / "server.py").write_text("from fedforget.methods.b import client\n")
    (root / "methods" / "b" / "client.py").write_text("from fedforget.federation import serve\n")
    (root / "federation" / "serve.py").write_text("def f():\n    from fedforget.methods.a import server\n")
    between, shared = crossings(import_graph(module_files(root)))
    assert between == [("fedforget.methods.a.server", "fedforget.methods.b"),
                       ("fedforget.methods.a.server", "fedforget.methods.b.client")]
    assert shared == [("fedforget.federation.serve", "fedforget.methods.a"),
                      ("fedforget.federation.serve", "fedforget.methods.a.server")]
