"""The registration exchange's cost next to the training run it starts, at 10, 100 and 1,000 nodes.

For each number of nodes it runs the real ServerApp and ClientApp on the in-process Grid (one process, the
nodes called one after another) and splits every message between the registration round (a
``RegisterQuery`` and its reply) and the rest of the run (training, evaluation). Bytes are Flower's own
serialized size of each message (``message_to_proto(...).ByteSize()``, the protobuf a SuperLink carries,
framing included); the tensor payload (``payload_bytes``, what the other traffic figures count) is kept
beside it. Seconds: the registration's wall time as the ServerApp sees it (``register_nodes``), split into
the nodes' own handling (in process the nodes answer one after another, so their times add up) and the
server's side (the rest: queries, decoding, the checks, the plan); in a deployment the nodes answer in
parallel, so the server waits for its side plus the slowest node. The training run is the same run's
remainder, so each ratio comes from one run. Then the same federation registers again with the needs
SAFE (``labels``) and FedShard/FedCIO (``class-counts``) ask for.

    python benchmarks/registration_cost.py                       # 10, 100, 1000 nodes, 60,000 rows
    python benchmarks/registration_cost.py --nodes 10,100 --out /tmp/smoke
Writes ``registration_cost.json`` and ``.png`` under ``--out`` (default ``docs/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import machine_info, quiet_flower  # noqa: E402
from flwr.app import Context, Message  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.common.serde import message_to_proto  # noqa: E402

import fedforget.methods.registry  # noqa: E402,F401 - the methods, for the run config's parser
from fedforget.core.config import parse_run_config  # noqa: E402
from fedforget.federation import driver  # noqa: E402
from fedforget.federation.control_messages import NEED_CLASS_COUNTS, NEED_LABELS, RegisterQuery  # noqa: E402
from fedforget.federation.messaging import payload_bytes  # noqa: E402
from fedforget.federation.registration import Federation, register_nodes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REGISTRATION, TRAINING = "registration", "training"
#: The needs measured on their own after the run: SAFE's and FedShard's / FedCIO's.
EXTRA_NEEDS: dict[str, tuple[str, ...]] = {"labels": (NEED_LABELS,), "class-counts": (NEED_CLASS_COUNTS,)}


def wire_bytes(msg: Message) -> int:
    """Flower's serialized size of ``msg``: the protobuf that crosses the SuperLink (metadata included)."""
    return int(message_to_proto(msg).ByteSize())


def phase_of(msg: Message) -> str:
    """Which part of a run a message to a node belongs to: the registration query, or the run's own work."""
    return REGISTRATION if RegisterQuery.asked(msg.content) else TRAINING


@dataclass
class Traffic:
    """One phase's messages: calls, serialized bytes each way, tensor payload each way, the nodes' seconds."""

    calls: int = 0
    down: int = 0
    up: int = 0
    payload_down: int = 0
    payload_up: int = 0
    node_s: float = 0.0
    node_max_s: float = 0.0
    node_cpu_s: float = 0.0
    #: message type → [calls, serialized bytes both ways]
    types: dict[str, list[int]] = field(default_factory=dict)

    def add(self, msg: Message, reply: Message, seconds: float, cpu_s: float = 0.0) -> None:
        down, up = wire_bytes(msg), wire_bytes(reply)
        self.calls += 1
        self.down += down
        self.up += up
        kind = self.types.setdefault(msg.metadata.message_type, [0, 0])
        kind[0] += 1
        kind[1] += down + up
        self.payload_down += payload_bytes(msg.content)
        self.payload_up += 0 if reply.has_error() else payload_bytes(reply.content)
        self.node_s += seconds
        self.node_max_s = max(self.node_max_s, seconds)
        self.node_cpu_s += cpu_s

    @property
    def total(self) -> int:
        return self.down + self.up


@dataclass
class CountingClient:
    """The real ClientApp, each call's messages and time booked to its phase."""

    app: Callable[[Message, Context], Message]
    phases: dict[str, Traffic] = field(default_factory=lambda: {REGISTRATION: Traffic(), TRAINING: Traffic()})

    def __call__(self, msg: Message, context: Context) -> Message:
        started, cpu = time.perf_counter(), time.process_time()
        reply = self.app(msg, context)
        self.phases[phase_of(msg)].add(msg, reply, time.perf_counter() - started, time.process_time() - cpu)
        return reply


def ratio(part: float, whole: float) -> float | None:
    """``part / whole`` to four significant figures; None when there is nothing to compare with."""
    return float(f"{part / whole:.4g}") if whole > 0 else None


