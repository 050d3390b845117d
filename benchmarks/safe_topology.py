"""SAFE's graph at a fixed number of cliques: which (n_c, n_f) serves best, against SISA (paper's Table 1).

The paper reports, for each number of shards n, the best of several shard-graph topologies. This
holds n fixed (so the expected forgetting cost) and moves n_f, the class groups per coarse shard, on
the same task, partition and seeds as ``safe_seeds.py``; SISA's rows and SAFE's n_f already measured
there are reused when their configuration is the same, so every difference is paired by seed. Each
topology also gets the instant-forgetting curve (cliques dropped without retraining, paper's Fig. 4).

    python benchmarks/safe_topology.py --n 16 --fine 1,2,4 --seeds 1,2,3
    python benchmarks/safe_topology.py --n 64 --fine 4 --dropped 0,8,16,32,48 \
        --out docs/results/safe_topology_n64.json   # the instant-forgetting curve nearer the paper's 256 shards

A reused row that lacks this run's curve is trained again, so every series carries the same curve.
Writes ``docs/results/safe_topology.json`` and ``safe_topology.png`` (or beside ``--out``).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import machine_info
from safe_seeds import SERIES, drop_curve, final, mean_std, plot_drop_curves, token_table, train

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"


def measured_elsewhere(path: Path, base: dict[str, Any], nodes: int, n: int, fine: dict[int, int]
                       ) -> list[dict[str, Any]]:
    """Rows of ``safe_seeds.json`` at ``n`` with this configuration, tagged with their n_f (SISA: 1)."""
    if not path.is_file():
        return []
    old = json.loads(path.read_text(encoding="utf-8"))
    if old.get("config") != base or old.get("nodes") != nodes:
        return []
    rows = []
    for r in old["rows"]:
        if r["n"] == n and r["series"] in ("SAFE", "SISA"):
            n_f = 1 if r["series"] == "SISA" else int(old["fine"][str(n)])
            rows.append({**r, "fine": n_f, "from": path.name})
    return [r for r in rows if r["series"] == "SISA" or r["fine"] in fine]


def has_curve(row: dict[str, Any], dropped: list[int]) -> bool:
    return len(row.get("drops", [])) == len(dropped)


def summarise(rows: list[dict[str, Any]], dropped: list[int]) -> dict[str, Any]:
    last = f"kept after {dropped[-1]} drops"
    sisa = {r["seed"]: r for r in rows if r["series"] == "SISA"}
    out: dict[str, Any] = {"SISA": mean_std([r["accuracy"] for r in sisa.values()])} if sisa else {}
    for f in sorted({r["fine"] for r in rows if r["series"] == "SAFE"}):
        mine = {r["seed"]: r for r in rows if r["series"] == "SAFE" and r["fine"] == f}
        cell: dict[str, Any] = {"accuracy": mean_std([r["accuracy"] for r in mine.values()])}
        paired = [mine[s]["accuracy"] - sisa[s]["accuracy"] for s in mine if s in sisa]
        if paired:
            cell["minus-SISA (paired)"] = mean_std(paired)
        kept = [r["drops"][-1] / r["drops"][0] for r in mine.values() if has_curve(r, dropped)]
        if kept:
            cell[last] = mean_std(kept)
        out[f"SAFE n_f={f}"] = cell
    for series in ("SISA", "ProtoSISA"):
        kept = [r["drops"][-1] / r["drops"][0] for r in rows if r["series"] == series and has_curve(r, dropped)]
        if kept:
            out[f"{series} {last}"] = mean_std(kept)
    out["minus-SISA along the curve (paired)"] = curve_gaps(rows, dropped)
    return out


def curve_gaps(rows: list[dict[str, Any]], dropped: list[int]) -> dict[str, dict[str, Any]]:
    """Accuracy minus SISA's after each number of drops, paired by seed: is a series above SISA along the curve?"""
    def label(r: dict[str, Any]) -> str:
        return f"SAFE n_f={r['fine']}" if r["series"] == "SAFE" else r["series"]

    curves = [r for r in rows if has_curve(r, dropped)]
    sisa = {r["seed"]: r["drops"] for r in curves if r["series"] == "SISA"}
    out = {}
    for name in sorted({label(r) for r in curves if r["series"] != "SISA"}):
        mine = {r["seed"]: r["drops"] for r in curves if label(r) == name and r["seed"] in sisa}
        if mine:
            out[name] = {str(d): mean_std([mine[s][i] - sisa[s][i] for s in mine]) for i, d in enumerate(dropped)}
    return out


