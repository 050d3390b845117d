"""How accurate does FedAvg of LoRA + head get on each task, on a stated CPU budget?

Runs ``fedavg`` with 10 clients in the in-process harness (the real ServerApp and ClientApp,
``fedforget.inprocess.run_in_process``) once per task, every key not in the task's budget at its
``[tool.flwr.app.config]`` default (Dirichlet(0.5) partitions, Adam lr 0.005, batch 32, LoRA r=4),
and records the central test accuracy per round, the wall seconds and the trainable (LoRA + head)
vs frozen backbone parameter counts. Writes ``docs/results/task_accuracy.json`` and ``.png``.

    python benchmarks/task_accuracy.py                       # the full budgets (about 25 min on 2 cores)
    python benchmarks/task_accuracy.py --quick --out /tmp/smoke
    python benchmarks/task_accuracy.py --tasks fmnist-cnn,rt-minilm
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from bench_common import RoundWatcher, machine_info, quiet_flower
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedforget.core.config import parse_run_config
from fedforget.federation.run_setup import build_model
from fedforget.inprocess import default_run_config, run_in_process
from fedforget.methods.fedavg.server import ARTIFACT
from fedforget.store import Store
from fedforget.tasks.registry import load_task_data

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = 10
SEED = 1

#: Per-task budgets (run-config overrides). Chosen so the three together take about 25 minutes with one
#: torch thread on a 2-core CPU: per round every training sample is seen local-epochs times and the test
#: split is evaluated twice (the clients' shares, then centrally); measured single-thread throughput is
#: roughly 120 train / 330 eval samples/s for fmnist-effnet and 35 / 75 for rt-minilm.
BUDGETS: dict[str, dict[str, int]] = {
    "fmnist-cnn": {"num-rounds": 10, "local-epochs": 1, "train-size": 12000, "test-size": 2000},
    "fmnist-effnet": {"num-rounds": 15, "local-epochs": 1, "train-size": 3000, "test-size": 1000},
    "rt-minilm": {"num-rounds": 8, "local-epochs": 1, "train-size": 2000, "test-size": 1000},
}
QUICK: dict[str, dict[str, int]] = {
    "fmnist-cnn": {"num-rounds": 2, "local-epochs": 1, "train-size": 1000, "test-size": 200},
    "fmnist-effnet": {"num-rounds": 1, "local-epochs": 1, "train-size": 200, "test-size": 100},
    "rt-minilm": {"num-rounds": 1, "local-epochs": 1, "train-size": 200, "test-size": 100},
}
console = Console()
if not console.is_terminal:  # a log file: wide enough for the summary table
    console.width = 140


def parameter_counts(task: str, overrides: dict[str, object]) -> dict[str, int]:
    """LoRA, head and frozen backbone parameters of the task's model (the cached one, after the run)."""
    cfg = parse_run_config({**default_run_config(), **overrides})
    model = build_model(cfg, load_task_data(cfg).num_classes).model
    lora = sum(p.numel() for n, p in model.body.named_parameters() if "lora_" in n)
    backbone = sum(p.numel() for n, p in model.body.named_parameters() if "lora_" not in n)
    head = sum(p.numel() for p in model.head.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"lora": lora, "head": head, "trainable": trainable, "backbone": backbone}


def run_task(task: str, budget: dict[str, int], work: Path, progress: Progress) -> dict[str, Any]:
    store = work / task
    overrides = {"method": "fedavg", "task": task, "seed": SEED, **budget}
    bar = progress.add_task(task, total=budget["num-rounds"], acc="loading")

    def on_round(rnd: int, acc: float) -> None:
        progress.update(bar, completed=rnd, acc=f"round {rnd}: accuracy {acc:.4f}")

    t0 = time.monotonic()
    with quiet_flower(), RoundWatcher(store, t0, on_round) as watch:
        run_in_process({**overrides, "store": str(store)}, CLIENTS)
    wall = time.monotonic() - t0
    progress.update(bar, acc=f"done in {wall:.0f} s")
    progress.stop_task(bar)
    progress.console.print(f"{task}: {budget['num-rounds']} rounds in {wall:.0f} s")

    rows = [m for m in Store.open(store).metrics() if m.get("artifact") == ARTIFACT]
    cfg = parse_run_config({**default_run_config(), **overrides})
    data = load_task_data(cfg)
    labels = data.test.labels
    seen = {rnd: t for rnd, t, _ in watch.rows}
    times = [seen.get(int(m["round"])) for m in rows]
    round_s = [round(b - a, 2) for a, b in zip(times, times[1:], strict=False) if a is not None and b is not None]
    counts = parameter_counts(task, overrides)
    return {
        "budget": {**budget, "clients": CLIENTS, "batch-size": cfg.batch_size, "lr": cfg.lr,
                   "optimizer": cfg.optimizer, "lora-r": cfg.lora_r, "lora-alpha": cfg.lora_alpha,
                   "partitioner": cfg.partitioner, "dirichlet-alpha": cfg.dirichlet_alpha, "seed": cfg.seed},
        "train-examples": len(data.train),
        "test-examples": len(labels),
        "num-classes": data.num_classes,
        "majority-class-accuracy": float(torch.bincount(labels).max()) / len(labels),
        "accuracy_per_round": [float(m["accuracy"]) for m in rows],
        # the clients' accuracy on each global model: round r's train replies evaluate model r-1, the
        # last model has evaluate messages of its own
        "client_accuracy_per_round": [float(m["received-accuracy"]) for m in rows if "received-accuracy" in m]
        + [float(m["client-accuracy"]) for m in rows[-1:] if "client-accuracy" in m],
        "loss_per_round": [float(m["loss"]) for m in rows],
        "final_accuracy": float(rows[-1]["accuracy"]),
        "best_accuracy": max(float(m["accuracy"]) for m in rows),
        "wall_s": round(wall, 2),
        "startup_s": round(times[0], 2) if times and times[0] is not None else None,
        "round_s": round_s,
        "parameters": {**counts, "trainable_over_backbone": round(counts["trainable"] / counts["backbone"], 6)},
    }


