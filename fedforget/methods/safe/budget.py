"""How much each SAFE adapter trains and how big it is, read off the (resolved) run config (pure).

The budget is a number of optimiser steps per adapter, not passes over its data: a clique that holds
few samples (many shards) still gets the steps it needs to fit, as the paper gives every adapter up
to ``30·⌈N/B⌉`` AdamW steps whatever its size. ``adapter-steps``, ``adapter-width`` and ``lr`` left at
0 take SAFE's per-task defaults from :mod:`fedforget.core.defaults`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AdapterBudget:
    """What every adapter of a run gets: ``steps`` AdamW steps on each node holding its data."""

    steps: int
    lr: float
    weight_decay: float
    width: int
    batch_size: int
    schedule: str
    rounds: int

    @property
    def steps_per_round(self) -> int:
        """Local steps of one adapter on one node in one Flower round (the last round may stop early)."""
        return math.ceil(self.steps / self.rounds)

    def round_steps(self, server_round: int) -> range:
        """Global step indices (0-based, of ``steps``) this round runs: the cosine schedule's clock."""
        start = (server_round - 1) * self.steps_per_round
        return range(min(start, self.steps), min(start + self.steps_per_round, self.steps))

    def lr_at(self, step: int) -> float:
        """lr of global step ``step``: cosine from ``lr`` towards 0 over all ``steps`` (the paper's), or flat."""
        if self.schedule != "cosine":
            return self.lr
        return self.lr * 0.5 * (1.0 + math.cos(math.pi * step / self.steps))

    def batch(self, held: int) -> int:
        """Samples per step on a node holding ``held`` samples of the adapter's clique."""
        return min(self.batch_size, held)

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "lr": self.lr, "weight-decay": self.weight_decay, "width": self.width,
                "batch-size": self.batch_size, "schedule": self.schedule, "rounds": self.rounds}


def adapter_budget(cfg: Any) -> AdapterBudget:
    """The run's adapter budget (a :class:`~fedforget.core.config.RunConfig` whose auto keys are resolved)."""
    safe = cfg.safe
    return AdapterBudget(steps=int(safe.adapter_steps), lr=float(cfg.lr), weight_decay=float(safe.adapter_weight_decay),
                         width=int(safe.adapter_width), batch_size=int(cfg.batch_size), schedule=str(safe.schedule),
                         rounds=int(cfg.num_rounds))
