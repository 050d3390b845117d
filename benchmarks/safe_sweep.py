"""Training-budget sweep for SAFE's InCA adapters (why is "no sharding" the worst?).

Each point is a real run through the ServerApp/ClientApp on the in-process runtime, on fmnist-effnet,
with the backbone tokens of an earlier store copied in (as ``safe_bench.py`` does). Prints one JSON
line per point and writes them all to ``docs/results/safe_sweep.json``.

    python benchmarks/safe_sweep.py --points 'no-sharding:2:5:0.01,sisa16:2:5:0.01' [--nodes 5]

A point is ``series:num-rounds:local-epochs:lr`` with series one of ``no-sharding``, ``safe16``,
``sisa16``; ``--nodes 1`` gives the centralised (IID) reference.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from safe_bench import OUT, final, train

SERIES: dict[str, dict[str, Any]] = {
    "no-sharding": {"method": "safe", "safe.coarse": 1, "safe.fine": 1, "safe.prototypes": False},
    "safe16": {"method": "safe", "safe.coarse": 4, "safe.fine": 4, "safe.prototypes": False},
    "sisa16": {"method": "protosisa", "safe.coarse": 16, "safe.fine": 1, "safe.prototypes": False},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", required=True)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--work", default="runs/safe-sweep")
    parser.add_argument("--cache", default="", help="a store whose cached tokens to copy in")
    parser.add_argument("--extra", default="{}", help="JSON run-config overrides for every point")
    parser.add_argument("--out", default=str(OUT / "safe_sweep.json"))
    args = parser.parse_args()
    root = Path(args.work).resolve()
    cache = Path(args.cache).resolve() if args.cache else None
    old = json.loads(Path(args.out).read_text(encoding="utf-8")) if Path(args.out).exists() else []
    rows = old["rows"] if isinstance(old, dict) else old
    for point in args.points.split(","):
        series, rounds, epochs, lr = point.split(":")
        config = {**SERIES[series], "num-rounds": int(rounds), "local-epochs": int(epochs), "lr": float(lr),
                  **json.loads(args.extra)}
        name = f"{series}-r{rounds}-e{epochs}-lr{lr}-n{args.nodes}"
        store, secs = train(root, name, config, args.nodes, cache)
        done = final(store)
        losses = [m["train-loss"] for m in store.metrics() if "train-loss" in m]
        row = {"series": series, "nodes": args.nodes, **config, "accuracy": done["accuracy"],
               "last-train-loss": losses[-1] if losses else None, "seconds": round(secs, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if cache is None:
            cache = store.root
        report = {**old, "rows": rows} if isinstance(old, dict) else rows
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
