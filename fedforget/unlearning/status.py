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
        "split": split_summary(manifest, metrics),
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
    if status.get("split"):
        print_split_summary(status["split"], console)
    if not status["serving"]:
        console.print("[yellow]nothing is served yet: the run did not finish[/]")


# -- HO-SFL and the split baselines (issue 4) ----------------------------------------------------
def split_summary(manifest: dict[str, Any], metrics: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Traffic by direction and kind (total and per client-round), samples and client memory of a split run."""
    from fedforget.core.hosfl_plan import summarize_traffic

    info = manifest.get("split")
    if not info:
        return None
    rows = [m for m in metrics if "bytes" in m]
    traffic = summarize_traffic(rows)
    return {
        "cut": info.get("cut"), "d_c": info.get("d_c"), "d_s": info.get("d_s"),
        "perturbations": info.get("perturbations"), "mu": info.get("mu"),
        "rounds": len(rows), "client_rounds": traffic["client-rounds"],
        "samples": max((int(m.get("samples-total", 0)) for m in rows), default=0),
        "bytes_total": traffic["total"], "bytes_per_client_round": traffic["per-client-round"],
        "client_peak_rss_mb": max((float(m.get("client-peak-rss-mb", 0.0)) for m in rows), default=0.0),
        "dropped_client_rounds": sum(len(m.get("dropped", [])) for m in rows),
    }


def print_split_summary(split: dict[str, Any], console: Console) -> None:
    console.print(f"[bold]split[/] cut {split['cut']} · d_c {split['d_c']:,} · d_s {split['d_s']:,} · "
                  f"{split['rounds']} rounds · {split['client_rounds']} client-rounds · {split['samples']:,} samples · "
                  f"{split['dropped_client_rounds']} dropped · client peak RSS {split['client_peak_rss_mb']:.0f} MB")
    for direction in ("up", "down"):
        kinds = split["bytes_total"][direction]
        per = split["bytes_per_client_round"][direction]
        console.print(f"  {direction:>4}: " + " · ".join(
            f"{k} {kinds[k] / 1e6:.3f} MB ({per[k]:,.0f} B/client-round)" for k in kinds))
