"""Forget throughput with one coordinator and with two coordinators at once on the same store:
SQLite `BEGIN IMMEDIATE` serialises them; nothing is lost.

    python benchmarks/ops_concurrency.py [--requests 200]
Writes docs/results/ops_concurrency.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from bench_common import machine_info  # noqa: E402
from rich.progress import Progress  # noqa: E402

from fedforget.inprocess import run_in_process  # noqa: E402
from fedforget.store import Store  # noqa: E402
from fedforget.store.check import check_store  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"
CONFIG = {"task": "digits-mlp", "lr": 0.02, "local-epochs": 1, "method": "fedsgt", "chains.groups": 3,
          "chains.budget": 3, "slices-per-client": 2, "seed": 3}


def forget_with(store: Path, coordinators: int, samples: list[int]) -> dict:
    chunks = [samples[i::coordinators] for i in range(coordinators)]
    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "fedforget.faults", "forget-many", str(store), "--samples",
                               ",".join(map(str, c))], stdout=subprocess.PIPE, text=True) for c in chunks]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.monotonic() - start
    recorded = [r for o in outs for r in o["requests"] if r is not None]
    ledger = Store.open(store).ledger()
    forgotten = ledger.forgotten_count()
    ledger.close()
    return {"coordinators": coordinators, "requests": len(samples), "recorded": len(recorded),
            "unique-ids": len(set(recorded)), "forgotten": forgotten, "lost": len(samples) - forgotten,
            "wall-s": wall, "throughput-per-s": len(samples) / wall,
            "per-coordinator-s": [o["seconds"] for o in outs], "store-ok": check_store(Store.open(store)).ok}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedforget-conc-") as tmp, Progress() as progress:
        work = Path(tmp)
        task = progress.add_task("training the store", total=3)
        run_in_process({**CONFIG, "store": str(work / "trained")}, 3)
        ids = sorted(i for p in Store.open(work / "trained").manifest()["partitions"].values() for s in p for i in s)
        samples = ids[: args.requests]
        rows = []
        for n in (1, 2):
            progress.update(task, description=f"{n} coordinator(s), {len(samples)} requests", advance=1)
            shutil.copytree(work / "trained", work / f"c{n}")
            rows.append(forget_with(work / f"c{n}", n, samples))
        progress.update(task, advance=1)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ops_concurrency.json").write_text(json.dumps({"machine": machine_info(), "config": CONFIG,
                                                          "runs": rows}, indent=2) + "\n")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.bar([f"{r['coordinators']} coordinator(s)" for r in rows], [r["throughput-per-s"] for r in rows],
           color=["#4c72b0", "#dd8452"])
    for i, r in enumerate(rows):
        ax.text(i, r["throughput-per-s"], f"{r['throughput-per-s']:.0f}/s, lost {r['lost']}", ha="center",
                va="bottom", fontsize=8)
    ax.set_ylabel("forget requests per second")
    ax.set_title("forget throughput, one store (SQLite, synchronous=FULL)")
    fig.tight_layout()
    fig.savefig(OUT / "ops_concurrency.png", dpi=120)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
