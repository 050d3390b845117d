"""FedAvg-LoRA: one adapter averaged over rounds; a forget retrains from scratch without the forgotten
data.

Each hook imports its code when called: the ClientApp reads this declaration in every per-message process."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedforget.core.method import Method
from fedforget.federation.message_types import FORGET, SINGLE_RULE
from fedforget.methods.shared_hooks import evaluate_adapter, lora_serving, train_adapter

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from fedforget.core.config import RunConfig
    from fedforget.federation.method_strategy import MethodStrategy


def run(grid: Grid, cfg: RunConfig, strategy: MethodStrategy) -> None:
    from fedforget.methods.fedavg.server import run_fedavg

    run_fedavg(grid, cfg, strategy)


def strategies() -> tuple[type, ...]:
    from fedforget.methods.fedavg.strategy import FedAvgLoRA

    return (FedAvgLoRA,)


METHOD = Method(
    name="fedavg",
    variants=("fedavg",),
    driver=run,
    strategies=strategies,
    handlers={"train.fedavg": train_adapter, "evaluate.fedavg": evaluate_adapter},
    serving=lora_serving,
    serving_rules={"single": SINGLE_RULE},
    forget_message=FORGET,
    config=None,
    head_only=True,  # head-only=true trains the head alone on the frozen backbone: a linear probe
)
