"""FedAvg-LoRA: one adapter averaged over rounds; a forget retrains from scratch without the forgotten
data.

Each hook imports its code when called: the ClientApp reads this declaration in every per-message process."""

from __future__ import annotations

from fedforget.core.method import Method
from fedforget.federation.message_types import FORGET, SINGLE_RULE
from fedforget.methods.shared_hooks import evaluate_adapter, lora_serving, train_adapter


def strategies() -> tuple[type, ...]:
    from fedforget.methods.fedavg.strategy import FedAvgLoRA

    return (FedAvgLoRA,)


METHOD = Method(
    name="fedavg",
    variants=("fedavg",),
    strategies=strategies,
    handlers={"train.fedavg": train_adapter, "evaluate.fedavg": evaluate_adapter},
    serving=lora_serving,
    serving_rules={"single": SINGLE_RULE},
    forget_message=FORGET,
    config=None,
    head_only=True,  # head-only=true trains the head alone on the frozen backbone: a linear probe
    no_whole_model=None,  # one model's trainable state averaged per round, whatever the model is
    refuses_task_loss=None,  # its nodes train by train_supervised (federation/adapter_round.py)
    refuses_train_step=None,  # the same loop calls the step per batch
)
