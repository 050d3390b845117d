"""How much each SAFE adapter trains and how big it is, resolved from the run config (pure).

The budget is a number of optimiser steps per adapter, not passes over its data: a clique that holds
few samples (many shards) still gets the steps it needs to fit, as the paper gives every adapter up
to ``30·⌈N/B⌉`` AdamW steps whatever its size. A run config value of ``0`` for ``adapter-steps``,
``adapter-lr`` or ``adapter-width`` means "the task's default" below, so a user who names only the
method and the task gets adapters that learn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Per-task defaults, chosen on the held-out split of ``benchmarks/safe_bench.py --tune`` (see
#: docs/design-decisions.md, "SAFE adapters trained by steps").
SAFE_TASK_DEFAULTS: dict[str, dict[str, float]] = {
    "digits-mlp": {"adapter-steps": 200, "adapter-lr": 0.02, "adapter-width": 64},
    "fmnist-cnn": {"adapter-steps": 300, "adapter-lr": 0.02, "adapter-width": 128},
    "fmnist-effnet": {"adapter-steps": 300, "adapter-lr": 0.02, "adapter-width": 256},
}
FALLBACK = {"adapter-steps": 300, "adapter-lr": 0.02, "adapter-width": 128}


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


def task_default(task: str, key: str) -> float:
    return SAFE_TASK_DEFAULTS.get(task, FALLBACK)[key]


def adapter_budget(cfg: Any) -> AdapterBudget:
    """The run's adapter budget: explicit run-config values win, ``0`` takes the task's default."""
    steps = int(cfg.adapter_steps) or int(task_default(cfg.task, "adapter-steps"))
    lr = float(cfg.adapter_lr) or float(task_default(cfg.task, "adapter-lr"))
    width = int(cfg.adapter_width) or int(task_default(cfg.task, "adapter-width"))
    return AdapterBudget(steps=steps, lr=lr, weight_decay=float(cfg.adapter_weight_decay), width=width,
                         batch_size=int(cfg.batch_size), schedule=str(cfg.safe_schedule), rounds=int(cfg.num_rounds))
