"""FedSGT's training traffic with and without the nodes' module cache, next to FedAvg's, from the real messages.

Trains FedAvg (``--rounds`` rounds) and FedSGT (L = B = ``--groups``, one round per position) with the
real ServerApp and ClientApp on the in-process Grid, on the same clients and data, and counts the bytes
of every tensor in every message each ClientApp receives (down) and sends (up): FedSGT once with the
cache (each frozen module travels to a node once, by sha256 after that; the node rebuilds each new
module's seeded start) and once with ``FEDFORGET_CLIENT_CACHE=off`` (everything in full, as before the
cache). Also checks that both FedSGT runs store the very same artifacts, and that the ServerApp's own
``bytes-down`` rows agree with the bytes counted at the nodes.

    python benchmarks/fedsgt_traffic.py                      # fmnist-cnn, 4,000 samples, 10 clients, L = B = 10
    python benchmarks/fedsgt_traffic.py --groups 5 --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import machine_info, quiet_flower
from flwr.app import Context, Message, RecordDict

from fedforget.client_app import app as client_app
from fedforget.inprocess import run_in_process
from fedforget.methods.chains.shipping import CACHE_ENV
from fedforget.store import Store

NODES = 10


def tensor_bytes(content: RecordDict) -> int:
    """Bytes of tensor data in a message (every ArrayRecord; configs and metrics are a few hundred bytes)."""
    return sum(int(a.numpy().nbytes) for record in content.array_records.values() for a in record.values())


class CountingClient:
    """The real ClientApp, counting what each call receives and sends."""

    def __init__(self) -> None:
        self.down = self.up = self.calls = 0

    def __call__(self, msg: Message, context: Context) -> Message:
        reply = client_app(msg, context)
        if msg.metadata.message_type.startswith("train"):
            self.calls += 1
            self.down += tensor_bytes(msg.content)
            if not reply.has_error():
                self.up += tensor_bytes(reply.content)
        return reply


def run(config: dict[str, Any], cache: bool) -> dict[str, Any]:
    counter = CountingClient()
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = "on" if cache else "off"
    started = time.monotonic()
    try:
        with quiet_flower():
            run_in_process(config, NODES, client_app=counter)
    finally:
        if previous is None:
            os.environ.pop(CACHE_ENV)
        else:
            os.environ[CACHE_ENV] = previous
    store = Store.open(config["store"])
    rows = store.metrics()
    waves = [r for r in rows if "wave" in r]
    ledger = store.ledger()
    try:
        shas = sorted(a["sha256"] for a in ledger.artifacts())
    finally:
        ledger.close()
    accuracy = [r for r in rows if "accuracy" in r][-1]["accuracy"]  # the final served model's
    return {
        "client-rounds": counter.calls, "bytes-down": counter.down, "bytes-up": counter.up,
        "bytes-down-per-client-round": counter.down / max(1, counter.calls),
        "server-rows-bytes-down": sum(r["bytes-down"] for r in waves) if waves else None,
        "modules-named": sum(r.get("modules-named", 0) for r in waves),
        "modules-carried": sum(r.get("modules-carried", 0) for r in waves),
        "module-needs": sum(r.get("module-needs", 0) for r in waves),
        "accuracy": accuracy, "wall-s": round(time.monotonic() - started, 1), "artifact-shas": shas,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    names = ["fedavg", "fedsgt-uncached", "fedsgt-cached"]
    labels = [f"FedAvg\n{runs['fedavg']['client-rounds']} client-rounds",
              f"FedSGT, no cache\n{runs['fedsgt-uncached']['client-rounds']} client-rounds",
              f"FedSGT, node cache\n{runs['fedsgt-cached']['client-rounds']} client-rounds"]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    down = [runs[n]["bytes-down"] / 2**20 for n in names]
    up = [runs[n]["bytes-up"] / 2**20 for n in names]
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], down, 0.4, label="down (server → nodes)")
    ax.bar([i + 0.2 for i in x], up, 0.4, label="up (nodes → server)")
    for i, n in enumerate(names):
        ax.annotate(f"{runs[n]['bytes-down'] / runs['fedavg']['bytes-down']:.1f}×", (i - 0.2, down[i]),
                    ha="center", va="bottom", fontsize=9)
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("MiB of tensors in the real messages")
    cfg = result["config"]
    ax.set_title(f"Training traffic, {cfg['task']} ({cfg['train-size']} samples, {NODES} clients, "
                 f"L = B = {cfg['groups']})", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="fmnist-cnn")
    parser.add_argument("--train-size", type=int, default=4000)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=10, help="L = B")
    parser.add_argument("--rounds", type=int, default=0, help="FedAvg rounds (0 = the task's default)")
    parser.add_argument("--rounds-per-phase", type=int, default=0, help="FedSGT rounds per position (0 = default)")
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "results")
    args = parser.parse_args(argv)
    common = {"task": args.task, "train-size": args.train_size, "test-size": args.test_size, "seed": args.seed,
              "partitioner": "dirichlet", "dirichlet-alpha": 0.3}
    result: dict[str, Any] = {"config": {**common, "groups": args.groups, "clients": NODES},
                              "machine": machine_info(), "runs": {}}
    fedsgt = {**common, "chains.groups": args.groups, "chains.budget": args.groups,
              "chains.rounds-per-phase": args.rounds_per_phase}
    with tempfile.TemporaryDirectory(prefix="fedsgt-traffic-") as tmp:
        plans = {
            "fedavg": ({**common, "method": "fedavg", "num-rounds": args.rounds}, True),
            "fedsgt-uncached": ({**fedsgt, "method": "fedsgt"}, False),
            "fedsgt-cached": ({**fedsgt, "method": "fedsgt"}, True),
        }
        for name, (config, cache) in plans.items():
            print(f"{name} ...", flush=True)
            result["runs"][name] = run({**config, "store": str(Path(tmp) / name)}, cache)
            resolved = Store.open(Path(tmp) / name).manifest()["config"]
            result["runs"][name]["schedule"] = {k: resolved[k]
                                                for k in ("num-rounds", "chains.rounds-per-phase", "local-epochs")}
            print(json.dumps({k: v for k, v in result["runs"][name].items() if k != "artifact-shas"}), flush=True)
    runs = result["runs"]
    fedavg = runs["fedavg"]
    result["same-artifacts"] = runs["fedsgt-cached"]["artifact-shas"] == runs["fedsgt-uncached"]["artifact-shas"]
    for name in ("fedsgt-uncached", "fedsgt-cached"):
        r = runs[name]
        r["download-vs-fedavg"] = round(r["bytes-down"] / fedavg["bytes-down"], 2)
        r["download-per-client-round-vs-fedavg"] = round(
            r["bytes-down-per-client-round"] / fedavg["bytes-down-per-client-round"], 2)
        r["server-rows-match-nodes"] = r["server-rows-bytes-down"] == r["bytes-down"]
    for r in runs.values():
        r.pop("artifact-shas")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fedsgt_traffic.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot(result, args.out / "fedsgt_traffic.png")
    print(json.dumps({n: {k: r.get(k) for k in ("client-rounds", "bytes-down", "download-vs-fedavg")}
                      for n, r in runs.items()}, indent=2))
    print(f"same artifacts with and without the cache: {result['same-artifacts']}")
    return 0 if result["same-artifacts"] else 1


if __name__ == "__main__":
    sys.exit(main())
