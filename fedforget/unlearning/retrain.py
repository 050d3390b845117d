"""``fedforget retrain``: a Flower run that makes clients delete forgotten data and rebuilds what is invalid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from fedforget.core.config import stored_run_config
from fedforget.store import Store
from fedforget.store.lock import check_not_busy
from fedforget.unlearning.flwr_runner import flwr_run
from fedforget.unlearning.user_app import app_run_config, store_app


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a TOML basic string


def retrain_run_config(store: Store, action: str = "retrain") -> str:
    """The stored run config with ``action='retrain'`` (or ``'propagate'``; ``store`` is added by :func:`flwr_run`)."""
    config = stored_run_config(store.manifest()["config"])
    config["action"] = action
    return submitted_config(store, config)


def submitted_config(store: Store, config: dict[str, Any]) -> str:
    """``config`` as ``--run-config`` text for the app that trained ``store`` (``store`` left out: :func:`flwr_run`
    adds it): every key for fedforget's own app, the keys it declares for a user's app."""
    config = {k: v for k, v in config.items() if k != "store"}
    app = store_app(store)
    if app is not None:
        config = app_run_config(app, config)
    return " ".join(f"{k}={toml_value(v)}" for k, v in sorted(config.items()))


def retrain_store(store: Store, federation: str, console: Console) -> tuple[int, Path, int]:
    """Submit the retrain run; return (flwr exit code, log path, watermark it had to reach).

    Raises :class:`~fedforget.store.lock.StoreBusy` before anything starts if a live run holds the store's
    run lock (the ServerApp takes the lock itself; this check only makes the common case fail fast).
    """
    check_not_busy(store.root)
    ledger = store.ledger()
    try:
        target = ledger.last_request()
    finally:
        ledger.close()
    code, log_path = flwr_run(federation, retrain_run_config(store), str(store.root), console, app=store_app(store))
    return code, log_path, target


def propagate_store(store: Store, federation: str, console: Console) -> tuple[int, Path]:
    """``forget --propagate``: a Flower run that makes the owning clients delete forgotten samples now."""
    check_not_busy(store.root)
    return flwr_run(federation, retrain_run_config(store, "propagate"), str(store.root), console,
                    app=store_app(store))
