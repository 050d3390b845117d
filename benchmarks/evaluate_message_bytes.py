"""The size of the ``evaluate.served`` message (``evaluate-on-nodes``), by part, beside a training message and the
served model, per method variant; and how the largest plan grows with the federation.

Each variant trains once on digits-mlp with the real ServerApp and ClientApp on the in-process Grid
(``evaluate-on-nodes = true``), and the ClientApp keeps the first ``evaluate.served`` message and the first
training message it receives. Sizes are Flower's wire bytes: Flower (1.42 here) sends a message as its
inflatable objects (the message, its RecordDict, each record, each array and each array chunk), each the
protobuf bytes ``deflate()`` returns, pushed once per object id; a message's size here is the sum over its
distinct objects (``message-proto-bytes``: the whole message as one protobuf, ``message_to_proto``, for
comparison). The ServerApp pushes the content the messages share once; each node pulls all of it. The
evaluate message's parts: its config record's ``plan``, ``serving`` and ``artifacts`` values (each measured as a
ConfigRecord holding that one value), the served tensors (its ArrayRecords, one per artifact), the RecordDict that
names each record (``records-index``), and the run's config record every message carries
(``fedforget.run-config``); ``rest`` is the other config values and the envelopes. The served model is the raw
bytes of the served artifacts' tensors.

The federation sweep builds the evaluate message of the variant whose plan is largest (SAFE) for 10, 100 and 1000
nodes without training (:func:`safe_message_at`): its parts as above, and the wire bytes of the plan values the
node's serving hook uses.

    python benchmarks/evaluate_message_bytes.py                  # ~2 minutes on 2 cores
    python benchmarks/evaluate_message_bytes.py --variants fedavg,safe --out /tmp/smoke
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

import numpy as np
from bench_common import machine_info, quiet_flower
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.common.serde import message_to_proto
from flwr.supercore.inflatable.inflatable_object import InflatableObject, get_all_nested_objects

from fedforget.client_app import app as client_app
from fedforget.federation.carried_config import RUN_CONFIG_RECORD
from fedforget.federation.evaluate_messages import ARTIFACTS_KEY, CONFIG, PLAN_KEY, SERVING_KEY, EvaluateServed
from fedforget.federation.message_types import EVALUATE_SERVED
from fedforget.inprocess import run_in_process
from fedforget.store import Store

NODES = 4
COMMON = {"task": "digits-mlp", "lr": 0.02, "local-epochs": 1, "train-size": 800, "test-size": 200, "seed": 7,
          "evaluate-on-nodes": True}
#: the small configs the served-bytes pins use, one per variant
VARIANTS: dict[str, dict[str, Any]] = {
    "fedavg": {"method": "fedavg", "num-rounds": 2},
    "replay": {"method": "replay", "num-rounds": 2},
    "fedsgt": {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2},
    "s3t": {"method": "s3t", "chains.groups": 2, "chains.shards": 2, "chains.budget": 2, "slices-per-client": 2},
    "sisa": {"method": "sisa", "chains.groups": 2, "chains.shards": 2, "slices-per-client": 2},
    "fedcio": {"method": "fedcio", "chains.clusters": 2, "num-rounds": 2},
    "fedshard": {"method": "fedshard", "fedshard.fanout": 2, "fedshard.rounds-min": 1, "fedshard.rounds-max": 1},
    "safe": {"method": "safe", "safe.coarse": 2, "safe.fine": 2, "num-rounds": 2},
    "protosisa": {"method": "protosisa", "safe.coarse": 2, "num-rounds": 2},
    "sfl": {"method": "sfl", "num-rounds": 1, "partitioner": "iid", "hosfl.client-lr": 0.01,
            "hosfl.clients-per-round": 3, "batch-size": 64},
}
SWEEP_NODES = (10, 100, 1000)
SWEEP_RECORDS_PER_NODE = 50
#: the plan values SAFE's serving hook uses (SafePlan.from_json parses all; the rest are for training and forgetting)
SAFE_PLAN_READ = ("kind", "method", "num-classes", "prototypes", "lambda")


def wire_bytes(objects: dict[str, InflatableObject]) -> int:
    """Flower's bytes for these objects: each distinct object's protobuf bytes, pushed once."""
    return sum(len(o.deflate()) for o in objects.values())


def record_bytes(record: Any) -> int:  # noqa: ANN401 - any Flower record
    return wire_bytes(get_all_nested_objects(record))


def message_bytes(msg: Message) -> int:
    return wire_bytes(get_all_nested_objects(msg))


def value_bytes(key: str, value: Any) -> int:  # noqa: ANN401 - a config value
    """A config record value's wire bytes: a ConfigRecord holding it alone."""
    return record_bytes(ConfigRecord({key: value}))


