"""The client side of the methods: what a node does with a message, given its partition's data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from fedforget.core.config import RunConfig, parse_run_config
from fedforget.core.seeds import derive_seed
from fedforget.store.store import resolve_store_path
from fedforget.store.tombstones import load_tombstones
from fedforget.strategies.messaging import PARTITION_KEY, to_numpy
from fedforget.strategies.run_setup import build_model, local_test_share
from fedforget.tasks.base import Examples, TaskData
from fedforget.tasks.registry import load_task_data, partition_plan
from fedforget.training.supervised import TrainSettings, evaluate, train_supervised


def node_partition(context: Context) -> tuple[int, int]:
    """This node's ``(partition-id, num-partitions)``, from the simulation engine or ``--node-config``."""
    try:
        partition = int(context.node_config["partition-id"])
        num_partitions = int(context.node_config["num-partitions"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            "this SuperNode has no partition: start it with --node-config 'partition-id=I num-partitions=N'"
        ) from None
    if not 0 <= partition < num_partitions:
        raise ValueError(f"partition-id {partition} is outside 0..{num_partitions - 1}")
    return partition, num_partitions


@dataclass
class ClientSite:
    """One node's view: its partition, the run config and its data."""

    cfg: RunConfig
    partition: int
    num_partitions: int
    data: TaskData
    state_dir: Path

    @classmethod
    def from_context(cls, context: Context) -> ClientSite:
        partition, num_partitions = node_partition(context)
        cfg = parse_run_config(dict(context.run_config))
        return cls(cfg, partition, num_partitions, load_task_data(cfg), client_state_dir(context, cfg, partition))

    @property
    def dataset_key(self) -> str:
        """Which data set this node's sample ids index (tombstones are kept per data set)."""
        return dataset_key(self.cfg)

    def slice_examples(self, slices: list[int] | None = None) -> Examples:
        """This partition's training examples, all slices or only the ones named, minus deleted ones.

        Slices come from the fixed plan first and deleted samples leave them afterwards, so a
        deletion never moves another sample into a different slice.
        """
        plan = partition_plan(self.cfg, self.num_partitions).slices[self.partition]
        chosen = range(len(plan)) if slices is None else slices
        gone = load_tombstones(self.state_dir, self.dataset_key)
        ids = sorted(i for s in chosen for i in plan[s] if i not in gone)
        return self.data.train.by_ids(ids)


def dataset_key(cfg: RunConfig) -> str:
    return f"{cfg.task}:{cfg.hf_dataset}" if cfg.task == "hf" else cfg.task


def client_state_dir(context: Context, cfg: RunConfig, partition: int) -> Path:
    """Where a node keeps what outlives a run: ``--node-config state-dir=…`` on a SuperNode, else
    (simulation) ``<store>/clients/<partition>`` (DESIGN §6)."""
    configured = context.node_config.get("state-dir")
    if configured:
        return Path(str(configured))
    return resolve_store_path(cfg.store) / "clients" / str(partition)


def _tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v.copy()) for k, v in to_numpy(record).items()}


def describe(msg: Message, context: Context) -> Message:
    """Answer the server's discovery query with this node's partition."""
    pid, num = node_partition(context)
    return Message(RecordDict({"info": ConfigRecord({PARTITION_KEY: pid, "num-partitions": num})}), reply_to=msg)


def train_adapter(msg: Message, context: Context) -> Message:
    """Load the received adapter + head, train it on this partition's data, send it back."""
    site = ClientSite.from_context(context)
    config = msg.content["config"]
    adapter = str(config.get("adapter", "default"))
    artifact = str(config.get("artifact", "global"))
    server_round = int(config.get("server-round", 0))
    slices = [int(s) for s in config["slices"]] if "slices" in config else None
    examples = site.slice_examples(slices)
    model = build_model(site.cfg, site.data.num_classes).model
    model.activate([adapter], trainable=[] if site.cfg.head_only else [adapter])  # head-only: a linear probe
    model.load_trainable_state(adapter, _tensors(msg.content["arrays"]))
    cfg = site.cfg
    settings = TrainSettings(
        epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr, optimizer=cfg.optimizer,
        seed=derive_seed(cfg.seed, cfg.method, artifact, server_round, site.partition, "train-order"),
    )
    result = train_supervised(model, examples.inputs, examples.labels, settings)
    metrics = MetricRecord({"num-examples": result.num_examples, "train-loss": result.mean_loss,
                            PARTITION_KEY: site.partition})
    return Message(RecordDict({"arrays": ArrayRecord(model.trainable_state(adapter)), "metrics": metrics}),
                   reply_to=msg)


def evaluate_adapter(msg: Message, context: Context) -> Message:
    """Evaluate the received adapter + head on this client's share of the test split."""
    site = ClientSite.from_context(context)
    adapter = str(msg.content["config"].get("adapter", "default"))
    model = build_model(site.cfg, site.data.num_classes).model
    model.activate([adapter], trainable=[adapter])
    model.load_trainable_state(adapter, _tensors(msg.content["arrays"]))
    share = local_test_share(site.data, site.partition, site.num_partitions, site.cfg.seed)
    result = evaluate(model, share.inputs, share.labels)
    metrics = MetricRecord({"num-examples": int(result["num-examples"]), "accuracy": result["accuracy"],
                            "loss": result["loss"], PARTITION_KEY: site.partition})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
