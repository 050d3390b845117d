"""FedShard's memory estimate (pure): the shared LoRA-model estimate over its tree's modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedforget.core.run_footprint import PLANNING_PARTITIONS, lora_footprint

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig


def footprint(cfg: RunConfig, partitions: int = PLANNING_PARTITIONS) -> dict[str, int]:
    """A tree over the clients stores at most twice its leaves, the partitions the estimate assumes."""
    return lora_footprint(cfg, 2 * PLANNING_PARTITIONS, partitions)
