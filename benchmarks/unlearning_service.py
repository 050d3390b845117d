"""The unlearning service's measured claims: forget latency vs retraining, service curves, deletions before a
retrain (next to the closed forms) and training cost per method.

Trains, with the real ServerApp and ClientApp on the in-process Grid (bit-identical to Ray and the
deployment), FedSGT (L groups, B sequences), FedCIO (c clusters, T rounds), SISA (m shards × slices)
and the retrain baseline (fedavg, T rounds) on the same 10 clients and data, then replays one seeded
sequence of deletion requests ("100 records of one client slice", the FedSGT paper's request) through
the real forget path (`fedforget.unlearning.forget`) and evaluates what is served after each request:
FedSGT under AllSeq, MinSeq and LongSeq, FedCIO, SISA, and fedavg retrained from scratch every few
requests. Deletions before a retrain are also counted on many random request sequences replayed on
copies of each trained store's ledger (the real forget path again, no training needed).

    python benchmarks/unlearning_service.py                    # fmnist-cnn, L = B = 10 (about 20 min)
    python benchmarks/unlearning_service.py --task rt-minilm --train-size 2000
    python benchmarks/unlearning_service.py --quick --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import machine_info, quiet_flower
from rich.console import Console
from rich.progress import Progress

from fedforget.core.serving_plans import compute_serving
from fedforget.federation.serve import serving_accuracy
from fedforget.inprocess import run_in_process
from fedforget.methods.chains.theory import deletion_rate_closed_form
from fedforget.store import Store
from fedforget.tasks.registry import load_task_data
from fedforget.unlearning.evaluate import stored_config
from fedforget.unlearning.forget import forget_request

NODES = 10
console = Console()


def method_configs(args: argparse.Namespace) -> dict[str, dict[str, object]]:
    common = {"task": args.task, "partitioner": "dirichlet", "dirichlet-alpha": 0.3, "slices-per-client": 5,
              "seed": args.seed, "train-size": args.train_size, "test-size": args.test_size}
    return {
        "fedsgt": {**common, "method": "fedsgt", "chains.groups": args.groups, "chains.budget": args.budget},
        "fedcio": {**common, "method": "fedcio", "chains.clusters": args.clusters, "num-rounds": args.rounds},
        "sisa": {**common, "method": "sisa", "chains.shards": args.sisa_shards,
                 "chains.groups": args.groups // args.sisa_shards},
        "fedavg": {**common, "method": "fedavg", "num-rounds": args.rounds},
    }


def ledger_rows(store: Store) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    ledger = store.ledger()
    try:
        return ledger.plan(), ledger.artifacts(), ledger.serving()
    finally:
        ledger.close()


def training_cost(store: Store, wall: float, method: str) -> dict[str, Any]:
    """Client-rounds and bytes from the metrics the ServerApp wrote from the real messages."""
    rows = store.metrics()
    waves = [r for r in rows if "wave" in r]
    if waves:
        return {"wall-s": wall, "client-rounds": sum(r["client-rounds"] for r in waves),
                "bytes-down": sum(r["bytes-down"] for r in waves), "bytes-up": sum(r["bytes-up"] for r in waves),
                "exchanges": len(waves)}
    rounds = [r for r in rows if r.get("round", 0) > 0 and "trained" in r]
    _, artifacts, _ = ledger_rows(store)
    size = store.artifact_path(artifacts[0]["sha256"]).stat().st_size
    client_rounds = sum(len(r["trained"]) for r in rounds)
    # fedavg sends the adapter + head down and up once per client-round (safetensors size as the payload)
    return {"wall-s": wall, "client-rounds": client_rounds, "bytes-down": client_rounds * size,
            "bytes-up": client_rounds * size, "exchanges": len(rounds)}


def request_sequence(store: Store, count: int, seed: int, batch: int) -> list[list[int]]:
    """Each request: up to ``batch`` not yet requested records of one slice chosen uniformly at random."""
    rng = random.Random(seed)
    remaining = {f"{p}:{s}": list(ids) for p, parts in store.manifest()["partitions"].items()
                 for s, ids in enumerate(parts) if ids}
    out = []
    for _ in range(count):
        units = sorted(u for u, ids in remaining.items() if ids)
        if not units:
            break
        unit = rng.choice(units)
        ids = remaining[unit]
        rng.shuffle(ids)
        out.append(sorted(ids[:batch]))
        remaining[unit] = ids[batch:]
    return out


def accuracy_now(store: Store, data, plan_override: str | None = None) -> float | None:  # noqa: ANN001
    plan, artifacts, serving = ledger_rows(store)
    if plan_override:
        plan = {**plan, "serving": plan_override}
        serving = compute_serving(plan, {a["artifact"] for a in artifacts if a["valid"]})
    if not serving.get("available"):
        return None
    cfg = stored_config(store)
    return serving_accuracy(cfg, data.num_classes, store, plan, serving, artifacts, data.test.inputs,
                            data.test.labels)["accuracy"]


def replay_deletions(store: Store, trials: int, seed: int, work: Path) -> list[int]:
    """Requests (one random slice each) until nothing is served, on copies of the store's ledger."""
    counts = []
    units = [f"{p}:{s}" for p, parts in store.manifest()["partitions"].items() for s, ids in enumerate(parts) if ids]
    for t in range(trials):
        copy = work / f"replay-{t}"
        copy.mkdir()
        shutil.copy(store.root / "manifest.json", copy / "manifest.json")
        shutil.copy(store.root / "ledger.sqlite", copy / "ledger.sqlite")
        rng = random.Random(seed * 100003 + t)
        handle = Store.open(copy)
        parts = store.manifest()["partitions"]
        n = 0
        while True:
            unit = rng.choice(units)
            p, s = unit.split(":")
            n += 1
            result = forget_request(handle, samples=[rng.choice(parts[p][int(s)])])
            if not result.serving.get("available"):
                break
        counts.append(n)
        shutil.rmtree(copy)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="fmnist-cnn")
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--budget", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=5)
    parser.add_argument("--sisa-shards", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--batch", type=int, default=100, help="records per request")
    parser.add_argument("--retrain-every", type=int, default=10)
    parser.add_argument("--latency-requests", type=int, default=200)
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--train-size", type=int, default=0)
    parser.add_argument("--test-size", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run (digits-mlp, L = B = 3)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "results")
    args = parser.parse_args()
    if args.quick:
        args.task, args.groups, args.budget, args.clusters, args.rounds = "digits-mlp", 4, 4, 2, 2
        args.requests, args.batch, args.retrain_every, args.latency_requests, args.replays = 6, 20, 3, 20, 10
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fedforget-bench-"))
    result: dict[str, Any] = {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()},
                              "nodes": NODES}
    try:
        stores: dict[str, Store] = {}
        cost: dict[str, Any] = {}
        with quiet_flower():
            for name, cfg in method_configs(args).items():
                console.print(f"training [bold]{name}[/] on {args.task} …")
                start = time.perf_counter()
                run_in_process({**cfg, "store": str(work / name)}, NODES)
                wall = time.perf_counter() - start
                stores[name] = Store.open(work / name)
                cost[name] = training_cost(stores[name], wall, name)
                console.print(f"  {wall:.0f} s, {cost[name]['client-rounds']} client-rounds")
        result["training-cost"] = cost
        data = load_task_data(stored_config(stores["fedsgt"]))

        # 1. forget latency on a copy of the FedSGT store, against a full retrain's wall time
        lat_store = work / "latency"
        shutil.copytree(stores["fedsgt"].root, lat_store)
        handle = Store.open(lat_store)
        rng = random.Random(args.seed)
        all_ids = sorted(i for parts in handle.manifest()["partitions"].values() for s in parts for i in s)
        latencies = []
        for sid in rng.sample(all_ids, min(args.latency_requests, len(all_ids))):
            start = time.perf_counter()
            forget_request(handle, samples=[sid])
            latencies.append((time.perf_counter() - start) * 1000.0)
        lat = sorted(latencies)
        p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        retrain_s = cost["fedavg"]["wall-s"]
        result["forget-latency"] = {"requests": len(lat), "p50-ms": p50, "p99-ms": p99, "mean-ms":
                                    statistics.fmean(lat), "retrain-wall-s": retrain_s,
                                    "retrain-over-forget-p50": retrain_s * 1000.0 / p50}
        console.print(f"forget p50 {p50:.2f} ms, p99 {p99:.2f} ms; retrain {retrain_s:.0f} s "
                      f"(×{retrain_s * 1000 / p50:,.0f})")

        # 2. service curve: the same requests through every method's forget path
        requests = request_sequence(stores["fedsgt"], args.requests, args.seed, args.batch)
        curves: dict[str, list[float | None]] = {k: [] for k in
                                                 ("fedsgt-allseq", "fedsgt-minseq", "fedsgt-longseq", "fedcio", "sisa")}
        retrain_curve: list[tuple[int, float]] = []
        copies = {}
        for name in ("fedsgt", "fedcio", "sisa", "fedavg"):
            shutil.copytree(stores[name].root, work / f"curve-{name}")
            copies[name] = Store.open(work / f"curve-{name}")
        retrain_walls = []
        with Progress(console=console) as progress, quiet_flower():
            bar = progress.add_task("requests", total=len(requests) + 1)
            for r in range(len(requests) + 1):
                if r > 0:
                    for store in copies.values():
                        forget_request(store, samples=requests[r - 1])
                for strategy in ("allseq", "minseq", "longseq"):
                    curves[f"fedsgt-{strategy}"].append(accuracy_now(copies["fedsgt"], data, strategy))
                curves["fedcio"].append(accuracy_now(copies["fedcio"], data))
                curves["sisa"].append(accuracy_now(copies["sisa"], data))
                if r % args.retrain_every == 0:
                    if r > 0:
                        start = time.perf_counter()
                        config = {**copies["fedavg"].manifest()["config"], "store": str(copies["fedavg"].root),
                                  "action": "retrain"}
                        run_in_process(config, NODES)
                        retrain_walls.append(time.perf_counter() - start)
                    retrain_curve.append((r, accuracy_now(copies["fedavg"], data)))
                progress.advance(bar)
        failures = {k: next((i for i, a in enumerate(v) if a is None), None) for k, v in curves.items()}
        result["service-curve"] = {"requests": len(requests), "records-per-request": args.batch, "curves": curves,
                                   "retrain": retrain_curve, "retrain-wall-s": retrain_walls,
                                   "first-request-without-service": failures}

        # 3. deletions handled before a retrain: real forget path on ledger copies vs the closed forms
        replay: dict[str, Any] = {}
        theory = {"fedsgt": deletion_rate_closed_form("fedsgt", args.groups, args.budget),
                  "fedcio": deletion_rate_closed_form("fedcio", 1, 1, clusters=args.clusters),
                  "sisa": deletion_rate_closed_form("sisa", args.groups // args.sisa_shards, 1,
                                                    shards=args.sisa_shards)}
        for name in ("fedsgt", "fedcio", "sisa"):
            counts = replay_deletions(stores[name], args.replays, args.seed, work)
            mean = statistics.fmean(counts)
            replay[name] = {"trials": len(counts), "measured-mean": mean,
                            "measured-stderr": statistics.stdev(counts) / len(counts) ** 0.5 if len(counts) > 1
                            else 0.0, "closed-form": theory[name]}
            console.print(f"{name}: {mean:.2f} requests until retrain (closed form {theory[name]:.2f})")
        result["deletions-before-retrain"] = replay
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stem = args.out / f"unlearning_{args.task}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2, sort_keys=True), encoding="utf-8")
    plot(result, stem.with_suffix(".png"), args)
    console.print(f"wrote {stem}.json and .png")