def plot(report: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(16, 4))
    fines = sorted({r["fine"] for r in rows if r["series"] == "SAFE"})
    acc = [[100 * r["accuracy"] for r in rows if r["series"] == "SAFE" and r["fine"] == f] for f in fines]
    ax.errorbar(fines, [np.mean(a) for a in acc], yerr=[np.std(a, ddof=1) if len(a) > 1 else 0 for a in acc],
                marker="o", capsize=3, label="SAFE")
    for colour, series in (("C1", "SISA"), ("C2", "ProtoSISA")):
        accuracy = [100 * r["accuracy"] for r in rows if r["series"] == series]
        if accuracy:
            ax.axhline(np.mean(accuracy), ls="--", color=colour, label=series)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"n_f (class groups per coarse shard), n = {report['n']} cliques")
    ax.set_ylabel("test accuracy (%), mean ± std over seeds")
    ax.set_title(f"{report['config']['task']}: topology at fixed forgetting cost")
    ax.legend(fontsize=8)
    picks = {f"SAFE n_f={f}": lambda r, f=f: r["series"] == "SAFE" and r["fine"] == f for f in fines}
    picks.update({s: lambda r, s=s: r["series"] == s for s in ("SISA", "ProtoSISA")})
    curves = {label: [r["drops"] for r in rows if pick(r) and "drops" in r] for label, pick in picks.items()}
    plot_drop_curves(bx, curves, report["dropped"], report["n"])
    plot_drop_curves(cx, curves, report["dropped"], report["n"], relative=False)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="fmnist-effnet")
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--fine", default="1,2,4")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--dropped", default="0,2,4,8,12", help="cliques / shards dropped along the curve")
    parser.add_argument("--baselines", default="SISA", help="uniform-shard series that get the same curve")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=2000)
    parser.add_argument("--work", default="runs/safe-topology")
    parser.add_argument("--reuse", default=str(OUT / "safe_seeds.json"), help="rows measured by safe_seeds.py")
    parser.add_argument("--out", default=str(OUT / "safe_topology.json"))
    args = parser.parse_args()
    work = Path(args.work).resolve()
    base = {"task": args.task, "train-size": args.train_size, "test-size": args.test_size}
    table = token_table(base, work)
    fine = {int(f): args.n // int(f) for f in args.fine.split(",")}
    seeds = [int(s) for s in args.seeds.split(",")]
    dropped = [int(d) for d in args.dropped.split(",")]
    baselines = [b for b in args.baselines.split(",") if b]
    out = Path(args.out)
    old = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    rows = [r for r in old.get("rows", []) if "from" not in r and has_curve(r, dropped)]
    rows += [r for r in measured_elsewhere(Path(args.reuse), base, args.nodes, args.n, fine)
             if r["seed"] in seeds and has_curve(r, dropped)]
    report = {"machine": machine_info(), "config": base, "nodes": args.nodes, "n": args.n, "seeds": seeds,
              "dropped": dropped, "rows": rows}
    jobs = [("SAFE", n_f, {"method": "safe", "safe.coarse": n_c, "safe.fine": n_f}) for n_f, n_c in fine.items()]
    jobs += [(b, 1, SERIES[b](args.n)) for b in baselines]
    for seed in seeds:
        for series, n_f, graph in jobs:
            if any(r["series"] == series and r["fine"] == n_f and r["seed"] == seed for r in rows):
                continue
            name = f"{series.lower()}-{graph['safe.coarse']}x{n_f}-s{seed}"
            store, secs = train(work, name, {**base, **graph, "seed": seed}, args.nodes, table)
            row = {"series": series, "n": args.n, "fine": n_f, "seed": seed, "accuracy": final(store)["accuracy"],
                   "seconds": round(secs, 1), "samples-visited": final(store)["samples-visited"],
                   "drops": drop_curve(store, dropped, seed)}
            shutil.rmtree(store.root, ignore_errors=True)
            rows.append(row)
            print(json.dumps(row), flush=True)
            report["summary"] = summarise(rows, dropped)
            out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    report["summary"] = summarise(rows, dropped)
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    plot(report, out.with_suffix(".png"))
    print(json.dumps(report["summary"], indent=2))


if __name__ == "__main__":
    main()
