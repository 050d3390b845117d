"""Sequence-sharded LoRA chains (FedSGT, S3T, SISA, FedCIO): a forget serves the prefixes that never saw
the data.

Each hook imports its code when called: the ClientApp reads this declaration in every per-message process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedforget.core.method import Method
from fedforget.federation.message_types import CHAIN, FORGET
from fedforget.methods.chains.config import DEFAULTS, ChainsConfig
from fedforget.methods.shared_hooks import module_training

if TYPE_CHECKING:
    import sqlite3

    from fedforget.core.config import RunConfig


def probabilities(*args: Any) -> Any:  # noqa: ANN401 - serve.chain_probabilities' arguments and result
    from fedforget.methods.chains.serve import chain_probabilities

    return chain_probabilities(*args)


def serving_rule(plan_json: dict[str, Any], valid: Any) -> dict[str, Any]:  # noqa: ANN401 - a collection of ids
    from fedforget.methods.chains.plan import serving_from_json

    return serving_from_json(plan_json, valid)


def footprint(cfg: RunConfig, partitions: int) -> dict[str, int]:
    from fedforget.methods.chains.footprint import footprint as footprint_

    return footprint_(cfg, partitions)


def forget_detail(plan: dict[str, Any], result: Any) -> dict[str, Any]:  # noqa: ANN401 - a ledger ForgetResult
    from fedforget.methods.chains.coordinator import forget_detail as forget_detail_

    return forget_detail_(plan, result)


def plan_artifacts(plan: dict[str, Any]) -> set[str] | None:
    from fedforget.methods.chains.coordinator import plan_artifacts as plan_artifacts_

    return plan_artifacts_(plan)


def status(view: Any) -> dict[str, Any]:  # noqa: ANN401 - a StatusView
    from fedforget.methods.chains.coordinator import status as status_

    return status_(view)


def print_status(status: dict[str, Any], console: Any) -> None:  # noqa: ANN401 - a rich Console
    from fedforget.methods.chains.coordinator import print_status as print_status_

    print_status_(status, console)


def copy_holders(db: sqlite3.Connection) -> dict[int, int]:
    from fedforget.methods.chains.copies import copy_holders as holders

    return holders(db)


def add_commands(app: Any) -> None:  # noqa: ANN401 - the typer app
    from fedforget.methods.chains.cli import add_commands as add

    add(app)


def strategies() -> tuple[type, ...]:
    from fedforget.methods.chains.strategy import S3T, SISA, FedCIO, FedSGT

    return (FedSGT, S3T, SISA, FedCIO)


METHOD = Method(
    name="chains",
    variants=("fedsgt", "s3t", "sisa", "fedcio"),
    strategies=strategies,
    handlers={CHAIN: module_training},
    serving=probabilities,
    serving_rules={"chains": serving_rule},
    forget_message=FORGET,
    config=ChainsConfig,
    refuses_task_loss=None,  # each position trains by train_supervised (federation/module_training.py)
    refuses_train_step=None,  # the same loop calls the step per batch
    defaults=DEFAULTS,
    footprint=footprint,
    size_keys={
        "fedsgt": ("lora-r", "chains.groups", "chains.budget", "slices-per-client"),
        "s3t": ("lora-r", "chains.groups", "chains.budget", "chains.shards", "slices-per-client"),
        "sisa": ("lora-r", "chains.groups", "chains.shards", "slices-per-client"),
        "fedcio": ("lora-r", "chains.clusters", "slices-per-client"),
    },
    planning=("fedforget.methods.chains.plan", "fedforget.methods.chains.grouping",
              "fedforget.methods.chains.sequences", "fedforget.methods.chains.serving",
              "fedforget.methods.chains.theory", "fedforget.methods.chains.config",
              "fedforget.methods.chains.footprint", "fedforget.methods.chains.copies"),
    forget_detail=forget_detail,
    plan_artifacts=plan_artifacts,
    status=status,
    print_status=print_status,
    copy_holders=copy_holders,  # nodes keep the frozen modules of a chain (store.module_cache)
    commands=add_commands,
    progress={r"(\d+)/(\d+) chain positions trained": "chain positions"},  # server.py logs it per position
    crash_points=("chains:position-recorded",),  # server.py, once a position's artifact is recorded
    no_whole_model="it stacks LoRA modules on the frozen backbone and forgets by switching modules off",
    whole_model_variants={"sisa": None, "fedcio": None},  # a chain continues one model: its trainable state
)
