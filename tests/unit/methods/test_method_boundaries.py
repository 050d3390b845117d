"""A method is one folder: no method imports another method's code, and shared machinery imports no
method (it calls methods only through the hooks they declare) nor spells a variant's name. Read with
``ast``, nothing imported; negative controls show a crossing and a named variant are seen."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.unit.test_import_graph import PACKAGE, import_graph, module_files


def method_of(module: str) -> str | None:
    """``fedforget.methods.<name>.…`` → ``<name>``; None for shared modules and the registry itself."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[:2] == ["fedforget", "methods"] and parts[2] not in ("registry", "method"):
        return parts[2]
    return None


#: the public lists of every method, which import each method's own declarations (its strategy classes)
FACADES = frozenset({"fedforget.strategies"})


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


#: Shared modules that may spell a variant's name, each with why. The ``method`` key's default is a
#: variant: a run config that names no method runs FedAvg.
NAMED_VARIANTS_ALLOWED = frozenset({("fedforget.core.config", "fedavg")})
#: The registry lists the packages (some of which share a variant's name); ``method`` defines the declaration.
INDEX_MODULES = ("fedforget.methods", "fedforget.methods.registry", "fedforget.methods.method")


def variant_literals(files: Mapping[str, Path], variants: Iterable[str],
                     allowed: frozenset[tuple[str, str]] = NAMED_VARIANTS_ALLOWED) -> list[tuple[str, str]]:
    """(shared module, variant) for every string literal in a shared module that is a method variant's name
    (``cfg.method == "sisa"``, a table keyed by variant), beyond ``allowed``; sorted, one per pair."""
    names = set(variants)
    found = set()
    for module, path in files.items():
        if method_of(module) is not None or module in INDEX_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names and (module, node.value) not in allowed:
                found.add((module, node.value))
    return sorted(found)


def test_shared_machinery_names_no_method_variant():
    """What a method is (its defaults, its memory, what it supports) is its declaration, read through the
    registry; shared code never branches on a variant's name."""
    from fedforget.methods.registry import BY_VARIANT

    assert variant_literals(module_files(PACKAGE), BY_VARIANT) == []


def test_a_named_variant_is_seen(tmp_path: Path):
    root = tmp_path / "fedforget"
    for folder in ("methods/a", "core"):
        (root / folder).mkdir(parents=True)
    for init in ("__init__.py", "methods/__init__.py", "methods/a/__init__.py", "core/__init__.py"):
        (root / init).write_text("")
    (root / "methods" / "a" / "config.py").write_text('DEFAULTS = {"sisa": {"num-rounds": 3}}\n')
    (root / "methods" / "registry.py").write_text('METHOD_PACKAGES = ("a", "safe")\n')
    (root / "core" / "config.py").write_text('method = "fedavg"\nif method != "safe":\n    pass\n')
    (root / "core" / "footprint.py").write_text('def f(cfg):\n    return {"sisa": 1}.get(cfg.method) or "x"\n')
    assert variant_literals(module_files(root), ("fedavg", "safe", "sisa")) == [
        ("fedforget.core.config", "safe"), ("fedforget.core.footprint", "sisa")]
