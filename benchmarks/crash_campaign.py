"""Crash campaign: kill -9 the coordinator inside `forget` (injected points and random
SIGKILLs) and retrain runs at random points; count requests, crashes, and anything lost or half applied.

    python benchmarks/crash_campaign.py [--forget-crashes 2000] [--retrain-crashes 20]
Writes docs/results/ops_crash_campaign.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from bench_common import machine_info  # noqa: E402
from rich.progress import Progress  # noqa: E402

from fedforget.faults.campaign import retrain_campaign  # noqa: E402
from fedforget.inprocess import run_in_process  # noqa: E402
from fedforget.store import Store  # noqa: E402
from fedforget.unlearning.forget import forget_request  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"
CONFIG = {"task": "digits-mlp", "lr": 0.02, "local-epochs": 1, "method": "fedsgt", "chains.groups": 3,
          "chains.budget": 3, "slices-per-client": 1, "seed": 3}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--forget-crashes", type=int, default=2000)
    parser.add_argument("--retrain-crashes", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedforget-crash-") as tmp, Progress() as progress:
        work = Path(tmp)
        task = progress.add_task("training the store", total=None)
        run_in_process({**CONFIG, "store": str(work / "trained")}, 3)
        progress.update(task, description=f"forget: {args.forget_crashes} crashes (in a torch-free process)")
        shutil.copytree(work / "trained", work / "forget")
        proc = subprocess.run([sys.executable, "-m", "fedforget.faults", "forget", str(work / "forget"),
                               "--crashes", str(args.forget_crashes), "--seed", "1"],
                              capture_output=True, text=True, check=True)
        forget = json.loads(proc.stdout)
        shutil.copytree(work / "trained", work / "pending")
        store = Store.open(work / "pending")
        parts = store.manifest()["partitions"]
        forget_request(store, samples=[parts["1"][0][0]])
        forget_request(store, samples=[parts["2"][0][3], parts["0"][0][5]])
        progress.update(task, description=f"retrain: {args.retrain_crashes} crashes", total=args.retrain_crashes,
                        completed=0)
        (work / "rt").mkdir()
        retrain = retrain_campaign(work / "pending", work / "rt", crashes=args.retrain_crashes, seed=2,
                                   tick=lambda n: progress.advance(task, n)).to_json()
    forget.pop("problems")
    retrain.pop("problems")
    result = {"machine": machine_info(), "config": CONFIG, "forget": forget, "retrain": retrain}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ops_crash_campaign.json").write_text(json.dumps(result, indent=2) + "\n")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    labels = ["crashes", "pending\nafter crash", "applied\nafter crash", "half applied", "lost", "inconsistent"]
    values = [forget["crashes"], forget["pending_after_crash"], forget["applied_after_crash"],
              forget["half_applied_found"], forget["lost_found"], forget["inconsistent_found"]]
    axes[0].bar(labels, values, color=["#4c72b0", "#55a868", "#55a868", "#c44e52", "#c44e52", "#c44e52"])
    axes[0].set_title(f"forget: {forget['requests']} requests, {forget['crashes']} kill -9")
    labels = ["crashes", "jobs", "restart\nunfinished", "restart ≠\nuninterrupted", "inconsistent"]
    values = [retrain["crashes"], retrain["jobs"], retrain["unfinished_after_restart"],
              retrain["mismatched_after_restart"], retrain["inconsistent_found"]]
    axes[1].bar(labels, values, color=["#4c72b0", "#4c72b0", "#c44e52", "#c44e52", "#c44e52"])
    axes[1].set_title(f"retrain: {retrain['crashes']} kill -9 in {retrain['jobs']} jobs")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "ops_crash_campaign.png", dpi=120)
    print(json.dumps({"forget": forget, "retrain": {k: v for k, v in retrain.items() if k != "restart_seconds"}}))


if __name__ == "__main__":
    main()
