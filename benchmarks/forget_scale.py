"""Does one forget request cost the same on a store of 10³ and of 10⁷ samples? The forget path alone.

No training: for each size the script builds a synthetic ``ledger.sqlite`` the way a training run
would leave it (``fedforget.store.ledger``'s own schema, sample → unit index, a FedSGT plan and its
artifacts with their lineage, fake sha256s), then times single-sample ``Ledger.forget`` calls on
random sample ids that were never forgotten before.

* samples ``n`` in 10³ … 10⁷; clients ``min(10⁴, n / 100)``, 5 slices (units) each, dealt IID;
* FedSGT plan: ``L = 10`` groups (Algorithm 1), ``B = 10`` cyclic orders → 100 artifacts whose
  lineage holds 55 · units (unit, artifact) rows;
* ``fresh``: every timed request starts from an all-valid store (validity reset before it, untimed,
  as after a retrain), so each one invalidates artifacts and re-plans serving: the per-request worst case;
* ``fresh-full-plan``: the same with the full plan (all unit lists) in the ledger, as training stored it
  before the forget path switched to the compact plan, for comparison;
* ``accumulating``: then N more requests with no reset, as a burst of deletions before any retrain
  (after the first few hits nothing is left to invalidate);
* each call is timed with ``time.perf_counter`` around ``Ledger.forget`` (its transaction and its
  ``synchronous=FULL`` commit); ``cpu_ms`` is this process's CPU time over the same call, ``ledger_ms``
  the ledger's own figure, which stops before the commit;
* all stores are built first, then the timed requests run in ``--rounds`` passes over the sizes, so
  that load from other processes on a shared machine falls on every size alike.

The samples table is filled in one transaction with ``executemany`` (journal off, index built after the
rows), then the plan and artifacts go through the public ``Ledger`` API. Stores live under a temporary
directory and are deleted at the end (all sizes together need about 0.5 GB).
Writes ``docs/results/forget_scale.json`` and ``.png``.

    python benchmarks/forget_scale.py                          # 10³ … 10⁷ (about 6 minutes on 2 cores)
    python benchmarks/forget_scale.py --sizes 1000,100000 --requests 50 --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import machine_info
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedforget.core.seeds import derive_seed
from fedforget.methods.chains.grouping import group_units
from fedforget.methods.chains.plan import ChainPlan
from fedforget.methods.chains.sequences import cyclic_sequences
from fedforget.store.ledger import LEDGER, SCHEMA, Ledger

ROOT = Path(__file__).resolve().parent.parent
SIZES = [10**3, 10**4, 10**5, 10**6, 10**7]
MAX_CLIENTS = 10**4
SAMPLES_PER_CLIENT = 100
SLICES = 5
GROUPS = 10
BUDGET = 10
ROWS_PER_BATCH = 200_000
#: fresh: all-valid before each request; fresh-full-plan: the same with the full plan stored; accumulating: no reset
MODES = ("fresh", "fresh-full-plan", "accumulating")
console = Console()
if not console.is_terminal:  # a log file: wide enough for the summary table
    console.width = 140


def clients_for(samples: int) -> int:
    return max(1, min(MAX_CLIENTS, samples // SAMPLES_PER_CLIENT))


def unit_name(unit: int) -> str:
    return f"{unit // SLICES}:{unit % SLICES}"


# -- building a store -----------------------------------------------------------------------------------
def populate_samples(path: Path, samples: int, units: int, seed: int, progress: Progress, bar: Any) -> None:
    """The ledger schema and its sample → unit index: samples dealt IID (seeded shuffle, near-equal cuts)."""
    rng = np.random.default_rng(seed)
    unit_of = np.empty(samples, dtype=np.int64)
    unit_of[rng.permutation(samples)] = np.arange(samples, dtype=np.int64) * units // samples
    sizes = np.bincount(unit_of, minlength=units)
    names = [unit_name(u) for u in range(units)]
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.executescript(SCHEMA)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "cache_size=-262144", "temp_store=MEMORY"):
            db.execute(f"PRAGMA {pragma}")
        db.execute("DROP INDEX samples_by_unit")  # rebuilt by one sort after the rows are in
        db.execute("BEGIN")
        db.executemany("INSERT INTO units VALUES(?, ?, ?)",
                       ((names[u], u // SLICES, int(sizes[u])) for u in range(units)))
        for start in range(0, samples, ROWS_PER_BATCH):
            chunk = unit_of[start : start + ROWS_PER_BATCH].tolist()
            db.executemany("INSERT INTO samples VALUES(?, ?)",
                           zip(range(start, start + len(chunk)), (names[u] for u in chunk), strict=True))
            progress.advance(bar, len(chunk))
        db.execute("COMMIT")
        progress.update(bar, description=f"{samples:>10,} index")
        db.executescript(SCHEMA)  # the same CREATE INDEX the ledger runs
    finally:
        db.close()


def fedsgt_plan(units: int, seed: int) -> ChainPlan:
    groups = group_units([unit_name(u) for u in range(units)], GROUPS, derive_seed(seed, "fedsgt", "grouping"))
    return ChainPlan("fedsgt", [groups], [cyclic_sequences(GROUPS, BUDGET)], "new", "additive", 1, "allseq")


def record_artifacts(ledger: Ledger, plan: ChainPlan, progress: Progress, bar: Any) -> int:
    """The plan and every artifact with its lineage, through the ledger's API, as training records them."""
    ledger.set_plan(plan.serving_json())  # what training stores (the full plan goes to the manifest)
    rows = 0
    for artifact, chain, position in plan.artifacts():
        lineage = plan.lineage(chain, position)
        fake_sha = f"{derive_seed(artifact, 'sha'):064x}"[-64:]
        ledger.record_artifact(artifact, fake_sha, "lora+head", lineage, 0, {"position": position})
        rows += len(lineage)
        progress.advance(bar)
    ledger.refresh_serving()
    return rows


