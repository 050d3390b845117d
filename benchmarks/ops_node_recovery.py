"""How long a round takes when a SuperNode dies in it, on the loopback deployment with real
processes: a normal run; runs where one SuperNode is ``kill -9``-ed while it holds a training message
and restarted at once (redo path: its partition is re-mapped to the new node id and its work redone);
and a run where it stays dead (exclude path, after a short ``FEDFORGET_NODE_REJOIN_S``; the redo runs
keep the default window). The SuperLink only
notices a dead SuperNode when its heartbeats stop (flwr 1.42: 30 s interval, patience 2, not
configurable), so that delay is measured too.

    python benchmarks/ops_node_recovery.py [--reps 2] [--rejoin 15] [--replot]
Writes docs/results/ops_node_recovery.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from bench_common import machine_info  # noqa: E402
from rich.progress import Progress  # noqa: E402

from fedforget.federation.failover import DEFAULT_REJOIN_S, REJOIN_ENV  # noqa: E402
from fedforget.launch import kill_tree, loopback_deployment  # noqa: E402
from fedforget.store import Store  # noqa: E402
from fedforget.unlearning.flwr_runner import app_dir  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"
NODES = 3
VICTIM = 1
CONFIG = ("method='fedsgt' task='digits-mlp' chains.groups=2 chains.budget=2 slices-per-client=1 lr=0.02 "
          "local-epochs=1 seed=6")


def _waves(store: Path) -> list[float]:
    """Seconds of each finished wave (round) so far, from the store's metrics.jsonl."""
    try:
        return [m["seconds"] for m in Store.open(store).metrics() if "wave" in m and "seconds" in m]
    except Exception:  # noqa: BLE001 - the store is not created yet
        return []


def _first(lines: list[tuple[float, str]], needle: str) -> float | None:
    return next((t for t, line in lines if needle in line), None)


