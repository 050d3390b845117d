"""What ``fedforget run`` submits: the app in the current directory (or the one given), its store, its
checked run config with its relative paths made absolute against its directory, and the connection."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fedforget.core.config import ConfigError
from fedforget.tasks.user_task import read_app_project
from fedforget.unlearning.retrain import toml_value
from fedforget.unlearning.run_config import check_run_config, parse_flwr_run_config
from fedforget.unlearning.user_app import AppToRun, anchored, app_to_run, declared_config


@dataclass(frozen=True)
class PlannedRun:
    """What ``fedforget run`` submits: the app, the store (absolute), the checked run config and the connection."""

    app: AppToRun
    store: str
    run_config: str
    federation: str


def plan_run(given_app: str | None, store: str, federation: str, run_config: str, cwd: Path) -> PlannedRun:
    """``fedforget run``'s app, store, run config and connection; :class:`ConfigError` (one line) for anything
    Flower or the ServerApp would refuse. A user app's relative paths (its ``store``, ``test-data``, ``node-data``)
    are its directory's, passed absolute; fedforget's own app keeps ``--store`` from the current directory."""
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
    for key in ("test-data", "node-data"):
        path = str(overrides.get(key, declared.get(key, "")))
        if path:
            overrides[key] = anchored(target.folder, path)
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