# -- timing ---------------------------------------------------------------------------------------------
def percentiles(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean()),
            "max": float(a.max())}


@dataclass
class Timings:
    wall: list[float] = field(default_factory=list)
    inside: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    invalidated: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"requests": len(self.wall), "wall_ms": percentiles(self.wall), "ledger_ms": percentiles(self.inside),
                "cpu_ms": percentiles(self.cpu), "invalidated_mean": float(np.mean(self.invalidated)),
                "wall_ms_all": [round(x, 3) for x in self.wall]}


def reset_validity(ledger: Ledger) -> None:
    with ledger.transaction() as db:
        db.execute("UPDATE artifacts SET valid=1")


def time_requests(ledger: Ledger, ids: list[int], reset: bool, out: Timings, progress: Progress, bar: Any) -> None:
    for sample in ids:
        if reset:
            reset_validity(ledger)
        c0, t0 = time.process_time(), time.perf_counter()
        result = ledger.forget(samples=[sample])
        out.wall.append((time.perf_counter() - t0) * 1000.0)
        out.cpu.append((time.process_time() - c0) * 1000.0)
        assert result.request is not None and result.new_samples == 1, result.to_json()
        out.inside.append(result.latency_ms)
        out.invalidated.append(len(result.invalidated))
        progress.advance(bar)


@dataclass
class Built:
    samples: int
    root: Path
    ledger: Ledger
    plan: ChainPlan
    ids: list[int]
    row: dict[str, Any]
    timings: dict[str, Timings] = field(default_factory=lambda: {m: Timings() for m in MODES})


def build_size(samples: int, requests: int, seed: int, work: Path, progress: Progress) -> Built:
    clients = clients_for(samples)
    units = clients * SLICES
    root = Path(tempfile.mkdtemp(prefix=f"n{samples}-", dir=work))
    path = root / LEDGER
    bar = progress.add_task(f"{samples:>10,} samples", total=samples)
    t0 = time.perf_counter()
    populate_samples(path, samples, units, seed, progress, bar)
    populate_s = time.perf_counter() - t0
    progress.update(bar, description=f"{samples:>10,} samples")
    bar = progress.add_task(f"{samples:>10,} artifacts", total=GROUPS * BUDGET)
    t1 = time.perf_counter()
    plan = fedsgt_plan(units, seed)
    ledger = Ledger(path)
    lineage_rows = record_artifacts(ledger, plan, progress, bar)
    artifacts_s = time.perf_counter() - t1
    build_s = time.perf_counter() - t0
    db_bytes = path.stat().st_size
    assert ledger.num_samples() == samples
    rng = np.random.default_rng(seed + 1)
    ids = [int(i) for i in rng.choice(samples, size=len(MODES) * requests, replace=False)]
    row = {"samples": samples, "clients": clients, "units": units, "artifacts": GROUPS * BUDGET,
           "lineage_rows": lineage_rows, "plan_json_bytes": len(json.dumps(plan.serving_json())),
           "full_plan_json_bytes": len(json.dumps(plan.to_json())),
           "populate_s": round(populate_s, 3), "artifacts_s": round(artifacts_s, 3), "build_s": round(build_s, 3),
           "db_bytes": db_bytes, "bytes_per_sample": db_bytes / samples}
    return Built(samples, root, ledger, plan, ids, row)


