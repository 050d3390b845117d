"""The chains methods' memory estimate (pure): one LoRA + head module per chain position (per FedCIO
cluster), each trained on a prefix of its chain, and the group orders FedSGT and S3T select."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedforget.core.run_footprint import PLANNING_PARTITIONS, lora_footprint, plan_units
from fedforget.methods.chains.plan import chain_layout

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig

#: Bytes per group position of an order (a pointer in a tuple), and per order.
ORDER_CELL_BYTES, ORDER_BYTES = 8, 64


def stored_modules(cfg: RunConfig) -> int:
    """Modules (LoRA factors + head) the variant stores: one per chain position, one per FedCIO cluster."""
    chains = cfg.chains
    return chain_layout(cfg.method).stored_modules(chains.groups, chains.budget, chains.shards, chains.clusters)


def footprint(cfg: RunConfig, partitions: int = PLANNING_PARTITIONS) -> dict[str, int]:
    """The shared LoRA-model estimate over the stored modules; a module's lineage is its chain's prefix,
    at most half the units plus one."""
    chains = cfg.chains
    ordered = chain_layout(cfg.method).ordered
    orders = chains.budget * (chains.groups * ORDER_CELL_BYTES + ORDER_BYTES) if ordered else 0
    return lora_footprint(cfg, stored_modules(cfg), partitions,
                          lineage_units=plan_units(cfg, partitions) // 2 + 1, orders=orders)
