"""Is what each method serves worth serving? Methods × tasks × partitionings × seeds, against FedAvg.

Every run goes through the in-process harness (the real ServerApp and ClientApp, bit-identical to Ray
and the deployment) with only the keys named here; everything else is the user's default
(`fedforget/core/defaults.py`), because "defaults that learn" is what is measured. Per (task,
partitioning) it reports mean ± std over seeds, the **paired** difference against `fedavg` on the same
partition and seed, the training cost taken from the real messages (client-rounds, bytes down and up,
wall seconds; FedSGT and S3T stores are also scored under every serving strategy, ``fedsgt@longseq``,
at no extra training), and two reference rows on every task: `probe` (frozen backbone, head only, FedAvg: the
floor) and `central` (LoRA + head on all training data in one client, same optimiser steps per sample:
the ceiling).

    python benchmarks/utility.py --tasks fmnist-cnn --partitions iid,dir0.3 --seeds 1,2,3 \\
        --methods fedavg,fedsgt,s3t,fedshard --train-size 4000 --test-size 1000
    python benchmarks/utility.py --variant "fedsgt-r16=method='fedsgt' lora-r=16" --methods fedavg,fedsgt-r16
    python benchmarks/utility.py --replot docs/results/utility_fmnist-cnn.json [--markdown]

Results: ``<out>.json`` (one row per run, a summary per method, the machine) and ``<out>.png``.
Rows are appended as they finish (``--resume`` skips rows already in the JSON), so a long sweep can be
stopped and continued.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import machine_info, quiet_flower
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedforget.core.config import key_applies
from fedforget.core.serving_plans import compute_serving
from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.unlearning.evaluate import evaluate_store

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=170)

#: Named method variants: run-config overrides on top of the defaults (and of --common).
VARIANTS: dict[str, dict[str, object]] = {
    "fedavg": {"method": "fedavg"},
    "probe": {"method": "fedavg", "head-only": True},
    "central": {"method": "fedavg"},  # one client holding everything (see run_one)
    "fedsgt": {"method": "fedsgt", "chains.serving": "allseq"},
    "s3t": {"method": "s3t", "chains.shards": 2},
    "sisa": {"method": "sisa", "chains.shards": 2},
    "fedcio": {"method": "fedcio"},
    "fedshard": {"method": "fedshard"},
    "safe": {"method": "safe"},
    # SAFE's references on the same InCA adapters: one adapter per class without sharding, and SISA with
    # as many uniform shards as SAFE's ten-class default graph has cliques (4 coarse × 2 fine = 8)
    "safe-flat": {"method": "safe", "safe.coarse": 1, "safe.fine": 1, "safe.prototypes": False},
    "sisa-inca": {"method": "protosisa", "safe.coarse": 8, "safe.fine": 1, "safe.prototypes": False},
    # Flower's own strategies made forgettable (method='replay'), each with its run-config defaults
    **{f"replay-{s}": {"method": "replay", "replay.strategy": s}
       for s in ("fedavg", "fedprox", "fedavgm", "fedadagrad", "fedadam", "fedyogi")},
}
PARTITIONS: dict[str, dict[str, object]] = {
    "iid": {"partitioner": "iid"},
    "dir0.5": {"partitioner": "dirichlet", "dirichlet-alpha": 0.5},
    "dir0.3": {"partitioner": "dirichlet", "dirichlet-alpha": 0.3},
    "dir0.1": {"partitioner": "dirichlet", "dirichlet-alpha": 0.1},
}
REFERENCE = ("probe", "central")


def parse_overrides(text: str) -> dict[str, object]:
    """``"a=1 b='x'"`` → ``{"a": 1, "b": "x"}`` with TOML value types, as ``flwr run --run-config``."""
    out: dict[str, object] = {}
    for item in shlex.split(text, posix=False):
        key, _, value = item.partition("=")
        out[key] = tomllib.loads(f"v = {value}")["v"]
    return out


def training_cost(store: Store) -> dict[str, int]:
    """Client-rounds and tensor bytes of the training messages, summed from ``metrics.jsonl``."""
    cost = {"client-rounds": 0, "bytes-down": 0, "bytes-up": 0}
    for row in store.metrics():
        if row.get("action", "train") != "train":
            continue
        if "trained" in row:  # fedavg rounds
            cost["client-rounds"] += len(row["trained"])
        elif "client-rounds" in row and ("wave" in row or "round" in row):
            cost["client-rounds"] += int(row["client-rounds"])
        cost["bytes-down"] += int(row.get("bytes-down", 0))
        cost["bytes-up"] += int(row.get("bytes-up", 0))
    return cost


def other_servings(store: Store) -> dict[str, float]:
    """The same trained store served other ways, no retraining: FedSGT/S3T under each serving strategy,
    FedCIO with equal cluster votes instead of votes by examples."""
    from fedforget.federation.serve import serving_accuracy
    from fedforget.methods.chains.serving import STRATEGIES
    from fedforget.tasks.registry import load_task_data
    from fedforget.unlearning.evaluate import stored_config

    ledger = store.ledger()
    try:
        plan, artifacts = ledger.plan(), ledger.artifacts()
    finally:
        ledger.close()
    if plan.get("kind") != "chains" or plan.get("method") not in ("fedsgt", "s3t", "fedcio"):
        return {}
    cfg = stored_config(store)
    data = load_task_data(cfg)
    valid = {a["artifact"] for a in artifacts if a["valid"]}
    if plan["method"] == "fedcio":  # same served modules; only the vote rule reads the renamed method
        alternatives = {"equal-votes": ({**plan, "method": "equal-votes"}, compute_serving(plan, valid))}
    else:
        alternatives = {strategy: ({**plan, "serving": strategy}, compute_serving({**plan, "serving": strategy},
                                                                                  valid))
                        for strategy in STRATEGIES}
    return {name: serving_accuracy(cfg, data.num_classes, store, alt, serving, artifacts,
                                   data.test.inputs, data.test.labels)["accuracy"]
            for name, (alt, serving) in alternatives.items()}


def expand_servings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows plus one derived row per other serving strategy (``fedsgt@longseq``), same cost."""
    out = list(rows)
    for r in rows:
        for strategy, acc in r.get("serving", {}).items():
            if strategy != r["config"].get("chains.serving"):
                out.append({**r, "method": f"{r['method']}@{strategy}", "accuracy": acc, "serving": {}})
    return out


