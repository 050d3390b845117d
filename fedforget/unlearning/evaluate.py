"""``fedforget evaluate``: test accuracy of exactly what the store serves now."""

from __future__ import annotations

from typing import Any

from fedforget.core.config import RunConfig, parse_run_config, stored_run_config
from fedforget.store import Store


def stored_config(store: Store) -> RunConfig:
    """The run config that trained the store (what every later step must reuse)."""
    return parse_run_config(stored_run_config(store.manifest()["config"]))


def evaluate_store(store: Store) -> dict[str, Any]:
    """Accuracy and loss of the served ensemble on the task's test split; cached in the ledger.

    Raises ``ServingError`` when nothing valid is left to serve.
    """
    from fedforget.federation.serve import serving_accuracy
    from fedforget.tasks.registry import load_task_data

    cfg = stored_config(store)
    data = load_task_data(cfg)
    ledger = store.ledger()
    try:
        serving = ledger.serving()
        result = serving_accuracy(cfg, data.num_classes, store, ledger.plan(), serving, ledger.artifacts(),
                                  data.test.inputs, data.test.labels)
        ledger.set_meta("accuracy", {"serving": sorted(serving["artifacts"]), **result})
    finally:
        ledger.close()
    return {**result, "serving": sorted(serving["artifacts"])}
