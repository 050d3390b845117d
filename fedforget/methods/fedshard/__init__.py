"""FedShard: a tree of LoRA modules over client shards, merged in product space; a forget retrains the
affected branch.

Each hook imports its code when called: the ClientApp reads this declaration in every per-message process."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedforget.core.method import Method
from fedforget.federation.message_types import FORGET
from fedforget.methods.fedshard.config import FedShardConfig
from fedforget.methods.shared_hooks import lora_serving, module_training

if TYPE_CHECKING:
    import sqlite3

    from fedforget.core.config import RunConfig


def serving_rule(plan_json: dict[str, Any], valid: Any) -> dict[str, Any]:  # noqa: ANN401 - a collection of ids
    from fedforget.methods.fedshard.plan import fedshard_serving

    return fedshard_serving(plan_json, valid)


def footprint(cfg: RunConfig, partitions: int) -> dict[str, int]:
    from fedforget.methods.fedshard.footprint import footprint as footprint_

    return footprint_(cfg, partitions)


def scrub_leaver_angles(db: sqlite3.Connection, request: int) -> list[str]:
    from fedforget.methods.fedshard.ledger_rules import scrub_leaver_angles as scrub_leaver_angles_

    return scrub_leaver_angles_(db, request)


def status(view: Any) -> dict[str, Any]:  # noqa: ANN401 - a StatusView
    from fedforget.methods.fedshard.status import status as status_

    return status_(view)


def print_status(status: dict[str, Any], console: Any) -> None:  # noqa: ANN401 - a rich Console
    from fedforget.methods.fedshard.status import print_status as print_status_

    print_status_(status, console)


def prepare_scratch(store: Any, cfg: RunConfig, scratch_root: Path, workdir: Path,  # noqa: ANN401 - a Store
                    config: dict[str, Any]) -> set[int]:
    from fedforget.methods.fedshard.verify import prepare_scratch as prepare_scratch_

    return prepare_scratch_(store, cfg, scratch_root, workdir, config)


def add_commands(app: Any) -> None:  # noqa: ANN401 - the typer app
    from fedforget.methods.fedshard.cli import add_commands as add

    add(app)


def strategies() -> tuple[type, ...]:
    from fedforget.methods.fedshard.strategy import FedShard

    return (FedShard,)


METHOD = Method(
    name="fedshard",
    variants=("fedshard",),
    strategies=strategies,
    handlers={"train.fedshard": module_training},  # the chains' module training, in its own namespace
    serving=lora_serving,
    serving_rules={"fedshard": serving_rule},
    forget_message=FORGET,
    config=FedShardConfig,
    refuses_task_loss=None,  # each shard trains by train_supervised (federation/module_training.py)
    refuses_train_step=None,  # the same loop calls the step per batch
    footprint=footprint,
    planning=("fedforget.methods.fedshard.config", "fedforget.methods.fedshard.plan",
              "fedforget.methods.fedshard.costs", "fedforget.methods.fedshard.angles",
              "fedforget.methods.fedshard.lora_merge", "fedforget.methods.fedshard.footprint"),
    ledger_rules=(scrub_leaver_angles,),
    status=status,
    print_status=print_status,
    prepare_scratch=prepare_scratch,
    commands=add_commands,
    progress={r"FedShard stage (\d+)/(\d+)": "FedShard stages"},  # server.py logs it per stage
    no_whole_model=None,  # one model per shard, its trainable state averaged (lora-merge: LoRA + head models only)
)
