"""How long does the store check's comparison of the sample index with the manifest take at 10⁶ samples?

No training: a synthetic ``ledger.sqlite`` in the ledger's own schema (10 partitions × 4 slices of
random ids, a plan, two forget requests: 100 samples and one whole slice) and the manifest's
``partitions`` it was indexed from. Times :func:`fedforget.store.index_check.index_problems` inside one
read transaction, the manifest already parsed (``check_store`` parses it once for every check), over
``--rounds`` passes; then moves one sample to another unit and times the refusal.

    python benchmarks/index_check_scale.py                 # 10⁶ samples (about 30 s to build on 2 cores)
    python benchmarks/index_check_scale.py --samples 100000 --out /tmp/index

Writes ``docs/results/index_check_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_common import machine_info

from fedforget.store.index_check import index_problems
from fedforget.store.ledger import Ledger


def build(path: Path, samples: int, partitions: int = 10, slices: int = 4) -> dict:
    ids = np.random.default_rng(0).permutation(samples)
    per = samples // (partitions * slices)
    plan = {p: [np.sort(ids[(p * slices + s) * per:(p * slices + s + 1) * per]).tolist() for s in range(slices)]
            for p in range(partitions)}
    ledger = Ledger(path)
    try:
        ledger.load_samples(plan)
        ledger.set_plan({"kind": "single", "artifact": "global"})
        ledger.forget(samples=ids[:100].tolist())
        ledger.forget(slices=["3:1"])
    finally:
        ledger.close()
    return {"partitions": {str(p): s for p, s in plan.items()}}


def timed(ledger: Ledger, manifest: dict) -> tuple[float, list[str]]:
    start = time.perf_counter()
    with ledger.snapshot():
        found = index_problems(ledger.db, manifest)
    return time.perf_counter() - start, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10**6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedforget-index-check-") as tmp:
        path = Path(tmp) / "ledger.sqlite"
        manifest = json.loads(json.dumps(build(path, args.samples)))
        ledger = Ledger(path, create=False)
        try:
            seconds = []
            for _ in range(args.rounds):
                took, found = timed(ledger, manifest)
                assert not found, found
                seconds.append(took)
            moved = manifest["partitions"]["1"][0][0]
            ledger.db.execute("UPDATE samples SET unit='2:0' WHERE sample=?", (moved,))
            refused, found = timed(ledger, manifest)
        finally:
            ledger.close()
    result = {"machine": machine_info(), "config": {"samples": args.samples, "rounds": args.rounds},
              "samples": args.samples, "honest_s": {"median": statistics.median(seconds), "min": min(seconds),
                                                    "max": max(seconds)},
              "moved_sample_s": refused, "problem": found[0]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "index_check_scale.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
