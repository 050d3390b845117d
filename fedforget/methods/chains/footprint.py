"""The chains methods' memory estimate (pure): one LoRA + head module per chain position (per FedCIO
cluster), each trained on a prefix of its chain, and the group orders FedSGT and S3T select."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedforget.core.run_footprint import PLANNING_PARTITIONS, lora_footprint, plan_units
from fedforget.methods.chains.config import ORDERED

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig

#: Bytes per group position of an order (a pointer in a tuple), and per order.
ORDER_CELL_BYTES, ORDER_BYTES = 8, 64


def stored_modules(cfg: RunConfig) -> int:
    """Modules (LoRA factors + head) the variant stores: one per chain position, one per FedCIO cluster."""
    chains = cfg.chains
    if cfg.method == "fedsgt":
        return chains.budget * chains.groups
    if cfg.method == "s3t":
        return chains.shards * chains.budget * chains.groups
    if cfg.method == "sisa":
        return chains.shards * chains.groups
    return chains.clusters  # fedcio


def footprint(cfg: RunConfig, partitions: int = PLANNING_PARTITIONS) -> dict[str, int]:
    """The shared LoRA-model estimate over the stored modules; a module's lineage is its chain's prefix,
    at most half the units plus one."""
    chains = cfg.chains
    orders = chains.budget * (chains.groups * ORDER_CELL_BYTES + ORDER_BYTES) if cfg.method in ORDERED else 0
    return lora_footprint(cfg, stored_modules(cfg), partitions,
                          lineage_units=plan_units(cfg, partitions) // 2 + 1, orders=orders)