def plot(results: dict[str, dict[str, Any]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for task, r in results.items():
        acc = r["accuracy_per_round"]
        b = r["budget"]
        label = (f"{task}: {acc[-1]:.3f} ({b['num-rounds']} rounds x {b['local-epochs']} local epoch(s), "
                 f"train {r['train-examples']}, test {r['test-examples']}; {r['wall_s'] / 60:.1f} min)")
        line, = ax.plot(range(len(acc)), acc, marker="o", markersize=3, label=label)
        ax.axhline(r["majority-class-accuracy"], color=line.get_color(), linestyle=":", linewidth=0.8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round (0 = before training)")
    ax.set_ylabel("central test accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8, loc="lower right", title="dotted: majority class", title_fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--tasks", default=",".join(BUDGETS), help="comma-separated tasks")
    parser.add_argument("--quick", action="store_true", help="tiny budgets, for a smoke test")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="where the .json and .png go")
    parser.add_argument("--keep", action="store_true", help="keep the temporary stores")
    args = parser.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    budgets = QUICK if args.quick else BUDGETS
    unknown = [t for t in tasks if t not in budgets]
    if unknown:
        parser.error(f"no budget for {', '.join(unknown)}; known: {', '.join(budgets)}")

    info = machine_info()
    console.rule(f"[bold]fedforget task accuracy: fedavg, {CLIENTS} clients, in-process"
                 + (" (quick budgets)" if args.quick else ""))
    for task in tasks:
        console.print(f"[dim]{task}: {budgets[task]}[/]")
    work = Path(tempfile.mkdtemp(prefix="fedforget-accuracy-"))
    results: dict[str, dict[str, Any]] = {}
    t_all = time.monotonic()
    with Progress(SpinnerColumn(), TextColumn("[bold blue]{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[acc]}"), TimeElapsedColumn(), console=console) as progress:
        for task in tasks:
            results[task] = run_task(task, budgets[task], work, progress)
    total = time.monotonic() - t_all

    report = {
        "benchmark": "task_accuracy",
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "runtime": f"in-process harness (run_in_process), {CLIENTS} nodes, one client after another",
        "quick": args.quick,
        "machine": info,
        "total_wall_s": round(total, 1),
        "tasks": results,
        "notes": [
            "accuracy: central evaluation of the global LoRA + head on the task's test subset after each round "
            "(round 0 = the seeded initial adapter and head).",
            "parameters: lora + head are trained and exchanged; backbone parameters are frozen and never sent.",
            "Budgets are CPU-time budgets, not tuned for accuracy; lr, batch size and LoRA rank are the defaults.",
        ],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / "task_accuracy.json", args.out / "task_accuracy.png"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot(results, f"fedavg of LoRA + head, {CLIENTS} clients, Dirichlet(0.5) partitions", png_path)

    table = Table(title="task accuracy")
    for col in ("task", "rounds", "epochs", "train", "test", "accuracy", "majority", "wall s", "trainable",
                "backbone"):
        table.add_column(col, justify="left" if col == "task" else "right")
    for task, r in results.items():
        b, p = r["budget"], r["parameters"]
        table.add_row(task, str(b["num-rounds"]), str(b["local-epochs"]), str(r["train-examples"]),
                      str(r["test-examples"]), f"{r['final_accuracy']:.4f}", f"{r['majority-class-accuracy']:.3f}",
                      f"{r['wall_s']:.0f}", f"{p['trainable']:,}", f"{p['backbone']:,}")
    console.print(table)
    console.print(f"total {total:.0f} s; wrote {json_path} and {png_path}")
    if args.keep:
        console.print(f"[dim]kept {work}[/]")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
