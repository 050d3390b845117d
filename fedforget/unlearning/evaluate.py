"""``fedforget evaluate``: test accuracy of exactly what the store serves now."""

from __future__ import annotations

import sqlite3
from typing import Any

from fedforget.core.config import RunConfig, parse_run_config, stored_run_config
from fedforget.store import Store
from fedforget.store.read_only import is_read_only_error


def stored_config(store: Store) -> RunConfig:
    """The run config that trained the store (what every later step must reuse)."""
    return parse_run_config(stored_run_config(store.manifest()["config"]))


def evaluate_store(store: Store) -> dict[str, Any]:
    """Accuracy and loss of the served ensemble on the server's test set (:mod:`fedforget.tasks.server_data`);
    cached in the ledger when the store can be written (on a read-only store it is measured all the same).

    Raises ``ServingError`` when nothing valid is left to serve.
    """
    from fedforget.federation.serve import serving_accuracy
    from fedforget.tasks.server_data import load_server_test

    cfg = stored_config(store)
    test = load_server_test(cfg)
    ledger = store.ledger()
    try:
        serving = ledger.serving()
        result = serving_accuracy(cfg, test.num_classes, store, ledger.plan(), serving, ledger.artifacts(),
                                  test.examples.inputs, test.examples.targets)
        try:
            ledger.set_meta("accuracy", {"serving": sorted(serving["artifacts"]), **result})
        except sqlite3.OperationalError as exc:  # a read-only store: the result stands, only its cache is lost
            if not is_read_only_error(exc):
                raise
    finally:
        ledger.close()
    return {**result, "serving": sorted(serving["artifacts"])}
