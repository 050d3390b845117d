"""``fedavg``: Flower's FedAvg over LoRA + head, deterministic, and the retrain-from-scratch baseline."""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords
from flwr.supercore import log

from fedforget.core.config import RunConfig, sample_clients
from fedforget.core.method import Method
from fedforget.core.seeds import derive_seed
from fedforget.core.weighted_mean import weighted_mean
from fedforget.federation.driver import Built, MethodServer, drive
from fedforget.federation.failover import PartitionsExcluded, PolicyGrid, check_reply
from fedforget.federation.messaging import (
    PARTITION_KEY,
    RECEIVED,
    NodeFailure,
    ReliableGrid,
    check_replies,
    record_bytes,
    to_numpy,
)
from fedforget.federation.round_hooks import aggregate_through_strategy, configure_through_strategy
from fedforget.federation.run_setup import DEFAULT_ADAPTER, ServerRun
from fedforget.federation.units import all_units
from fedforget.store.ledger import Ledger
from fedforget.training.supervised import evaluate

ARTIFACT = "fedavg/global"
#: fedavg's own message types (Flower's categories, fedavg's action)
TRAIN_MESSAGE = f"{MessageType.TRAIN}.fedavg"
EVALUATE_MESSAGE = f"{MessageType.EVALUATE}.fedavg"


def _mean_metrics(records: list[RecordDict], weighting_key: str) -> MetricRecord:
    """Flower's weighted mean of client metrics, without the partition id (not a quantity) and without
    the received model's evaluation (weighted by test examples instead, in ``_received_evaluation``). Clients
    that evaluated nothing (nodes whose own data has no test split) weigh nothing; with none left, nothing."""
    records = [r for r in records if any(float(m.get(weighting_key, 0)) > 0 for m in r.metric_records.values())]
    if not records:
        return MetricRecord()
    merged = aggregate_metricrecords(records, weighting_key)
    for key in [PARTITION_KEY, *(k for k in merged if k.startswith(RECEIVED))]:
        merged.pop(key, None)
    return merged


def _received_evaluation(replies: list[Message]) -> dict[str, object]:
    """The sampled clients' accuracy on the model they received, as the evaluate round would report it:
    the mean weighted by each client's test examples, and each partition's own."""
    metrics = [r.content["metrics"] for r in replies if f"{RECEIVED}accuracy" in r.content["metrics"]]
    total = sum(int(m[f"{RECEIVED}examples"]) for m in metrics)
    if not total:
        return {}
    return {
        "received-accuracy": sum(float(m[f"{RECEIVED}accuracy"]) * int(m[f"{RECEIVED}examples"]) for m in metrics)
        / total,
        "received-accuracies": {str(m[PARTITION_KEY]): float(m[f"{RECEIVED}accuracy"]) for m in metrics},
    }


