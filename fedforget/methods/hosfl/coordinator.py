"""The split methods' part of ``fedforget status``: traffic by direction and kind, samples and client memory."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from fedforget.methods.hosfl.plan import summarize_traffic


def split_summary(manifest: dict[str, Any], metrics: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Traffic by direction and kind (total and per client-round), samples and client memory of the split
    run that built what is served (a retrain's rounds follow the training's in ``metrics.jsonl``)."""
    info = manifest.get("split")
    if not info:
        return None
    starts = [i for i, m in enumerate(metrics) if m.get("round") == 0]
    rows = [m for m in metrics[starts[-1] if starts else 0 :] if "bytes" in m]
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


def status(view: Any) -> dict[str, Any]:  # noqa: ANN401 - a StatusView
    return {"split": split_summary(view.manifest, view.store.metrics())}


def print_status(status: dict[str, Any], console: Console) -> None:
    if status.get("split"):
        print_split_summary(status["split"], console)
