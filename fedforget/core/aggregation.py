"""Weighted averaging in a fixed order, so every runtime gives the same bits (DESIGN §4)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def weighted_average(
    updates: Sequence[tuple[int, int, dict[str, np.ndarray]]],
) -> dict[str, np.ndarray]:
    """FedAvg of ``(partition_id, num_examples, arrays)`` triples.

    Sorted by partition id and accumulated in float64, then cast back to each array's dtype, so the
    result does not depend on the order in which replies arrived.
    """
    if not updates:
        raise ValueError("nothing to aggregate: no client replied")
    ordered = sorted(updates, key=lambda u: u[0])
    if len({u[0] for u in ordered}) != len(ordered):
        raise ValueError("two replies for the same partition")
    total = sum(n for _, n, _ in ordered)
    if total <= 0:
        raise ValueError("clients reported zero examples in total")
    keys = list(ordered[0][2])
    out: dict[str, np.ndarray] = {}
    for key in keys:
        acc = np.zeros(ordered[0][2][key].shape, dtype=np.float64)
        for _, n, arrays in ordered:
            if arrays[key].shape != acc.shape:
                raise ValueError(f"array {key!r} has shape {arrays[key].shape}, expected {acc.shape}")
            acc += arrays[key].astype(np.float64) * (n / total)
        out[key] = acc.astype(ordered[0][2][key].dtype)
    return out
