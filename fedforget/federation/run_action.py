"""One run of a method on the Grid, under the guards every fedforget run takes: the server reads no client's
training rows, holds no coordinator key, and holds the store's run lock for the whole run.

The ServerApp and every :class:`~fedforget.federation.method_strategy.MethodStrategy` go through here, so a user's own
ServerApp gets exactly what ``flwr run`` of fedforget's app gets."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

from flwr.serverapp import Grid

from fedforget.core.config import RunConfig
from fedforget.federation.app_home import check_app_directory
from fedforget.federation.messaging import ReliableGrid
from fedforget.federation.node_data import REGISTERED
from fedforget.store.lock import LOCK_FILE, store_run_lock
from fedforget.store.log import without_head_signer
from fedforget.store.store import CLIENTS, StoreError, resolve_store_path
from fedforget.tasks.data_access import serving_role


class RunLockRefused(StoreError):
    """The store's run lock (:mod:`fedforget.store.lock`) was not taken: another live run holds it, or its
    lock file is unusable."""


def reliable(grid: Grid, cfg: RunConfig) -> ReliableGrid:
    """``grid`` with the short poll and the safe retries, its messages carrying the run's config (a wrapped
    Grid is not wrapped again)."""
    if isinstance(grid, ReliableGrid):
        return grid if grid.run_config is not None else ReliableGrid(grid.inner, cfg.to_dict())
    return ReliableGrid(grid, cfg.to_dict())


def run_action(grid: Grid, cfg: RunConfig, strategy: Any, initial_arrays: dict[str, Any] | None = None) -> None:
    """``cfg.action`` (train, retrain or propagate) of ``strategy`` on the nodes ``grid`` reaches: the strategy's
    own methods train and retrain (:func:`~fedforget.federation.driver.drive`, from ``initial_arrays`` when
    ``start`` was handed some), its declaration (``strategy.method``) names how nodes forget.

    Raises :class:`RunLockRefused` when another live run holds the store's lock, and
    :class:`~fedforget.core.config.ConfigError` for a config this federation cannot run, or whose relative
    paths would not be the app's (:mod:`fedforget.federation.app_home`)."""
    check_app_directory(grid, cfg)  # a relative path means the app's directory, or the run is refused
    with ExitStack() as held:
        held.enter_context(serving_role())  # the server never reads a client's training rows
        held.enter_context(without_head_signer())  # nor holds the coordinator's key: its entries wait
        try:  # one run writes a store at a time; the lock dies with this process, however it ends
            held.enter_context(store_run_lock(resolve_store_path(cfg.store), cfg.action))
        except StoreError as exc:
            raise RunLockRefused(str(exc)) from None
        if cfg.action == "propagate":  # deletion on the clients now, no training (`forget --propagate`)
            from fedforget.federation.propagate import run_propagation

            run_propagation(reliable(grid, cfg), cfg, strategy.method)
            return
        from fedforget.federation.driver import drive  # the server's run: torch, the model

        drive(reliable(grid, cfg), cfg, strategy, initial_arrays)


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