def run_one(task: str, partition: str, seed: int, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train one configuration in process; its served accuracy and training cost."""
    method = str(VARIANTS[variant].get("method", "fedavg"))
    common = {k: v for k, v in args.common_overrides.items() if key_applies(k, method, task)}
    config: dict[str, object] = {"task": task, "seed": seed, "train-size": args.train_size,
                                 "test-size": args.test_size, **PARTITIONS[partition], **common,
                                 **VARIANTS[variant]}
    nodes = args.clients
    if variant == "central":
        nodes = 1
        config.update({"partitioner": "iid", "slices-per-client": 1})
    work = Path(tempfile.mkdtemp(prefix="utility-"))
    config["store"] = str(work / "store")
    started = time.monotonic()
    try:
        with quiet_flower():
            run_in_process(config, nodes)
        wall = time.monotonic() - started
        store = Store.open(config["store"])
        result = evaluate_store(store)
        resolved = store.manifest()["config"]
        return {"task": task, "partition": partition, "seed": seed, "method": variant,
                "accuracy": float(result["accuracy"]), "wall-s": round(wall, 2), **training_cost(store),
                "serving": other_servings(store), "config": {k: resolved[k] for k in sorted(resolved) if k != "store"}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± std per (task, partition, method) and the paired difference against fedavg."""
    rows = expand_servings(rows)
    fedavg = {(r["task"], r["partition"], r["seed"]): r["accuracy"] for r in rows if r["method"] == "fedavg"}
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    partitions = {r["task"]: sorted({q["partition"] for q in rows if q["task"] == r["task"]}) for r in rows}
    for r in rows:  # the ceiling does not depend on the partitioning: show it in every panel of its task
        for partition in partitions[r["task"]] if r["method"] == "central" else [r["partition"]]:
            groups.setdefault((r["task"], partition, r["method"]), []).append(r)
    out = []
    for (task, partition, method), runs in sorted(groups.items()):
        acc = [r["accuracy"] for r in runs]
        diffs = [r["accuracy"] - fedavg[(task, partition, r["seed"])] for r in runs
                 if (task, partition, r["seed"]) in fedavg]
        out.append({
            "task": task, "partition": partition, "method": method, "seeds": sorted(r["seed"] for r in runs),
            "mean": statistics.fmean(acc), "std": statistics.stdev(acc) if len(acc) > 1 else 0.0,
            "paired-diff-mean": statistics.fmean(diffs) if diffs else None,
            "paired-diff-std": statistics.stdev(diffs) if len(diffs) > 1 else None,
            "paired-diffs": diffs,
            **{k: statistics.fmean(r[k] for r in runs) for k in ("client-rounds", "bytes-down", "bytes-up", "wall-s")},
        })
    return out


def markdown(summary: list[dict[str, Any]]) -> str:
    """The summary as a Markdown table (for the README)."""
    lines = ["| task | partitioning | method | seeds | accuracy | Δ vs fedavg (points, paired) | client-rounds "
             "| MB down / up |", "|---|---|---|---|---|---|---|---|"]
    for s in summary:
        diff = "—" if s["paired-diff-mean"] is None or s["method"] == "fedavg" else (
            f"{100 * s['paired-diff-mean']:+.1f} ± {100 * (s['paired-diff-std'] or 0):.1f}")
        lines.append(f"| {s['task']} | {s['partition']} | {s['method']} | {len(s['seeds'])} | "
                     f"{s['mean']:.3f} ± {s['std']:.3f} | {diff} | {s['client-rounds']:.0f} | "
                     f"{s['bytes-down'] / 1e6:.1f} / {s['bytes-up'] / 1e6:.1f} |")
    return "\n".join(lines)


def show(summary: list[dict[str, Any]]) -> None:
    table = Table(title="served test accuracy (mean ± std over seeds), paired against fedavg")
    for col in ("task", "partition", "method", "n", "accuracy", "Δ vs fedavg (pts)", "client-rounds", "MB down",
                "MB up", "wall s"):
        table.add_column(col, justify="right" if col not in ("task", "partition", "method") else "left")
    for s in summary:
        diff = "" if s["paired-diff-mean"] is None or s["method"] == "fedavg" else (
            f"{100 * s['paired-diff-mean']:+.1f} ± {100 * (s['paired-diff-std'] or 0):.1f}")
        table.add_row(s["task"], s["partition"], s["method"], str(len(s["seeds"])),
                      f"{s['mean']:.3f} ± {s['std']:.3f}", diff, f"{s['client-rounds']:.0f}",
                      f"{s['bytes-down'] / 1e6:.2f}", f"{s['bytes-up'] / 1e6:.2f}", f"{s['wall-s']:.0f}")
    console.print(table)


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(s["task"], s["partition"]) for s in summary})
    fig, axes = plt.subplots(1, len(panels), figsize=(max(7.5, 4.2 * len(panels)), 4.2), squeeze=False)
    for ax, (task, partition) in zip(axes[0], panels, strict=True):
        rows = [s for s in summary if (s["task"], s["partition"]) == (task, partition)]
        rows.sort(key=lambda s: (s["method"] not in REFERENCE, s["method"] != "fedavg", s["method"]))
        names = [s["method"] for s in rows]
        colors = ["#999999" if n in REFERENCE else "#1f77b4" if n == "fedavg" else "#ff7f0e" for n in names]
        ax.bar(range(len(rows)), [s["mean"] for s in rows], yerr=[s["std"] for s in rows], color=colors, capsize=3)
        fedavg = next((s["mean"] for s in rows if s["method"] == "fedavg"), None)
        if fedavg is not None:
            ax.axhline(fedavg, color="#1f77b4", lw=0.8, ls="--")
            ax.axhline(fedavg - 0.01, color="#1f77b4", lw=0.6, ls=":")
        ax.set_xticks(range(len(rows)), names, rotation=45, ha="right", fontsize=8)
        low = min(s["mean"] - s["std"] for s in rows)
        ax.set_ylim(max(0.0, math.floor(low * 20) / 20 - 0.05), 1.0)
        ax.set_title(f"{task}, {partition}", fontsize=9)
        ax.set_ylabel("served test accuracy")
    fig.suptitle("utility: grey = probe (floor) / central (ceiling); dashed = fedavg, dotted = fedavg − 1 pt",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(path: Path, rows: list[dict[str, Any]], args: argparse.Namespace | None) -> list[dict[str, Any]]:
    summary = summarise(rows)
    old = json.loads(path.read_text()) if path.exists() else {}
    doc = {"benchmark": "utility", "machine": old.get("machine") or machine_info(),
           "setup": old.get("setup") if args is None else {
               "clients": args.clients, "train-size": args.train_size, "test-size": args.test_size,
               "common": args.common_overrides,
               "variants": {k: VARIANTS[k] for k in sorted({r["method"] for r in rows})},
               "partitions": PARTITIONS, "runtime": "in process (real ServerApp/ClientApp)"},
           "rows": rows, "summary": summary}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    plot(summary, path.with_suffix(".png"))
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="fmnist-cnn")
    parser.add_argument("--partitions", default="iid,dir0.3")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--methods", default="fedavg,fedsgt")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--train-size", type=int, default=0, help="0 = the task's default")
    parser.add_argument("--test-size", type=int, default=0)
    parser.add_argument("--common", default="",
                        help="run-config overrides for every run, e.g. \"chains.groups=5 chains.budget=5\" "
                             "(a grouped key only reaches the methods that read it)")
    parser.add_argument("--variant", action="append", default=[], help="NAME=\"run-config overrides\"")
    parser.add_argument("--no-reference", action="store_true", help="skip the probe and central rows")
    parser.add_argument("--out", default="", help="output path without suffix (default docs/results/utility_<tasks>)")
    parser.add_argument("--resume", action="store_true", help="keep rows already in the JSON, run the rest")
    parser.add_argument("--replot", default="", help="redraw table and PNG from a JSON and exit")
    parser.add_argument("--markdown", action="store_true", help="with --replot: print the table as Markdown")
    args = parser.parse_args(argv)
    if args.replot:
        path = Path(args.replot)
        summary = write(path, json.loads(path.read_text())["rows"], None)
        print(markdown(summary)) if args.markdown else show(summary)
        return
    for spec in args.variant:
        name, _, text = spec.partition("=")
        VARIANTS[name] = parse_overrides(text)
    args.common_overrides = parse_overrides(args.common)
    tasks, partitions = args.tasks.split(","), args.partitions.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    if not args.no_reference:
        methods += [m for m in REFERENCE if m not in methods]
    unknown = [m for m in methods if m not in VARIANTS] + [p for p in partitions if p not in PARTITIONS]
    if unknown:
        sys.exit(f"utility: unknown method variant(s) or partitioning(s): {', '.join(unknown)}")
    out = Path(args.out or ROOT / "docs" / "results" / f"utility_{'+'.join(tasks)}")
    path = out.with_suffix(".json")
    rows: list[dict[str, Any]] = json.loads(path.read_text())["rows"] if args.resume and path.exists() else []
    done = {(r["task"], r["partition"], r["seed"], r["method"]) for r in rows}
    todo = [(t, p, s, m) for t in tasks for p in partitions for s in seeds for m in methods
            if (t, p, s, m) not in done and not (m == "central" and p != partitions[0])]
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        bar = progress.add_task("utility", total=len(todo))
        for task, partition, seed, method in todo:
            progress.update(bar, description=f"{task} {partition} seed {seed} {method}")
            row = run_one(task, partition, seed, method, args)
            rows.append(row)
            progress.console.print(f"{task} {partition} seed {seed} {method}: accuracy {row['accuracy']:.4f}, "
                                   f"{row['client-rounds']} client-rounds, {row['wall-s']:.0f} s")
            write(path, rows, args)
            progress.advance(bar)
    show(write(path, rows, args))
    console.print(f"wrote {path} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
