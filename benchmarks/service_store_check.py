"""What the forget service's store check costs per request, whole or by what changed, as a store fills up.

One FedSGT store on digits (trained in process), then single-sample forget requests up to each checkpoint.
At each checkpoint, measured in this one process on the same store:

* ``full``: :func:`fedforget.store.check.check_store`, what every CLI command runs first (and what the
  service ran before every request until it checked by changes; ``FEDFORGET_SERVICE_CHECK=full`` still does);
* ``changes``: :class:`fedforget.store.check_changes.StoreWatch` after one more forget (what the service
  runs before the next request);
* ``files``: the same watch when nothing was committed since (a status or predict call).

Each figure is the median of ``--repeats`` calls; the forget itself is not timed. The ratio full / changes
at the last checkpoint is the saving. Writes ``docs/results/service_store_check.{json,png}``.

    python benchmarks/service_store_check.py                     # checkpoints 0 .. 1,000 requests
    python benchmarks/service_store_check.py --checkpoints 0,50 --repeats 5 --out /tmp/check
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import machine_info, quiet_flower

from fedforget.inprocess import run_in_process
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.check_changes import StoreWatch
from fedforget.unlearning.forget import forget_request

CONFIG = {"task": "digits-mlp", "method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2,
          "lr": 0.02, "local-epochs": 2}
NODES = 3
OUT = Path(__file__).resolve().parents[1] / "docs" / "results"


def _ms(fn) -> float:  # noqa: ANN001
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def _samples(store: Store) -> list[int]:
    ledger = store.ledger()
    try:
        return [int(r[0]) for r in ledger.db.execute("SELECT sample FROM samples ORDER BY sample")]
    finally:
        ledger.close()


def measure(store: Store, checkpoints: list[int], repeats: int) -> list[dict[str, float]]:
    ids = iter(_samples(store))
    watch = StoreWatch(store)
    assert watch.check().ok
    done, rows = 0, []
    for target in checkpoints:
        while done < target:
            forget_request(store, samples=[next(ids)])
            done += 1
        watch.check()
        full = [_ms(lambda: check_store(store)) for _ in range(repeats)]
        changes = []
        for _ in range(repeats):
            forget_request(store, samples=[next(ids)])
            done += 1
            start = time.perf_counter()
            result = watch.check()
            changes.append((time.perf_counter() - start) * 1000.0)
            assert result.ok, result.problems
        files = [_ms(watch.check) for _ in range(repeats)]
        row = {"requests": done, "full_ms": statistics.median(full), "changes_ms": statistics.median(changes),
               "files_ms": statistics.median(files)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    x = [r["requests"] for r in rows]
    for key, label in (("full_ms", "whole store (every CLI command)"), ("changes_ms", "what changed (after a forget)"),
                       ("files_ms", "nothing committed (status, predict)")):
        ax.plot(x, [r[key] for r in rows], marker="o", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("forget requests in the store")
    ax.set_ylabel("store check, ms per request (median)")
    ax.set_title("The forget service's store check")
    ax.grid(alpha=0.3)
    ax.legend(loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", default="0,100,300,1000")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    checkpoints = [int(c) for c in args.checkpoints.split(",")]
    with tempfile.TemporaryDirectory(prefix="fedforget-check-") as tmp:
        root = Path(tmp) / "store"
        with quiet_flower():
            run_in_process({**CONFIG, "store": str(root)}, NODES)
        store = Store.open(root)
        rows = measure(store, checkpoints, args.repeats)
    last = rows[-1]
    result = {"machine": machine_info(), "config": {**CONFIG, "nodes": NODES, "checkpoints": checkpoints,
                                                    "repeats": args.repeats},
              "rows": rows, "full_over_changes_at_last": last["full_ms"] / last["changes_ms"],
              "full_over_files_at_last": last["full_ms"] / last["files_ms"]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "service_store_check.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(rows, args.out / "service_store_check.png")
    print(f"full / changes at {last['requests']} requests: {result['full_over_changes_at_last']:.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
