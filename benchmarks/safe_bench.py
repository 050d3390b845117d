"""SAFE at small scale on fmnist-effnet (the paper's Table 1, forget cost and Fig. 4 analogues).

Every run goes through the real ServerApp/ClientApp on the in-process runtime; the backbone tokens
of each node (and of the test split) are computed once and copied into each new store, as a node
would keep them in its state dir. Writes ``docs/results/safe_bench.json`` and ``safe_*.png``.

    python benchmarks/safe_bench.py [--shards 8,16,32,64] [--nodes 5]

On a busy machine the shard counts can run as parallel parts, then be merged (same numbers, each run is
independent and seeded; the part holding ``--cost-n`` measures drops and forget cost):

    python benchmarks/safe_bench.py --shards 8,16 --part /tmp/a.json &
    python benchmarks/safe_bench.py --shards 32,64 --part /tmp/b.json --work runs/safe-bench-b
    python benchmarks/safe_bench.py --merge /tmp/a.json,/tmp/b.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

from bench_common import machine_info, quiet_flower
from rich.progress import Progress

from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.unlearning.forget import forget_request

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"
#: Only the task and the sizes: every method and shard count trains with the user's defaults (the same
#: AdamW step budget per adapter, core/defaults.py), which is what this benchmark measures.
BASE = {"task": "fmnist-effnet", "seed": 1}
FINE = {8: 2, 16: 4, 32: 4, 64: 4}  # SAFE's (n_c, n_f) per n: n_f grows with n, at most K = 10 classes
SERIES = {
    "SAFE": lambda n: {"method": "safe", "safe.coarse": n // FINE[n], "safe.fine": FINE[n]},
    "SAFE (no prototypes)": lambda n: {"method": "safe", "safe.coarse": n // FINE[n], "safe.fine": FINE[n],
                                       "safe.prototypes": False},
    "SISA": lambda n: {"method": "protosisa", "safe.coarse": n, "safe.fine": 1, "safe.prototypes": False},
    "ProtoSISA": lambda n: {"method": "protosisa", "safe.coarse": n, "safe.fine": 1},
}


def seed_caches(src: Path | None, dst: Path) -> None:
    """Copy cached tokens (nodes' and the test split's) from an earlier store into a new one."""
    if src is None:
        return
    for f in src.rglob("safe-features-*.safetensors"):
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)


def train(root: Path, name: str, config: dict[str, Any], nodes: int, cache: Path | None) -> tuple[Store, float]:
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    seed_caches(cache, path)
    t0 = time.perf_counter()
    with quiet_flower():
        run_in_process({**BASE, **config, "store": str(path)}, nodes)
    return Store.open(path), time.perf_counter() - t0


def final(store: Store) -> dict[str, Any]:
    return [m for m in store.metrics() if m.get("final")][-1]


def drop_curve(store: Store, drops: list[int], seed: int) -> list[float]:
    """Accuracy as m random cliques leave the ensemble without retraining (and their cells' prototypes)."""
    from fedforget.methods.safe.graph import SafePlan
    from fedforget.methods.safe.serve import safe_accuracy
    from fedforget.unlearning.evaluate import stored_config

    cfg = stored_config(store)
    ledger = store.ledger()
    try:
        plan_json, serving, artifacts = ledger.plan(), ledger.serving(), ledger.artifacts()
    finally:
        ledger.close()
    plan = SafePlan.from_json(plan_json)
    order = [c for c, *_ in plan.cliques()]
    random.Random(seed).shuffle(order)
    out = []
    for m in drops:
        gone = set(order[:m])
        units = {u for c in gone for u in plan.members[c]}
        kept = [a for a in serving["artifacts"] if a not in gone and not any(a == plan.proto_id(u) for u in units)]
        if not any("/proto/" not in a for a in kept):
            out.append(float("nan"))
            continue
        out.append(safe_accuracy(cfg, store, plan_json, {**serving, "artifacts": kept}, artifacts)["accuracy"])
    return out


def forget_cost(store: Store, nodes: int) -> dict[str, Any]:
    """One sample forgotten, then `retrain` in process: what it revisited and how long it took."""
    sample = store.manifest()["partitions"]["0"][0][0]
    t0 = time.perf_counter()
    result = forget_request(store, samples=[sample])
    forget_ms = (time.perf_counter() - t0) * 1000
    config = {**store.manifest()["config"], "store": str(store.root), "action": "retrain"}
    t0 = time.perf_counter()
    with quiet_flower():
        run_in_process(config, nodes)
    wall = time.perf_counter() - t0
    done = final(store)
    return {"forget-ms": forget_ms, "invalidated": result.invalidated, "predicted-revisited":
            result.affected.get("safe", {}).get("revisited"), "samples-visited": done["samples-visited"],
            "client-rounds": done["client-rounds"], "retrain-seconds": wall, "rebuilt": done["rebuilt"]}


def plots(report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shards = report["shards"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, accs in report["accuracy"].items():
        ax.plot(shards, [100 * a for a in accs], marker="o", label=name)
    ax.axhline(100 * report["no-sharding"], color="k", ls="--", label="no sharding")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("shards n (cliques for SAFE)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("fmnist-effnet: accuracy vs shards")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "safe_accuracy_vs_shards.png", dpi=120)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, accs in report["drops"]["accuracy"].items():
        base = accs[0]
        ax.plot(report["drops"]["dropped"], [a / base for a in accs], marker="o", label=name)
    ax.set_xlabel(f"cliques/shards dropped without retraining (of {report['drops']['n']})")
    ax.set_ylabel("relative accuracy")
    ax.set_title("instant forgetting (Fig. 4 analogue)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "safe_instant_forgetting.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", default="8,16,32,64")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--work", default="runs/safe-bench")
    parser.add_argument("--cost-n", type=int, default=16)
    parser.add_argument("--cache", default="", help="a store whose cached tokens to copy into the first run")
    parser.add_argument("--part", default="", help="write this part's report here (no plots)")
    parser.add_argument("--merge", default="", help="comma-separated part reports: merge, write, plot")
    args = parser.parse_args()
    if args.merge:
        merge([Path(p) for p in args.merge.split(",")])
        return
    shards = [int(x) for x in args.shards.split(",")]
    root = Path(args.work).resolve()
    root.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine_info(), "config": BASE, "nodes": args.nodes, "shards": shards,
                              "fine": {str(n): FINE[n] for n in shards}, "accuracy": {k: [] for k in SERIES},
                              "train-seconds": {k: [] for k in SERIES}}
    stores: dict[tuple[str, int], Store] = {}
    with Progress() as progress:
        bar = progress.add_task("SAFE benchmark", total=1 + len(SERIES) * len(shards) + 3)
        flat, secs = train(root, "no-sharding", {"method": "safe", "safe.coarse": 1, "safe.fine": 1,
                                                 "safe.prototypes": False},
                           args.nodes, Path(args.cache).resolve() if args.cache else None)
        cache = flat.root
        report["no-sharding"] = final(flat)["accuracy"]
        report["no-sharding-seconds"] = secs
        progress.advance(bar)
        for n in shards:
            for name, make in SERIES.items():
                store, secs = train(root, f"{name.split()[0].lower()}{'-np' if 'no' in name else ''}-{n}", make(n),
                                    args.nodes, cache)
                stores[(name, n)] = store
                report["accuracy"][name].append(final(store)["accuracy"])
                report["train-seconds"][name].append(secs)
                progress.console.print(f"{name} n={n}: accuracy {final(store)['accuracy']:.4f} ({secs:.0f} s)")
                progress.advance(bar)
        n = args.cost_n if args.cost_n in shards else shards[0]
        if args.part and args.cost_n not in shards:
            write_part(Path(args.part), report)
            return
        drops = [0, 1, 2, 4, 8][: 1 + sum(1 for d in (1, 2, 4, 8) if d < n)]
        report["drops"] = {"n": n, "dropped": drops, "accuracy": {
            name: drop_curve(stores[(name, n)], drops, seed=7) for name in ("SAFE", "SISA", "ProtoSISA")}}
        report["forget-cost"] = {"n": n, "full-retrain": {
            "samples-visited": final(flat)["samples-visited"], "client-rounds": final(flat)["client-rounds"],
            "seconds": report["no-sharding-seconds"]}}
        for name in ("SAFE", "SISA"):
            report["forget-cost"][name] = forget_cost(stores[(name, n)], args.nodes)
            progress.advance(bar)
    if args.part:
        write_part(Path(args.part), report)
        return
    publish(report)


def write_part(path: Path, report: dict[str, Any]) -> None:
    path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


def publish(report: dict[str, Any]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "safe_bench.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    plots(report)
    print(json.dumps({k: report[k] for k in ("accuracy", "no-sharding", "forget-cost")}, indent=2, default=str))


def merge(paths: list[Path]) -> None:
    """Parts of one benchmark (disjoint shard counts) into one report, shards in increasing order."""
    parts = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    shards = sorted(n for r in parts for n in r["shards"])
    where = {n: (r, r["shards"].index(n)) for r in parts for n in r["shards"]}
    main_part = next(r for r in parts if "drops" in r)
    report = {**main_part, "shards": shards, "fine": {str(n): FINE[n] for n in shards},
              "parts": [{"shards": r["shards"], "machine": r["machine"], "no-sharding": r["no-sharding"],
                         "no-sharding-seconds": r["no-sharding-seconds"]} for r in parts]}
    for key in ("accuracy", "train-seconds"):
        report[key] = {name: [where[n][0][key][name][where[n][1]] for n in shards] for name in SERIES}
    publish(report)


if __name__ == "__main__":
    main()
