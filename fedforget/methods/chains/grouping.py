"""FedSGT Algorithm 1: deal every client slice into ``L`` groups by a seeded shuffle of slice ids.

Index-driven only (no data semantics), so the grouping is reproducible from the seed and the list
of units alone and can be reused unchanged when the method retrains from scratch.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from fedforget.core.slicing import UnitId, array_split


def canonical_units(units: Sequence[str]) -> list[str]:
    """Units in (partition, slice) order, so the same seed always sees the same list."""
    return [str(u) for u in sorted(UnitId.parse(u) for u in set(units))]


def group_units(units: Sequence[str], groups: int, seed: int) -> list[list[str]]:
    """Algorithm 1: canonical order, seeded permutation, ``groups`` near-equal groups (sorted inside).

    Raises ValueError when there are fewer units than groups: a group without data would train a
    module on nothing.
    """
    ordered = canonical_units(units)
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    if len(ordered) < groups:
        raise ValueError(
            f"{len(ordered)} client slices cannot fill {groups} groups; lower chains.groups= or raise "
            "slices-per-client="
        )
    random.Random(seed).shuffle(ordered)
    return [canonical_units(g) for g in array_split(ordered, groups)]
