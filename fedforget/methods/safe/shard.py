"""The server side of SAFE's safe shard: its rows, its tokens, and its part in every clique's FedAvg.

The server holds ``safe-shard`` rows of the task's training split that the run does not use (drawn in
:mod:`fedforget.methods.safe.shard_plan`). In every round it trains each clique's adapters on its samples of
the clique's classes with the same :func:`train_adapters` call a client makes, and that result joins
the clique's FedAvg after the partitions, weighted by its count. Its data order is seeded by (run
seed, method, clique), so a retrain and verify's scratch run replay it bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedforget.core.config import RunConfig
from fedforget.core.seeds import derive_seed
from fedforget.methods.safe.adapters import normalised, train_adapters
from fedforget.methods.safe.budget import AdapterBudget
from fedforget.methods.safe.shard_plan import draw_safe_shard, shard_seed
from fedforget.tasks.base import Examples

#: A train-size no split reaches: every task's loader then returns its whole training split.
WHOLE_SPLIT = 2**31 - 1
Arrays = dict[str, np.ndarray]


def whole_train_split(cfg: RunConfig) -> Examples:
    """Every row of the task's training split (not the run's subset), loaded outside the per-run cache."""
    from fedforget.tasks.registry import get_task

    return get_task(cfg.task).load_data(dataclasses.replace(cfg, train_size=WHOLE_SPLIT)).train


def safe_shard_ids(cfg: RunConfig, used: Collection[int] | None = None, whole: Examples | None = None) -> list[int]:
    """The run's safe-shard ids, drawn from the rows no node registered (``used``: the nodes' sample ids);
    a :class:`ConfigError` if the task has too few rows the run leaves unused.

    ``used`` None: the run's rows of the public set, as ``fedforget run`` checks a config before submitting
    it (a node's read: refused inside the ServerApp). ``whole``: the task's whole training split when the
    caller has it loaded already.
    """
    if cfg.safe.shard <= 0:
        return []
    if used is None:
        from fedforget.tasks.registry import load_task_data

        used = load_task_data(cfg).train.ids.tolist()
    pool = (whole if whole is not None else whole_train_split(cfg)).ids.tolist()
    return draw_safe_shard(pool, used, cfg.safe.shard, shard_seed(cfg.seed, cfg.task))


@dataclass(frozen=True)
class SafeShard:
    """The server's samples: ids (sorted), frozen-backbone tokens, labels and pooled features."""

    ids: list[int]
    tokens: torch.Tensor
    labels: torch.Tensor
    pooled: np.ndarray

    def rows(self, classes: list[int]) -> list[int]:
        """Rows whose label is one of ``classes`` (in id order): what a clique of those classes reads."""
        wanted = set(int(k) for k in classes)
        return [r for r, y in enumerate(self.labels.tolist()) if int(y) in wanted]

    def train(self, cfg: RunConfig, theta: torch.nn.Module, clique: str, classes: list[int], start: Arrays,
              budget: AdapterBudget, server_round: int) -> tuple[int, Arrays]:
        """One round of ``clique`` on the server's samples of its classes: (count, params), as a client replies."""
        rows = self.rows(classes)
        if not rows:
            return 0, start
        params = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in start.items()}
        order = derive_seed(cfg.seed, cfg.method, clique, "safe-shard", "order")
        trained, _ = train_adapters(theta, params, self.tokens[rows], self.labels[rows], list(classes), budget,
                                    server_round, order)
        return len(rows), {k: np.ascontiguousarray(v.numpy()) for k, v in trained.items()}

    def prototype_sum(self, label: int) -> tuple[np.ndarray, int]:
        """float64 sum of the L2-normalised pooled features of one class, and the count (as a client's cell)."""
        rows = self.rows([label])
        return normalised(torch.from_numpy(self.pooled[rows])).sum(axis=0), len(rows)


def load_safe_shard(cfg: RunConfig, folder: Path, ids: list[int], whole: Examples | None = None
                    ) -> SafeShard | None:
    """The safe shard of ``ids`` with its tokens, cached in ``folder`` (the store) like the test split's."""
    if not ids:
        return None
    from fedforget.methods.safe.client import frozen_backbone
    from fedforget.methods.safe.features import cached_tokens

    examples = (whole if whole is not None else whole_train_split(cfg)).by_ids(ids)
    backbone = frozen_backbone(cfg.task, cfg.hf.model, cfg.seed)
    tokens, pooled = cached_tokens(folder, f"safe-shard-{cfg.task}", backbone.weights_sha256, ids, backbone.module,
                                   examples.inputs)
    return SafeShard(list(ids), torch.from_numpy(tokens), examples.labels, pooled)
