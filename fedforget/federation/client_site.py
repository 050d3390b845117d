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

from fedforget.core.config import RunConfig, is_user_task, parse_run_config
from fedforget.core.record_ids import LOCAL_RECORDS, PUBLIC_RECORDS, check_node_name, default_node_name
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


def simulated_data_dir(cfg: RunConfig, partition: int) -> Path | None:
    """The records directory of a node whose node config names none: the run config's ``node-data``, else a user
    task's ``Task(simulation_data=...)``; None: the node trains on its share of the task's public set."""
    template = cfg.node_data
    if not template and is_user_task(cfg.task):
        from fedforget.tasks.registry import get_task

        template = get_task(cfg.task).simulation_data
    return resolve_store_path(template.replace("{partition}", str(partition))) if template else None


def dataset_key(cfg: RunConfig) -> str:
    return f"{cfg.task}:{cfg.hf.dataset}" if cfg.task == "hf" else cfg.task


#: Where ``fedforget verify --federation`` puts its reference run's store, inside the store it verifies.
VERIFY_SCRATCH = "verify-scratch"


def client_state_dir(context: Context, cfg: RunConfig, partition: int) -> Path:
    """Where a node keeps what outlives a run: ``--node-config state-dir=…`` on a SuperNode, else
    (simulation) ``<store>/clients/<partition>``."""
    configured = context.node_config.get("state-dir")
    if configured:
        return Path(str(configured))
    store = resolve_store_path(cfg.store)
    if cfg.reference and store.parent.name == VERIFY_SCRATCH:  # `verify --federation`'s reference, simulated:
        store = store.parent.parent  # its nodes read what they registered and deleted, as a SuperNode does
    return store / "clients" / str(partition)


@dataclass
class ClientSite:
    """One node's view: its partition, name, the run config, its state directory and (lazily) its own data.

    Its data is either its own records (``--node-config data-dir=…``, :mod:`fedforget.tasks.local_records`)
    or, for the shipped tasks, its partition of the public set, drawn on the node the way flwr-datasets
    partitioners draw it. Either way :attr:`data` holds this node's training rows and no other node's.
    """

    cfg: RunConfig
    partition: int
    num_partitions: int
    state_dir: Path
    name: str = ""
    data_dir: Path | None = None
    #: the store's record key as the registration query hands it ("" = unkeyed); None: the one registered
    given_key: str | None = None

    @classmethod
    def from_context(cls, context: Context) -> ClientSite:
        partition, num_partitions = node_partition(context)
        cfg = parse_run_config(dict(context.run_config))
        name = check_node_name(str(context.node_config.get("node-name") or default_node_name(partition)))
        configured = context.node_config.get("data-dir") or simulated_data_dir(cfg, partition)
        data_dir = Path(str(configured)) if configured else None
        return cls(cfg, partition, num_partitions, client_state_dir(context, cfg, partition), name, data_dir)

    @property
    def records_kind(self) -> str:
        """How this node's records map to sample ids: the public set's row numbers, or hashes of its own ids."""
        return LOCAL_RECORDS if self.data_dir is not None else PUBLIC_RECORDS

    @property
    def record_key(self) -> str | None:
        """The key of this node's own records' sample ids (None: unkeyed, or public rows): the registration
        query's, else the one it registered for training."""
        if self.data_dir is None:
            return None
        if self.given_key is None:  # read once: the registration file holds every record's digest
            from fedforget.federation.node_data import registered_key

            self.given_key = registered_key(self) or ""
        return self.given_key or None

    @property
    def data(self) -> TaskData:
        """This node's training rows (sample-id order) and its test split, loaded once per process on first use."""
        return node_data(self)

    @property
    def dataset_key(self) -> str:
        """Which data set this node's sample ids index (tombstones are kept per data set)."""
        return dataset_key(self.cfg) if self.data_dir is None else f"local:{self.name}"

    def held_slices(self) -> list[list[int]]:
        """This partition's slices of sample ids, fixed at training (deleted ones included)."""
        if self.data_dir is None:
            return remembered_plan(self.cfg, self.num_partitions).slices[self.partition]
        from fedforget.federation.node_data import local_slices

        return local_slices(self)

    def partition_ids(self) -> list[int]:
        """Every sample id this partition's plan holds, deleted ones included, sorted."""
        return sorted(i for s in self.held_slices() for i in s)

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


def node_data(site: ClientSite) -> TaskData:
    """``site``'s own rows: its records, or its partition of the public set (cached per process)."""
    from fedforget.federation.node_data import load_node_data

    return load_node_data(site)
