"""Which Flower app the coordinator submits for a store, and the run config that app accepts.

A store trained by fedforget's own app is retrained, propagated and verified through fedforget's app. A
store trained by a user's app (its task ``"<module>:<ATTRIBUTE>"``) records that app in its manifest
(``app``: its directory, ``publisher/name`` and version), and the coordinator submits that same app: its
task code is the one that trained the store. Flower refuses an override of a key the app does not declare,
so the stored config is cut down to the app's declared keys, and the cut is refused (one line) if the
config the app would then run differs from the stored one.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from fedforget.core.config import ConfigError, declared_defaults, parse_run_config
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
    from flwr.common.config import flatten_dict

    try:
        data = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {folder / 'pyproject.toml'} ({exc})") from None
    return set(flatten_dict(data.get("tool", {}).get("flwr", {}).get("app", {}).get("config", {})))


def app_run_config(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (the keys the coordinator would submit, ``store`` left out) cut to the keys the app at
    ``folder`` declares; :class:`ConfigError` when a key it must set is not declared."""
    declared = declared_keys(folder)
    needed = [k for k in (*COORDINATOR_KEYS, *(k for k in config if k == "reference" and config[k]))
              if k not in declared]
    kept = {k: v for k, v in config.items() if k in declared}
    if not needed:
        base = {**declared_defaults(), **{k: v for k, v in config.items() if k in COORDINATOR_KEYS}}
        wanted = parse_run_config({**base, **config}, warn=False).to_dict()
        runs = parse_run_config({**base, **kept}, warn=False).to_dict()
        needed = sorted(k for k in wanted if wanted[k] != runs[k] and k not in COORDINATOR_KEYS)
    if needed:
        raise ConfigError(f"declare {', '.join(needed)} in [tool.flwr.app.config] of {folder / 'pyproject.toml'}: "
                          "the coordinator sets them when it submits the app")
    return kept