class PartitionFedAvg(FedAvg):
    """Flower's FedAvg with the choices exactness needs.

    Partitions (not random node ids) are sampled, with a seed per round; replies are aggregated in
    partition order. The Grid it runs on (:class:`PolicyGrid`) redoes lost or failed messages and
    checks every reply; a partition lost for good stops the training instead of being averaged
    around (the global model needs every partition: it stays unbuilt until ``retrain``).

    Client-side evaluation rides on the train messages: round r's clients evaluate the model they
    receive (round r-1's) before training on it, and only the last round's model gets evaluate
    messages of its own. A round is then one message per sampled node instead of two.
    """

    def __init__(self, nodes: dict[int, int], train_partitions: list[int], fraction_train: float,
                 seed: int, artifact: str, num_rounds: int) -> None:
        super().__init__(fraction_train=fraction_train, fraction_evaluate=1.0, min_train_nodes=1,
                         min_evaluate_nodes=1, min_available_nodes=len(nodes),
                         train_metrics_aggr_fn=_mean_metrics, evaluate_metrics_aggr_fn=_mean_metrics)
        self.nodes = nodes
        self.train_partitions = sorted(train_partitions)
        self.seed = seed
        self.artifact = artifact
        self.num_rounds = num_rounds
        self.participants: set[int] = set()
        #: The partitions sampled this round: they alone evaluate it, so a round costs what is sampled.
        self.chosen: list[int] = sorted(nodes)
        #: What the clients reported in the last round, for metrics.jsonl.
        self.round_report: dict[str, object] = {}
        self._expected = 0
        self._expected_type = TRAIN_MESSAGE

    def _messages(self, partitions: list[int], arrays: ArrayRecord, config: ConfigRecord,
                  message_type: str) -> list[Message]:
        self._expected, self._expected_type = len(partitions), message_type
        return list(self._construct_messages(RecordDict({"arrays": arrays, "config": config}),
                                             [self.nodes[p] for p in partitions], message_type))

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        chosen = sample_clients(self.train_partitions, self.fraction_train,
                                derive_seed(self.seed, "sample", self.artifact, server_round))
        self.participants.update(chosen)
        self.chosen = chosen
        config["server-round"] = server_round
        config["artifact"] = self.artifact
        config["evaluate-received"] = True
        self.round_report = {"bytes-down": len(chosen) * record_bytes(arrays)}
        messages = self._messages(chosen, arrays, config, TRAIN_MESSAGE)
        return configure_through_strategy(server_round, messages, arrays, grid)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if server_round < self.num_rounds:  # the next round's train messages evaluate this model
            return []
        config["server-round"] = server_round
        return self._messages(self.chosen, arrays, config, EVALUATE_MESSAGE)

    def _sorted_complete(self, replies: Iterable[Message]) -> list[Message]:
        replies = list(replies)
        check_replies(replies)
        if len(replies) != self._expected and self._expected_type == TRAIN_MESSAGE:
            raise NodeFailure(f"{self._expected - len(replies)} node(s) did not reply before the round timeout")
        return sorted(replies, key=lambda r: int(r.content["metrics"][PARTITION_KEY]))

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):  # noqa: ANN201
        """Flower's ``FedAvg.aggregate_train`` (its reply checks and log, the weighted mean of the metrics)
        with the arrays averaged by :func:`fedforget.core.weighted_mean.weighted_mean` in partition order
        (Flower's float32 arithmetic)."""
        ordered = self._sorted_complete(replies)
        arrays, metrics = None, None
        valid, _ = self._check_and_log_replies(ordered, is_train=True)
        if valid:
            contents = [m.content for m in valid]
            mean = weighted_mean([to_numpy(next(iter(c.array_records.values()))) for c in contents],
                                 [next(iter(c.metric_records.values()))[self.weighted_by_key] for c in contents],
                                 keys=[int(c["metrics"][PARTITION_KEY]) for c in contents])
            arrays = ArrayRecord({k: Array(v) for k, v in mean.items()})
            metrics = self.train_metrics_aggr_fn(contents, self.weighted_by_key)
            arrays = aggregate_through_strategy(server_round, ordered, arrays, dict(metrics)) or arrays
        self.round_report.update({
            "bytes-up": sum(record_bytes(r.content["arrays"]) for r in ordered),
            "train-loss": float((metrics or {}).get("train-loss", 0.0)),
            "trained": [int(r.content["metrics"][PARTITION_KEY]) for r in ordered],
            "train-examples": sum(int(r.content["metrics"]["num-examples"]) for r in ordered),
            **_received_evaluation(ordered),
        })
        return arrays, metrics

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        if server_round < self.num_rounds:  # nothing was sent (see configure_evaluate)
            return None
        ordered = self._sorted_complete(replies)
        metrics = super().aggregate_evaluate(server_round, ordered)
        self.round_report["client-accuracy"] = float((metrics or {}).get("accuracy", 0.0))
        self.round_report["client-accuracies"] = {
            str(r.content["metrics"][PARTITION_KEY]): float(r.content["metrics"]["accuracy"]) for r in ordered
        }
        return metrics


def run_fedavg(grid: Grid, cfg: RunConfig, method: Method) -> None:
    """Train one global LoRA adapter + head with FedAvg, evaluate every round, store the result.

    ``action='retrain'`` is the retrain-from-scratch baseline: clients first delete the forgotten
    samples for good, then the whole training runs again on what remains.
    """
    drive(grid, cfg, FedAvgServer(grid, cfg), method)


