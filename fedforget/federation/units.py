"""Unit listing: the slices a set of partitions holds, as the ledger's unit ids."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from fedforget.core.slicing import UnitId

if TYPE_CHECKING:
    from fedforget.federation.run_setup import ServerRun


def all_units(run: ServerRun, partitions: Iterable[int]) -> list[str]:
    """Every slice of ``partitions`` (empty ones included): the lineage of a model they all trained."""
    return sorted(str(UnitId(p, s)) for p in partitions for s in range(len(run.plan.slices[p])))
