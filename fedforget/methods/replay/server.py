"""Replay's server: a Flower strategy's rounds on the round engine, each one a checkpoint in the store.

The wrapper keeps what exactness needs and leaves the rest to the strategy: the nodes of a round are
partitions drawn with a seed per round (Flower draws node ids, which change every run), the strategy's
``configure_train`` builds their messages and its ``aggregate_train`` averages the replies in partition
order. After each round the global model, and the strategy's server state when it has one, are recorded
with the partitions trained so far as their lineage, so a forget invalidates exactly the rounds from the
first one that saw the data; a retrain restores the last valid round and replays the rest."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import log

import fedforget.methods.replay.flower_strategies as flower_strategies
from fedforget.core.config import ConfigError, RunConfig, sample_clients
from fedforget.core.seeds import derive_seed
from fedforget.federation.failover import check_reply
from fedforget.federation.messaging import PARTITION_KEY, record_bytes, to_numpy
from fedforget.federation.round_engine import Arrays, Round, RoundResult, Send
from fedforget.federation.run_setup import DEFAULT_ADAPTER, ServerRun
from fedforget.federation.units import all_units
from fedforget.methods.replay.plan import round_artifact, state_artifact
from fedforget.store.ledger import Ledger
from fedforget.training.supervised import evaluate

MESSAGE = "train.replay"
#: what seeds the nodes' data order: one name for every round's model, as fedavg's
SEED_ARTIFACT = "replay/global"


class _Sampled:
    """The Grid a strategy's ``configure_train`` sees: the round's drawn nodes, all of them available."""

    def __init__(self, node_ids: list[int]) -> None:
        self.node_ids = node_ids

    def get_node_ids(self) -> list[int]:
        return list(self.node_ids)


class ReplayRound(Round):
    """One round of a Flower strategy on the round engine: the strategy's own ``configure_train`` builds the
    drawn partitions' messages (as replay's message type) and its ``aggregate_train`` makes the round's model
    from the replies in partition order (its server step included); the model keeps its dtypes. A partition
    lost for good stops the replay there (every later round needs the one global model)."""

    one_model = True
    needs_every_partition = True

    def __init__(self, grid: Grid, run: ServerRun, flower: FedAvg,
                 sampled: Callable[[ServerRun, int], list[int]]) -> None:
        super().__init__(grid, run)
        self.server_run, self.flower, self.sampled = run, flower, sampled
        self.chosen: list[int] = []
        #: the round's messages as sent, its replies in partition order and the strategy's metrics (its row's)
        self.sent: list[Message] = []
        self.replies: list[Message] = []
        self.metrics: dict[str, Any] = {}

    def configure_train(self, server_round: int, states: Mapping[str, Arrays]) -> list[Send]:
        run, strategy = self.server_run, self.flower
        self.chosen = chosen = self.sampled(run, server_round)
        keep = strategy.fraction_train, strategy.min_train_nodes, strategy.min_available_nodes
        strategy.fraction_train, strategy.min_train_nodes, strategy.min_available_nodes = 1.0, len(chosen), 0
        try:
            config = ConfigRecord({"adapter": DEFAULT_ADAPTER, "artifact": SEED_ARTIFACT})
            record = ArrayRecord({k: Array(v) for k, v in states[SEED_ARTIFACT].items()})
            made = list(strategy.configure_train(server_round, record, config,
                                                 _Sampled([run.nodes[p] for p in chosen])))
        finally:
            strategy.fraction_train, strategy.min_train_nodes, strategy.min_available_nodes = keep
        drawn = sorted(run.nodes[p] for p in chosen)
        if sorted(m.metadata.dst_node_id for m in made) != drawn:
            raise ConfigError(f"{type(strategy).__name__}.configure_train sent round {server_round} to other nodes "
                              "than the round's drawn partitions; fedforget draws them with a seed (fraction-train) "
                              "and a replay draws the same, so send one message to each node of the grid it hands")
        partition_of = {n: p for p, n in run.nodes.items()}
        sends = []
        for m in made:
            message = Message(m.content, dst_node_id=m.metadata.dst_node_id, message_type=MESSAGE)
            p = partition_of[m.metadata.dst_node_id]
            sends.append(Send(p, message, partial(self._valid, p, message), SEED_ARTIFACT))
        return sends

    def _valid(self, partition: int, sent: Message, reply: Message) -> str | None:
        return check_reply(reply, partition, sent=to_numpy(sent.content["arrays"]),
                           max_examples=len(self.server_run.plan.partition_ids(partition)))

    def aggregate_train(self, server_round: int, states: Mapping[str, Arrays], sends: Sequence[Send],
                        replies: Sequence[Message | None]) -> RoundResult:
        ordered = sorted((r for r in replies if r is not None), key=lambda r: int(r.content["metrics"][PARTITION_KEY]))
        aggregated, metrics = self.flower.aggregate_train(server_round, ordered)
        state = states[SEED_ARTIFACT]
        if aggregated is not None:  # the model keeps its dtypes (a float64 server step is rounded back)
            state = {k: np.ascontiguousarray(v.numpy(), dtype=state[k].dtype) for k, v in aggregated.items()}
        self.replies, self.metrics = ordered, dict(metrics or {})
        return RoundResult({SEED_ARTIFACT: state}, {}, [], list(replies), metrics=self.metrics)

    def finish(self, server_round: int, result: RoundResult, sends: Sequence[Send], bytes_down: int,
               seconds: float) -> None:
        """The round's checkpoint and row are the server's (after the hook: what the round goes on from)."""
        self.sent = [s.message for s in sends]


def sampled(run: ServerRun, server_round: int) -> list[int]:
    """The partitions drawn for ``server_round``: seeded per round, so a replay draws the same ones."""
    cfg = run.cfg
    return sample_clients(sorted(run.nodes), cfg.fraction_train,
                          derive_seed(cfg.seed, "sample", SEED_ARTIFACT, server_round))


def forgotten_meanwhile(cfg: RunConfig, ledger: Ledger, resume: int) -> bool:
    """Whether a request applied since this run chose where to resume invalidated that round (and its purge
    took the files): every round replayed from it would be stale."""
    valid = ledger.valid_artifacts()
    return any(a not in valid for a in round_artifacts(resume, cfg.replay.strategy))


def round_artifacts(server_round: int, name: str) -> list[str]:
    """The artifacts one round records: its model, and the strategy's server state when it has one."""
    return [round_artifact(server_round)] + ([state_artifact(server_round)] if flower_strategies.STATE[name]
                                             else [])