def registration_row(wall_s: float, traffic: Traffic, fed: Federation, cpu_s: float = 0.0) -> dict[str, Any]:
    """One registration's figures: wall and CPU seconds, the nodes' and the server's, bytes each way."""
    return {"wall-s": round(wall_s, 3), "nodes-s": round(traffic.node_s, 3),
            "slowest-node-s": round(traffic.node_max_s, 4), "server-s": round(max(0.0, wall_s - traffic.node_s), 3),
            "cpu-s": round(cpu_s, 3), "nodes-cpu-s": round(traffic.node_cpu_s, 3),
            "server-cpu-s": round(max(0.0, cpu_s - traffic.node_cpu_s), 3),
            "calls": traffic.calls, "query-bytes": traffic.down, "reply-bytes": traffic.up,
            "bytes": traffic.total, "payload-bytes": traffic.payload_down + traffic.payload_up,
            "federation-reply-bytes": fed.reply_bytes}


def defaults_of(config: dict[str, Any]) -> dict[str, Any]:
    """The task's own FedAvg run: its default rounds and epochs, every node trained each round."""
    from fedforget.inprocess import default_run_config

    cfg = parse_run_config({**default_run_config(), "task": config["task"], "method": "fedavg"})
    return {"num-rounds": cfg.num_rounds, "local-epochs": cfg.local_epochs, "fraction-train": 1.0}


def default_run_projection(nodes: int, by_type: dict[str, dict[str, int]], registration_bytes: int,
                           defaults: dict[str, Any]) -> dict[str, Any]:
    """The training bytes of the task's default run (projected, not measured): its client-rounds times the
    measured bytes of one ``train`` exchange; epochs change no byte. Other messages are left out."""
    train = by_type.get("train", {"calls": 0, "bytes": 0})
    per_call = train["bytes"] / train["calls"] if train["calls"] else 0.0
    client_rounds = int(defaults["num-rounds"]) * nodes
    projected = round(per_call * client_rounds)
    return {**defaults, "client-rounds": client_rounds, "train-bytes-per-client-round": round(per_call),
            "training-bytes": projected, "registration-vs-training-bytes": ratio(registration_bytes, projected)}


@contextmanager
def timed_registration(into: dict[str, Any]) -> Iterator[None]:
    """Time the driver's own ``register_nodes`` call, and keep its federation, for the ``with`` block."""
    real = driver.register_nodes

    def timed(*args: Any, **kwargs: Any) -> Federation:
        started, cpu = time.perf_counter(), time.process_time()
        fed = real(*args, **kwargs)
        into["wall-s"], into["cpu-s"] = time.perf_counter() - started, time.process_time() - cpu
        into["federation"] = fed
        return fed

    driver.register_nodes = timed
    try:
        yield
    finally:
        driver.register_nodes = real


