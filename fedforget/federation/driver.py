"""One driver for every method's run, written once: register the nodes, prepare or open the store, train
or retrain, send the forget messages first (the purge list, the acknowledgements), rebuild corrupt
artifacts like invalid ones, record what stayed unbuilt, re-plan serving and evaluate it.

The method is the strategy started (a :class:`~fedforget.federation.method_strategy.MethodStrategy`
subclass in the method's folder): its own methods say only what it knows, the way Flower's
``Strategy.start`` calls a strategy's ``configure_*``/``aggregate_*``: what each node must report
(``needs``), what to refuse before the store exists (``check``), how to train (``train``), how to rebuild
what a forget invalidated (``retrain``), how to evaluate what it serves (``evaluate_served``), and, with
``evaluate-on-nodes``, how the nodes evaluate it (``configure_evaluate``/``aggregate_evaluate``).
"""

from __future__ import annotations

import math
from logging import INFO
from typing import Any, Protocol

from flwr.serverapp import Grid
from flwr.supercore import log

from fedforget.core.config import ConfigError, RunConfig
from fedforget.core.method import Method
from fedforget.federation.built import Built
from fedforget.federation.federated_evaluation import evaluate_on_nodes
from fedforget.federation.forget_messages import forget_before_retrain
from fedforget.federation.metrics_rows import federated_fields, training_rounds
from fedforget.federation.record_key import run_record_key
from fedforget.federation.registration import Federation, register_nodes
from fedforget.federation.run_setup import ServerRun, open_server_run, prepare_server_run
from fedforget.federation.starting_model import Arrays
from fedforget.store.check import corrupt_artifacts
from fedforget.store.crash import crash_point
from fedforget.store.ledger import Ledger
from fedforget.store.purge import finish_pending_purges
from fedforget.tasks.server_data import ServerTest, server_test_for
from fedforget.tasks.task_functions import metric_names