def tensor_bytes(content: RecordDict) -> int:
    return sum(int(a.numpy().nbytes) for record in content.array_records.values() for a in record.values())


def evaluate_parts(msg: Message) -> dict[str, Any]:
    """The evaluate message's wire bytes by part, and the raw bytes of the tensors it serves. An object two
    parts share (equal arrays) is pushed once and counted in the first part that holds it."""
    content = msg.content
    config = content[CONFIG]
    parts = {name: value_bytes(key, config[key])
             for name, key in (("plan", PLAN_KEY), ("serving", SERVING_KEY), ("artifact-entries", ARTIFACTS_KEY))}
    tensors: dict[str, InflatableObject] = {}
    for record in content.array_records.values():
        tensors.update(get_all_nested_objects(record))
    parts["tensors"] = wire_bytes(tensors)
    parts["carried-config"] = record_bytes(content[RUN_CONFIG_RECORD]) if RUN_CONFIG_RECORD in content else 0
    parts["records-index"] = len(content.deflate())  # the RecordDict: each record's name and object id
    total = message_bytes(msg)
    parts["rest"] = total - sum(parts.values())  # the other config values, the records' and message's envelopes
    request = EvaluateServed.from_record(content)
    return {"total": total, "parts": parts, "message-proto-bytes": message_to_proto(msg).ByteSize(),
            "plan-json-chars": len(str(config[PLAN_KEY])),
            "served-artifacts": len(request.tensors), "served-model-bytes": tensor_bytes(content)}


class CapturingClient:
    """The real ClientApp, keeping the first evaluate message and the first training message it receives."""

    def __init__(self) -> None:
        self.evaluate: Message | None = None
        self.train: Message | None = None

    def __call__(self, msg: Message, context: Context) -> Message:
        kind = msg.metadata.message_type
        if kind == EVALUATE_SERVED and self.evaluate is None:
            self.evaluate = msg
        elif kind.startswith("train") and self.train is None:
            self.train = msg
        return client_app(msg, context)


def federated_accuracy(store: Store) -> float | None:
    final = next((r for r in reversed(store.metrics()) if r.get("final")), {})
    return final.get("federated-accuracy")


def measure(name: str, config: dict[str, Any], root: Path) -> tuple[dict[str, Any], Message]:
    """One run's evaluate message by part, its first training message, and the evaluate message itself."""
    client = CapturingClient()
    started = time.monotonic()
    with quiet_flower():
        run_in_process({**config, "store": str(root)}, NODES, client_app=client)
    if client.evaluate is None:
        raise SystemExit(f"{name}: no evaluate.served message reached a node")
    out = evaluate_parts(client.evaluate)
    if client.train is not None:
        out["training-message"] = {"type": client.train.metadata.message_type,
                                   "total": message_bytes(client.train),
                                   "tensor-bytes": tensor_bytes(client.train.content)}
    store = Store.open(root)
    out["federated-accuracy"] = federated_accuracy(store)
    out["resolved-config"] = {k: v for k, v in store.manifest()["config"].items() if k != "store"}
    out["wall-s"] = round(time.monotonic() - started, 1)
    return out, client.evaluate


