"""SAFE's and ProtoSISA's memory estimate (pure): the frozen backbone with one node's adapters while
training, and a query and a head per class for every clique of every round stored."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedforget.core.run_footprint import (
    FLOAT_BYTES,
    LINEAGE_BYTES,
    PLANNING_PARTITIONS,
    plan_bytes,
    plan_units,
    task_dims,
)

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig


def footprint(cfg: RunConfig, partitions: int = PLANNING_PARTITIONS) -> dict[str, int]:
    """The parts of :func:`fedforget.core.run_footprint.footprint`, for InCA adapters instead of LoRA."""
    dims = task_dims(cfg.task)
    width, dim = cfg.safe.adapter_width, dims.feature_dim
    # a query and a head per class in each coarse shard (its cliques split the classes between them)
    per_round = cfg.safe.coarse * dims.classes * (dim + width)
    attention = 3 * dim * width + width * width  # the frozen cross-attention every node rebuilds
    return {"model": (dims.backbone + attention + 4 * per_round) * FLOAT_BYTES,
            "modules": cfg.num_rounds * per_round * FLOAT_BYTES, "plan": plan_bytes(cfg, partitions),
            # a unit: in at most safe.fine cliques
            "lineage": cfg.num_rounds * cfg.safe.fine * plan_units(cfg, partitions) * LINEAGE_BYTES, "orders": 0}
