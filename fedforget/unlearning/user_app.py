"""Which Flower app the coordinator submits for a store, and the run config that app accepts.

A store trained by fedforget's own app is retrained, propagated and verified through fedforget's app. A
store trained by a user's app (its task ``"<module>:<ATTRIBUTE>"``) records that app in its manifest
(``app``: its directory, ``publisher/name`` and version), and the coordinator submits that same app: its
task code is the one that trained the store. Flower refuses an override of a key the app does not declare,
so the stored config is cut down to the app's declared keys, and the cut is refused (one line) if the
config the app would then run differs from the stored one.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
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
    return set(declared_config(folder))


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


@dataclass(frozen=True)
class PlannedRun:
    """What ``fedforget run`` submits: the app, the store (absolute), the checked run config and the connection."""

    app: AppToRun
    store: str
    run_config: str
    federation: str


def plan_run(given_app: str | None, store: str, federation: str, run_config: str, cwd: Path) -> PlannedRun:
    """``fedforget run``'s app, store, run config and connection; :class:`ConfigError` (one line) for anything
    Flower or the ServerApp would refuse. A user app's relative paths (its ``store``, ``test-data``) are its
    directory's, passed absolute; fedforget's own app keeps ``--store`` from the current directory."""
    from fedforget.unlearning.retrain import toml_value
    from fedforget.unlearning.run_config import check_run_config, parse_flwr_run_config

    if "store=" in run_config.replace(" ", ""):
        raise ConfigError("pass the store with --store, not inside --run-config")
    target = app_to_run(given_app, cwd)
    connection = federation or default_federation()
    if target.own:
        return PlannedRun(target, str((cwd / os.path.expanduser(store or "runs/latest")).resolve()),
                          check_run_config(run_config), connection)
    pyproject = str(target.folder / "pyproject.toml")
    declared = declared_config(target.folder)
    if "store" not in declared:
        raise ConfigError(f"declare store in [tool.flwr.app.config] of {pyproject}: `fedforget run` sets it")
    overrides = parse_flwr_run_config(check_run_config(run_config, declared, pyproject))
    test_data = str(overrides.get("test-data", declared.get("test-data", "")))
    if test_data:
        overrides["test-data"] = anchored(target.folder, test_data)
    text = " ".join(f"{k}={toml_value(v)}" for k, v in overrides.items())
    where = str(cwd / os.path.expanduser(store)) if store else anchored(target.folder, str(declared["store"]))
    return PlannedRun(target, str(Path(where).resolve()), text, connection)


def default_federation() -> str:
    """``$FLWR_HOME``'s default connection (Flower's, for ``flwr run`` given none), else ``local-simulation``."""
    from fedforget.local_superlink import default_connection

    home = Path(os.environ.get("FLWR_HOME") or Path.home() / ".flwr")
    return default_connection(home) or "local-simulation"


def check_local_superlink(planned: PlannedRun, env: dict[str, str]) -> None:
    """:class:`ConfigError` (one line) when ``planned`` goes to a managed local SuperLink that already runs with
    another directory as its home: the app's relative paths (its task's ``simulation_data``) would be refused
    there (:mod:`fedforget.federation.app_home`). One that is not running is started with the app's directory."""
    from fedforget.local_superlink import FLOWER_DEFAULT, HTTP_ENV, healthy, local_address, running_home

    if planned.app.own:
        return
    flwr_home = Path(env.get("FLWR_HOME") or Path.home() / ".flwr")
    if local_address(planned.federation, flwr_home) is None:
        return
    port = int(env.get(HTTP_ENV) or FLOWER_DEFAULT[0])
    if not healthy(port):
        return
    home = running_home(port)
    held = read_app_project(home) if home is not None else None
    if home is None or (held is not None and held["name"] == planned.app.name):
        return
    raise ConfigError(f"the local SuperLink of connection {planned.federation!r} (127.0.0.1:{port}) runs with "
                      f"{home} as its home, not {planned.app.folder}, so it would refuse this app's relative paths; "
                      "stop it (`python -m fedforget.local_superlink stop`) and run again, or give the app a Flower "
                      "home of its own (source its env.sh)")
