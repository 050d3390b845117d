"""SAFE on text: `rt-minilm` (2 classes) against SISA over seeds, and the n_f sweep on `fortunes-minilm`.

The paper's Fig. 3 holds the number of cliques n fixed (so the expected forgetting cost, ∝ 1/n) and
moves n_f, the class groups per coarse shard: n_f = 1 is uniform sharding with SAFE's class-balanced
coarse split, large n_f gives each clique few classes. `fortunes-minilm` has 43 categories, so n_f can
range widely. Every row is a real run through the ServerApp/ClientApp in process with the user's
defaults (only the graph is set); MiniLM's word-piece tokens are computed once and written into each
node's cache (what a node would cache itself), exactly as in ``safe_seeds.py``, whose helpers this
reuses. References on the same frozen features: linear probe and prototypes only (central).

    python benchmarks/safe_text.py --part rt --seeds 1,2,3
    python benchmarks/safe_text.py --part fortunes --seeds 1,2,3 --n 16 --fine 1,2,4,8,16

Writes ``docs/results/safe_text.json`` and ``safe_text.png``.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import machine_info
from safe_seeds import fedavg_probe, final, mean_std, references, token_table, train

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"
RT_SERIES = {
    "SAFE": lambda n: {"method": "safe", "safe.coarse": n, "safe.fine": 1},  # 2 classes: a clique needs both
    "SISA": lambda n: {"method": "protosisa", "safe.coarse": n, "safe.fine": 1, "safe.prototypes": False},
}
NO_SHARDING = {"method": "safe", "safe.coarse": 1, "safe.fine": 1, "safe.prototypes": False}


def run_row(work: Path, table: dict[str, np.ndarray], base: dict[str, Any], part: str, series: str, n: int,
            fine: int, seed: int, graph: dict[str, Any], nodes: int) -> dict[str, Any]:
    store, secs = train(work, f"{part}-{series.split()[0].lower()}-{n}-{fine}-s{seed}", {**base, **graph, "seed": seed},
                        nodes, table)
    last = final(store)
    shutil.rmtree(store.root, ignore_errors=True)
    return {"part": part, "series": series, "n": n, "fine": fine, "seed": seed, "accuracy": last["accuracy"],
            "seconds": round(secs, 1), "samples-visited": last["samples-visited"]}


def jobs_for(part: str, seeds: list[int], shards: list[int], n: int, fines: list[int]
             ) -> list[tuple[str, int, int, int, dict[str, Any]]]:
    """(series, n, n_f, seed, graph) of every run of ``part``, seed-major so a stopped run keeps whole seeds."""
    jobs = []
    for s in seeds:
        jobs.append(("SAFE n=1 (no sharding)", 1, 1, s, NO_SHARDING))
        if part == "rt":
            jobs += [(series, m, 1, s, make(m)) for m in shards
                     for series, make in RT_SERIES.items()]
        else:
            jobs += [("SAFE", n, f, s, {"method": "safe", "safe.coarse": n // f, "safe.fine": f}) for f in fines]
            jobs.append(("SISA", n, 1, s, RT_SERIES["SISA"](n)))
    return jobs


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in sorted({r["part"] for r in rows}):
        mine = [r for r in rows if r["part"] == part]
        cells = sorted({(r["series"], r["n"], r["fine"]) for r in mine})
        out[part] = {f"{s} n={n} n_f={f}": mean_std([r["accuracy"] for r in mine if (r["series"], r["n"], r["fine"])
                                                      == (s, n, f)]) for s, n, f in cells}
        safe = {(r["n"], r["fine"], r["seed"]): r["accuracy"] for r in mine if r["series"] == "SAFE"}
        sisa = {(r["n"], r["seed"]): r["accuracy"] for r in mine if r["series"] == "SISA"}
        gaps = {}
        for m, f in sorted({(m, f) for m, f, _ in safe}):
            diffs = [safe[(m, f, s)] - sisa[(m, s)] for (mm, ff, s) in safe if (mm, ff) == (m, f) and (m, s) in sisa]
            if diffs:
                gaps[f"n={m} n_f={f}"] = mean_std(diffs)
        out[part]["SAFE - SISA (paired)"] = gaps
    return out


def plot(report: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, part, title in ((axes[0], "rt", "rt-minilm (2 classes)"),
                            (axes[1], "fortunes", "fortunes-minilm (43 classes), n_f sweep")):
        mine = [r for r in rows if r["part"] == part]
        refs = report.get("references", {}).get(part, {})
        for name, value in refs.items():
            ax.axhline(100 * value, ls=":", color="grey")
            ax.annotate(name, (0.02, 100 * value), xycoords=("axes fraction", "data"), fontsize=7, color="grey")
        flat = [r["accuracy"] for r in mine if r["n"] == 1]
        if flat:
            ax.axhline(100 * np.mean(flat), ls="--", color="k", label="SAFE n=1 (no sharding)")
        for series in ("SAFE", "SISA"):
            key = "n" if part == "rt" else "fine"
            xs = sorted({r[key] for r in mine if r["series"] == series and r["n"] > 1})
            acc = [[100 * r["accuracy"] for r in mine if r["series"] == series and r["n"] > 1 and r[key] == x]
                   for x in xs]
            if xs:
                ax.errorbar(xs, [np.mean(a) for a in acc], yerr=[np.std(a, ddof=1) if len(a) > 1 else 0 for a in acc],
                            marker="o", capsize=3, label=series)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("shards n" if part == "rt" else f"n_f (class groups per coarse shard), n = {report.get('n')}")
        ax.set_ylabel("test accuracy (%), mean ± std over seeds")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--part", choices=("rt", "fortunes"), required=True)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--shards", default="4,8,16", help="rt: SAFE (n × 1) and SISA shard counts")
    parser.add_argument("--n", type=int, default=16, help="fortunes: cliques held fixed over the n_f sweep")
    parser.add_argument("--fine", default="1,2,4,8,16", help="fortunes: the n_f values")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--work", default="runs/safe-text")
    parser.add_argument("--out", default=str(OUT / "safe_text.json"))
    args = parser.parse_args()
    task = {"rt": "rt-minilm", "fortunes": "fortunes-minilm"}[args.part]
    work = Path(args.work).resolve()
    base = {"task": task, "train-size": args.train_size, "test-size": args.test_size}
    table = token_table(base, work)
    out = Path(args.out)
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {"rows": []}
    report.update({"machine": machine_info(), "nodes": args.nodes, "n": args.n})
    report.setdefault("config", {})[args.part] = base
    seeds = [int(s) for s in args.seeds.split(",")]
    federated = mean_std([fedavg_probe(table, base, args.nodes, s) for s in seeds])["mean"]
    report.setdefault("references", {})[args.part] = {**references(table), "fedavg-probe": federated}
    done = {(r["part"], r["series"], r["n"], r["fine"], r["seed"]) for r in report["rows"]}
    jobs = jobs_for(args.part, seeds, [int(n) for n in args.shards.split(",")],
                    args.n, [int(f) for f in args.fine.split(",")])
    for series, n, fine, seed, graph in jobs:
        if (args.part, series, n, fine, seed) in done:
            continue
        row = run_row(work, table, base, args.part, series, n, fine, seed, graph, args.nodes)
        report["rows"].append(row)
        print(json.dumps(row), flush=True)
        report["summary"] = summarise(report["rows"])
        out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    report["summary"] = summarise(report["rows"])
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    plot(report, out.with_suffix(".png"))
    print(json.dumps({"references": report["references"], **report["summary"]}, indent=2))


if __name__ == "__main__":
    main()
