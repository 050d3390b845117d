"""A method is one folder: no method imports another method's code, shared machinery imports no
method (it calls methods only through the hooks they declare; that it names none is
``tests/unit/test_shared_code_names_no_method.py``), and what only one method uses lives in its folder
(every module of ``federation/`` serves the shared floor or two methods at least). Read with ``ast``,
nothing imported; negative controls show a crossing and a one-method module are seen."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from functools import cache
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


@cache
def package_graph() -> dict[str, set[str]]:
    """fedforget's import graph, read once for the tests of this module."""
    return import_graph(module_files(PACKAGE))


def test_no_method_imports_another_method():
    between, _ = crossings(package_graph())
    assert between == []


def test_shared_machinery_imports_no_method():
    _, shared = crossings(package_graph())
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


#: ``"module:function"`` names a declaration imports on use: a use of that module all the same
NAMED = re.compile(r"^(fedforget(?:\.\w+)+):\w+$")


def users_of_shared(files: Mapping[str, Path], graph: Mapping[str, set[str]],
                    shared: str = "fedforget.federation") -> dict[str, set[str]]:
    """Each module under ``shared`` → who uses it, directly or through other modules there: the methods by
    name, ``"shared"`` for any other module (the driver's callers, the apps, the coordinator)."""
    graph = {m: set(targets) for m, targets in graph.items()}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = NAMED.match(node.value) if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
            if named and named.group(1) in files:
                graph[module].add(named.group(1))
    importers: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            importers.setdefault(target, set()).add(source)

    def users(module: str) -> set[str]:
        out: set[str] = set()
        seen, todo = {module}, [module]
        while todo:  # a name in a string may close a circle: walk, don't recurse
            for importer in importers.get(todo.pop(), ()):
                if importer.startswith(shared + ".") and importer not in seen:
                    seen.add(importer)
                    todo.append(importer)
                elif not importer.startswith(shared + ".") and importer != shared:
                    out.add(method_of(importer) or "shared")
        return out

    return {m: users(m) for m in files if m.startswith(shared + ".")}


def one_method_modules(files: Mapping[str, Path], graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The shared modules that one method alone uses (they belong in its folder), or none uses."""
    return {m: u for m, u in users_of_shared(files, graph).items() if "shared" not in u and len(u) < 2}


def test_what_one_method_alone_uses_lives_in_its_folder():
    assert one_method_modules(module_files(PACKAGE), package_graph()) == {}


def test_a_one_method_module_is_seen(tmp_path: Path):
    root = tmp_path / "fedforget"
    for folder in ("methods/a", "methods/b", "federation"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "methods" / "__init__.py").write_text("")
    (root / "federation" / "only_a.py").write_text("")
    (root / "federation" / "under_only_a.py").write_text("")
    (root / "federation" / "both.py").write_text("from fedforget.federation import under_only_a\n")
    (root / "federation" / "named.py").write_text("")
    (root / "methods" / "a" / "server.py").write_text(
        "from fedforget.federation import both, only_a\nHANDLER = 'fedforget.federation.named:handle'\n")
    (root / "methods" / "b" / "server.py").write_text("from fedforget.federation.both import x\n")
    (root / "federation" / "only_a.py").write_text("from fedforget.federation import under_only_a\n")
    files = module_files(root)
    assert one_method_modules(files, import_graph(files)) == {"fedforget.federation.only_a": {"a"},
                                                      "fedforget.federation.named": {"a"}}