class FedAvgServer(MethodServer):
    """One artifact trained on every partition: a forget invalidates it, a retrain trains it again."""

    def train(self, run: ServerRun, ledger: Ledger) -> Built:
        ledger.load_samples(run.plan.slices)
        ledger.set_plan({"kind": "single", "artifact": ARTIFACT})
        return self._build(run, ledger, watermark=0)

    def retrain(self, run: ServerRun, ledger: Ledger, watermark: int, reusable: set[str]) -> Built:
        return self._build(run, ledger, watermark)

    def _build(self, run: ServerRun, ledger: Ledger, watermark: int) -> Built:
        cfg = self.cfg
        try:
            sha, participants = _train(self.grid, run)
        except PartitionsExcluded as lost:  # the global model needs every partition: it stays unbuilt
            log(WARNING, "fedforget: %s stays unbuilt: partition(s) %s were lost; run `fedforget retrain` "
                "when they are back", ARTIFACT, sorted(lost.partitions))
            return Built([], [ARTIFACT], set(lost.partitions), manifest={"rounds-done": cfg.num_rounds},
                         summary=f"{ARTIFACT} unbuilt")
        ledger.record_artifact(ARTIFACT, sha, "lora+head", all_units(run, participants), watermark,
                               {"adapter": DEFAULT_ADAPTER, "rounds": cfg.num_rounds, "slot": DEFAULT_ADAPTER})
        return Built([ARTIFACT], manifest={"rounds-done": cfg.num_rounds},
                     summary=f"fedavg trained {ARTIFACT} (sha256 {sha})")


def check_fedavg_reply(run: ServerRun, reply: Message, partition: int, sent: Message) -> str | None:
    """A train reply carries the tensors sent back, trained on at most the partition's examples, and
    the received model's finite evaluation on at most the test split; an evaluate reply carries finite
    metrics and no tensors."""
    if sent.metadata.message_type == TRAIN_MESSAGE:
        why = check_reply(reply, partition, sent=to_numpy(sent.content["arrays"]),
                          max_examples=len(run.plan.partition_ids(partition)),
                          numbers=("train-loss", f"{RECEIVED}accuracy", f"{RECEIVED}loss", f"{RECEIVED}examples"))
        if why is None and not 0 <= int(reply.content["metrics"][f"{RECEIVED}examples"]) <= len(run.test):
            return f"implausible {RECEIVED}examples"
        return why
    return check_reply(reply, partition, numbers=("accuracy", "loss"), max_bytes=0)


def _train(grid: Grid, run: ServerRun) -> tuple[str, set[int]]:
    cfg = run.cfg
    model = run.bundle.model
    strategy = PartitionFedAvg(run.nodes, sorted(run.nodes), cfg.fraction_train, cfg.seed, ARTIFACT, cfg.num_rounds)

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_trainable_state(DEFAULT_ADAPTER, {k: torch.from_numpy(v) for k, v in to_numpy(arrays).items()})
        result = evaluate(model, run.test.inputs, run.test.labels)
        row = {"round": server_round, "num-rounds": cfg.num_rounds, "accuracy": result["accuracy"],
               "loss": result["loss"], "artifact": ARTIFACT, "action": cfg.action}
        if server_round > 0:
            row.update(strategy.round_report)
        run.store.append_metrics(row)
        log(INFO, "round %d/%d: test accuracy %.4f, loss %.4f", server_round, cfg.num_rounds,
            result["accuracy"], result["loss"])
        return MetricRecord({"accuracy": result["accuracy"], "loss": result["loss"]})

    initial = ArrayRecord(run.bundle.initial_state)
    policy = PolicyGrid(grid.inner if isinstance(grid, ReliableGrid) else grid, run.nodes,
                        lambda reply, partition, sent: check_fedavg_reply(run, reply, partition, sent))
    result = strategy.start(policy, initial, num_rounds=cfg.num_rounds, timeout=cfg.round_timeout,
                            train_config=ConfigRecord({"adapter": DEFAULT_ADAPTER}), evaluate_fn=evaluate_fn)
    final = {k: np.ascontiguousarray(v) for k, v in to_numpy(result.arrays).items()}
    sha = run.store.put_arrays(final, {"artifact": ARTIFACT, "method": cfg.method, "task": cfg.task})
    return sha, strategy.participants
