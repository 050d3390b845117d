"""The nodes evaluate what is served (``evaluate-on-nodes``): once a train or retrain run is served, the server
sends every node one ``evaluate.served`` message (:mod:`fedforget.federation.evaluate_messages`) through the
strategy's ``configure_evaluate``, and the strategy's ``aggregate_evaluate`` turns the answers into one record,
by default the mean of their accuracy and loss (and of the task's own metric values) weighted by each node's test
records, in partition order.

The evaluation changes nothing that is served: a node that fails to answer only leaves the mean, and a
federation where none answers has no federated result (the run, already served, stands).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from logging import INFO, WARNING
from typing import TYPE_CHECKING, Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.supercore import log

from fedforget.federation.control_messages import MalformedMessage
from fedforget.federation.evaluate_messages import EvaluateResult, EvaluateServed, served_entries
from fedforget.federation.message_types import EVALUATE_SERVED

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from fedforget.federation.run_setup import ServerRun
    from fedforget.store.ledger import Ledger


@dataclass
class EvaluationInProgress:
    """What the default ``configure_evaluate`` returns while the driver evaluates what is served: one message per
    registered node, in partition order."""

    messages: list[Message]


def evaluate_messages(run: ServerRun, ledger: Ledger, server_round: int) -> list[Message]:
    """One ``evaluate.served`` message per node, in partition order, carrying what is served (none when nothing
    is)."""
    serving = ledger.serving()
    if not serving.get("available"):
        return []
    artifacts = served_entries(serving, ledger.artifacts())
    tensors = {a["sha256"]: run.store.get_arrays(a["sha256"]) for a in artifacts}
    content = EvaluateServed(ledger.plan() or {}, serving, artifacts, tensors, run.num_classes,
                             server_round).to_record()
    return [Message(content, dst_node_id=run.nodes[p], message_type=EVALUATE_SERVED) for p in sorted(run.nodes)]


def weighted_evaluation(replies: Iterable[Message]) -> MetricRecord | None:
    """The replies' accuracy and loss weighted by their test records, summed in partition order, with the records
    counted (``num-examples``) and the nodes that held some (``nodes``); None when no node held any. Each value of
    the task's own metric is weighted alike: the mean of the nodes' values, which for a metric that is not a mean
    over records (F1) is not the metric of their records pooled."""
    results = sorted((EvaluateResult.from_record(r.content) for r in replies if not r.has_error()),
                     key=lambda r: r.partition)
    counted = [r for r in results if r.examples > 0]
    total = sum(r.examples for r in counted)
    if not total:
        return None
    own = set.intersection(*(set(r.metrics) for r in counted))  # the task's metric: each node reports the same names
    return MetricRecord({"accuracy": sum(r.accuracy * r.examples for r in counted) / total,
                         "loss": sum(r.loss * r.examples for r in counted) / total,
                         **{k: sum(r.metrics[k] * r.examples for r in counted) / total for k in sorted(own)},
                         "num-examples": total, "nodes": len(counted)})


def check_evaluation(reply: Message, partition: int, max_examples: int, metric_names: Sequence[str] = ()) -> str | None:
    """Why a node's answer cannot be counted (None if it can): its own partition, finite accuracy in [0, 1] and
    loss, at most ``max_examples`` records, no tensors, and finite values of exactly the task's own metric's
    ``metric_names`` (the store's manifest lists them; none from a node that abstains)."""
    try:
        result = EvaluateResult.from_record(reply.content)
    except MalformedMessage as exc:
        return str(exc)
    if result.partition != partition:
        return f"reply claims partition {result.partition}, not {partition}"
    if not (math.isfinite(result.accuracy) and math.isfinite(result.loss) and 0.0 <= result.accuracy <= 1.0):
        return f"implausible accuracy {result.accuracy} or loss {result.loss}"
    expected = sorted(metric_names) if result.examples else []  # a node that abstains measures nothing
    if sorted(result.metrics) != expected:
        return f"reports metric values {sorted(result.metrics)}, the task's metric reports {expected}"
    if not all(math.isfinite(v) for v in result.metrics.values()):
        return f"a metric value that is not finite ({dict(result.metrics)})"
    if not 0 <= result.examples <= max_examples:
        return f"implausible num-examples {result.examples}"
    if reply.content.array_records:
        return "an evaluation carries no tensors"
    return None


def evaluate_on_nodes(grid: Grid, strategy: Any, run: ServerRun, ledger: Ledger,  # noqa: ANN401 - the strategy
                      server_round: int) -> dict[str, Any] | None:
    """The strategy's ``configure_evaluate`` sent to the nodes, their valid answers through its
    ``aggregate_evaluate``: its record as a dict, or None (nothing served, or no node evaluated anything)."""
    from fedforget.federation.failover import exchange_redo_or_exclude
    from fedforget.federation.messaging import NodeFailure

    messages = evaluate_messages(run, ledger, server_round)
    if not messages:
        return None
    sent = configured(strategy, grid, run, server_round, messages)
    partition_of = {node: p for p, node in run.nodes.items()}
    try:
        partitions = [partition_of[m.metadata.dst_node_id] for m in sent]
    except KeyError as exc:
        raise ValueError(f"{type(strategy).__name__}.configure_evaluate addressed node {exc.args[0]}, which "
                         "holds no partition of this run") from None
    from fedforget.tasks.task_functions import metric_names

    bound, names = run.cfg.max_records_per_node, metric_names(run.store.manifest())
    try:
        replies, lost = exchange_redo_or_exclude(
            grid, run.nodes, sent, partitions, run.cfg.round_timeout,
            lambda reply, i: check_evaluation(reply, partitions[i], bound, names))
    except NodeFailure as exc:  # what is served stands; only its evaluation on the nodes is missing
        log(WARNING, "fedforget: the nodes did not evaluate what is served: %s", exc)
        return None
    if lost:
        log(WARNING, "fedforget: partition(s) %s left out of the nodes' evaluation", sorted(lost))
    aggregated = strategy.aggregate_evaluate(server_round, [r for r in replies if r is not None])
    if aggregated is None:
        return None
    metrics = dict(aggregated)
    if isinstance(metrics.get("accuracy"), int | float):
        log(INFO, "fedforget: the nodes' evaluation of what is served: accuracy %.4f on %s test record(s)",
            metrics["accuracy"], metrics.get("num-examples", "?"))
    return metrics


def configured(strategy: Any, grid: Grid, run: ServerRun, server_round: int,  # noqa: ANN401 - the strategy
               messages: Sequence[Message]) -> list[Message]:
    """The messages ``strategy.configure_evaluate`` returns for this evaluation (the default: ``messages``). An
    override is handed what is served as Flower's ArrayRecord (:func:`served_arrays`)."""
    from fedforget.federation.served_arrays import served_arrays
    from fedforget.federation.strategy_hooks import overridden

    arrays = served_arrays(run.store) if overridden(strategy, "configure_evaluate") else ArrayRecord()
    strategy._evaluation = EvaluationInProgress(list(messages))
    try:
        return list(strategy.configure_evaluate(server_round, arrays, ConfigRecord({"server-round": server_round}),
                                                grid))
    finally:
        strategy._evaluation = None
