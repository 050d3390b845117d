"""Which Flower app the coordinator submits for a store, and the run config that app accepts.

A store trained by fedforget's own app is retrained, propagated and verified through fedforget's app. A
store trained by a user's app (its task ``"<module>:<ATTRIBUTE>"``) records that app in its manifest
(``app``: its directory, ``publisher/name`` and version), and the coordinator submits that same app: its
task code is the one that trained the store. Flower refuses an override of a key the app does not declare,
so the stored config is cut down to the app's declared keys; the app builds the rest of its strategy as it
did when it trained the store (in its ServerApp's code, or from the keys it declares), and its ServerApp
refuses a retrain that builds another.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedforget.core.config import ConfigError
from fedforget.store import Store
from fedforget.tasks.user_task import read_app_project

#: The keys the coordinator sets itself on every run it submits.
COORDINATOR_KEYS = ("action", "store")


def store_app(store: Store) -> Path | None:
    """The directory of the app that trained ``store`` (None: fedforget's own); :class:`ConfigError` when it
    is gone or now holds another app or version."""
    app = store.manifest().get("app")
    if not isinstance(app, dict):
        return None
    folder = Path(str(app.get("dir", "")))
    trained = f"{app.get('name')} {app.get('version')}"
    project = read_app_project(folder)
    if project is None:
        raise ConfigError(f"the app that trained this store ({trained}) is no longer at {folder}; restore it there "
                          "(the coordinator submits the app that trained the store)")
    if (project["name"], project["version"]) != (app.get("name"), app.get("version")):
        raise ConfigError(f"{folder} now holds {project['name']} {project['version']}, not {trained}, which trained "
                          "this store; restore that version there")
    return folder


def declared_keys(folder: Path) -> set[str]:
    """The run-config keys the app's ``[tool.flwr.app.config]`` declares (flattened like Flower's)."""
    return set(declared_config(folder))


def app_run_config(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (the keys the coordinator would submit, ``store`` left out) cut to the keys the app at
    ``folder`` declares; :class:`ConfigError` when a key the coordinator sets is not declared.

    The other stored keys need not be declared: a ServerApp that builds its strategy in code says them there, and
    one that builds it from the run config declares what it sets. Either way the app's ServerApp refuses, naming
    the keys, a retrain whose strategy differs from the one the store recorded
    (:func:`fedforget.federation.run_setup.open_server_run`), and ``verify``'s reference run compares what it
    builds with what is served.
    """
    declared = declared_keys(folder)
    needed = [k for k in (*COORDINATOR_KEYS, *(k for k in config if k == "reference" and config[k]))
              if k not in declared]
    if needed:
        raise ConfigError(f"declare {', '.join(needed)} in [tool.flwr.app.config] of {folder / 'pyproject.toml'}: "
                          "the coordinator sets them when it submits the app")
    return {k: v for k, v in config.items() if k in declared}


@dataclass(frozen=True)
class AppToRun:
    """The Flower app ``fedforget run`` submits: its directory, ``publisher/name`` and version, and whether it
    is fedforget's own."""

    folder: Path
    name: str
    version: str
    own: bool

    def describe(self) -> str:
        what = "fedforget's own app" if self.own else "the Flower app"
        return f"{what} {self.name} {self.version} in {self.folder}"


def app_to_run(given: str | None, cwd: Path) -> AppToRun:
    """``given`` (a Flower app's directory, else :class:`ConfigError`), else ``cwd`` when it holds a Flower app
    (``pyproject.toml`` with ``[tool.flwr.app]``), else ``FEDFORGET_HOME``'s or fedforget's own (:func:`app_dir`)."""
    from fedforget.unlearning.flwr_runner import app_dir, own_app_dir

    own_name = (read_app_project(own_app_dir()) or {}).get("name")
    if given:
        folder = Path(os.path.expanduser(given)).resolve()
        if read_app_project(folder) is None:
            raise ConfigError(f"{folder} is not a Flower app (no pyproject.toml with [tool.flwr.app]); give the "
                              "directory of your app, or leave APP out to run the one in the current directory")
    else:
        folder = cwd.resolve() if read_app_project(cwd) is not None else app_dir().resolve()
    project = read_app_project(folder) or {}
    return AppToRun(folder, project.get("name", ""), project.get("version", ""), project.get("name") == own_name)


def declared_config(folder: Path) -> dict[str, Any]:
    """The app's ``[tool.flwr.app.config]``, flattened like Flower's."""
    from flwr.common.config import flatten_dict

    try:
        data = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {folder / 'pyproject.toml'} ({exc})") from None
    return flatten_dict(data.get("tool", {}).get("flwr", {}).get("app", {}).get("config", {}))


def anchored(folder: Path, value: str) -> str:
    """``value``, a path of the app's run config, made absolute against the app's directory."""
    path = Path(os.path.expanduser(value))
    return str(path if path.is_absolute() else folder / path)

