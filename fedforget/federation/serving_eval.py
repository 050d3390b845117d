"""Accuracy of what is served on the test split, recorded in the ledger (``status`` shows it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedforget.federation.serve import serving_accuracy
from fedforget.store.ledger import Ledger

if TYPE_CHECKING:
    from fedforget.federation.run_setup import ServerRun


def evaluate_serving(run: ServerRun, ledger: Ledger) -> dict[str, float]:
    """Evaluate the ledger's serving plan; NaN accuracy when nothing valid is left to serve, or the server holds
    no test rows (then the cache says so: ``status`` shows no server accuracy instead of measuring one)."""
    serving = ledger.serving()
    if not serving.get("available"):
        return {"accuracy": float("nan"), "loss": float("nan"), "num-examples": 0}
    if not len(run.test):  # a server without a test set: the nodes evaluate what is served (evaluate-on-nodes)
        ledger.set_meta("accuracy", {"serving": serving["artifacts"], "accuracy": None, "loss": None,
                                     "num-examples": 0})
        return {"accuracy": float("nan"), "loss": float("nan"), "num-examples": 0}
    result = serving_accuracy(run.cfg, run.num_classes, run.store, ledger.plan(), serving, ledger.artifacts(),
                              run.test.inputs, run.test.targets)
    ledger.set_meta("accuracy", {"serving": serving["artifacts"], **result})
    return result
