"""The method registry is the one list of methods: every run-config method has an entry, every name
in it imports, the ClientApp serves exactly its handlers, and planning modules stay pure."""

from __future__ import annotations

import ast
import importlib
import importlib.util

import pytest

from fedforget.core.config import CONFIG_GROUPS, METHOD_GROUP, METHODS
from fedforget.strategies import registry
from fedforget.strategies.messaging import CHAIN_MESSAGE, FORGET_MESSAGE
from fedforget.strategies.registry import FAMILIES, SHARED_HANDLERS, SHARED_MODULES, client_handlers, resolve

GROUPS = {None, "chains", "hosfl", "fedshard", "safe"}


def _targets() -> list[str]:
    return sorted({t for m in FAMILIES for t in (m.driver, m.serving, *m.handlers.values())} |
                  set(SHARED_HANDLERS.values()))


def test_every_configured_method_has_one_entry():
    variants = [v for m in FAMILIES for v in m.variants]
    assert sorted(variants) == sorted(METHODS)
    assert len(set(variants)) == len(variants)
    assert len({m.name for m in FAMILIES}) == len(FAMILIES)


def test_each_entry_names_the_config_group_its_methods_read():
    assert {m.config_group for m in FAMILIES} <= GROUPS
    assert {v: m.config_group for m in FAMILIES for v in m.variants} == METHOD_GROUP
    assert {g for g in METHOD_GROUP.values() if g} <= set(CONFIG_GROUPS)


@pytest.mark.parametrize("target", _targets())
def test_every_target_is_an_importable_function(target: str):
    module, sep, name = target.partition(":")
    assert sep and module.startswith("fedforget.") and name.isidentifier()
    assert callable(resolve(target))


def test_every_named_module_exists():
    for module in {*SHARED_MODULES, *(f for m in FAMILIES for f in m.files())}:
        assert importlib.util.find_spec(module) is not None, module


def test_planning_modules_are_pure():
    """Planning is under fedforget.core and imports neither torch nor flwr (read, not imported)."""
    for method in FAMILIES:
        for module in method.planning:
            assert module.startswith("fedforget.core."), module
            tree = ast.parse(open(importlib.util.find_spec(module).origin, encoding="utf-8").read())
            names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            assert not {n.split(".")[0] for n in names} & {"torch", "flwr"}, module


def test_client_app_registers_exactly_the_registry_handlers():
    from fedforget.client_app import app

    expected = {t if "." in t else f"{t}.default" for t in client_handlers()}
    assert set(app._registered_funcs) == expected


def test_a_message_type_has_one_handler():
    seen: dict[str, str] = dict(SHARED_HANDLERS)
    for method in FAMILIES:
        for kind, target in method.handlers.items():
            assert seen.setdefault(kind, target) == target, kind


def test_methods_sharing_a_plan_kind_serve_and_forget_alike():
    for kind in {k for m in FAMILIES for k in m.plan_kinds}:
        owners = [m for m in FAMILIES if kind in m.plan_kinds]
        assert len({(m.serving, m.forget_message) for m in owners}) == 1, kind


def test_forget_messages_have_handlers():
    handlers = client_handlers()
    assert all(m.forget_message in handlers for m in FAMILIES)
    assert FORGET_MESSAGE == "query.forget" and CHAIN_MESSAGE == "train.chain"


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        registry.get_method("nope")


def test_get_method_resolves_the_driver():
    from fedforget.strategies.fedavg import run_fedavg

    assert registry.get_method("fedavg") is run_fedavg


def test_a_module_belongs_to_one_method_at_most():
    owners: dict[str, str] = {}
    for method in FAMILIES:
        for module in method.files():
            assert owners.setdefault(module, method.name) == method.name, module


def test_no_method_imports_another_methods_modules():
    """Read with ast: a method's modules reach other methods only through shared modules."""
    from tests.unit.test_import_graph import PACKAGE, import_graph, module_files

    graph = import_graph(module_files(PACKAGE))
    owner = {module: m.name for m in FAMILIES for module in m.files()}
    crossing = sorted((a, b) for a, targets in graph.items() if a in owner
                      for b in targets if b in owner and owner[a] != owner[b])
    assert crossing == []


def test_serving_rules_cover_every_plan_kind():
    from fedforget.core.serving_plans import SERVING_RULES

    assert set(SERVING_RULES) == {k for m in FAMILIES for k in m.plan_kinds}
    for method in FAMILIES:
        for kind in method.plan_kinds:
            module = SERVING_RULES[kind].partition(":")[0]
            assert module in method.planning or module in SHARED_MODULES, (method.name, kind)
            assert callable(resolve(SERVING_RULES[kind]))
