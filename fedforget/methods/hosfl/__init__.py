"""HO-SFL with SFL and ZO-SFL: split learning whose clients train with forward passes only; a forget
retrains from scratch without the forgotten data.

Each hook imports its code when called: the ClientApp reads this declaration in every per-message process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedforget.core.method import Method
from fedforget.federation.message_types import FORGET, SINGLE_RULE
from fedforget.methods.hosfl.config import DEFAULTS, HosflConfig

if TYPE_CHECKING:
    from flwr.app import Context, Message



def forward(msg: Message, context: Context) -> Message:
    from fedforget.methods.hosfl.client import forward as forward_

    return forward_(msg, context)


def zo_phase(msg: Message, context: Context) -> Message:
    from fedforget.methods.hosfl.client import zo_phase as zo_phase_

    return zo_phase_(msg, context)


def backprop(msg: Message, context: Context) -> Message:
    from fedforget.methods.hosfl.client import backprop as backprop_

    return backprop_(msg, context)


def probabilities(*args: Any) -> Any:  # noqa: ANN401 - serve.split_probabilities' arguments and result
    from fedforget.methods.hosfl.serve import split_probabilities

    return split_probabilities(*args)


def status(view: Any) -> dict[str, Any]:  # noqa: ANN401 - a StatusView
    from fedforget.methods.hosfl.coordinator import status as status_

    return status_(view)


def print_status(status: dict[str, Any], console: Any) -> None:  # noqa: ANN401 - a rich Console
    from fedforget.methods.hosfl.coordinator import print_status as print_status_

    print_status_(status, console)


def strategies() -> tuple[type, ...]:
    from fedforget.methods.hosfl.strategy import HOSFL, SFL, ZOSFL

    return (HOSFL, SFL, ZOSFL)


METHOD = Method(
    name="hosfl",
    variants=("hosfl", "sfl", "zo-sfl"),
    strategies=strategies,
    handlers={"train.forward": forward, "train.zo": zo_phase, "train.backprop": backprop},
    serving=probabilities,  # one [θ_c; θ_s] artifact
    serving_rules={"split": SINGLE_RULE},
    forget_message=FORGET,
    config=HosflConfig,
    refuses_task_loss=("its training step is split over three messages (forward, zeroth-order, backprop) "
                       "between the nodes' and the server's halves of the model"),
    refuses_train_step=("its training step is split over three messages (forward, zeroth-order, backprop) "
                        "between the nodes' and the server's halves of the model, so no one call holds it"),
    defaults=DEFAULTS,
    planning=("fedforget.methods.hosfl.config", "fedforget.methods.hosfl.plan",),
    status=status,
    print_status=print_status,
    no_whole_model="it splits the backbone with its LoRA adapters between the nodes and the server",
)