def plot(result: dict[str, Any], path: Path, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    ax = axes[0]
    styles = {"fedsgt-allseq": ("C0", "-"), "fedsgt-minseq": ("C0", "--"), "fedsgt-longseq": ("C0", ":"),
              "fedcio": ("C1", "-"), "sisa": ("C2", "-")}
    for name, values in result["service-curve"]["curves"].items():
        xs = [i for i, v in enumerate(values) if v is not None]
        color, style = styles[name]
        ax.plot(xs, [values[i] for i in xs], style, color=color, label=name)
    rx, ry = zip(*[(r, a) for r, a in result["service-curve"]["retrain"] if a is not None], strict=True)
    ax.plot(rx, ry, "s-", color="C3", label="retrain (fedavg)")
    ax.set_xlabel(f"deletion requests ({result['service-curve']['records-per-request']} records of one slice each)")
    ax.set_ylabel("test accuracy of what is served")
    ax.set_title(f"{args.task}: service curve (L={args.groups}, B={args.budget}, Dirichlet 0.3)")
    ax.legend(fontsize=8)
    ax = axes[1]
    names = list(result["deletions-before-retrain"])
    measured = [result["deletions-before-retrain"][n]["measured-mean"] for n in names]
    closed = [result["deletions-before-retrain"][n]["closed-form"] for n in names]
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], measured, 0.4, label="measured (real forget path)")
    ax.bar([x + 0.2 for x in xs], closed, 0.4, label="closed form")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("requests until a retrain is required")
    ax.set_title("deletions handled before retraining")
    ax.legend(fontsize=8)
    ax = axes[2]
    cost = result["training-cost"]
    names = list(cost)
    ax.bar(names, [cost[n]["client-rounds"] for n in names], color="C4")
    ax.set_ylabel("client-rounds")
    ax2 = ax.twinx()
    ax2.plot(names, [cost[n]["wall-s"] for n in names], "o-", color="k")
    ax2.set_ylabel("wall seconds (in process, 2 cores)")
    ax.set_title("training cost")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
