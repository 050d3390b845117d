"""``fedforget status``: what a store holds, as a dict (for --json) and as a rich table."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from fedforget.store import Store


def store_status(store: Store) -> dict[str, Any]:
    """Task, method, config, progress, last accuracy, artifacts with sha256 and integrity."""
    manifest = store.manifest()
    inventory = store.inventory()
    metrics = store.metrics()
    evaluated = [m for m in metrics if "accuracy" in m]
    artifacts = [
        {
            "artifact_id": rec.artifact_id,
            "sha256": rec.sha256,
            "kind": rec.kind,
            "valid": rec.valid,
            "intact": store.verify_artifact(rec.sha256),
            "serving": rec.artifact_id in inventory.serving,
            "lineage_units": len(rec.lineage),
        }
        for rec in inventory.artifacts.values()
    ]
    backbone = manifest.get("backbone") or {}
    return {
        "store": str(store.root),
        "task": manifest.get("task"),
        "method": manifest.get("method"),
        "config": manifest.get("config", {}),
        "num_partitions": manifest.get("num-partitions"),
        "rounds_done": int(manifest.get("rounds-done", 0)),
        "rounds_evaluated": max((int(m.get("round", 0)) for m in evaluated), default=0),
        "accuracy": evaluated[-1]["accuracy"] if evaluated else None,
        "serving": list(inventory.serving),
        "artifacts": artifacts,
        "backbone": {"source": backbone.get("source"), "weights_sha256": backbone.get("weights-sha256"),
                     "artifact": backbone.get("artifact")},
        "complete": bool(inventory.serving) and all(a["intact"] for a in artifacts),
    }


def print_status(status: dict[str, Any], console: Console) -> None:
    acc = status["accuracy"]
    console.print(f"[bold]store[/] {status['store']}")
    console.print(f"task [cyan]{status['task']}[/] · method [cyan]{status['method']}[/] · "
                  f"{status['num_partitions']} partitions · rounds done {status['rounds_done']} · "
                  f"accuracy {'—' if acc is None else f'{acc:.4f}'}")
    cfg = status["config"]
    console.print("config " + " ".join(f"{k}={v!r}" for k, v in sorted(cfg.items())), style="dim")
    console.print("[bold]artifacts[/] (● served)")
    for a in status["artifacts"]:
        flags = [
            "valid" if a["valid"] else "[red]invalid[/]",
            "intact" if a["intact"] else "[red]CORRUPT: bytes do not match sha256[/]",
            f"{a['lineage_units']} units",
        ]
        console.print(f" {'●' if a['serving'] else ' '} [cyan]{a['artifact_id']}[/] {a['kind']} · " + " · ".join(flags))
        console.print(f"   sha256 {a['sha256']}", soft_wrap=True)
    if not status["serving"]:
        console.print("[yellow]nothing is served yet: the run did not finish[/]")
