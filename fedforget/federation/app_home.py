"""A relative path in a run config is relative to the app's directory, whoever started the SuperLink.

``store``, ``test-data``, ``node-data`` and a user task's ``simulation_data`` may be relative. Flower runs the app
from the copy it installed (``$FLWR_HOME/apps/<publisher>.<name>.<version>.<hash>``, code and config, no data), in a
process the SuperLink starts with the SuperLink's environment and working directory, so fedforget takes the app's
directory from there: ``FEDFORGET_HOME``, else the working directory
(:func:`fedforget.store.store.resolve_store_path`). That is this app's directory only when it holds this same app
(its ``pyproject.toml`` names the run's ``<publisher>/<name>``); a SuperLink started from another environment
(fedforget's checkout, another app) would send the path elsewhere, so a run with a relative path is then refused,
one line, before anything is written. ``fedforget run`` and the coordinator's runs pass absolute paths, and an app's
``env.sh`` starts its own SuperLink with ``FEDFORGET_HOME`` set to the app's directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from flwr.serverapp import Grid

from fedforget.core.config import ConfigError, RunConfig, is_user_task
from fedforget.tasks.user_task import read_app_project


def running_app(grid: Grid) -> str | None:
    """``<publisher>/<name>`` of the app the Flower run on ``grid`` runs (its FAB), None outside Flower's
    runtimes (the in-process Grid has no FAB)."""
    while hasattr(grid, "inner"):  # fedforget's ReliableGrid around the runtime's
        grid = grid.inner
    try:
        run = grid.run
    except (AttributeError, RuntimeError, ValueError):
        return None
    fab_id = getattr(run, "fab_id", "") or ""
    return fab_id if fab_id.count("/") == 1 else None


def simulated(grid: Grid) -> bool:
    """The run is on Flower's simulation engine, whose nodes run in the ServerApp's environment."""
    from flwr.superlink.grid.inmemory_grid import InMemoryGrid

    while hasattr(grid, "inner"):
        grid = grid.inner
    return isinstance(grid, InMemoryGrid)


def relative_paths(cfg: RunConfig, with_simulation_data: bool) -> list[tuple[str, str]]:
    """The run config's paths that are relative, as (what, value)."""
    found = [(f"run-config {key!r}", value) for key, value in (("store", cfg.store), ("test-data", cfg.test_data))]
    if with_simulation_data and cfg.node_data:  # where the simulated nodes read their records, not the task's
        found.append(("run-config 'node-data'", cfg.node_data))
    elif with_simulation_data and is_user_task(cfg.task):
        from fedforget.tasks.registry import get_task

        found.append((f"{cfg.task}'s simulation_data", get_task(cfg.task).simulation_data))
    return [(what, value) for what, value in found if value and not Path(os.path.expanduser(value)).is_absolute()]


def check_app_directory(grid: Grid, cfg: RunConfig) -> None:
    """Raise :class:`ConfigError` (one line) when ``cfg`` holds a relative path and the directory it would be
    taken from does not hold the app the run runs."""
    app = running_app(grid)
    if app is None:
        return
    relative = relative_paths(cfg, with_simulation_data=simulated(grid))
    if not relative:
        return
    home = os.environ.get("FEDFORGET_HOME")
    base, where = (Path(home), "FEDFORGET_HOME") if home else (Path.cwd(), "working directory")
    held = read_app_project(base)
    if held is not None and held["name"] == app:
        return
    what, value = relative[0]
    holds = f"holds {held['name']}" if held else "holds no Flower app"
    absolute = ("make it absolute" if what.endswith("simulation_data") else
                "give an absolute path (`fedforget run` from the app's directory passes its paths absolute)")
    raise ConfigError(f"{what}={value!r} is relative to the app's directory, but the SuperLink's {where} {base} "
                      f"{holds}, not {app} (the SuperLink was started from another environment): start the app's "
                      f"own SuperLink with FEDFORGET_HOME set to its directory (its env.sh), or {absolute} "
                      "(docs/your-app.md)")
