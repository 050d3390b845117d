"""HO-SFL's and the split baselines' run-config keys, ``[tool.flwr.app.config.hosfl]``, and their rules
(pure: no torch, no flwr), checked whenever a run config is parsed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedforget.core.config_keys import ConfigError, ConfigTable, option
from fedforget.core.method import Defaults

if TYPE_CHECKING:
    from fedforget.core.config import RunConfig

#: Blocks a split model can put on the client, per model (a task variant runs its model: ``model_task``):
#: digits-mlp fc1|fc2, fmnist-cnn conv1|conv2|fc1, rt-minilm transformer layers, rt-smollm decoder layers
#: (the embeddings always stay on the client).
SPLIT_MAX_CUT = {"digits-mlp": 2, "fmnist-cnn": 3, "rt-minilm": 6, "rt-smollm": 29}


def split_tasks() -> list[str]:
    """Every task a split model runs on, variants included."""
    from fedforget.core.config import TASKS, model_task

    return [task for task in TASKS if model_task(task) in SPLIT_MAX_CUT]

#: What their auto keys take before the task's (core/defaults.py). One HO-SFL / ZO-SFL round is one
#: mini-batch per sampled client (3 by default), so they need many more rounds than FedAvg; SFL runs the
#: paper's one local epoch per round.
DEFAULTS = Defaults(
    variants={"hosfl": {"num-rounds": 150}, "zo-sfl": {"num-rounds": 150}, "sfl": {"local-epochs": 1}},
    pairs={("hosfl", "rt-smollm"): {"num-rounds": 60},  # about 50 s a round on 2 CPU cores
           ("zo-sfl", "rt-smollm"): {"num-rounds": 60},
           **{(m, "rt-smollm-val"): {"num-rounds": 60} for m in ("hosfl", "zo-sfl")}},
)


@dataclass(frozen=True)
class HosflConfig(ConfigTable):
    """hosfl and the split baselines sfl, zo-sfl."""

    group = "hosfl"

    cut: int = option(1, low=1, old="cut")  # blocks on the client; the task bounds it (SPLIT_MAX_CUT)
    perturbations: int = option(5, low=1, high=10_000, old="perturbations")
    mu: float = option(0.001, positive=True, old="mu")
    clients_per_round: int = option(3, low=1, high=100_000, old="clients-per-round")
    client_lr: float = option(0.01, low=0, old="client-lr")  # 0 freezes the client: HO-SFL's control run
    eval_every: int = option(1, low=1, high=100_000, old="eval-every")
    device: str = option("auto", choices=("auto", "cpu", "cuda"), old="device")
    #: comma-separated substrings of client parameter names the ZO directions perturb ("" = all of θ_c)
    zo_params: str = option("", old="zo-params")
    #: heavy-ball momentum β of the client's ZO update (0 = plain ZO-SGD, Algorithm 1)
    client_momentum: float = option(0.0, low=0, below=1, old="client-momentum")

    def check(self, cfg: RunConfig) -> None:
        """A split method needs a task with a split model deep enough for ``cut``."""
        if not cfg.reads(self.group):
            return
        from fedforget.core.config import model_task

        deepest = SPLIT_MAX_CUT.get(model_task(cfg.task))
        if deepest is None:
            raise ConfigError(f"method {cfg.method!r} needs a split model; use task one of: {', '.join(split_tasks())}")
        if self.cut > deepest:
            raise ConfigError(f"run-config 'hosfl.cut'={self.cut} is too deep for task {cfg.task!r}: "
                              f"use 1..{deepest} (blocks on the client)")
