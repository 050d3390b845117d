"""FedShard benchmarks: unlearning speed-up, the A1/A2 ablation, and fairness over leavers.

1. ``speedup``: for K ∈ {16, 32} and R ∈ {2, 4} with constant rounds T0, client-rounds and wall time
   of unlearning one client (path-only retrain) against FedShard training and FedAvg retrained from
   scratch with matched per-client rounds (P·T0), next to the analytical r1.
2. ``accuracy``: FedShard (A1 + A2), naive sharding (random merges, constant rounds), A1 only, and
   FedAvg with matched rounds on fmnist-cnn, Dirichlet α ∈ {0.1, 0.5} (the paper's Fig. 5 ablation).
3. ``fairness``: M_e and M_p for FedShard, FedAvg retraining and flat SISA-style client shards over a
   sequence of leaving clients (same clients, data and reference angles α_c for every method).

Everything runs the real ServerApp/ClientApp in process; results go to docs/results/fedshard_*.json
and .png. Numbers, not assertions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.progress import Progress  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import machine_info, quiet_flower  # noqa: E402

from fedforget.inprocess import run_in_process  # noqa: E402
from fedforget.methods.fedshard.costs import (  # noqa: E402
    MP_EPSILON,
    client_costs,
    efficiency_fairness,
    min_distances,
    performance_fairness,
    speedup_r1,
    training_cost,
    unlearning_cost,
)
from fedforget.methods.fedshard.plan import ShardTree, num_stages  # noqa: E402
from fedforget.store import Store  # noqa: E402
from fedforget.unlearning.forget import forget_request  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"


def timed_run(config: dict[str, Any], nodes: int) -> float:
    start = time.perf_counter()
    with quiet_flower():
        run_in_process(config, nodes)
    return time.perf_counter() - start


def resolved_config(store: Store) -> dict[str, Any]:
    """The run's config as the store's manifest resolved it (every auto key at its value), less the path."""
    config = store.manifest()["config"]
    return {k: config[k] for k in sorted(config) if k != "store"}


def finals(store: Store) -> list[dict[str, Any]]:
    return [m for m in store.metrics() if m.get("final")]


def round_seconds(store: Store, action: str) -> float:
    return sum(float(m["seconds"]) for m in store.metrics() if "seconds" in m and m.get("action") == action)


def retrain(store: Store, nodes: int) -> float:
    return timed_run({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, nodes)


# -- 1. speed-up ----------------------------------------------------------------------------------
def speedup(args: argparse.Namespace, work: Path, progress: Progress) -> list[dict[str, Any]]:
    rows = []
    cases = [(k, r) for k in (16, 32) for r in (2, 4)]
    task = progress.add_task("speed-up", total=len(cases))
    for k, r in cases:
        p = num_stages(k, r)
        base = {"task": args.speed_task, "seed": args.seed, "lr": 0.02, "train-size": args.speed_train_size,
                "test-size": 300, "partitioner": "iid"}
        path = work / f"speed-{k}-{r}"
        train_wall = timed_run({**base, "method": "fedshard", "fedshard.fanout": r, "fedshard.rounds-max": args.t0,
                                "fedshard.rounds-rule": "constant", "store": str(path)}, k)
        store = Store.open(path)
        tree = ShardTree.from_json(store.manifest()["plan"])
        train_rounds = finals(store)[-1]["client-rounds"]
        leaver = tree.stages[0][0].clients[0]
        forget_request(store, clients=[leaver])
        unlearn_wall = retrain(store, k)
        unlearn_rounds = finals(store)[-1]["client-rounds"]
        fedavg_path = work / f"fedavg-{k}-{r}"
        fedavg_wall = timed_run({**base, "method": "fedavg", "num-rounds": p * args.t0, "store": str(fedavg_path)}, k)
        cost = unlearning_cost(tree, [leaver])
        rows.append({
            "clients": k, "fanout": r, "stages": p, "t0": args.t0, "r1": speedup_r1(k, r),
            "training-client-rounds": train_rounds, "unlearning-member-rounds": cost["member-rounds"],
            "unlearning-client-rounds": unlearn_rounds, "critical-path-rounds": cost["critical-path-rounds"],
            "client-round-speedup": train_rounds / cost["member-rounds"],
            "participating-speedup": train_rounds / unlearn_rounds,
            "train-wall-s": train_wall, "unlearn-wall-s": unlearn_wall, "fedavg-wall-s": fedavg_wall,
            "train-round-s": round_seconds(store, "train"), "unlearn-round-s": round_seconds(store, "retrain"),
            "wall-speedup-vs-training": train_wall / unlearn_wall,
            "wall-speedup-vs-fedavg": fedavg_wall / unlearn_wall,
            "round-time-speedup": round_seconds(store, "train") / round_seconds(store, "retrain"),
        })
        progress.advance(task)
    return rows


# -- 2. accuracy ablation -------------------------------------------------------------------------
VARIANTS = {
    "fedshard (A1+A2)": {"fedshard.merge": "a1", "fedshard.rounds-rule": "intent"},
    "A1 only": {"fedshard.merge": "a1", "fedshard.rounds-rule": "constant"},
    "naive sharding": {"fedshard.merge": "random", "fedshard.rounds-rule": "constant"},
}


def accuracy(args: argparse.Namespace, work: Path, progress: Progress) -> list[dict[str, Any]]:
    rows = []
    alphas = (0.1, 0.5)
    task = progress.add_task("accuracy ablation", total=len(alphas) * (len(VARIANTS) + 1))
    for alpha in alphas:
        base = {"task": args.task, "seed": args.seed, "dirichlet-alpha": alpha, "train-size": args.train_size,
                "test-size": args.test_size, "local-epochs": 1}
        for name, extra in VARIANTS.items():
            path = work / f"acc-{alpha}-{name.split()[0]}"
            timed_run({**base, "method": "fedshard", "fedshard.fanout": args.fanout, "fedshard.rounds-min": args.t_min,
                       "fedshard.rounds-max": args.t_max, **extra, "store": str(path)}, args.clients)
            store = Store.open(path)
            tree = ShardTree.from_json(store.manifest()["plan"])
            per_client = training_cost(tree) / tree.num_clients
            rows.append({"alpha": alpha, "variant": name, "accuracy": served_accuracy(store),
                         "rounds-per-client": per_client,
                         "rounds": [[s.rounds for s in stage] for stage in tree.stages],
                         "client-rounds": training_cost(tree), "config": resolved_config(store)})
            progress.advance(task)
        matched = round(max(r["rounds-per-client"] for r in rows if r["alpha"] == alpha))
        path = work / f"acc-{alpha}-fedavg"
        timed_run({**base, "method": "fedavg", "num-rounds": matched, "store": str(path)}, args.clients)
        rows.append({"alpha": alpha, "variant": "fedavg", "accuracy": served_accuracy(Store.open(path)),
                     "rounds-per-client": matched, "client-rounds": matched * args.clients,
                     "config": resolved_config(Store.open(path))})
        progress.advance(task)
    return rows


def served_accuracy(store: Store) -> float:
    """The test accuracy training cached for what it served."""
    ledger = store.ledger()
    try:
        return float(ledger.get_meta("accuracy")["accuracy"])
    finally:
        ledger.close()


# -- 3. fairness over a sequence of leavers --------------------------------------------------------
def fairness(args: argparse.Namespace, work: Path, progress: Progress) -> dict[str, Any]:
    import numpy as np

    from fedforget.federation.serve import serving_probabilities
    from fedforget.methods.fedshard.fairness import accuracy_drops, client_label_shares, per_class_accuracy
    from fedforget.tasks.registry import load_task_data
    from fedforget.unlearning.evaluate import stored_config

    k, r = args.clients, args.fanout
    p = num_stages(k, r)
    base = {"task": args.task, "seed": args.seed, "dirichlet-alpha": 0.5, "train-size": args.train_size,
            "test-size": args.test_size, "local-epochs": 1}
    methods = {
        "fedshard": {"method": "fedshard", "fedshard.fanout": r, "fedshard.rounds-min": args.t_min,
                     "fedshard.rounds-max": args.t_max},
        "retrain (fedavg)": {"method": "fedavg", "num-rounds": p * args.t_max},
        "flat shards (SISA)": {"method": "fedshard", "fedshard.fanout": r, "fedshard.rounds-min": args.t_min,
                               "fedshard.rounds-max": args.t_max, "fedshard.flat": True},
    }
    task = progress.add_task("fairness over leavers", total=len(methods) * (args.leavers + 1))
    stores = {}
    for name, extra in methods.items():
        path = work / f"fair-{name.split()[0]}"
        timed_run({**base, **extra, "store": str(path)}, k)
        stores[name] = Store.open(path)
        progress.advance(task)
    ref = stores["fedshard"]
    ledger = ref.ledger()
    angles = {int(c): float(a) for c, a in ledger.get_meta("client-angles").items()}
    ledger.close()
    cfg = stored_config(ref)
    data = load_task_data(cfg)
    labels = data.test.labels.numpy()
    shares = client_label_shares(ref.manifest(), data, sorted(angles))
    leavers = sorted(angles, key=lambda c: (-angles[c], c))[: args.leavers]  # the most distinct clients leave

    def per_class(store: Store) -> np.ndarray:
        led = store.ledger()
        try:
            probs = serving_probabilities(cfg, data.num_classes, store, led.plan(), led.serving(), led.artifacts(),
                                          data.test.inputs)
        finally:
            led.close()
        return per_class_accuracy(probs, labels, data.num_classes)

    def costs(name: str, store: Store, gone: list[int]) -> dict[int, float]:
        if name == "retrain (fedavg)":
            remaining = k - len(gone)
            return {c: float(p * args.t_max * remaining) for c in angles}
        return {c: float(z) for c, z in client_costs(ShardTree.from_json(store.manifest()["plan"])).items()}

    out: dict[str, Any] = {"leavers": leavers, "angles": angles, "methods": {},
                           "configs": {name: resolved_config(store) for name, store in stores.items()}}
    for name, store in stores.items():
        before = per_class(store)
        series = []
        for i, leaver in enumerate(leavers, start=1):
            forget_request(store, clients=[leaver])
            wall = retrain(store, k)
            gone = leavers[:i]
            rounds = (p * args.t_max * (k - len(gone)) if name == "retrain (fedavg)"
                      else finals(store)[-1]["client-rounds"])
            delta = accuracy_drops(shares, before, per_class(store))
            z = costs(name, store, gone)
            z_avg = sum(z.values()) / len(z)
            series.append({
                "leavers": gone, "retrain-client-rounds": rounds, "retrain-wall-s": wall,
                "me-client-rounds": efficiency_fairness(z, angles),
                "me-relative": efficiency_fairness({c: 100 * v / z_avg for c, v in z.items()}, angles),
                "mp": performance_fairness(delta, min_distances(angles, gone), MP_EPSILON),
                "accuracy-drop-leavers": float(np.mean([delta[c] for c in gone])),
                "accuracy-drop-remaining": float(np.mean([delta[c] for c in angles if c not in gone])),
            })
            progress.advance(task)
        out["methods"][name] = series
    return out


# -- plots ----------------------------------------------------------------------------------------
def plot_speedup(rows: list[dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"K={r['clients']} R={r['fanout']}" for r in rows]
    x = range(len(rows))
    width = 0.2
    ax.bar([i - 1.5 * width for i in x], [r["r1"] for r in rows], width, label="analytical r1")
    ax.bar([i - 0.5 * width for i in x], [r["client-round-speedup"] for r in rows], width,
           label="client-rounds (member)")
    ax.bar([i + 0.5 * width for i in x], [r["round-time-speedup"] for r in rows], width, label="round time")
    ax.bar([i + 1.5 * width for i in x], [r["wall-speedup-vs-fedavg"] for r in rows], width,
           label="wall vs FedAvg retrain")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("speed-up of unlearning one client (×)")
    ax.set_title("FedShard: path-only retraining vs retraining")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_accuracy(rows: list[dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    variants = list(VARIANTS) + ["fedavg"]
    alphas = sorted({r["alpha"] for r in rows})
    width = 0.8 / len(variants)
    for j, v in enumerate(variants):
        ys = [next(r["accuracy"] for r in rows if r["alpha"] == a and r["variant"] == v) for a in alphas]
        ax.bar([i + (j - (len(variants) - 1) / 2) * width for i in range(len(alphas))], ys, width, label=v)
    ax.set_xticks(range(len(alphas)), [f"Dirichlet α = {a}" for a in alphas])
    ax.set_ylabel("test accuracy (fmnist-cnn)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("FedShard ablation (paper Fig. 5, small scale)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_fairness(result: dict[str, Any], path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for name, series in result["methods"].items():
        n = range(1, len(series) + 1)
        axes[0].plot(n, [s["mp"] for s in series], marker="o", label=name)
        axes[1].plot(n, [s["me-relative"] for s in series], marker="o", label=name)
        axes[2].plot(n, [s["retrain-client-rounds"] for s in series], marker="o", label=name)
    axes[0].set_title("M_p (≥ 4, lower is fairer)")
    axes[1].set_title("M_e, relative cost (lower is fairer)")
    axes[2].set_title("client-rounds per unlearning")
    for ax in axes:
        ax.set_xlabel("clients left")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="speedup,accuracy,fairness")
    parser.add_argument("--task", default="fmnist-cnn")
    parser.add_argument("--speed-task", default="digits-mlp")
    parser.add_argument("--speed-train-size", type=int, default=0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--fanout", type=int, default=2)
    parser.add_argument("--t0", type=int, default=2)
    parser.add_argument("--t-min", type=int, default=2)
    parser.add_argument("--t-max", type=int, default=4)
    parser.add_argument("--train-size", type=int, default=6000)
    parser.add_argument("--test-size", type=int, default=2000)
    parser.add_argument("--leavers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    parts = args.parts.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fedshard-bench-"))
    try:
        with Progress() as progress:
            if "speedup" in parts:
                rows = speedup(args, work, progress)
                _write(args.out / "fedshard_speedup.json", {"machine": machine_info(), "args": vars(args),
                                                            "rows": rows})
                plot_speedup(rows, args.out / "fedshard_speedup.png")
            if "accuracy" in parts:
                rows = accuracy(args, work, progress)
                _write(args.out / "fedshard_accuracy.json", {"machine": machine_info(), "args": vars(args),
                                                             "rows": rows})
                plot_accuracy(rows, args.out / "fedshard_accuracy.png")
            if "fairness" in parts:
                result = fairness(args, work, progress)
                _write(args.out / "fedshard_fairness.json", {"machine": machine_info(), "args": vars(args),
                                                             **result})
                plot_fairness(result, args.out / "fedshard_fairness.png")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
