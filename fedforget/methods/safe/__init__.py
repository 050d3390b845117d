"""SAFE (with ProtoSISA and SAFE-DP): per-clique adapters; a forget drops the cliques that saw the data.

Each hook imports its code when called: the ClientApp reads this declaration in every per-message process."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedforget.core.method import HeldSamples, Method
from fedforget.methods.safe.config import DEFAULTS, SafeConfig

if TYPE_CHECKING:
    import sqlite3

    from flwr.app import Context, Message

    from fedforget.core.config import RunConfig


def train_cliques(msg: Message, context: Context) -> Message:
    from fedforget.methods.safe.client import train_cliques as train_cliques_

    return train_cliques_(msg, context)


def prototype_sums(msg: Message, context: Context) -> Message:
    from fedforget.methods.safe.client import prototype_sums as prototype_sums_

    return prototype_sums_(msg, context)


def forget_samples(msg: Message, context: Context) -> Message:
    """SAFE's forget message runs the one node forget handler (its caches are its ``feature_caches``)."""
    from fedforget.federation.forget_client import forget_samples as forget_samples_

    return forget_samples_(msg, context)


def probabilities(*args: Any) -> Any:  # noqa: ANN401 - serve.served_probabilities' arguments and result
    from fedforget.methods.safe.serve import served_probabilities

    return served_probabilities(*args)


def serving_rule(plan_json: dict[str, Any], valid: Any) -> dict[str, Any]:  # noqa: ANN401 - a collection of ids
    from fedforget.methods.safe.graph import safe_serving

    return safe_serving(plan_json, valid)


def footprint(cfg: RunConfig, partitions: int) -> dict[str, int]:
    from fedforget.methods.safe.footprint import footprint as footprint_

    return footprint_(cfg, partitions)


def forget_detail(plan: dict[str, Any], result: Any) -> dict[str, Any]:  # noqa: ANN401 - a ledger ForgetResult
    from fedforget.methods.safe.coordinator import forget_detail as forget_detail_

    return forget_detail_(plan, result)


def refuse_safe_shard_ids(store: Any, samples: Sequence[int]) -> None:  # noqa: ANN401 - a Store
    from fedforget.methods.safe.coordinator import refuse_safe_shard_ids as refuse_safe_shard_ids_

    refuse_safe_shard_ids_(store, samples)


def charge_dp_budget(db: sqlite3.Connection, request: int) -> list[str]:
    from fedforget.methods.safe.budget_store import charge_dp_budget as charge_dp_budget_

    return charge_dp_budget_(db, request)


def status(view: Any) -> dict[str, Any]:  # noqa: ANN401 - a StatusView
    from fedforget.methods.safe.coordinator import status as status_

    return status_(view)


def print_status(status: dict[str, Any], console: Any) -> None:  # noqa: ANN401 - a rich Console
    from fedforget.methods.safe.coordinator import print_status as print_status_

    print_status_(status, console)


def check_before_submit(cfg: RunConfig) -> None:
    from fedforget.methods.safe.coordinator import check_before_submit as check_before_submit_

    check_before_submit_(cfg)


def prepare_scratch(store: Any, cfg: RunConfig, scratch_root: Path, workdir: Path,  # noqa: ANN401 - a Store
                    config: dict[str, Any]) -> set[int]:
    from fedforget.methods.safe.verify import prepare_scratch as prepare_scratch_

    return prepare_scratch_(store, cfg, scratch_root, workdir, config)


def dp_exposure(ledger: Any) -> tuple[set[str], dict[str, set[int]]]:  # noqa: ANN401 - a Ledger
    from fedforget.methods.safe.verify import dp_exposure as dp_exposure_

    return dp_exposure_(ledger)


def strategies() -> tuple[type, ...]:
    from fedforget.methods.safe.strategy import SAFE, ProtoSISA

    return (SAFE, ProtoSISA)


METHOD = Method(
    name="safe",
    variants=("safe", "protosisa"),
    strategies=strategies,
    handlers={"train.safe": train_cliques, "query.safeproto": prototype_sums, "query.safeforget": forget_samples},
    serving=probabilities,
    serving_rules={"safe": serving_rule},
    forget_message="query.safeforget",
    config=SafeConfig,
    refuses_task_loss=("each clique trains its own adapter with its own loss over the shared features, and that "
                       "loss is what keeps the cliques apart"),
    refuses_train_step=("each clique trains its own adapter with its own loss over the shared features, and that "
                        "loss is what keeps the cliques apart, which a step computing its own would not"),
    defaults=DEFAULTS,
    footprint=footprint,
    size_keys={v: ("safe.adapter-width", "safe.coarse", "safe.fine", "num-rounds", "slices-per-client")
               for v in ("safe", "protosisa")},
    planning=("fedforget.methods.safe.config", "fedforget.methods.safe.graph", "fedforget.methods.safe.dp",
              "fedforget.methods.safe.shard_plan", "fedforget.methods.safe.budget",
              "fedforget.methods.safe.footprint"),
    forget_detail=forget_detail,
    forget_check=refuse_safe_shard_ids,
    ledger_rules=(charge_dp_budget,),
    status=status,
    print_status=print_status,
    submit_check=check_before_submit,
    prepare_scratch=prepare_scratch,
    dp_exposure=dp_exposure,
    feature_caches=("safe-features-*",),  # the frozen backbone's tokens (features.CACHE_PREFIX)
    held_samples=HeldSamples(key="safe-shard-ids", name="safe shard", report="safe_shard"),  # shard.py draws it
    no_whole_model="it trains its own InCA adapters and heads on the frozen backbone's features",
)
