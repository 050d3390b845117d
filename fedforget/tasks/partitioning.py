"""Clients' partitions and slices, drawn with flwr-datasets partitioners over the local train pool."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedforget.core.seeds import derive_seed32
from fedforget.core.slicing import split_into_slices

#: Dirichlet draws below this size are redrawn by flwr-datasets (its ``min_partition_size``).
MIN_PARTITION_SIZE = 2


@dataclass(frozen=True)
class PartitionPlan:
    """Each partition's slices of global sample ids: ``slices[partition][slice] -> sorted ids``."""

    slices: dict[int, list[list[int]]]

    def partition_ids(self, partition: int) -> list[int]:
        return sorted(i for s in self.slices[partition] for i in s)

    def to_json(self) -> dict[str, list[list[int]]]:
        return {str(p): s for p, s in sorted(self.slices.items())}


def partition_samples(
    labels: np.ndarray,
    ids: np.ndarray,
    num_partitions: int,
    partitioner: str,
    alpha: float,
    seed: int,
) -> list[list[int]]:
    """Split the train pool into ``num_partitions`` lists of global ids (IID or Dirichlet over labels)."""
    if num_partitions < 1:
        raise ValueError(f"num-partitions must be >= 1, got {num_partitions}")
    if len(ids) < num_partitions * MIN_PARTITION_SIZE:
        raise ValueError(f"{len(ids)} samples cannot fill {num_partitions} partitions; raise train-size")
    import datasets  # imported here: a ClientApp process that reads a remembered plan never pays for it
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

    table = datasets.Dataset.from_dict({"label": labels.astype(np.int64), "gid": ids.astype(np.int64)})
    if partitioner == "iid":
        table = table.shuffle(seed=derive_seed32(seed, "iid-partition"))
        part = IidPartitioner(num_partitions=num_partitions)
    elif partitioner == "dirichlet":
        part = DirichletPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            alpha=alpha,
            min_partition_size=MIN_PARTITION_SIZE,
            self_balancing=False,
            shuffle=True,
            seed=derive_seed32(seed, "dirichlet-partition"),
        )
    else:
        raise ValueError(f"unknown partitioner {partitioner!r} (iid or dirichlet)")
    part.dataset = table
    return [sorted(int(g) for g in part.load_partition(p)["gid"]) for p in range(num_partitions)]


def plan_partitions(
    labels: np.ndarray,
    ids: np.ndarray,
    num_partitions: int,
    partitioner: str,
    alpha: float,
    slices_per_client: int,
    seed: int,
) -> PartitionPlan:
    """Partitions, then each one cut into ``slices_per_client`` seeded slices."""
    parts = partition_samples(labels, ids, num_partitions, partitioner, alpha, seed)
    return PartitionPlan(
        {p: split_into_slices(members, slices_per_client, derive_seed32(seed, "slices", p))
         for p, members in enumerate(parts)}
    )
