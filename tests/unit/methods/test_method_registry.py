"""The method registry is the one list of methods: every run-config method has an entry, every hook it
declares is a function whose deferred imports exist, the ClientApp serves exactly its handlers, and
planning modules stay pure."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fedforget.core.config import CONFIG_GROUPS, METHOD_GROUP, METHODS
from fedforget.federation.message_types import CHAIN, FORGET
from fedforget.federation.messaging import CHAIN_MESSAGE, FORGET_MESSAGE
from fedforget.methods import registry
from fedforget.methods.registry import FAMILIES, METHOD_PACKAGES, SHARED_HANDLERS, client_handlers

METHODS_DIR = Path(registry.__file__).parent
SHARED_PREFIXES = ("fedforget.federation.", "fedforget.core.", "fedforget.training.", "fedforget.tasks.",
                   "fedforget.store.", "fedforget.unlearning.", "fedforget.methods.shared_hooks")


def _hooks() -> list[Callable[..., object]]:
    return list(dict.fromkeys([*(h for m in FAMILIES for h in m.hooks()), *SHARED_HANDLERS.values()]))


def deferred_imports(hook: Callable[..., object]) -> Iterator[tuple[str, str]]:
    """(module, name) of each ``from module import name`` inside ``hook``'s body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(hook)))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield from ((node.module, a.name) for a in node.names)


def test_every_configured_method_has_one_entry():
    variants = [v for m in FAMILIES for v in m.variants]
    assert sorted(variants) == sorted(METHODS)
    assert len(set(variants)) == len(variants)
    assert [m.name for m in FAMILIES] == list(METHOD_PACKAGES)


def test_every_method_folder_is_registered_and_every_registered_name_is_a_folder():
    folders = {p.name for p in METHODS_DIR.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(METHOD_PACKAGES)


def test_each_entry_names_the_config_table_its_methods_read():
    """A method's table is its own code and its group is its package's name, so ``<group>.*`` keys are found
    in ``fedforget/methods/<group>/``."""
    from fedforget.core.config_keys import ConfigTable

    for m in FAMILIES:
        if m.config:
            assert m.config.__module__ == m.package + ".config"
            assert issubclass(m.config, ConfigTable) and m.config.group == m.name
    assert {v: (m.name if m.config else None) for m in FAMILIES for v in m.variants} == METHOD_GROUP
    assert {g for g in METHOD_GROUP.values() if g} <= set(CONFIG_GROUPS)


@pytest.mark.parametrize("hook", _hooks(), ids=lambda h: f"{h.__module__}.{h.__qualname__}")
def test_every_hook_is_a_function_whose_deferred_imports_exist(hook: Callable[..., object]):
    assert inspect.isfunction(hook)
    for module, name in deferred_imports(hook):
        assert hasattr(importlib.import_module(module), name), (module, name)


def test_a_method_declares_only_its_own_code_or_shared_code():
    """Each hook is defined in its package or in shared code, and imports only from those."""
    for method in FAMILIES:
        for hook in method.hooks():
            assert hook.__module__ == method.package or hook.__module__.startswith(SHARED_PREFIXES), hook
            for module, _ in deferred_imports(hook):
                assert module.startswith((method.package + ".", *SHARED_PREFIXES)), (method.name, module)


def test_planning_modules_are_pure_and_their_methods_own():
    """Read, not imported: a planning module imports neither torch nor flwr."""
    for method in FAMILIES:
        for module in method.planning:
            assert module.startswith(method.package + "."), module
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


def test_each_method_sends_its_own_message_types_and_none_owns_a_bare_category():
    owners: dict[str, str] = {}
    for method in FAMILIES:
        for kind in method.handlers:
            assert kind not in SHARED_HANDLERS, f"{method.name} registers the shared {kind!r}"
            assert "." in kind, f"{method.name} owns Flower's bare {kind!r} category: give it an action"
            assert owners.setdefault(kind, method.name) == method.name, f"{kind!r}: {owners[kind]} and {method.name}"


def test_a_plan_kind_has_one_method():
    kinds = [k for m in FAMILIES for k in m.serving_rules]
    assert len(kinds) == len(set(kinds))
    assert all(registry.entry_for_plan(k) is m for m in FAMILIES for k in m.serving_rules)


def test_forget_messages_have_handlers():
    handlers = client_handlers()
    assert all(m.forget_message in handlers for m in FAMILIES)
    assert FORGET_MESSAGE == FORGET == "query.forget" and CHAIN_MESSAGE == CHAIN == "train.chain"


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        registry.method_entry("nope")


def test_a_variant_finds_its_declaration():
    from fedforget.methods import fedavg

    assert registry.method_entry("fedavg") is fedavg.METHOD
    assert registry.store_method({"method": "sisa"}) is registry.method_entry("fedsgt")


def test_safe_declares_the_feature_cache_its_nodes_write():
    from fedforget.methods.safe import METHOD
    from fedforget.methods.safe.features import CACHE_PREFIX

    assert METHOD.feature_caches == (f"{CACHE_PREFIX}*",)


def test_defaults_and_footprints_are_the_methods_own_pure_code():
    """A method's auto-key defaults and memory estimate live in its planning modules, speak only of its
    own variants, and name real run-config keys (the auto keys; the keys its estimate grows with)."""
    from fedforget.core.config import RunConfig
    from fedforget.core.defaults import AUTO_KEYS
    from fedforget.methods.method import Defaults

    keys = set(RunConfig().to_dict())
    for m in FAMILIES:
        if m.footprint:
            assert {module for module, _ in deferred_imports(m.footprint)} <= set(m.planning), m.name
        if m.defaults:
            declared = m.defaults
            assert declared is importlib.import_module(m.package + ".config").DEFAULTS
            assert isinstance(declared, Defaults)
            assert set(declared.variants) <= set(m.variants)
            assert {v for v, _ in declared.pairs} <= set(m.variants)
            for values in (*declared.variants.values(), *declared.pairs.values()):
                assert values and set(values) <= set(AUTO_KEYS), (m.name, values)
        assert set(m.size_keys) <= set(m.variants)
        for variant_keys in m.size_keys.values():
            assert set(variant_keys) <= keys, (m.name, variant_keys)