def one_federation(nodes: int, config: dict[str, Any], client_app: ClientApp) -> dict[str, Any]:
    """The training run (its registration inside) on ``nodes`` nodes, then registrations with each extra need."""
    from flwr.supercore.task_identity import TaskIdentity

    from fedforget.inprocess import InProcessGrid, default_run_config, run_in_process
    from fedforget.tasks.data_access import serving_role
    from fedforget.tasks.plan_memory import remembered_plan
    from fedforget.tasks.registry import get_task

    remembered_plan(parse_run_config({**default_run_config(), **config}), nodes)  # drawn once, before timing
    counter, seen = CountingClient(client_app), {}
    load_before = os.getloadavg()[0]
    started, cpu = time.perf_counter(), time.process_time()
    with quiet_flower(), timed_registration(seen):
        run_in_process(config, nodes, client_app=counter)
    run_wall, run_cpu = time.perf_counter() - started, time.process_time() - cpu
    reg = registration_row(seen["wall-s"], counter.phases[REGISTRATION], seen["federation"], seen["cpu-s"])
    train = counter.phases[TRAINING]
    training = {"wall-s": round(run_wall - seen["wall-s"], 3), "cpu-s": round(run_cpu - seen["cpu-s"], 3),
                "nodes-s": round(train.node_s, 3),
                "calls": train.calls, "bytes-down": train.down, "bytes-up": train.up, "bytes": train.total,
                "payload-bytes": train.payload_down + train.payload_up,
                "by-message-type": {k: {"calls": c, "bytes": b} for k, (c, b) in sorted(train.types.items())}}
    row: dict[str, Any] = {
        "nodes": nodes, "rows": sum(len(s) for slices in seen["federation"].plan.slices.values() for s in slices),
        "registration": reg, "training": training,
        "registration-vs-training": {"wall": ratio(reg["wall-s"], training["wall-s"]),
                                     "server-side": ratio(reg["server-s"], training["wall-s"]),
                                     "cpu": ratio(reg["cpu-s"], training["cpu-s"]),
                                     "bytes": ratio(reg["bytes"], training["bytes"])},
        "load-average-1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "with-needs": {},
    }
    row["default-run-projection"] = default_run_projection(nodes, training["by-message-type"], reg["bytes"],
                                                           defaults_of(config))
    cfg = parse_run_config({**default_run_config(), **config})
    classes = get_task(cfg.task).num_classes or 10  # only checks the labels' range here
    for name, needs in EXTRA_NEEDS.items():
        counter = CountingClient(client_app)
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, InProcessGrid.SERVER_NODE_ID, 1
        grid = InProcessGrid(counter, nodes, {**default_run_config(), **config})
        with quiet_flower(), serving_role():
            started, cpu = time.perf_counter(), time.process_time()
            fed = register_nodes(grid, cfg, needs, classes)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        extra = registration_row(wall, counter.phases[REGISTRATION], fed, cpu)
        extra["vs-training"] = {"wall": ratio(extra["wall-s"], training["wall-s"]),
                                "server-side": ratio(extra["server-s"], training["wall-s"]),
                                "cpu": ratio(extra["cpu-s"], training["cpu-s"]),
                                "bytes": ratio(extra["bytes"], training["bytes"])}
        row["with-needs"][name] = extra
    return row


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(report["runs"], key=lambda r: r["nodes"])
    xs = [r["nodes"] for r in rows]
    fig, (ax_s, ax_b) = plt.subplots(1, 2, figsize=(11, 4.8))
    ax_s.plot(xs, [r["training"]["wall-s"] for r in rows], "k-o", label="training run (after registration)")
    ax_s.plot(xs, [r["training"]["cpu-s"] for r in rows], "k:", label="training run, CPU seconds")
    ax_s.plot(xs, [r["registration"]["wall-s"] for r in rows], "C0-o", label="registration, in process (nodes serial)")
    ax_s.plot(xs, [r["registration"]["server-s"] for r in rows], "C0--s", label="registration, server's side")
    ax_s.plot(xs, [r["registration"]["slowest-node-s"] for r in rows], "C0:^", label="registration, slowest node")
    for i, (name, _) in enumerate(EXTRA_NEEDS.items(), start=1):
        ax_s.plot(xs, [r["with-needs"][name]["server-s"] for r in rows], f"C{i}--s",
                  label=f"registration with {name}, server's side")
    ax_s.set_ylabel("seconds")
    ax_b.plot(xs, [r["training"]["bytes"] for r in rows], "k-o", label="training run (measured)")
    ax_b.plot(xs, [r["default-run-projection"]["training-bytes"] for r in rows], "k--", alpha=0.6,
              label="the task's default run (projected: its client-rounds × one train exchange)")
    ax_b.plot(xs, [r["registration"]["bytes"] for r in rows], "C0-o", label="registration")
    for i, name in enumerate(EXTRA_NEEDS, start=1):
        ax_b.plot(xs, [r["with-needs"][name]["bytes"] for r in rows], f"C{i}-o", label=f"registration with {name}")
    for r in rows:
        ax_b.annotate(f"{100 * r['registration-vs-training']['bytes']:.3g} %", (r["nodes"], r["registration"]["bytes"]),
                      textcoords="offset points", xytext=(4, -10), fontsize=7, color="C0")
    ax_b.set_ylabel("bytes, serialized messages both ways")
    for ax in (ax_s, ax_b):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    cfg = report["config"]
    fig.suptitle(f"Registration vs the training run it starts: {cfg['task']}, {cfg['train-size']:,} rows, "
                 f"{cfg['method']} {cfg['num-rounds']} rounds × {cfg['local-epochs']} epoch, "
                 f"fraction-train {cfg['fraction-train']}; in process, {report['machine']['cores']} cores",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="10,100,1000")
    parser.add_argument("--task", default="fmnist-cnn")
    parser.add_argument("--train-size", type=int, default=60000, help="rows the nodes share (0 = the task's)")
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2, help="the training run's FedAvg rounds")
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--fraction-train", type=float, default=0.1,
                        help="nodes trained per round (the same rows per round whatever the number of nodes)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument("--replot", action="store_true", help="only redraw the .png from the .json in --out")
    args = parser.parse_args(argv)
    json_path, png_path = args.out / "registration_cost.json", args.out / "registration_cost.png"
    if args.replot:
        plot(json.loads(json_path.read_text(encoding="utf-8")), png_path)
        return 0
    try:
        counts = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        print("registration_cost: --nodes takes numbers separated by commas, e.g. 10,100,1000", file=sys.stderr)
        return 2
    from fedforget.client_app import app as client_app

    config = {"task": args.task, "train-size": args.train_size, "test-size": args.test_size, "seed": args.seed,
              "partitioner": "iid", "method": "fedavg", "num-rounds": args.rounds, "local-epochs": args.local_epochs,
              "fraction-train": args.fraction_train}
    report: dict[str, Any] = {"benchmark": "registration_cost", "machine": machine_info(), "config": config,
                              "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "runs": []}
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fedforget-registration-") as tmp:
        for nodes in counts:
            print(f"{nodes} nodes ...", flush=True)
            store = Path(tmp) / f"store-{nodes}"
            row = one_federation(nodes, {**config, "store": str(store)}, client_app)
            from fedforget.store import Store

            resolved = Store.open(store).manifest()["config"]
            report["resolved-config"] = {k: v for k, v in resolved.items() if k != "store"}
            report["runs"].append(row)
            print(json.dumps({k: row[k] for k in ("nodes", "registration", "training", "registration-vs-training")}),
                  flush=True)
            json_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    plot(report, png_path)
    print(f"wrote {json_path} and {png_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
