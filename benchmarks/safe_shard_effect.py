"""What SAFE's server-held safe shard buys: the same graph with and without it, paired over seeds.

The safe shard (the paper's Fig. 1B(c)) gives the server samples no request can forget, connected to
every clique. Each pair of runs shares the task, the clients' data, the graph and the seed; one adds
``safe.shard`` server rows drawn from the training rows the run does not use. Real ServerApp/ClientApp
in process, SAFE's defaults otherwise.

    python benchmarks/safe_shard_effect.py --seeds 1,2,3

Writes ``docs/results/safe_shard_effect.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench_common import machine_info, quiet_flower

from fedforget.inprocess import run_in_process
from fedforget.store import Store

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"


def accuracy(config: dict[str, Any], nodes: int) -> float:
    root = Path(tempfile.mkdtemp(prefix="safe-shard-effect-"))
    try:
        with quiet_flower():
            run_in_process({**config, "store": str(root / "store")}, nodes)
        return [m for m in Store.open(root / "store").metrics() if m.get("final")][-1]["accuracy"]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="digits-mlp")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--train-size", type=int, default=800)
    parser.add_argument("--test-size", type=int, default=360)
    parser.add_argument("--shard", type=int, default=200)
    parser.add_argument("--graphs", default="4x2,8x4", help="coarse x fine of each SAFE graph")
    parser.add_argument("--out", default=str(OUT / "safe_shard_effect.json"))
    args = parser.parse_args()
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for graph in args.graphs.split(","):
            coarse, fine = (int(x) for x in graph.split("x"))
            base = {"method": "safe", "task": args.task, "train-size": args.train_size, "test-size": args.test_size,
                    "seed": seed, "safe.coarse": coarse, "safe.fine": fine}
            row = {"seed": seed, "graph": graph, "without": accuracy(base, args.nodes),
                   "with": accuracy({**base, "safe.shard": args.shard}, args.nodes)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {}
    for graph in args.graphs.split(","):
        mine = [r for r in rows if r["graph"] == graph]
        diffs = [r["with"] - r["without"] for r in mine]
        spread = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
        summary[graph] = {k: statistics.fmean(r[k] for r in mine) for k in ("without", "with")} | {
            "paired-gain": statistics.fmean(diffs), "paired-gain-std": spread}
    report = {"machine": machine_info(), "task": args.task, "nodes": args.nodes, "train-size": args.train_size,
              "test-size": args.test_size, "safe-shard": args.shard, "rows": rows, "summary": summary}
    Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
