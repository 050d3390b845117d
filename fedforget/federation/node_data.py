"""A node's own rows and the slices drawn over them, on the node; nothing here leaves it.

A node's rows are either its own records (``data-dir``) or its partition of a shipped task's public set. Its
slices are drawn from the seed: for the public set from the partition plan (as flwr-datasets draws it), for
its own records by :func:`~fedforget.core.slicing.split_into_slices` over every record it registered for
training, deleted ones included, so a deletion never moves another record to a different slice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fedforget.core.config import RunConfig
from fedforget.core.seeds import derive_seed32
from fedforget.core.slicing import split_into_slices
from fedforget.store.tombstones import load_tombstones

if TYPE_CHECKING:
    from fedforget.tasks.base import Examples, TaskData


class ClientSite(Protocol):
    """What a node's data is drawn from (:class:`fedforget.federation.client_site.ClientSite` is one): typed here,
    not imported, because that module loads its data through this one."""

    cfg: RunConfig
    partition: int
    num_partitions: int
    state_dir: Path
    name: str
    data_dir: Path | None

    @property
    def dataset_key(self) -> str: ...

    @property
    def record_key(self) -> str | None: ...

    def partition_ids(self) -> list[int]: ...

#: What a node with its own data registered for training, in its state dir: the records its plan is drawn
#: over, each one's content digest, and the store's record key its sample ids are keyed with.
REGISTERED = "registered-records.json"

_DATA: dict[tuple[object, ...], TaskData] = {}


def _key(site: ClientSite) -> tuple[object, ...]:
    cfg = site.cfg
    return (cfg.task, cfg.train_size, cfg.test_size, cfg.hf.dataset, cfg.hf.model, cfg.partitioner,
            cfg.dirichlet_alpha, cfg.slices_per_client, cfg.seed, site.partition, site.num_partitions,
            site.name, str(site.data_dir), site.record_key)


def task_classes(site: ClientSite) -> int:
    """How many classes the task's labels range over, for a node that brings its own records."""
    from fedforget.tasks.registry import get_task

    classes = get_task(site.cfg.task).num_classes
    if classes <= 0:
        raise ValueError(f"task {site.cfg.task!r} does not fix its classes, so a node's own data (data-dir) "
                         "cannot be checked against them; use a task that does (see `fedforget data split`)")
    return classes


def _empty_like(examples: Examples) -> Examples:
    return examples.subset([])


def load_node_data(site: ClientSite) -> TaskData:
    """``site``'s own training rows (sample-id order) and test split, loaded once per process."""
    key = _key(site)
    if key not in _DATA:
        _DATA.clear()
        _DATA[key] = _load(site)
    return _DATA[key]


def _load(site: ClientSite) -> TaskData:
    if site.data_dir is None:
        from fedforget.tasks.base import TaskData
        from fedforget.tasks.registry import load_task_data

        whole = load_task_data(site.cfg)
        return TaskData(whole.train.by_ids(site.partition_ids()), whole.test, whole.num_classes)
    from fedforget.tasks.base import TaskData
    from fedforget.tasks.local_records import NodeDataError, find_split_file, read_local_records

    classes, key = task_classes(site), site.record_key
    train = read_local_records(site.data_dir, site.cfg, site.name, classes, key=key).examples
    try:
        find_split_file(site.data_dir, "test", f"node {site.name}")
    except NodeDataError:  # a node without a test split evaluates nothing locally
        return TaskData(train, _empty_like(train), classes)
    return TaskData(train, read_local_records(site.data_dir, site.cfg, site.name, classes, split="test",
                                              key=key).examples, classes)


def registered_plan(site: ClientSite) -> dict | None:
    """What this node registered for training (its state dir), or None when it has not."""
    try:
        data = json.loads((site.state_dir / REGISTERED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("node") == site.name else None


def registered_key(site: ClientSite) -> str | None:
    """The record key this node registered for training (None: unkeyed, or nothing registered)."""
    registered = registered_plan(site)
    key = registered.get("record-key") if registered else None
    return key if isinstance(key, str) and key else None


def held_now(site: ClientSite) -> list[int]:
    held = {int(i) for i in load_node_data(site).train.ids.tolist()}
    return sorted(held | load_tombstones(site.state_dir, site.dataset_key))


def local_slices(site: ClientSite) -> list[list[int]]:
    """Slices of a node's own records, drawn from the seed over every record it registered for training
    (those it has deleted since included), so neither a deletion nor a row removed from its file moves
    another record to a different slice."""
    registered = registered_plan(site)
    held = [int(i) for i in registered["held"]] if registered and "held" in registered else held_now(site)
    return split_into_slices(held, site.cfg.slices_per_client, derive_seed32(site.cfg.seed, "slices", site.partition))
