"""SAFE's server-held "safe shard": which training rows it takes (pure: no torch, no flwr).

The safe shard (paper Fig. 1B(c)) is data that never receives forget requests, connected to every
clique. Here it is drawn from the task's training split rows the run does not use, so it is disjoint
from every client's data and carries no sample id any client holds or any request can name.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from fedforget.core.config import ConfigError
from fedforget.core.seeds import derive_seed


def shard_seed(seed: int, task: str) -> int:
    """The seed of the draw: the run's seed and task only, so train, retrain and verify draw the same rows."""
    return derive_seed(seed, "safe-shard", task, "ids")


def draw_safe_shard(pool: Sequence[int], used: Collection[int], size: int, seed: int) -> list[int]:
    """``size`` sorted ids of ``pool`` outside ``used``, drawn with ``seed``; too few free rows is a
    :class:`ConfigError` that says which key to lower."""
    if size <= 0:
        return []
    taken = set(used)
    free = sorted(int(i) for i in pool if int(i) not in taken)
    if size > len(free):
        fix = f" or 'train-size' to at most {len(pool) - size}" if size < len(pool) else ""
        raise ConfigError(f"run-config 'safe.shard'={size} needs {size} training rows the run does not use, but "
                          f"only {len(free)} of the task's {len(pool)} are free; lower 'safe.shard' to at most "
                          f"{len(free)}{fix}")
    return sorted(random.Random(seed).sample(free, size))


def class_counts(labels: Sequence[int]) -> dict[int, int]:
    """class -> how many safe-shard samples it has (what the plan records)."""
    out: dict[int, int] = {}
    for y in labels:
        out[int(y)] = out.get(int(y), 0) + 1
    return dict(sorted(out.items()))