def one(folder: Path, scenario: str, rejoin: float) -> dict:
    """One run; ``scenario`` is ``normal``, ``redo`` (kill, restart at once) or ``exclude`` (kill only)."""
    store = folder / "s"
    os.environ[REJOIN_ENV] = str(rejoin)  # reaches the ServerApp through the SuperLink's environment
    lines: list[tuple[float, str]] = []
    row: dict = {"scenario": scenario, "rejoin-window-s": rejoin}
    with loopback_deployment(folder / "deploy", NODES) as fed:
        start = time.monotonic()
        run = subprocess.Popen(fed.run_command(f'{CONFIG} store="{store}"'), env=fed.env, cwd=app_dir(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), ln) for ln in run.stdout),
                                  daemon=True)
        reader.start()
        try:
            if scenario != "normal":
                killed = fed.kill_node_mid_round(VICTIM, lambda: run.poll() is None)
                done_before = len(_waves(store))
                if scenario == "redo":
                    fed.restart_node(VICTIM)
                    row["restart-s"] = time.monotonic() - killed
                while len(_waves(store)) <= done_before and run.poll() is None:
                    time.sleep(0.1)
                row["kill-to-round-done-s"] = time.monotonic() - killed
                row["killed-in-wave"] = done_before + 1
            code = run.wait(timeout=1800)
        finally:
            kill_tree(run.pid)
        reader.join(timeout=10)
    row["run-wall-s"] = time.monotonic() - start
    text = "".join(line for _, line in lines)
    if code != 0 or "store written to" not in text:
        raise RuntimeError(f"{scenario} run failed ({code}):\n{text[-3000:]}")
    row["wave-s"] = _waves(store)
    if scenario != "normal":
        noticed = _first(lines, f"partition {VICTIM}: ")
        row["kill-to-noticed-s"] = None if noticed is None else noticed - killed
        back = _first(lines, f"partition {VICTIM} is back on node")
        row["kill-to-remapped-s"] = None if back is None else back - killed
        row["excluded"] = "excluded from this run" in text
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2, help="redo-path repetitions")
    parser.add_argument("--rejoin", type=float, default=15.0, help="FEDFORGET_NODE_REJOIN_S for the exclude run")
    parser.add_argument("--replot", action="store_true", help="only redo the summary and plot from the JSON")
    args = parser.parse_args()
    if args.replot:
        replot()
        return
    plan = ["normal"] + ["redo"] * args.reps + ["exclude"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fedforget-recovery-") as tmp, Progress() as progress:
        task = progress.add_task("loopback runs", total=len(plan))
        for i, scenario in enumerate(plan):
            progress.update(task, description=f"{scenario} run ({i + 1}/{len(plan)})")
            # the default window for the redo runs: a restarted SuperNode's first reply (a new ClientApp
            # process) can take longer than a short window on a loaded box, and then it is excluded
            rejoin = args.rejoin if scenario == "exclude" else DEFAULT_REJOIN_S
            rows.append(one(Path(tmp) / f"{i}-{scenario}", scenario, rejoin))
            progress.advance(task)
    report(rows, args.rejoin, machine_info())


def report(rows: list[dict], rejoin: float, machine: dict) -> None:
    """Ratios against the same wave of the normal run (waves differ in work), then the JSON and plot."""
    normal = rows[0]
    redo = [r for r in rows if r["scenario"] == "redo" and not r["excluded"]]
    exclude = [r for r in rows if r["scenario"] == "exclude"]
    for r in redo + exclude:
        same = normal["wave-s"][r["killed-in-wave"] - 1]
        r["normal-same-wave-s"] = same
        r["round-s"] = r["wave-s"][r["killed-in-wave"] - 1]
        r["round-vs-normal"] = r["round-s"] / same
        r["recovery-vs-normal"] = r["kill-to-round-done-s"] / same
    summary = {
        "normal-wave-s": normal["wave-s"],
        "redo-kill-to-round-done-s": [r["kill-to-round-done-s"] for r in redo],
        "redo-kill-to-noticed-s": [r["kill-to-noticed-s"] for r in redo],
        "redo-kill-to-remapped-s": [r["kill-to-remapped-s"] for r in redo],
        "redo-round-s": [r["round-s"] for r in redo],
        "redo-round-vs-normal": [r["round-vs-normal"] for r in redo],
        "exclude-kill-to-round-done-s": [r["kill-to-round-done-s"] for r in exclude],
        "exclude-kill-to-noticed-s": [r["kill-to-noticed-s"] for r in exclude],
        "exclude-round-s": [r["round-s"] for r in exclude],
        "exclude-round-vs-normal": [r["round-vs-normal"] for r in exclude],
        "exclude-rejoin-window-s": rejoin,
        "redo-rejoin-window-s": DEFAULT_REJOIN_S,
        "redo-runs-excluded-instead": sum(r["scenario"] == "redo" and r["excluded"] for r in rows),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ops_node_recovery.json").write_text(json.dumps(
        {"machine": machine, "config": CONFIG, "nodes": NODES, "victim-partition": VICTIM,
         "summary": summary, "runs": rows}, indent=2) + "\n")

    fig, ax = plt.subplots(figsize=(6.8, 3.9))
    labels = ["normal round\n(same wave)", "killed + restarted\n(redo)",
              f"killed, not back\n(exclude, rejoin {rejoin:.0f} s)"]
    groups = [[r["normal-same-wave-s"] for r in redo + exclude][:1], [r["round-s"] for r in redo],
              [r["round-s"] for r in exclude]]
    colors = ["#4c72b0", "#55a868", "#c44e52"]
    base = groups[0][0] if groups[0] else 1.0
    for i, (vals, color) in enumerate(zip(groups, colors, strict=True)):
        if not vals:
            continue
        ax.bar(i, statistics.mean(vals), color=color, alpha=0.8)
        ax.scatter([i] * len(vals), vals, color="black", s=12, zorder=3)
        ax.text(i, max(vals), f"{statistics.mean(vals):.0f} s\n({statistics.mean(vals) / base:.1f}x)",
                ha="center", va="bottom", fontsize=8)
    noticed = [r["kill-to-noticed-s"] for r in redo + exclude if r["kill-to-noticed-s"] is not None]
    if noticed:
        ax.axhline(statistics.mean(noticed), color="grey", ls="--", lw=1)
        ax.text(2.45, statistics.mean(noticed), "kill → SuperLink reports the node gone", ha="right", va="bottom",
                fontsize=7, color="grey")
    ax.set_xticks(range(3), labels, fontsize=8)
    ax.set_ylabel("round (wave) time, s")
    ax.set_ylim(0, max(max(g) for g in groups if g) * 1.3)
    ax.set_title(f"SuperNode killed mid-round, loopback, {NODES} SuperNodes", fontsize=10)
    fig.tight_layout()
    fig.savefig(OUT / "ops_node_recovery.png", dpi=120)
    print(json.dumps(summary, indent=2))


def replot() -> None:
    """Recompute the summary and plot from the JSON of the last run (no new runs)."""
    data = json.loads((OUT / "ops_node_recovery.json").read_text())
    report(data["runs"], data["summary"]["exclude-rejoin-window-s"], data["machine"])


if __name__ == "__main__":
    main()
