"""What does the ledger's log cost to check at 10⁶ samples, whole and per service request, and per forget?

No training: a store built the way a FedSGT run leaves one (manifest ``partitions``, the sample index, a plan
of ``--groups`` × ``--budget`` artifacts with real safetensors files naming them, their lineage, the serving
plan), every write through the ledger, so its log is the one a run writes; then ``--requests`` single-sample
forget requests through :func:`fedforget.unlearning.forget.forget_request` (signed heads, purges), all in one
unit so part of the plan stays valid and served. Then, on that store:

* ``whole_check_s``: :func:`fedforget.store.check.check_store`, what every CLI command runs first (median of
  ``--rounds``);
* ``service_check_ms``: :class:`fedforget.store.check_changes.StoreWatch` after one more forget, what the
  service runs before the next request (median of ``--repeats``, wall and this process's CPU time: on a
  shared machine the wall time includes waiting for a core; the forget itself is not timed);
* ``forget_ms``: one :meth:`fedforget.store.ledger.Ledger.forget` (its transaction and ``synchronous=FULL``
  commit), interleaved: without a log (its triggers and entry left out), with the log unsigned (a training
  run's writes) and with the log signed (the coordinator's): what a log adds to one forget (median of
  ``--forget-repeats`` each). This runs last: a forget without a log leaves the store's log behind its tables.

    python benchmarks/log_check_scale.py                         # 10⁶ samples, 1,000 requests (about 2 min)
    python benchmarks/log_check_scale.py --samples 20000 --requests 50 --out /tmp/log

Writes ``docs/results/log_check_scale.{json,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import machine_info

from fedforget.core.seeds import derive_seed
from fedforget.methods.chains.grouping import group_units
from fedforget.methods.chains.plan import ChainPlan
from fedforget.methods.chains.sequences import cyclic_sequences
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.check_changes import StoreWatch
from fedforget.store.log import LogWriter, head_signer, set_head_signer
from fedforget.unlearning.forget import forget_request

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"


def build(root: Path, samples: int, partitions: int, slices: int, groups: int, budget: int) -> tuple[Store, list]:
    """The store; returns it and the sample ids of the unit the requests forget from."""
    ids = np.random.default_rng(0).permutation(samples)
    per = samples // (partitions * slices)
    cut = {p: [np.sort(ids[(p * slices + s) * per:(p * slices + s + 1) * per]).tolist() for s in range(slices)]
           for p in range(partitions)}
    store = Store.create(root, {"partitions": {str(p): s for p, s in cut.items()}})
    units = [f"{p}:{s}" for p in range(partitions) for s in range(slices)]
    plan = ChainPlan("fedsgt", [group_units(units, groups, derive_seed(0, "fedsgt", "grouping"))],
                     [cyclic_sequences(groups, budget)], "new", "additive", 1, "allseq")
    ledger = store.ledger()
    try:
        ledger.load_samples(cut)
        ledger.set_plan(plan.serving_json())
        for i, (artifact, chain, position) in enumerate(plan.artifacts()):
            sha = store.put_arrays({"w": np.full(4, i, dtype=np.float32)}, {"artifact": artifact})
            ledger.record_artifact(artifact, sha, "lora+head", plan.lineage(chain, position), 0,
                                   {"position": position})
        ledger.refresh_serving()
    finally:
        ledger.close()
    return store, cut[partitions - 1][slices - 1]


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000.0


def forget_costs(store: Store, ids: list[int], repeats: int) -> dict[str, float]:
    """One Ledger.forget without a log, with it unsigned, with it signed; interleaved, median of each."""
    signer = head_signer()
    plain = (LogWriter.begin, LogWriter.finish)
    times: dict[str, list[float]] = {"no-log": [], "log-unsigned": [], "log-signed": []}
    ledger = store.ledger()
    try:
        for _ in range(repeats):
            for mode in times:
                if mode == "no-log":
                    LogWriter.begin, LogWriter.finish = (lambda self, *a, **k: None), (lambda self: None)
                set_head_signer(signer if mode == "log-signed" else None)
                try:
                    start = time.perf_counter()
                    result = ledger.forget(samples=[ids.pop()])
                    times[mode].append(time.perf_counter() - start)
                finally:
                    LogWriter.begin, LogWriter.finish = plain
                    set_head_signer(signer)
                assert result.request is not None
    finally:
        ledger.close()
    return {mode: median_ms(t) for mode, t in times.items()}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    checks = [("whole store\n(every CLI command)", result["whole_check_s"]["median"] * 1000.0, 1000.0),
              ("per service request\n(after a forget)", result["service_check_ms"]["median"], 1.0)]
    left.bar([c[0] for c in checks], [c[1] for c in checks], color=["tab:blue", "tab:orange"])
    for i, (_, value, target) in enumerate(checks):
        left.hlines(target, i - 0.4, i + 0.4, colors="k", linestyles="dashed")
        left.annotate(f"{value:.3g} ms", (i, value), ha="center", va="bottom")
    left.set_yscale("log")
    left.set_ylabel("ms (median); dashed: target")
    left.set_title(f"store check, {result['config']['samples']:,} samples")
    modes = list(result["forget_ms"])
    right.bar(modes, [result["forget_ms"][m] for m in modes], color="tab:green")
    right.set_ylabel("ms per forget (median)")
    right.set_title("one Ledger.forget")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10**6)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--slices", type=int, default=4)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--forget-repeats", type=int, default=31)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    config = {k: v for k, v in vars(args).items() if k != "out"}
    machine = machine_info()  # the code this runs, before anything else can change the checkout
    with tempfile.TemporaryDirectory(prefix="fedforget-log-check-") as tmp:
        os.environ["FEDFORGET_SECRETS"] = str(Path(tmp) / "secrets")
        t0 = time.perf_counter()
        store, pool = build(Path(tmp) / "store", args.samples, args.partitions, args.slices, args.groups,
                            args.budget)
        pool = list(pool)
        for _ in range(args.requests):
            forget_request(store, samples=[pool.pop()])
        built_s = time.perf_counter() - t0
        whole = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            out = check_store(Store.open(store.root))
            whole.append(time.perf_counter() - start)
            assert out.ok, out.problems
        ledger = store.ledger()
        try:
            sizes = {t: ledger.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                     for t in ("log", "log_heads", "requests", "artifacts", "lineage", "history", "samples")}
            sizes["log_bytes"] = ledger.db.execute("SELECT SUM(LENGTH(entry)) FROM log").fetchone()[0]
            served = len(ledger.serving().get("artifacts", []))
        finally:
            ledger.close()
        watch = StoreWatch(store)
        assert watch.check().ok
        service, service_cpu = [], []
        for _ in range(args.repeats):
            forget_request(store, samples=[pool.pop()])
            start, cpu = time.perf_counter(), time.process_time()
            out = watch.check()
            service.append(time.perf_counter() - start)
            service_cpu.append(time.process_time() - cpu)
            assert out.ok, out.problems
        assert watch.runs["full"] == 1 and watch.runs["changes"] == args.repeats, watch.runs
        forget = forget_costs(store, pool, args.forget_repeats)
    result = {"machine": machine, "config": config, "built_s": built_s, "sizes": sizes, "served": served,
              "whole_check_s": {"median": statistics.median(whole), "min": min(whole), "max": max(whole),
                                "target": 1.0},
              "service_check_ms": {"median": median_ms(service), "min": min(service) * 1000.0,
                                   "max": max(service) * 1000.0, "cpu_median": median_ms(service_cpu),
                                   "target": 1.0},
              "forget_ms": forget}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "log_check_scale.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, args.out / "log_check_scale.png")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
