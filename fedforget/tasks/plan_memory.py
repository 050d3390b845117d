"""The partition plan remembered on disk, so a fresh ClientApp process skips redrawing it.

Flower 1.42 starts a new ClientApp process per message; redrawing the plan costs the task's data
plus ``datasets`` and ``flwr_datasets`` (seconds of imports). The plan is a pure function of the
config fields in :func:`plan_key`, so a file keyed by their hash is a cache, never state: deleting
it changes nothing but speed. It lives in the machine-wide cache (``FEDFORGET_CACHE``), not in the
store or a node's state directory, so rejected requests still leave those byte for byte unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fedforget.core.config import RunConfig
from fedforget.store.atomic import atomic_write_json
from fedforget.tasks.assets import cache_dir
from fedforget.tasks.partitioning import PartitionPlan

PLAN_FORMAT = 1


def plan_key(cfg: RunConfig, num_partitions: int) -> tuple[object, ...]:
    """Everything the plan depends on: the task's data and the partitioning settings."""
    return (cfg.task, cfg.train_size, cfg.test_size, cfg.hf.dataset, cfg.hf.model, cfg.hf.input_column,
            cfg.hf.label_column, num_partitions, cfg.partitioner, cfg.dirichlet_alpha, cfg.slices_per_client,
            cfg.seed)


def _plan_path(key: tuple[object, ...]) -> Path:
    digest = hashlib.sha256(json.dumps([PLAN_FORMAT, *map(repr, key)]).encode()).hexdigest()
    return cache_dir() / "partition-plans" / f"{digest}.json"


def _read(path: Path, key: tuple[object, ...]) -> PartitionPlan | None:
    try:
        raw = json.loads(path.read_text())
        if raw.get("key") != [repr(k) for k in key]:
            return None
        return PartitionPlan({int(p): [[int(i) for i in s] for s in slices] for p, slices in raw["slices"].items()})
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return None  # absent, torn or foreign: draw the plan again


def remembered_plan(cfg: RunConfig, num_partitions: int) -> PartitionPlan:
    """The run's partition plan: read from the cache, or drawn once (imports the task) and written."""
    key = plan_key(cfg, num_partitions)
    path = _plan_path(key)
    plan = _read(path, key)
    if plan is not None:
        return plan
    from fedforget.tasks.registry import partition_plan  # the heavy path: data, datasets, flwr_datasets

    plan = partition_plan(cfg, num_partitions)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {"key": [repr(k) for k in key], "slices": plan.to_json()})
    except OSError:
        pass  # a read-only cache only costs speed
    return plan
