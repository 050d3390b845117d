"""A node's view of a run without the heavy stack: its partition, state directory and slices.

Kept free of torch, peft and the task loaders so that the messages that need none of them (the
partition query, forgetting) start in a fresh ClientApp process for the price of flwr + numpy; the
task's data is loaded on first use only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flwr.app import Context, Message

from fedforget.core.config import RunConfig, parse_run_config
from fedforget.federation.control_messages import PartitionInfo
from fedforget.store.store import resolve_store_path
from fedforget.store.tombstones import load_tombstones
from fedforget.tasks.plan_memory import remembered_plan

if TYPE_CHECKING:
    from fedforget.tasks.base import Examples, TaskData


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


def describe(msg: Message, context: Context) -> Message:
    """Answer the server's discovery query with this node's partition."""
    pid, num = node_partition(context)
    return Message(PartitionInfo(pid, num).to_record(), reply_to=msg)


def dataset_key(cfg: RunConfig) -> str:
    return f"{cfg.task}:{cfg.hf.dataset}" if cfg.task == "hf" else cfg.task


def client_state_dir(context: Context, cfg: RunConfig, partition: int) -> Path:
    """Where a node keeps what outlives a run: ``--node-config state-dir=…`` on a SuperNode, else
    (simulation) ``<store>/clients/<partition>``."""
    configured = context.node_config.get("state-dir")
    if configured:
        return Path(str(configured))
    return resolve_store_path(cfg.store) / "clients" / str(partition)


@dataclass
class ClientSite:
    """One node's view: its partition, the run config, its state directory and (lazily) its data."""

    cfg: RunConfig
    partition: int
    num_partitions: int
    state_dir: Path

    @classmethod
    def from_context(cls, context: Context) -> ClientSite:
        partition, num_partitions = node_partition(context)
        cfg = parse_run_config(dict(context.run_config))
        return cls(cfg, partition, num_partitions, client_state_dir(context, cfg, partition))

    @property
    def data(self) -> TaskData:
        """The task's train pool and test split (loaded once per process, on first use)."""
        from fedforget.tasks.registry import load_task_data

        return load_task_data(self.cfg)

    @property
    def dataset_key(self) -> str:
        """Which data set this node's sample ids index (tombstones are kept per data set)."""
        return dataset_key(self.cfg)

    def held_slices(self) -> list[list[int]]:
        """This partition's slices of global sample ids, from the fixed plan (deleted ones included)."""
        return remembered_plan(self.cfg, self.num_partitions).slices[self.partition]

    def slice_ids(self, slices: list[int] | None = None) -> list[int]:
        """The ids of the slices named (all if ``None``) minus the deleted ones, sorted."""
        plan = self.held_slices()
        chosen = range(len(plan)) if slices is None else slices
        gone = load_tombstones(self.state_dir, self.dataset_key)
        return sorted(i for s in chosen for i in plan[s] if i not in gone)

    def slice_examples(self, slices: list[int] | None = None) -> Examples:
        """This partition's training examples, all slices or only the ones named, minus deleted ones.

        Slices come from the fixed plan first and deleted samples leave them afterwards, so a
        deletion never moves another sample into a different slice.
        """
        return self.data.train.by_ids(self.slice_ids(slices))