def safe_message_at(nodes: int, template: EvaluateServed, carried: ConfigRecord, seed: int) -> dict[str, Any]:
    """SAFE's evaluate message for ``nodes`` nodes of ``SWEEP_RECORDS_PER_NODE`` digits records each (labels
    drawn seeded), built without training: the plan as the server builds it from the labels, what it serves
    with every artifact valid, the measured run's adapters (their number does not grow with the nodes) and one
    prototype per served cell shaped as the run's (values drawn, so no two are pushed as one object).
    Returns its parts' wire bytes and those of the plan values the serving hook reads."""
    from fedforget.methods.safe.graph import build_safe_plan, safe_serving

    rng = np.random.default_rng(seed)
    labels = {p: {p * SWEEP_RECORDS_PER_NODE + s: int(y) for s, y in
                  enumerate(rng.integers(0, 10, SWEEP_RECORDS_PER_NODE))} for p in range(nodes)}
    plan, _ = build_safe_plan("safe", labels, 10, 2, 2, "sample", True, seed)
    plan_json = plan.to_json()
    adapters = {a["artifact"]: a for a in template.artifacts if a["kind"] != "prototype"}
    serving = safe_serving(plan_json, set(adapters) | set(plan.proto_artifacts()))
    proto = next(template.tensors[a["sha256"]] for a in template.artifacts if a["kind"] == "prototype")
    entries, tensors = [], {}
    for artifact in serving["artifacts"]:
        if artifact in adapters:
            entry = adapters[artifact]
            tensors[entry["sha256"]] = template.tensors[entry["sha256"]]
        else:
            label = int(artifact.rsplit("/c", 1)[1]) % plan.num_classes
            sha = rng.bytes(32).hex()
            entry = {"artifact": artifact, "sha256": sha, "kind": "prototype", "meta": {"label": label}}
            tensors[sha] = {"sum": rng.standard_normal(proto["sum"].shape), "label": np.array([label]),
                            "count": rng.integers(1, 50, 1)}
        entries.append(entry)
    content = EvaluateServed(plan_json, serving, tuple(entries), tensors, template.num_classes,
                             template.server_round).to_record()
    content[RUN_CONFIG_RECORD] = carried
    out = evaluate_parts(Message(content, dst_node_id=1, message_type=EVALUATE_SERVED))
    read = {k: plan_json[k] for k in SAFE_PLAN_READ}
    return {"nodes": nodes, "cells": len(plan.sizes), **out,
            "plan-share": round(out["parts"]["plan"] / out["total"], 4), "federation-bytes": out["total"] * nodes,
            "plan-read-by-serving-hook": value_bytes(PLAN_KEY, json.dumps(read, sort_keys=True))}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    names = list(runs)
    parts = ["plan", "serving", "artifact-entries", "tensors", "records-index", "carried-config", "rest"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [2.2, 1]})
    bottom = np.zeros(len(names))
    for part in parts:
        values = np.array([runs[n]["parts"][part] / 1024 for n in names])
        ax.bar(names, values, bottom=bottom, label=part)
        bottom += values
    train = [runs[n].get("training-message", {}).get("total", 0) / 1024 for n in names]
    ax.scatter(names, train, color="black", marker="_", s=300, zorder=3, label="one training message")
    ax.set_ylabel("KiB on the wire (Flower's objects)")
    ax.set_title(f"One evaluate.served message by part ({result['config']['task']}, {NODES} nodes)", fontsize=10)
    ax.tick_params(axis="x", labelsize=8, rotation=20)
    ax.legend(fontsize=7)
    sweep = result["plan-growth"]["rows"]
    nodes = [r["nodes"] for r in sweep]
    bx.loglog(nodes, [r["total"] / 1024 for r in sweep], "o-", label="whole message")
    for part, style in (("tensors", "v-"), ("artifact-entries", "^-"), ("plan", "s-"), ("serving", "d-")):
        bx.loglog(nodes, [r["parts"][part] / 1024 for r in sweep], style, label=part)
    bx.loglog(nodes, [r["plan-read-by-serving-hook"] / 1024 for r in sweep], "k:", label="plan values the hook reads")
    bx.set_xlabel("nodes (planned, not trained)")
    bx.set_ylabel("KiB")
    bx.set_title("SAFE's evaluate message vs federation size", fontsize=10)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "results")
    args = parser.parse_args(argv)
    messages: dict[str, Message] = {}
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(chosen) - set(VARIANTS))
    if unknown:
        print(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    result: dict[str, Any] = {"config": {**COMMON, "nodes": NODES}, "variants": {v: VARIANTS[v] for v in chosen},
                              "machine": machine_info(),
                              "measured": "Flower wire bytes: sum of deflate() over a message's distinct inflatable "
                                          "objects (flwr " + machine_info()["flwr"] + ")",
                              "runs": {}}
    with tempfile.TemporaryDirectory(prefix="evaluate-bytes-") as tmp:
        for name in [*chosen, *(["safe"] if "safe" not in chosen else [])]:
            print(f"{name} ...", flush=True)
            row, messages[name] = measure(name, {**COMMON, **VARIANTS[name]}, Path(tmp) / name)
            if name in chosen:
                result["runs"][name] = row
            print(json.dumps({k: v for k, v in row.items() if k != "resolved-config"}), flush=True)
    safe = messages["safe"].content
    template = EvaluateServed.from_record(safe)
    rows = [safe_message_at(n, template, safe[RUN_CONFIG_RECORD], COMMON["seed"]) for n in SWEEP_NODES]
    result["plan-growth"] = {"method": "safe", "safe.coarse": 2, "safe.fine": 2,
                             "records-per-node": SWEEP_RECORDS_PER_NODE, "rows": rows}
    for r in rows:
        print(json.dumps(r), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "evaluate_message_bytes.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot(result, args.out / "evaluate_message_bytes.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
