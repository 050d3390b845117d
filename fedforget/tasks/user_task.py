"""A task defined in the user's own Flower app: ``task='<module>:<ATTRIBUTE>'`` in the run config.

The reference is imported where a task is loaded (the ServerApp, the ClientApp, the coordinator's
commands), never when a run config is parsed, so a parse stays pure. The ServerApp and ClientApp run
inside the app's directory (Flower puts it on ``sys.path``); the coordinator puts the directory of the app
that trained a store there (:func:`use_app_of`), read from the manifest's ``app`` entry, which also tells
``retrain``, ``forget --propagate`` and ``verify`` which app to submit.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedforget.core.config import ConfigError, is_user_task

if TYPE_CHECKING:
    from fedforget.tasks.base import TaskSpec

_LOADED: dict[str, TaskSpec] = {}


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def load_user_task(reference: str) -> TaskSpec:
    """The :class:`~fedforget.tasks.base.TaskSpec` that ``"<module>:<ATTRIBUTE>"`` names, named by the reference
    (so the store, the fingerprints and the service see one name). One :class:`ConfigError` line when the
    module cannot be imported or the attribute is not a :class:`fedforget.client.Task`."""
    if reference in _LOADED:
        return _LOADED[reference]
    if not is_user_task(reference):
        raise ConfigError(f"run-config 'task'={reference[:80]!r} is not a '<module>:<ATTRIBUTE>' reference")
    from fedforget.client import Task
    from fedforget.tasks.base import TaskSpec

    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises is one line for them
        raise ConfigError(f"run-config 'task'={reference!r}: cannot import {module_name!r} ({_one_line(exc)}); "
                          "run from your app's directory or put it on PYTHONPATH") from None
    found = getattr(module, attribute, None)
    spec = found.spec if isinstance(found, Task) else found
    if not isinstance(spec, TaskSpec):
        what = "has no attribute" if found is None else f"holds a {type(found).__name__}, not a fedforget.client.Task:"
        raise ConfigError(f"run-config 'task'={reference!r}: module {module_name!r} {what} {attribute!r}; "
                          f"define {attribute} = fedforget.client.Task(...) there (docs/your-app.md)")
    _LOADED[reference] = dataclasses.replace(spec, name=reference)
    return _LOADED[reference]


def app_of_task(reference: str) -> dict[str, str] | None:
    """The Flower app whose code defines the user task: its directory (the nearest one above the module holding a
    ``pyproject.toml`` with ``[tool.flwr.app]``), its ``publisher/name`` and version. None if there is none
    (a module on ``sys.path`` outside any app)."""
    module = sys.modules.get(reference.partition(":")[0])
    origin = getattr(module, "__file__", None)
    if not origin:
        return None
    for folder in Path(origin).resolve().parents:
        project = read_app_project(folder)
        if project is not None:
            return {"dir": str(folder), **project}
    return None


def read_app_project(folder: Path) -> dict[str, str] | None:
    """``{"name": "<publisher>/<name>", "version": ...}`` of the Flower app in ``folder``, or None."""
    try:
        data: dict[str, Any] = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    app = data.get("tool", {}).get("flwr", {}).get("app")
    project = data.get("project", {})
    if not isinstance(app, dict) or not isinstance(project, dict):
        return None
    return {"name": f"{app.get('publisher', '')}/{project.get('name', '')}", "version": str(project.get("version", ""))}


def use_app_of(manifest: dict[str, Any]) -> Path | None:
    """Put the app that trained a store (its manifest's ``app``) on ``sys.path``, so this process can load its
    task; its directory, or None for a store of fedforget's own app."""
    app = manifest.get("app")
    if not isinstance(app, dict) or not isinstance(app.get("dir"), str):
        return None
    folder = Path(app["dir"])
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return folder
