"""``fedavg``: Flower's FedAvg over LoRA + head on the round engine, deterministic, and the retrain-from-scratch
baseline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from logging import INFO

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords, validate_message_reply_consistency
from flwr.supercore import log

from fedforget.core.config import sample_clients
from fedforget.core.record_ids import LOCAL_RECORDS
from fedforget.core.seeds import derive_seed
from fedforget.core.weighted_mean import weighted_mean
from fedforget.federation.failover import check_reply, exchange_redo_or_exclude
from fedforget.federation.messaging import (
    PARTITION_KEY,
    RECEIVED,
    check_replies,
    record_bytes,
    to_numpy,
    to_record,
)
from fedforget.federation.round_engine import Arrays, Round, RoundResult, Send
from fedforget.federation.run_setup import DEFAULT_ADAPTER, ServerRun
from fedforget.training.supervised import evaluate

ARTIFACT = "fedavg/global"
#: fedavg's own message types (Flower's categories, fedavg's action)
TRAIN_MESSAGE = f"{MessageType.TRAIN}.fedavg"
EVALUATE_MESSAGE = f"{MessageType.EVALUATE}.fedavg"
#: the reply metric each reply's weight is read from (Flower's FedAvg ``weighted_by_key``)
WEIGHTED_BY = "num-examples"


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


class FedAvgRound(Round):
    """One round of Flower's FedAvg with the choices exactness needs.

    Partitions (not random node ids) are sampled, with a seed per round; replies are averaged in partition
    order at Flower's float32 arithmetic, every reply a term (one with zero examples weighs 0, as in Flower's
    FedAvg). A partition lost for good stops the training instead of being averaged around (the global model
    needs every partition: it stays unbuilt until ``retrain``).

    Client-side evaluation rides on the train messages: round r's clients evaluate the model they receive
    (round r-1's) before training on it, and only the last round's model gets evaluate messages of its own.
    A round is then one message per sampled node instead of two. Each round ends with the server's evaluation
    of the new model, one metrics row.
    """

    one_model = True
    needs_every_partition = True

    def __init__(self, grid: Grid, run: ServerRun) -> None:
        super().__init__(grid, run)
        self.server_run = run
        self.participants: set[int] = set()
        #: The partitions sampled this round: they alone evaluate it, so a round costs what is sampled.
        self.chosen: list[int] = sorted(run.nodes)
        #: What the clients reported in the last round, for metrics.jsonl.
        self.report: dict[str, object] = {}
        #: the train and evaluate messages' config, as Flower's ``start`` holds them across rounds
        self.train_config = ConfigRecord({"adapter": DEFAULT_ADAPTER})
        self.evaluate_config = ConfigRecord()

    def configure_train(self, server_round: int, states: Mapping[str, Arrays]) -> list[Send]:
        run, cfg = self.server_run, self.server_run.cfg
        chosen = sample_clients(sorted(run.nodes), cfg.fraction_train,
                                derive_seed(cfg.seed, "sample", ARTIFACT, server_round))
        self.participants.update(chosen)
        self.chosen = chosen
        arrays = to_record(states[ARTIFACT])
        config = self.train_config
        config["server-round"] = server_round
        config["artifact"] = ARTIFACT
        config["evaluate-received"] = True
        self.report = {"bytes-down": len(chosen) * record_bytes(arrays)}
        return self._sends(chosen, RecordDict({"arrays": arrays, "config": config}), TRAIN_MESSAGE)

    def _sends(self, partitions: list[int], record: RecordDict, message_type: str) -> list[Send]:
        """One message per partition, every one carrying the same record (as Flower's FedAvg builds them)."""
        sends = []
        for p in partitions:
            message = Message(content=record, message_type=message_type, dst_node_id=self.nodes[p])
            sends.append(Send(p, message, partial(_checked, self.server_run, p, message), ARTIFACT))
        return sends

    def aggregate_train(self, server_round: int, states: Mapping[str, Arrays], sends: Sequence[Send],
                        replies: Sequence[Message | None]) -> RoundResult:
        """The partition-order mean of every reply's tensors (Flower's float32 arithmetic) and Flower's weighted
        mean of the client metrics."""
        ordered = _ordered(replies, is_train=True)
        contents = [m.content for m in ordered]
        mean = weighted_mean([to_numpy(next(iter(c.array_records.values()))) for c in contents],
                             [next(iter(c.metric_records.values()))[WEIGHTED_BY] for c in contents],
                             keys=[int(c["metrics"][PARTITION_KEY]) for c in contents])
        metrics = _mean_metrics(contents, WEIGHTED_BY)
        self.report.update({
            "bytes-up": sum(record_bytes(r.content["arrays"]) for r in ordered),
            "train-loss": float((metrics or {}).get("train-loss", 0.0)),
            "trained": [int(r.content["metrics"][PARTITION_KEY]) for r in ordered],
            "train-examples": sum(int(r.content["metrics"]["num-examples"]) for r in ordered),
            **_received_evaluation(ordered),
        })
        state = {k: np.ascontiguousarray(v) for k, v in mean.items()}
        return RoundResult({ARTIFACT: state}, {ARTIFACT: sum(int(c["metrics"]["num-examples"]) for c in contents)},
                           [], list(replies), metrics=dict(metrics))

    def finish(self, server_round: int, result: RoundResult, sends: Sequence[Send], bytes_down: int,
               seconds: float) -> None:
        """The last round's model is evaluated by the clients that trained it; every round's by the server."""
        state = result.states[ARTIFACT]
        if server_round == self.server_run.cfg.num_rounds:
            self._evaluate_on_clients(server_round, state)
        result.row = self.evaluate(server_round, state)

    def _evaluate_on_clients(self, server_round: int, state: Arrays) -> None:
        config = self.evaluate_config
        config["server-round"] = server_round
        sends = self._sends(self.chosen, RecordDict({"arrays": to_record(state), "config": config}),
                            EVALUATE_MESSAGE)
        replies, _ = exchange_redo_or_exclude(  # a lost evaluation only leaves that partition out of the metrics
            self.grid, self.nodes, [s.message for s in sends], [s.partition for s in sends], self.timeout,
            lambda reply, i: sends[i].check(reply))
        ordered = _ordered(replies, is_train=False)
        metrics = _mean_metrics([r.content for r in ordered], WEIGHTED_BY) if ordered else None
        self.report["client-accuracy"] = float((metrics or {}).get("accuracy", 0.0))
        self.report["client-accuracies"] = {
            str(r.content["metrics"][PARTITION_KEY]): float(r.content["metrics"]["accuracy"]) for r in ordered
        }

    def evaluate(self, server_round: int, state: Arrays) -> dict[str, object]:
        """The server's evaluation of ``state`` on its own test set, appended as the round's metrics row."""
        run, cfg = self.server_run, self.server_run.cfg
        row: dict[str, object] = {"round": server_round, "num-rounds": cfg.num_rounds, "artifact": ARTIFACT,
                                  "action": cfg.action}
        if len(run.test):  # a server without a test set (the nodes evaluate what is served) measures nothing
            model = run.bundle.model
            model.load_trainable_state(DEFAULT_ADAPTER, {k: torch.from_numpy(np.array(v)) for k, v in state.items()})
            result = evaluate(model, run.test.inputs, run.test.targets)
            row.update(accuracy=result["accuracy"], loss=result["loss"])
            log(INFO, "round %d/%d: test accuracy %.4f, loss %.4f", server_round, cfg.num_rounds,
                result["accuracy"], result["loss"])
        if server_round > 0:
            row.update(self.report)
        run.store.append_metrics(row)
        return row


def _checked(run: ServerRun, partition: int, sent: Message, reply: Message) -> str | None:
    return check_fedavg_reply(run, reply, partition, sent)


def _ordered(replies: Sequence[Message | None], is_train: bool) -> list[Message]:
    """The valid replies in partition order, held to Flower's FedAvg reply rules (one ArrayRecord for a train
    reply, one MetricRecord with the examples)."""
    ordered = sorted((r for r in replies if r is not None), key=lambda r: int(r.content["metrics"][PARTITION_KEY]))
    check_replies(ordered)
    if ordered:
        validate_message_reply_consistency([m.content for m in ordered], WEIGHTED_BY, check_arrayrecord=is_train)
    return ordered


def check_fedavg_reply(run: ServerRun, reply: Message, partition: int, sent: Message) -> str | None:
    """A train reply carries the tensors sent back, trained on at most the partition's examples, and
    the received model's finite evaluation on at most the test split; an evaluate reply carries finite
    metrics and no tensors."""
    if sent.metadata.message_type == TRAIN_MESSAGE:
        why = check_reply(reply, partition, sent=to_numpy(sent.content["arrays"]),
                          max_examples=len(run.plan.partition_ids(partition)),
                          numbers=("train-loss", f"{RECEIVED}accuracy", f"{RECEIVED}loss", f"{RECEIVED}examples"))
        if why is None and not 0 <= int(reply.content["metrics"][f"{RECEIVED}examples"]) <= _test_bound(run, partition):
            return f"implausible {RECEIVED}examples"
        return why
    return check_reply(reply, partition, numbers=("accuracy", "loss"), max_bytes=0)


def _test_bound(run: ServerRun, partition: int) -> int:
    """The most test records a node may evaluate: its share of the public test split is at most the server's copy
    of it; a node's own test records are bounded like its training records."""
    if run.federation.records.get(partition) == LOCAL_RECORDS:
        return run.cfg.max_records_per_node
    return len(run.test)


def train_global(grid: Grid, run: ServerRun) -> tuple[str, set[int]]:
    """``num-rounds`` rounds of :class:`FedAvgRound` from the run's initial model (the seeded one, or the
    initial arrays the store recorded), the server evaluating it first; the stored global model and the
    partitions it saw."""
    rnd = FedAvgRound(grid, run)
    state = {k: np.array(v.detach().numpy(), copy=True) for k, v in run.initial_state.items()}
    rnd.evaluate(0, state)
    for server_round in range(1, run.cfg.num_rounds + 1):
        state = rnd.run(server_round, {ARTIFACT: state}).states[ARTIFACT]
    final = {k: np.ascontiguousarray(v) for k, v in state.items()}
    sha = run.store.put_arrays(final, {"artifact": ARTIFACT, "method": run.cfg.method, "task": run.cfg.task})
    return sha, rnd.participants
