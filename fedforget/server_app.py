"""The ServerApp: read the run config into the method's strategy (:mod:`fedforget.strategies`) and start it."""

from __future__ import annotations

import logging
from logging import ERROR
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from fedforget.core.config import ConfigError, parse_run_config
from fedforget.federation.node_data import REGISTERED
from fedforget.federation.registration import RegistrationRefused
from fedforget.store.lock import LOCK_FILE
from fedforget.store.store import CLIENTS, resolve_store_path
from fedforget.strategies import strategy_for
from fedforget.strategies.run_action import RunLockRefused

app = ServerApp()


class RunRefused(Exception):
    """The run was refused before it wrote anything; its one line is already logged, so Flower's traceback
    of it is dropped."""


class StoreLockRefused(RunRefused):
    """The store's run lock (:mod:`fedforget.store.lock`) was not taken: another live run holds it, or its
    lock file is unusable."""


class RunConfigRefused(ConfigError, RunRefused):
    """The run config was refused; its one line is already logged, so Flower's traceback of it is dropped.

    Flower marks the run failed (``flwr ls`` shows sub-status ``failed`` with this message as details), but
    ``flwr run --stream`` exits 0 whatever the run's status: the CLI streams the logs and never asks how the
    run ended (``flwr/cli/log.py``), so nothing a ServerApp does gives it a non-zero exit code.
    """


class DropRefusedTraceback(logging.Filter):
    """Drop the records that carry a :class:`RunRefused` (Flower's "ServerApp raised an exception"
    / "Simulation raised an exception" with its traceback), and, once a refusal was logged, Flower's
    closing "Exit Code: N ... An unhandled exception occurred" (flwr/supercore/exit/exit.py): the one line
    before them says it all. Every other record, traceback included, passes."""

    refused = False

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RunRefused):
            return False
        if isinstance(record.args, tuple) and any(isinstance(arg, RunRefused) for arg in record.args):
            return False
        return not (self.refused and record.levelno >= ERROR and str(record.msg).startswith("Exit Code: "))


def quiet_refusals(logger: logging.Logger | None = None) -> None:
    """Install :class:`DropRefusedTraceback` on Flower's logger once, marked as having seen a refusal."""
    logger = logger or logging.getLogger("flwr")
    mine = [f for f in logger.filters if isinstance(f, DropRefusedTraceback)]
    if not mine:
        mine = [DropRefusedTraceback()]
        logger.addFilter(mine[0])
    mine[0].refused = True


class NodeDataRefused(ConfigError, RunRefused):
    """What a node registered was refused (:class:`~fedforget.federation.registration.RegistrationRefused`):
    its one line, naming the node, is already logged."""


def refusal_line(exc: ConfigError) -> str:
    if isinstance(exc, RegistrationRefused):  # the node's problem, not the run config's
        return f"fedforget: run refused at registration, nothing written: {exc}"
    return (f"fedforget: bad run config: {exc}; fix it in --run-config (keys and values: pyproject.toml "
            "[tool.flwr.app.config]; `fedforget run` checks them before submitting)")


@app.main()
def main(grid: Grid, context: Context) -> None:
    try:
        cfg = parse_run_config(dict(context.run_config))
    except ConfigError as exc:
        quiet_refusals()
        log(ERROR, "%s", refusal_line(exc))  # the one line a user needs; Flower's traceback of it is dropped
        raise RunConfigRefused(str(exc)) from None
    store_root = resolve_store_path(cfg.store)
    fresh = cfg.action == "train" and not store_root.exists()
    try:
        strategy_for(context.run_config).start(grid=grid, action=cfg.action)
    except RunLockRefused as exc:
        quiet_refusals()
        log(ERROR, "fedforget: error: %s", exc)
        raise StoreLockRefused(str(exc)) from None
    except ConfigError as exc:  # a config this federation cannot run: its size is known only once nodes answer
        if fresh:
            remove_unwritten_store(store_root)
        quiet_refusals()
        log(ERROR, "%s", refusal_line(exc))
        if isinstance(exc, RegistrationRefused):
            raise NodeDataRefused(str(exc)) from None
        raise RunConfigRefused(str(exc)) from None


def remove_unwritten_store(root: Path) -> None:
    """Take back the directory a refused training run made for its lock, when that is all it holds besides
    what simulated nodes registered in it (their state dirs live under the store in simulation)."""
    if not root.is_dir() or not {p.name for p in root.iterdir()} <= {LOCK_FILE, CLIENTS}:
        return
    clients = root / CLIENTS
    states = list(clients.iterdir()) if clients.is_dir() else []
    if any(not d.is_dir() or {f.name for f in d.iterdir()} - {REGISTERED} for d in states):
        return
    for d in states:
        (d / REGISTERED).unlink(missing_ok=True)
        d.rmdir()
    if clients.is_dir():
        clients.rmdir()
    (root / LOCK_FILE).unlink(missing_ok=True)
    root.rmdir()
