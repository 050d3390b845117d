"""Shared machinery (every module outside ``fedforget/methods/``) names no method: no string constant equal to
a registered variant or method package, no identifier holding one as a word. What a method is, it declares
(``fedforget.core.method.Method``); shared code reads that. Everything is read with ``ast``: the registry's
names from its source, the modules' text as text, nothing imported. Negative controls show each kind of
naming is caught and the allowlist is the only way past."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.unit.methods.test_method_boundaries import FACADES
from tests.unit.test_import_graph import PACKAGE, module_files

#: (module, what it names) that may stay, each with why. Nothing else in shared code may name a method; the
#: facades (``fedforget.strategies``: one public class per method, as the registry lists one declaration per
#: package) are read as the methods' own.
ALLOWED: dict[tuple[str, str], str] = {
    ("fedforget.core.config", "fedavg"): "the run config's default method= value: data the user sees (the "
                                         "pyproject ships the same), not knowledge of how FedAvg runs",
    ("fedforget.tasks.smollm", "safe_open"): "safetensors' API (the English word), not the SAFE method",
    ("fedforget.tasks.smollm", "safe_serialization"): "transformers' save_pretrained flag (the English word)",
}

#: Method names that are also English words, with what shared code means by them: an identifier that is the
#: word alone (``replay``, ``Replay``) may stay anywhere; a string equal to it, or a longer identifier, may not.
WORDS: dict[str, str] = {
    "replay": "the ledger log's replay (store.log_check.Replay, read by check_changes, log_follow, log_verify) "
              "and the ASGI body replay (service.gate), not the replay method",
}

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z]|\d|\b)|[A-Z]?[a-z]+|[A-Z]+|\d+")


def registered_names(methods_dir: Path = PACKAGE / "methods") -> frozenset[str]:
    """Every method package the registry imports and every variant its ``Method(...)`` declares, read from the
    source."""
    packages: list[str] = []
    for node in ast.walk(ast.parse((methods_dir / "registry.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedforget.methods."):
            if any(a.name == "METHOD" for a in node.names):
                packages.append(node.module.rpartition(".")[2])
    names = set(packages)
    for package in packages:
        for node in ast.walk(ast.parse((methods_dir / package / "__init__.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "variants":
                names.update(ast.literal_eval(node.value))
    return frozenset(names)


def _words(identifier: str) -> list[str]:
    """``run_zo_sfl`` → run, zo, sfl; ``FedShardServer`` → fed, shard, server (lowercase)."""
    return [w.lower() for part in identifier.split("_") for w in _CAMEL.findall(part)]


def _holds(identifier: str, name: str) -> bool:
    """Whether ``name`` (``zo-sfl``: zo, sfl) is one or more consecutive words of ``identifier``, joined as written
    (``zo_sfl``, ``ZoSfl``, ``fedshard``, ``FedShard``)."""
    words = _words(identifier)
    target = name.lower().replace("-", "").replace("_", "")
    return any("".join(words[i:j]) == target for i in range(len(words)) for j in range(i + 1, len(words) + 1))


def _identifiers(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, ast.keyword) and node.arg:
        yield node.arg
    elif isinstance(node, ast.alias):
        yield node.asname or node.name.rpartition(".")[2]


def namings(source: str, names: Iterable[str], words: Iterable[str] = WORDS) -> set[str]:
    """What ``source`` names of ``names``: each string constant equal to one (any case), each identifier holding
    one as a word, except an identifier that is one of ``words`` alone."""
    names, words = frozenset(names), frozenset(words)
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in names:
            found.add(node.value)
        for identifier in _identifiers(node):
            if identifier.lower() not in words and any(_holds(identifier, name) for name in names):
                found.add(identifier)
    return found


def shared_namings(package: Path, names: Iterable[str], allowed: dict[tuple[str, str], str] = ALLOWED,
                   facades: Iterable[str] = FACADES) -> list[tuple[str, str]]:
    """(module, what it names) for every module of ``package`` outside ``<package>.methods`` and ``facades``,
    beyond ``allowed``."""
    root = package.name
    out = []
    for module, path in module_files(package).items():
        if module == f"{root}.methods" or module.startswith(f"{root}.methods.") or module in facades:
            continue
        out += [(module, n) for n in namings(path.read_text(encoding="utf-8"), names) if (module, n) not in allowed]
    return sorted(out)


def test_the_names_are_the_registry_s():
    names = registered_names()
    assert {"fedavg", "chains", "fedsgt", "s3t", "sisa", "fedcio", "fedshard", "safe", "protosisa", "hosfl", "sfl",
            "zo-sfl"} <= names
    assert set(WORDS) <= names  # a word that is no longer a method's name is dropped


def test_shared_code_names_no_method():
    assert shared_namings(PACKAGE, registered_names()) == []


def test_every_allowed_naming_is_still_there():
    """An allowlist entry whose naming is gone is dropped, so the list only holds what is needed."""
    files = module_files(PACKAGE)
    names = registered_names()
    stale = [key for key in ALLOWED if key[1] not in namings(files[key[0]].read_text(encoding="utf-8"), names)]
    assert stale == []


def test_a_planted_naming_is_caught(tmp_path: Path):
    names = ("fedavg", "fedshard", "safe", "zo-sfl", "chains", "replay")
    root = tmp_path / "fedforget"
    for folder in ("core", "unlearning", "methods/fedshard"):
        (root / folder).mkdir(parents=True)
    for init in ("", "core/", "unlearning/", "methods/", "methods/fedshard/"):
        (root / f"{init}__init__.py").write_text('"""A docstring about FedShard and the safe shard is prose."""\n')
    (root / "core" / "config.py").write_text('METHOD = "fedavg"\n')
    (root / "unlearning" / "runner.py").write_text(
        'import re\n'
        'STAGE = re.compile(r"FedShard stage (\\d+)")\n'  # a pattern that merely contains a name: not a naming
        'if cfg.method == "FedShard":\n    pass\n'
        'def compare_safe_shard(store):\n    return store.zo_sfl_rounds\n'
        'class ChainsReport:\n    pass\n'
        'by_chain = {}\n'
        'def unsafe(x):\n    return x\n'
        'class Replay:\n    pass\n'
        'def replay(log):\n    return log == "replay" or log.replay_rounds\n')
    (root / "methods" / "fedshard" / "server.py").write_text('NAME = "fedshard"\ndef run_fedshard():\n    pass\n')
    assert shared_namings(root, names, allowed={}) == [
        ("fedforget.core.config", "fedavg"), ("fedforget.unlearning.runner", "ChainsReport"),
        ("fedforget.unlearning.runner", "FedShard"), ("fedforget.unlearning.runner", "compare_safe_shard"),
        ("fedforget.unlearning.runner", "replay"), ("fedforget.unlearning.runner", "replay_rounds"),
        ("fedforget.unlearning.runner", "zo_sfl_rounds")]
    assert shared_namings(root, names, allowed={("fedforget.core.config", "fedavg"): "why"})[0] == (
        "fedforget.unlearning.runner", "ChainsReport")
