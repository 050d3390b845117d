"""The cost of TLS (+ SuperNode authentication) on the loopback deployment: the same
FedSGT run on `deploy/loopback.sh` insecure and with TLS=1 AUTH=1; round (wave) times from the
store's metrics.

    python benchmarks/ops_tls_cost.py
Writes docs/results/ops_tls_cost.{json,png}.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from bench_common import machine_info  # noqa: E402
from rich.progress import Progress  # noqa: E402

from fedforget.launch import loopback_deployment  # noqa: E402
from fedforget.store import Store  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"
NODES = 2
CONFIG = ("method='fedsgt' task='digits-mlp' chains.groups=2 chains.budget=2 slices-per-client=1 lr=0.02 "
          "local-epochs=1 seed=6")


def one(folder: Path, secure: bool) -> dict:
    store = folder / "s"
    with loopback_deployment(folder / "deploy", NODES, tls=secure, auth=secure) as fed:
        start = time.monotonic()
        proc = fed.flwr_run(f'{CONFIG} store="{store}"', timeout=1800)
        wall = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    waves = [m["seconds"] for m in Store.open(store).metrics() if "wave" in m]
    return {"tls+auth": secure, "run-wall-s": wall, "waves": len(waves), "wave-s": waves,
            "wave-median-s": statistics.median(waves)}


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="fedforget-tls-") as tmp, Progress() as progress:
        task = progress.add_task("loopback runs", total=2)
        for secure in (False, True):
            progress.update(task, description=f"loopback {'TLS + auth' if secure else 'insecure'}")
            rows.append(one(Path(tmp) / ("tls" if secure else "plain"), secure))
            progress.advance(task)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ops_tls_cost.json").write_text(json.dumps({"machine": machine_info(), "config": CONFIG, "nodes": NODES,
                                                       "runs": rows}, indent=2) + "\n")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    labels = ["insecure", "TLS + node auth"]
    ax.bar(labels, [r["wave-median-s"] for r in rows], color=["#4c72b0", "#dd8452"])
    for i, r in enumerate(rows):
        ax.text(i, r["wave-median-s"], f"{r['wave-median-s']:.1f} s/round\nrun {r['run-wall-s']:.0f} s",
                ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("median round (wave) time, s")
    ax.set_title(f"loopback deployment, {NODES} SuperNodes")
    fig.tight_layout()
    fig.savefig(OUT / "ops_tls_cost.png", dpi=120)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
