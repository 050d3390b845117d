"""One driver for every method's run, written once: register the nodes, prepare or open the store, train
or retrain, send the forget messages first (the purge list, the acknowledgements), rebuild corrupt
artifacts like invalid ones, record what stayed unbuilt, re-plan serving and evaluate it.

A method supplies a :class:`MethodServer` whose hooks say only what it knows, the way Flower's
``Strategy.start`` calls a strategy's ``configure_*``/``aggregate_*``: what to refuse before the store
exists, how to train, how to rebuild what a forget invalidated, how to evaluate what it serves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.core.config import RunConfig
from fedforget.core.method import Method
from fedforget.federation.forget_messages import forget_before_retrain
from fedforget.federation.record_key import run_record_key
from fedforget.federation.registration import Federation, register_nodes
from fedforget.federation.run_setup import ServerRun, open_server_run, prepare_server_run
from fedforget.federation.serving_eval import evaluate_serving
from fedforget.store.check import corrupt_artifacts
from fedforget.store.crash import crash_point
from fedforget.store.ledger import Ledger
from fedforget.store.purge import finish_pending_purges
from fedforget.tasks.server_data import load_server_test


@dataclass
class Built:
    """What one training or retrain built, as the driver records it."""

    rebuilt: list[str]  # artifacts (re)built by this run
    unbuilt: list[str] = field(default_factory=list)  # artifacts a lost partition kept from being built
    excluded: set[int] = field(default_factory=set)  # partitions lost in this run
    metrics: dict[str, Any] | None = None  # the method's fields of the final metrics row (None: no row)
    manifest: dict[str, Any] = field(default_factory=dict)  # manifest fields written once it is served
    summary: str = ""  # the closing log line, before the served accuracy


class MethodServer:
    """A method's server side; override the hooks it needs. ``grid`` and ``cfg`` are the run's."""

    def __init__(self, grid: Grid, cfg: RunConfig) -> None:
        self.grid = grid
        self.cfg = cfg

    def needs(self) -> tuple[str, ...]:
        """What this method's planning asks each node for at registration, beyond its sample ids and slices
        (``labels``, ``class-counts``; :mod:`fedforget.federation.control_messages`). The docs list it per method."""
        return ()

    def check(self, federation: Federation, num_classes: int) -> None:
        """Refuse a run this federation cannot do, before the store exists (raises ConfigError)."""

    def train(self, run: ServerRun, ledger: Ledger) -> Built:
        """Load the sample index and the plan into the fresh ledger, then train everything."""
        raise NotImplementedError

    def retrain(self, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        """Rebuild what is not in ``reusable`` (valid, intact artifacts), recording it with ``watermark``.
        The nodes have already dropped every sample forgotten up to ``watermark``."""
        raise NotImplementedError

    def evaluate(self, run: ServerRun, ledger: Ledger) -> dict[str, float]:
        """The served model's test accuracy and loss."""
        return evaluate_serving(run, ledger)

    def first_served(self, run: ServerRun, ledger: Ledger, serving: dict[str, Any]) -> None:
        """After training, what the method keeps of the first model it serves."""

    def finished(self, run: ServerRun, built: Built) -> None:
        """Once the run is recorded and served: delete what the rebuilt artifacts replaced."""


def drive(grid: Grid, cfg: RunConfig, server: MethodServer, strategy: Any) -> None:
    """Run ``cfg.action`` (train or retrain) of ``server``'s method on the nodes ``grid`` reaches; ``strategy``
    is the one started: its declaration (``strategy.method``: the message that makes a node forget, what a purge
    covers) and the hooks its rounds call (:mod:`fedforget.federation.round_engine`)."""
    method = strategy.method
    server_test = load_server_test(cfg)  # the server's own test set: never a client's row
    record_key = run_record_key(cfg)
    federation = register_nodes(grid, cfg, server.needs(), server_test.num_classes, record_key)
    if cfg.action == "retrain":
        run = open_server_run(cfg, federation, server_test)
        run.strategy = strategy
        _retrain(server, run, method)
        return
    server.check(federation, server_test.num_classes)
    run = prepare_server_run(cfg, federation, server_test, record_key)
    run.strategy = strategy
    _train(server, run, method)


def _train(server: MethodServer, run: ServerRun, method: Method) -> None:
    ledger = run.store.ledger()
    try:
        built = server.train(run, ledger)
        ledger.set_meta("unbuilt", {"artifacts": built.unbuilt, "partitions": sorted(built.excluded)})
        serving = ledger.refresh_serving()
        result = server.evaluate(run, ledger)
        server.first_served(run, ledger, serving)
        _finish(server, run, method, built, result, serving, {"action": "train"})
        log(INFO, "fedforget: store written to %s", run.store.root)
    finally:
        ledger.close()


def _retrain(server: MethodServer, run: ServerRun, method: Method) -> None:
    ledger = run.store.ledger()
    try:
        watermark = forget_before_retrain(server.grid, run, ledger, method.forget_message)
        crash_point("retrain:forget-sent")
        # a corrupt artifact is rebuilt like an invalid one (same inputs, so the same bytes come back)
        reusable = ledger.valid_artifacts() - corrupt_artifacts(run.store, ledger)
        built = server.retrain(run, ledger, watermark, reusable)
        ledger.set_meta("unbuilt", {"artifacts": built.unbuilt, "partitions": sorted(built.excluded)})
        crash_point("retrain:before-finish")
        serving = ledger.finish_retrain(watermark, built.rebuilt)
        result = server.evaluate(run, ledger)
        _finish(server, run, method, built, result, serving, {"action": "retrain", "watermark": watermark})
    finally:
        ledger.close()


def _finish(server: MethodServer, run: ServerRun, method: Method, built: Built, result: dict[str, float],
            serving: dict[str, Any], what: dict[str, Any]) -> None:
    if built.metrics is not None:
        run.store.append_metrics({"final": True, **what, "accuracy": result["accuracy"], "loss": result["loss"],
                                  **built.metrics, "served": serving["artifacts"]})
    if built.manifest:
        run.store.update_manifest(**built.manifest)
    server.finished(run, built)
    # what it built from data forgotten meanwhile
    purged = finish_pending_purges(run.store, method, int(what.get("watermark", 0)))
    if purged is not None and purged.files:
        log(INFO, "fedforget: purged %d file(s) built from data forgotten during this run", len(purged.files))
    log(INFO, "fedforget: %s; %s", built.summary or f"{server.cfg.method} done", served_line(result, serving))


def served_line(result: dict[str, float], serving: dict[str, Any]) -> str:
    """The closing line's account of what is served: its accuracy, or that nothing is (no valid artifact is
    left to serve: there is no accuracy to give, never a NaN)."""
    accuracy = result.get("accuracy")
    if not serving.get("available") or not isinstance(accuracy, int | float) or not math.isfinite(accuracy):
        return "nothing is served"
    return f"serving accuracy {accuracy:.4f}"
