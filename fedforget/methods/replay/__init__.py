"""Replay: Flower's own strategies (FedAvg, FedProx, FedAvgM, FedAdagrad, FedAdam, FedYogi) made forgettable.

Every round's global model (and the strategy's server state) is a checkpoint whose lineage is every
partition that trained up to it; a forget invalidates the rounds from the first that saw the data, and a
retrain rolls back to the last round that did not and replays the rest without it.

Each hook imports its code when called: the ClientApp reads this declaration in every per-message process."""

from __future__ import annotations

from typing import Any

from fedforget.core.method import Method
from fedforget.federation.message_types import FORGET, SINGLE_RULE
from fedforget.methods.replay.config import ReplayConfig
from fedforget.methods.shared_hooks import lora_serving, train_adapter


def plan_artifacts(plan: dict[str, Any]) -> set[str]:
    from fedforget.methods.replay.plan import plan_artifacts as plan_artifacts_

    return plan_artifacts_(plan)


def status(view: Any) -> dict[str, Any]:  # noqa: ANN401 - a StatusView
    """The user's subclass whose rounds the store holds (its class and the attributes it was built with), which
    the run config's ``replay.strategy`` (its Flower parent) does not name; None for any other store."""
    recorded = view.manifest.get("replay-strategy")
    return {"replay_strategy": recorded if isinstance(recorded, dict) else None}


def print_status(status: dict[str, Any], console: Any) -> None:  # noqa: ANN401 - a rich Console
    recorded = status.get("replay_strategy")
    if recorded:
        console.print(f"replay strategy {recorded.get('class')}, a subclass (the attributes it was built with: "
                      "--json)", highlight=False, soft_wrap=True)


def strategies() -> tuple[type, ...]:
    from fedforget.methods.replay.strategy import Forgettable

    return (Forgettable,)


METHOD = Method(
    name="replay",
    variants=("replay",),
    strategies=strategies,
    handlers={"train.replay": train_adapter},
    serving=lora_serving,
    serving_rules={"replay": SINGLE_RULE},
    forget_message=FORGET,
    config=ReplayConfig,
    refuses_task_loss=None,  # its nodes train by train_supervised (federation/adapter_round.py)
    refuses_train_step=None,  # the same loop calls the step per batch (not under FedProx: Forgettable refuses)
    status=status,
    print_status=print_status,
    planning=("fedforget.methods.replay.config", "fedforget.methods.replay.plan"),
    plan_artifacts=plan_artifacts,
    no_whole_model=None,  # one model's trainable state per round and per checkpoint, whatever the model is
)
