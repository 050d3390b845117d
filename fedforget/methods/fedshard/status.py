"""The FedShard part of ``fedforget status``: stages, shards, members, rounds, cached artifacts."""

from __future__ import annotations

from typing import Any

from rich.console import Console


def tree_summary(manifest: dict[str, Any], artifacts: list[dict[str, Any]],
                 serving: dict[str, Any]) -> dict[str, Any] | None:
    """The stored tree with each shard's artifact state; None for other methods."""
    plan = manifest.get("plan") or {}
    if plan.get("kind") != "fedshard":
        return None
    from fedforget.methods.fedshard.plan import artifact_id

    rows = {a["artifact_id"]: a for a in artifacts}
    stages = []
    for p, stage in enumerate(plan["stages"], start=1):
        shards = []
        for i, shard in enumerate(stage):
            row = rows.get(artifact_id(p, i), {})
            shards.append({"artifact": artifact_id(p, i), "clients": shard["clients"], "children": shard["children"],
                           "rounds": shard["rounds"], "cached": bool(row), "valid": bool(row.get("valid")),
                           "serving": bool(row.get("serving"))})
        stages.append(shards)
    return {"fanout": plan["fanout"], "flat": plan.get("flat", False), "stages": stages,
            "fallback": serving.get("fallback"), "falling_back": bool(serving.get("falling-back")),
            "served_stage": serving.get("stage"), "served_clients": serving.get("clients", 0),
            "cached": sum(s["cached"] for st in stages for s in st)}


def print_tree(tree: dict[str, Any], console: Console) -> None:
    kind = "flat shards (ensemble)" if tree["flat"] else f"fanout R = {tree['fanout']}"
    console.print(f"[bold]shard tree[/] {len(tree['stages'])} stage(s), {kind}, {tree['cached']} cached shard models")
    for p, stage in enumerate(tree["stages"], start=1):
        parts = []
        for s in stage:
            style = "green" if s["valid"] else "red"
            mark = "●" if s["serving"] else ""
            parts.append(f"[{style}]{mark}s{s['artifact'].rsplit('/s', 1)[1]}[/]{{{','.join(map(str, s['clients']))}}}"
                         f"×{s['rounds']}")
        console.print(f"  stage {p}: " + "  ".join(parts), soft_wrap=True)
    if tree["falling_back"]:
        if tree["served_stage"]:
            console.print(f"[yellow]the root is invalid: serving the last valid model, stage {tree['served_stage']} "
                          f"({tree['served_clients']} clients), until `fedforget retrain` "
                          "(fedshard.fallback='last-valid')[/]")
        else:
            console.print("[yellow]the root is invalid and fedshard.fallback='refuse': nothing is served until "
                          "`fedforget retrain`[/]")


def status(view: Any) -> dict[str, Any]:  # noqa: ANN401 - a StatusView
    return {"tree": tree_summary(view.manifest, view.artifacts, view.serving)}


def print_status(status: dict[str, Any], console: Console) -> None:
    if status.get("tree"):
        print_tree(status["tree"], console)
