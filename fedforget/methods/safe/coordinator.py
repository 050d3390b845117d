"""What the coordinator's commands need to know about a SAFE store: the cliques a forget hit, the
server-held safe shard (never forgotten) and SAFE-DP's per-adapter budgets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console

from fedforget.core.config import RunConfig
from fedforget.methods.safe.config import safe_layout
from fedforget.methods.safe.graph import forget_detail as clique_detail
from fedforget.store.ledger import LedgerUsageError


def forget_detail(plan: dict[str, Any], result: Any) -> dict[str, Any]:  # noqa: ANN401 - a ledger ForgetResult
    """The cliques hit, |M_x|, the cliques still served."""
    if result.request is None:
        return {}
    return clique_detail(plan, result.units, result.new_samples, result.serving)


def refuse_safe_shard_ids(store: Any, samples: Sequence[int]) -> None:  # noqa: ANN401 - a Store
    """A safe-shard id is server data, not a client's: say so instead of "unknown sample"."""
    shard = set(store.manifest().get("safe-shard-ids") or [])
    named = sorted({int(s) for s in samples} & shard)
    if named:
        shown = ", ".join(map(str, named[:5])) + (" …" if len(named) > 5 else "")
        raise LedgerUsageError(f"sample id(s) {shown} are in the server-held safe shard, not in any client's data; "
                               "the safe shard never receives forget requests (nothing was changed)")


def status(view: Any) -> dict[str, Any]:  # noqa: ANN401 - a StatusView
    return {"safe_shard": len(view.manifest.get("safe-shard-ids") or [])}


def print_status(status: dict[str, Any], console: Console) -> None:
    if status.get("safe_shard"):
        console.print(f"safe shard {status['safe_shard']} server-held samples: every clique trains on them; "
                      "never forgotten")


def check_before_submit(cfg: RunConfig) -> None:
    """What the ServerApp checks once it has the task's data, checked before submitting (raises ConfigError)."""
    if cfg.safe.shard:  # the task's unused rows bound it
        from fedforget.methods.safe.shard import safe_shard_ids

        safe_shard_ids(cfg)
    layout = safe_layout(cfg.method)
    if layout.class_cliques and cfg.safe.fine > 1:  # one class per clique
        from fedforget.methods.safe.graph import check_clique_classes
        from fedforget.tasks.server_data import load_server_test

        check_clique_classes(layout, load_server_test(cfg).num_classes, cfg.safe.fine, cfg.task)