def checkpoint(run: ServerRun, ledger: Ledger, strategy: FedAvg, server_round: int, arrays: dict[str, np.ndarray],
               seen: list[int], watermark: int) -> list[str]:
    """Record the round's model (and the strategy's state) with every partition trained so far as lineage."""
    cfg = run.cfg
    name, lineage = cfg.replay.strategy, all_units(run, seen)
    meta = {"round": server_round, "strategy": name, "adapter": DEFAULT_ADAPTER, "slot": DEFAULT_ADAPTER}
    sha = run.store.put_arrays(arrays, {"artifact": round_artifact(server_round), "method": cfg.method,
                                        "task": cfg.task})
    ledger.record_artifact(round_artifact(server_round), sha, "lora+head", lineage, watermark, meta)
    written = [round_artifact(server_round)]
    if flower_strategies.STATE[name]:
        state = flower_strategies.state_arrays(strategy, name)
        sha = run.store.put_arrays(state, {"artifact": state_artifact(server_round), "method": cfg.method})
        ledger.record_artifact(state_artifact(server_round), sha, "strategy-state", lineage, watermark,
                               {"round": server_round, "strategy": name})
        written.append(state_artifact(server_round))
    return written


def restore(run: ServerRun, ledger: Ledger, strategy: FedAvg, resume: int,
            initial: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model of round ``resume`` (and the strategy's state then), to replay the rounds after it."""
    shas = {a["artifact"]: a["sha256"] for a in ledger.artifacts()}
    stored = run.store.get_arrays(shas[round_artifact(resume)])
    name = run.cfg.replay.strategy
    if flower_strategies.STATE[name]:
        flower_strategies.restore_state(strategy, name, run.store.get_arrays(shas[state_artifact(resume)]))
    return {k: np.array(stored[k], copy=True) for k in initial}  # the model's order, as the first round sent


def report(run: ServerRun, server_round: int, arrays: dict[str, np.ndarray], rnd: ReplayRound) -> None:
    """The round's metrics row: the server's test accuracy of its model, what it sent and received."""
    cfg, model = run.cfg, run.bundle.model
    measured: dict[str, float] = {}
    if len(run.test):  # a server without a test set (the nodes evaluate what is served) measures nothing
        model.load_trainable_state(DEFAULT_ADAPTER, {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()})
        result = evaluate(model, run.test.inputs, run.test.targets)
        measured = {"accuracy": result["accuracy"], "loss": result["loss"]}
        log(INFO, "round %d/%d: test accuracy %.4f, loss %.4f", server_round, cfg.num_rounds,
            result["accuracy"], result["loss"])
    run.store.append_metrics({
        "round": server_round, "num-rounds": cfg.num_rounds, **measured,
        "artifact": round_artifact(server_round), "action": cfg.action,
        "trained": rnd.chosen, "bytes-down": sum(record_bytes(m.content["arrays"]) for m in rnd.sent),
        "bytes-up": sum(record_bytes(r.content["arrays"]) for r in rnd.replies),
        "train-loss": float((rnd.metrics or {}).get("train-loss", 0.0)),
        "train-examples": sum(int(r.content["metrics"]["num-examples"]) for r in rnd.replies),
    })
