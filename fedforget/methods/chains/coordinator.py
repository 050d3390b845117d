"""What the coordinator's commands need to know about a chains store: the sequences a forget cut, the
artifacts its plan can hold, and each sequence's active prefix in ``status``."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from fedforget.methods.chains.plan import ChainPlan, describe_invalidation


def forget_detail(plan: dict[str, Any], result: Any) -> dict[str, Any]:  # noqa: ANN401 - a ledger ForgetResult
    """The groups a request newly hit and the sequences it cut."""
    return describe_invalidation(plan, result.invalidated)


def plan_artifacts(plan: dict[str, Any]) -> set[str] | None:
    """Every artifact id a chains plan can produce (None when the plan does not parse)."""
    try:
        chains = ChainPlan.from_json(plan)
    except (KeyError, TypeError, ValueError):
        return None
    return {chains.artifact_id(c, p) for c in chains.chains() for p in range(1, chains.phases(c) + 1)}


def status(view: Any) -> dict[str, Any]:  # noqa: ANN401 - a StatusView
    """Per shard and sequence: the group order and the active prefix (empty for other plans)."""
    plan, serving = view.plan, view.serving
    if not plan or plan.get("kind") != "chains":
        return {"sequences": []}
    out = []
    for shard in serving.get("shards", []):
        orders = plan["sequences"][shard["shard"]]
        weights = {m["sequence"]: m["weight"] for m in shard["members"]}
        for q, order in enumerate(orders):
            out.append({"shard": shard["shard"], "sequence": q, "order": order, "active_prefix": shard["prefixes"][q],
                        "weight": weights.get(q, 0.0)})
    return {"sequences": out}


def print_status(status: dict[str, Any], console: Console) -> None:
    if not status.get("sequences"):
        return
    console.print("[bold]sequences[/] (group order; [green]active prefix[/], weight in the served ensemble)")
    for s in status["sequences"]:
        order, k = s["order"], s["active_prefix"]
        shown = "[green]" + " ".join(map(str, order[:k])) + "[/]" + (" " if k else "") + \
            "[dim]" + " ".join(map(str, order[k:])) + "[/]"
        console.print(f"  shard {s['shard']} seq {s['sequence']:>2}: {shown}  prefix {k} · weight {s['weight']:.3f}")