class MethodStrategy(Protocol):
    """What the driver reads of the strategy started
    (:class:`~fedforget.federation.method_strategy.MethodStrategy`, which imports this module's caller)."""

    method: Method
    #: it reads rows of the server's test set while it trains (a run without one is refused)
    needs_server_test_rows: bool

    def needs(self) -> tuple[str, ...]: ...

    def check(self, cfg: RunConfig, federation: Federation, num_classes: int) -> None: ...

    def train(self, grid: Grid, run: ServerRun, ledger: Ledger) -> Built: ...

    def retrain(self, grid: Grid, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built: ...

    def evaluate_served(self, run: ServerRun, ledger: Ledger) -> dict[str, float]: ...

    def first_served(self, run: ServerRun, ledger: Ledger, serving: dict[str, Any]) -> None: ...

    def finished(self, run: ServerRun, built: Built) -> None: ...

    def configure_evaluate(self, server_round: int, arrays: Any, config: Any, grid: Grid) -> Any: ...  # noqa: ANN401

    def aggregate_evaluate(self, server_round: int, replies: Any) -> Any: ...  # noqa: ANN401


def drive(grid: Grid, cfg: RunConfig, strategy: MethodStrategy, initial_arrays: Arrays | None = None) -> None:
    """Run ``cfg.action`` (train or retrain) of the strategy started on the nodes ``grid`` reaches: its own
    methods train and retrain, its declaration (``strategy.method``) names the message that makes a node forget
    and what a purge covers, and its rounds call its ``configure_train``/``aggregate_train``
    (:mod:`fedforget.federation.round_engine`). ``initial_arrays``: what ``start`` was handed to start from
    (:mod:`fedforget.federation.starting_model`)."""
    method = strategy.method
    server_test = server_test_for(cfg)  # the server's own test set: never a client's row
    _check_server_test(strategy, server_test)
    record_key = run_record_key(cfg)
    federation = register_nodes(grid, cfg, strategy.needs(), server_test.num_classes, record_key)
    if cfg.action == "retrain":
        run = open_server_run(cfg, federation, server_test, initial_arrays)
        run.strategy = strategy
        _retrain(grid, strategy, run, method)
        return
    strategy.check(cfg, federation, server_test.num_classes)
    run = prepare_server_run(cfg, federation, server_test, record_key, initial_arrays)
    run.strategy = strategy
    _train(grid, strategy, run, method)


def _check_server_test(strategy: MethodStrategy, server_test: ServerTest) -> None:
    """Refuse a method that reads the server's test rows while it trains when the server holds none."""
    if not len(server_test.examples) and strategy.needs_server_test_rows:
        raise ConfigError(f"{type(strategy).__name__} reads the server's test set while it trains, and this server "
                          "has none: set run-config test-data=<records dir>")


def _train(grid: Grid, strategy: MethodStrategy, run: ServerRun, method: Method) -> None:
    ledger = run.store.ledger()
    rows_before = len(run.store.metrics())
    try:
        built = strategy.train(grid, run, ledger)
        ledger.set_meta("unbuilt", {"artifacts": built.unbuilt, "partitions": sorted(built.excluded)})
        serving = ledger.refresh_serving()
        result = strategy.evaluate_served(run, ledger)
        federated = _on_nodes(grid, strategy, run, ledger, rows_before)
        strategy.first_served(run, ledger, serving)
        _finish(strategy, run, method, built, result, serving, {"action": "train"}, federated)
        log(INFO, "fedforget: store written to %s", run.store.root)
    finally:
        ledger.close()


def _retrain(grid: Grid, strategy: MethodStrategy, run: ServerRun, method: Method) -> None:
    ledger = run.store.ledger()
    rows_before = len(run.store.metrics())
    try:
        watermark = forget_before_retrain(grid, run, ledger, method.forget_message)
        crash_point("retrain:forget-sent")
        # a corrupt artifact is rebuilt like an invalid one (same inputs, so the same bytes come back)
        reusable = ledger.valid_artifacts() - corrupt_artifacts(run.store, ledger)
        built = strategy.retrain(grid, run, ledger, watermark, reusable)
        ledger.set_meta("unbuilt", {"artifacts": built.unbuilt, "partitions": sorted(built.excluded)})
        crash_point("retrain:before-finish")
        serving = ledger.finish_retrain(watermark, built.rebuilt)
        result = strategy.evaluate_served(run, ledger)
        federated = _on_nodes(grid, strategy, run, ledger, rows_before)
        _finish(strategy, run, method, built, result, serving, {"action": "retrain", "watermark": watermark},
                federated)
    finally:
        ledger.close()


def _on_nodes(grid: Grid, strategy: MethodStrategy, run: ServerRun, ledger: Ledger,
              rows_before: int) -> dict[str, Any] | None:
    """With ``evaluate-on-nodes``, the nodes' evaluation of what is served (under the run's last round number),
    kept in the ledger beside the server's for ``status``; else None."""
    if not run.cfg.evaluate_on_nodes:
        return None
    last = training_rounds(run.store.metrics()[rows_before:])
    federated = evaluate_on_nodes(grid, strategy, run, ledger, last)
    if federated is not None:
        ledger.set_meta("federated-accuracy", {"serving": sorted(ledger.serving().get("artifacts") or []),
                                               **federated_fields(federated)})
    return federated


def _finish(strategy: MethodStrategy, run: ServerRun, method: Method, built: Built, result: dict[str, float],
            serving: dict[str, Any], what: dict[str, Any], federated: dict[str, Any] | None = None) -> None:
    if built.metrics is not None or federated is not None:
        names = ("accuracy", "loss", *metric_names(run.store.manifest()))  # and the task's own metric's values
        measured = {k: result[k] for k in names if k in result} if len(run.test) else {}
        run.store.append_metrics({"final": True, **what, **measured, **(built.metrics or {}),
                                  **federated_fields(federated or {}), "served": serving["artifacts"]})
    if built.manifest:
        run.store.update_manifest(**built.manifest)
    strategy.finished(run, built)
    # what it built from data forgotten meanwhile
    purged = finish_pending_purges(run.store, method, int(what.get("watermark", 0)))
    if purged is not None and purged.files:
        log(INFO, "fedforget: purged %d file(s) built from data forgotten during this run", len(purged.files))
    log(INFO, "fedforget: %s; %s", built.summary or f"{run.cfg.method} done",
        served_line(result, serving, federated))


def served_line(result: dict[str, float], serving: dict[str, Any], federated: dict[str, Any] | None = None) -> str:
    """The closing line's account of what is served: its accuracy (the server's, and the nodes' when they
    evaluated it), or that nothing is (no valid artifact is left to serve: there is no accuracy to give, never
    a NaN)."""
    if not serving.get("available"):
        return "nothing is served"
    accuracy, on_nodes = _finite(result.get("accuracy")), _finite((federated or {}).get("accuracy"))
    parts = [] if accuracy is None else [f"serving accuracy {accuracy:.4f}"]
    if on_nodes is not None:
        parts.append(f"{'' if parts else 'serving accuracy '}{on_nodes:.4f} on the nodes' test records")
    return ", ".join(parts) or "serving; no test record measured it"


def _finite(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None
