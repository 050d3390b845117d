"""Which files of the repository a script runs: its import closure, read with ``ast`` (nothing is imported).

A benchmark's figure depends on the code it ran; this finds that code statically so a later commit that
changes it can be noticed (``tools/results_staleness.py``). From the script, every import statement (at
module level or inside a function; not those under ``if TYPE_CHECKING:``, which never run) that names a
module of the repository is followed, recursively, with the ``__init__.py`` of each package on the way.
A module name is looked up from the repository root (``fedforget.store``, ``tests.unit.x``) and from the
script's own folder (``bench_common`` beside a benchmark), as Python does for a script run by path.

Two kinds of string stand in for imports and are followed too: a constant equal to a repository module's
dotted name (``[sys.executable, "-m", "fedforget.faults"]``) and Flower's ``"module:attribute"``
(``"fedforget.server_app:app"``). A module that hands Flower the app's folder (:data:`STARTS_THE_APP`)
brings in the app's components named in ``pyproject.toml``. Not seen: ``importlib.import_module`` with a
computed name, ``sys.path`` entries a script adds itself, and files read as data.
"""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: ``"<dotted module>:<dotted name>"``: Flower's way of naming an app, code named without an import.
NAMED = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
#: Modules that start the Flower app this repository's ``pyproject.toml`` declares (``flwr run <app dir>``):
#: a script reaching one of them runs the app's components.
STARTS_THE_APP = ("fedforget.unlearning.flwr_runner",)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def statements(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, str, int]]:
    """(imported name, kind, line) for every import statement; relative imports made absolute. Kind:
    ``module`` (runs on import), ``function`` (inside a def, on its first call) or ``type-checking``."""
    stack: list[tuple[ast.AST, str]] = [(tree, "module")]
    while stack:
        node, kind = stack.pop()
        if isinstance(node, ast.Import):
            yield from ((alias.name, kind, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*parts, *([base] if base else [])])
            yield from ((f"{base}.{alias.name}", kind, node.lineno) for alias in node.names)
        for child in ast.iter_child_nodes(node):
            if kind != "type-checking" and isinstance(node, ast.If) and _is_type_checking(node.test) \
                    and child in node.body:
                stack.append((child, "type-checking"))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and kind == "module":
                stack.append((child, "function"))
            else:
                stack.append((child, kind))


def named_modules(tree: ast.AST) -> Iterator[str]:
    """Dotted names that string constants give: ``"a.b"`` and the module part of ``"a.b:c"``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
            match = NAMED.match(node.value)
            if match:
                yield match["module"]
            elif re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", node.value):
                yield node.value


def module_file(name: str, roots: Iterable[Path]) -> tuple[str, Path] | None:
    """The longest prefix of dotted ``name`` that is a module under one of ``roots``, and its file."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        for root in roots:
            base = root.joinpath(*parts[:end])
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if path.is_file():
                    return ".".join(parts[:end]), path
    return None


def app_components(root: Path = ROOT) -> list[str]:
    """The modules of the Flower app ``pyproject.toml`` declares (``[tool.flwr.app.components]``)."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return []
    components = project.get("tool", {}).get("flwr", {}).get("app", {}).get("components", {})
    return [str(value).partition(":")[0] for value in components.values()]


@functools.cache
def _named_in(path: Path, module: str) -> tuple[str, ...]:
    """The dotted names ``path`` (module ``module``) imports or names in a string, read once per process."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = [n for n, kind, _ in statements(tree, module, path.name == "__init__.py") if kind != "type-checking"]
    return tuple(dict.fromkeys([*names, *named_modules(tree)]))


@functools.cache
def _module_chain(name: str, roots: tuple[Path, ...]) -> tuple[tuple[str, Path], ...]:
    """The repository module ``name`` reaches and the packages whose ``__init__.py`` run before it."""
    found = module_file(name, roots)
    if found is None:
        return ()
    dotted = found[0].split(".")
    chain = []
    for end in range(1, len(dotted) + 1):
        hit = module_file(".".join(dotted[:end]), roots)
        if hit and hit[0] == ".".join(dotted[:end]):
            chain.append((hit[0], hit[1].resolve()))
    return tuple(chain)


def closure(script: Path, root: Path = ROOT) -> set[Path]:
    """Every repository file running ``script`` runs, ``script`` included (paths relative to ``root``)."""
    script = (script if script.is_absolute() else root / script).resolve()
    roots = (root.resolve(), script.parent)
    seen: dict[Path, str] = {script: script.stem}
    todo = [script]
    while todo:
        path = todo.pop()
        module = seen[path]
        names = list(_named_in(path, module))
        if module in STARTS_THE_APP:
            names += app_components(root)
        for name in names:
            for dotted, file in _module_chain(name, roots):
                if file not in seen:
                    seen[file] = dotted
                    todo.append(file)
    return {p.relative_to(roots[0]) for p in seen if p.is_relative_to(roots[0])}
