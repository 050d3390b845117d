"""Does a run scale with the clients sampled or with the clients registered? The Ray simulation
engine with 10, 100 and 1,000 virtual SuperNodes (``options.num-supernodes``).

For each task × method × number of clients it runs ``flwr run`` on Flower's managed local SuperLink
and measures the wall time (start-up, then seconds per round), the peak memory of the run's process
tree (the local SuperLink, the simulation and Ray's processes below it, sampled), the store's
size on disk, the time of one ``fedforget forget`` and of ``fedforget status`` on the result (the
operator's commands, interpreter start-up included), and how many lines ``status`` prints.

* ``fedavg`` samples ``--sampled`` clients per round (``fraction-train = sampled / clients``): its
  rounds should cost the same whatever the number registered.
* ``fedsgt`` (L = B = 2, one round per position) trains, at each position, every client that holds the
  group's slices: its cost grows with the clients registered by design; what must hold is that nothing
  breaks or is refused (node → partition mapping, lineage, ledger, status).

The training data is fixed (``--train-size``), so more clients means fewer samples each.

    python benchmarks/many_clients.py                                  # 10, 100, 1000 clients
    python benchmarks/many_clients.py --clients 10,100 --methods fedavg --out /tmp/smoke
Writes ``many_clients.json`` and ``.png`` under ``--out`` (default ``docs/results``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import psutil  # noqa: E402
from bench_common import Poller, RoundWatcher, machine_info, run_config_string  # noqa: E402
from rich.progress import Progress  # noqa: E402

from fedforget.launch import simulation_federation  # noqa: E402
from fedforget.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FLWR_RUN_TIMEOUT = 3600.0
METHODS: dict[str, dict[str, object]] = {
    "fedavg": {"method": "fedavg", "num-rounds": 2, "local-epochs": 1},
    "fedsgt": {"method": "fedsgt", "chains.groups": 2, "chains.budget": 2, "chains.rounds-per-phase": 1,
               "local-epochs": 1, "slices-per-client": 1},
}


class MemoryPeak(Poller):
    """Samples, in a thread, the summed RSS of the run's process tree: the local SuperLink that ``flwr
    run`` starts on this federation's port, and everything below it (the simulation process, Ray's head
    and its actors). ``peak_mib`` is the largest sum seen."""

    def __init__(self, superlink_port: str, every: float = 0.25) -> None:
        super().__init__(every)
        self.port = superlink_port
        self.peak = 0

    def _tree_rss(self) -> int:
        seen: dict[int, int] = {}
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if "flower-superlink" not in cmdline or f"--port {self.port}" not in cmdline:
                continue
            try:
                for member in [proc, *proc.children(recursive=True)]:
                    seen[member.pid] = member.memory_info().rss
            except psutil.Error:
                continue
        return sum(seen.values())

    def tick(self) -> None:
        self.peak = max(self.peak, self._tree_rss())

    @property
    def peak_mib(self) -> float:
        return self.peak / 2**20


def store_bytes(store: Path) -> int:
    return sum(f.stat().st_size for f in store.rglob("*") if f.is_file())


def timed_cli(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "fedforget.unlearning.cli", *args], capture_output=True, text=True,
                          check=False, cwd=ROOT)
    return time.monotonic() - start, proc


def one_run(task: str, method: str, clients: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    config: dict[str, object] = {"task": task, "seed": args.seed, "train-size": args.train_size,
                                 "test-size": args.test_size, "partitioner": "iid", **METHODS[method]}
    if method == "fedavg":
        config["fraction-train"] = min(1.0, args.sampled / clients)
    folder = work / f"{task}-{method}-{clients}"
    store = folder / "store"
    row: dict[str, Any] = {"task": task, "method": method, "clients": clients, "config": config}
    with simulation_federation(folder / "flwr-home", clients) as fed, \
            MemoryPeak(fed.env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]) as memory:
        t0 = time.monotonic()
        with RoundWatcher(store, t0, lambda rnd, acc: None) as watch:
            proc = fed.flwr_run(run_config_string(config, store), timeout=FLWR_RUN_TIMEOUT)
        wall = time.monotonic() - t0
    row.update({"wall-s": round(wall, 2), "peak-rss-mib": round(memory.peak_mib, 1), "ok": proc.returncode == 0})
    if proc.returncode != 0 or "store written to" not in proc.stdout:
        row["error"] = (proc.stdout + proc.stderr)[-2000:]
        return row
    metrics = Store.open(store).metrics()
    final = metrics[-1]
    if method == "fedavg":  # one row per round, round 0 = the evaluation before training
        rows = watch.rows
        start_up = rows[0][1] if rows else wall
        trained = [m for m in metrics if m.get("round", 0) > 0]
        row["per-round-s"] = round((rows[-1][1] - start_up) / max(1, len(rows) - 1), 2)
        row["client-rounds"] = sum(len(m.get("trained", [])) for m in trained)
    else:  # a chain method writes one row per wave round, timed by the server, then a final row
        waves = [m for m in metrics if "wave" in m]
        start_up = watch.rows[0][1] - waves[0]["seconds"] if waves and watch.rows else wall
        trained = waves
        row["per-round-s"] = round(sum(m["seconds"] for m in waves) / max(1, len(waves)), 2)
        row["client-rounds"] = sum(int(m["client-rounds"]) for m in waves)
    row.update({"start-up-s": round(start_up, 2), "rounds": len(trained), "accuracy": final.get("accuracy")})
    row["store-mib"] = round(store_bytes(store) / 2**20, 2)
    manifest = Store.open(store).manifest()
    sample = manifest["partitions"][str(clients // 2)][0][0]
    row["forget-s"], forget = timed_cli(["forget", "--store", str(store), "--sample", str(sample)])
    row["status-s"], status = timed_cli(["status", "--store", str(store)])
    row["forget-ok"], row["status-lines"] = forget.returncode == 0, len(status.stdout.splitlines())
    row["forget-s"], row["status-s"] = round(row["forget-s"], 2), round(row["status-s"], 2)
    return row


def plot(report: dict[str, Any], path: Path) -> None:
    rows = [r for r in report["runs"] if r.get("ok")]
    keys = sorted({(r["task"], r["method"]) for r in rows})
    panels = [("per-round-s", "seconds per round (fedavg) / per position round (fedsgt)"),
              ("peak-rss-mib", "peak RSS of SuperLink + simulation + Ray, MiB"),
              ("forget-s", "one `fedforget forget`, s")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for task, method in keys:
            pts = sorted((r["clients"], r[key]) for r in rows if (r["task"], r["method"]) == (task, method)
                         and r.get(key) is not None)
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=f"{method}, {task}")
        ax.set_xscale("log")
        ax.set_xlabel("clients registered (virtual SuperNodes)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Ray simulation, {report['sampled']} fedavg clients sampled per round; 2 CPU cores", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="10,100,1000", help="numbers of virtual SuperNodes")
    parser.add_argument("--methods", default="fedavg,fedsgt")
    parser.add_argument("--tasks", default="fmnist-cnn")
    parser.add_argument("--sampled", type=int, default=10, help="fedavg clients sampled per round")
    parser.add_argument("--train-size", type=int, default=10000)
    parser.add_argument("--test-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument("--replot", action="store_true", help="only redraw the .png from the .json in --out")
    args = parser.parse_args(argv)
    json_path, png_path = args.out / "many_clients.json", args.out / "many_clients.png"
    if args.replot:
        plot(json.loads(json_path.read_text()), png_path)
        return 0
    runs = [(t, m, int(n)) for t in args.tasks.split(",") for m in args.methods.split(",")
            for n in args.clients.split(",")]
    unknown = sorted({m for _, m, _ in runs} - set(METHODS))
    if unknown:
        print(f"many_clients: unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}",
              file=sys.stderr)
        return 2
    report: dict[str, Any] = {"benchmark": "many_clients", "machine": machine_info(), "sampled": args.sampled,
                              "train-size": args.train_size, "runs": []}
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fedforget-many-") as tmp, Progress() as progress:
        bar = progress.add_task("many clients", total=len(runs))
        for task, method, clients in runs:
            progress.update(bar, description=f"{method} on {task}, {clients} clients")
            row = one_run(task, method, clients, args, Path(tmp))
            report["runs"].append(row)
            progress.console.print({k: v for k, v in row.items() if k not in ("config", "error")})
            if "error" in row:
                progress.console.print(f"[red]{method} with {clients} clients failed:[/] {row['error'][-600:]}")
            json_path.write_text(json.dumps(report, indent=1) + "\n")
            progress.advance(bar)
    plot(report, png_path)
    print(f"wrote {json_path} and {png_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