def time_all(stores: list[Built], requests: int, rounds: int, progress: Progress) -> None:
    """Each mode in ``rounds`` passes over the sizes, so load swings from other processes hit every size alike."""
    per = [len(c) for c in np.array_split(np.arange(requests), rounds)]
    for m, mode in enumerate(MODES):
        bar = progress.add_task(f"forget {mode}", total=requests * len(stores))
        for b in stores:
            reset_validity(b.ledger)
        for r in range(rounds):
            for b in stores:
                ids = b.ids[m * requests + sum(per[:r]) : m * requests + sum(per[: r + 1])]
                if mode == "fresh-full-plan":
                    b.ledger.set_plan(b.plan.to_json())
                time_requests(b.ledger, ids, mode != "accumulating", b.timings[mode], progress, bar)
                if mode == "fresh-full-plan":
                    b.ledger.set_plan(b.plan.serving_json())


# -- output ---------------------------------------------------------------------------------------------
def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    rows = report["results"]
    xs = [r["samples"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    ax1.plot(xs, [r["fresh"]["wall_ms"]["p50"] for r in rows], "o-", color="#4c72b0", label="p50")
    ax1.plot(xs, [r["fresh"]["wall_ms"]["p99"] for r in rows], "s-", color="#dd8452", label="p99")
    ax1.plot(xs, [r["fresh-full-plan"]["wall_ms"]["p50"] for r in rows], "d-.", color="#8172b3",
             label="p50 with the full plan stored (unit lists)")
    ax1.plot(xs, [r["accumulating"]["wall_ms"]["p50"] for r in rows], "o--", color="#8c8c8c",
             label="p50, accumulating (nothing left to invalidate)")
    ax1.plot(xs, [r["fresh"]["cpu_ms"]["p50"] for r in rows], "^:", color="#c44e52",
             label="p50 CPU time of the call (no fsync waits)")
    for r in rows:
        ax1.annotate(f"{r['clients']:,} clients", (r["samples"], r["fresh"]["wall_ms"]["p99"]),
                     textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax1.set_xscale("log")
    top = max(max(r["fresh"]["wall_ms"]["p99"], r["fresh-full-plan"]["wall_ms"]["p50"]) for r in rows)
    ax1.set_ylim(bottom=0, top=top * 1.3)
    ax1.set_xlabel("samples in the ledger (log scale)")
    ax1.set_ylabel("ms per single-sample forget (incl. commit)")
    ax1.set_title(f"forget latency, {report['config']['requests']} requests per size", fontsize=10)
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8, loc="center left")

    ax2.plot(xs, [r["bytes_per_sample"] for r in rows], "o-", color="#55a868")
    for r in rows:
        ax2.annotate(f"{r['db_bytes'] / 2**20:,.1f} MiB", (r["samples"], r["bytes_per_sample"]),
                     textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax2.set_xscale("log")
    ax2.set_ylim(bottom=0, top=max(r["bytes_per_sample"] for r in rows) * 1.25)
    ax2.set_xlabel("samples in the ledger (log scale)")
    ax2.set_ylabel("ledger.sqlite bytes per sample")
    ax2.set_title("ledger size (sample index + 100 artifacts' lineage)", fontsize=10)
    ax2.grid(alpha=0.3)
    machine = report["machine"]
    fig.suptitle(f"fedforget forget path: FedSGT L={GROUPS}, B={BUDGET}, {SLICES} slices per client; "
                 f"SQLite synchronous=FULL; {machine['cores']} cores, {machine['cpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="forget path at scale (fresh: every request invalidates and re-plans)")
    for col in ("samples", "clients", "p50 ms", "p99 ms", "CPU p50", "full plan p50", "accum. p50", "invalidated",
                "B/sample", "DB MiB", "build s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['samples']:,}", f"{r['clients']:,}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
                      f"{r['fresh']['cpu_ms']['p50']:.2f}", f"{r['fresh-full-plan']['wall_ms']['p50']:.2f}",
                      f"{r['accumulating']['wall_ms']['p50']:.2f}",
                      f"{r['fresh']['invalidated_mean']:.1f}", f"{r['bytes_per_sample']:.1f}",
                      f"{r['db_bytes'] / 2**20:,.1f}", f"{r['build_s']:.1f}")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated sample counts")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per size and mode")
    parser.add_argument("--rounds", type=int, default=4,
                        help="passes over the sizes that the timed requests are split into (interleaving)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the partition, grouping and sample draws")
    parser.add_argument("--work", type=Path, default=None, help="where the temporary stores go (default: $TMPDIR)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="where the .json and .png go")
    parser.add_argument("--replot", action="store_true", help="only redraw the .png from the .json in --out")
    args = parser.parse_args(argv)
    if args.replot:
        plot(json.loads((args.out / "forget_scale.json").read_text(encoding="utf-8")), args.out / "forget_scale.png")
        return 0
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    if any(len(MODES) * args.requests > n for n in sizes):
        parser.error(f"every size needs at least {len(MODES) * args.requests} samples ({len(MODES)} × --requests "
                     "fresh ids)")

    info = machine_info()
    load = os.getloadavg()
    console.rule("[bold]fedforget forget path at scale")
    console.print(f"[dim]{info['cpu']}, {info['cores']} cores; load average {load[0]:.2f}; "
                  f"SQLite {sqlite3.sqlite_version}[/]")
    work = Path(tempfile.mkdtemp(prefix="fedforget-forget-scale-", dir=args.work))
    console.print(f"[dim]stores under {work} (deleted at the end)[/]")
    started = time.perf_counter()
    stores: list[Built] = []
    try:
        with Progress(SpinnerColumn(), TextColumn("[bold blue]{task.description:<28}"), BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=console) as progress:
            for n in sizes:
                stores.append(build_size(n, args.requests, args.seed, work, progress))
                row = stores[-1].row
                progress.console.print(f"{n:>10,} samples: {row['bytes_per_sample']:.1f} B/sample, "
                                       f"build {row['build_s']:.1f} s")
            time_all(stores, args.requests, args.rounds, progress)
        results = []
        for b in stores:
            modes = {mode: t.summary() for mode, t in b.timings.items()}
            results.append({**b.row, "p50_ms": modes["fresh"]["wall_ms"]["p50"],
                            "p99_ms": modes["fresh"]["wall_ms"]["p99"], **modes})
    finally:
        for b in stores:
            b.ledger.close()
        shutil.rmtree(work, ignore_errors=True)

    report = {
        "benchmark": "forget_scale",
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": {**info, "sqlite": sqlite3.sqlite_version, "load-average-at-start": [round(x, 2) for x in load]},
        "config": {"sizes": sizes, "requests": args.requests, "seed": args.seed, "max-clients": MAX_CLIENTS,
                   "samples-per-client": SAMPLES_PER_CLIENT, "slices-per-client": SLICES, "groups": GROUPS,
                   "budget": BUDGET, "method": "fedsgt", "stacking": "new", "serving": "allseq", "rounds": args.rounds},
        "total_wall_s": round(time.perf_counter() - started, 1),
        "results": results,
        "notes": [
            "p50_ms / p99_ms: the fresh mode's wall time of Ledger.forget(samples=[id]) per call, BEGIN IMMEDIATE to "
            "COMMIT (synchronous=FULL, rollback journal), on a warm page cache; cpu_ms: this process's CPU time "
            "over the call (what the wall time would be without fsync waits and other processes); ledger_ms: the "
            "ledger's own latency_ms, measured before the commit.",
            "fresh: before each timed request every artifact is set valid again (untimed), so every request "
            "invalidates the artifacts whose lineage holds its unit and recomputes the serving plan. accumulating: "
            "requests follow each other with no reset, like a burst before a retrain.",
            "fresh-full-plan: like fresh, but with the full plan (every unit id of every group) in the ledger, as "
            "training stored it before commit 9916185; forget parses the stored plan on every request, so then "
            "its cost follows the number of units (clients × slices). The compact plan (ChainPlan.serving_json, "
            "what training stores now) has no unit lists. Sample → unit and unit → artifact look-ups are indexed.",
            "bytes_per_sample: ledger.sqlite size after the build divided by samples; it includes the 55 × units "
            "lineage rows and the plan, which dominate at 100 samples per client.",
            "build_s = populate_s (units and samples, one transaction, journal off, index after the rows) + "
            "artifacts_s (set_plan, 100 record_artifact calls through the Ledger API, refresh_serving).",
            "Shared CPU and disk: other processes were running (load average at start is recorded), so wall "
            "percentiles are noisy; the timed requests are interleaved over the sizes in rounds so that this noise "
            "falls on every size alike.",
        ],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / "forget_scale.json", args.out / "forget_scale.png"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot(report, png_path)
    console.print(summary_table(results))
    console.print(f"wrote {json_path} and {png_path} ({report['total_wall_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
