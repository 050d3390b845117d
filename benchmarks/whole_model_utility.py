"""Does the whole-model app, trained through fedforget, serve a model as good as plain Flower's FedAvg does?

``examples/whole-mlp`` (its own 16 -> 32 -> 4 MLP trained whole, its own loss and macro-F1, CSV records, three
nodes) is trained per seed four ways on the same split (each node its own ``train.csv``):

* ``replay`` and ``fedavg``: the example's own ServerApp and ClientApp through fedforget, its run config with
  ``seed`` set;
* ``flower``: plain Flower, no fedforget training code: Flower's own ``flwr.serverapp.strategy.FedAvg``
  (``fraction_train=1.0``, the same rounds) and a ClientApp written here that trains ``make_model()`` with
  ``smoothed_cross_entropy`` and the epochs, batch size, optimizer and learning rate of fedforget's resolved
  config, shuffling with a torch generator seeded by (seed, round, node);
* ``probe`` (floor): fedforget's ``replay`` with the task's ``train=["fc2"]`` (only the last layer trained);
* ``central`` (ceiling): the same training loop on all nodes' records in one place, rounds × epochs passes.

Every served model is scored the same way: its logits on the server's ``test.csv`` (accuracy, and the task's own
``macro_f1``). The paired differences fedforget − plain Flower per seed give a mean and a t-based 95 % interval.

    python benchmarks/whole_model_utility.py [--seeds 1,2,3,4,5]

Results: ``docs/results/whole_model_utility.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np
import torch
from bench_common import machine_info, paired_interval, quiet_flower, summarise_by_method
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

import fedforget.methods.registry  # noqa: F401 - the method declarations parse_run_config reads
from fedforget.core.config import parse_run_config
from fedforget.federation.record_key import hand_over
from fedforget.inprocess import default_run_config, run_in_process
from fedforget.store import Store
from fedforget.training.supervised import predict_logits
from fedforget.unlearning.user_app import declared_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "whole-mlp"
NODES = 3
OUT = ROOT / "docs" / "results" / "whole_model_utility"
FEDFORGET = ("replay", "fedavg")
METRICS = ("accuracy", "macro-f1")

sys.path.insert(0, str(EXAMPLE))
from whole_mlp.task import COLUMNS, TASK, macro_f1, make_model, smoothed_cross_entropy  # noqa: E402

#: the floor: the same task with only its last layer trained (``fc1`` stays at its seeded init)
PROBE_TASK = dataclasses.replace(TASK, name="whole-mlp-probe", train=["fc2"])


def read_records(folder: Path, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A CSV's feature columns and labels."""
    with (folder / name).open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    features = torch.tensor([[float(r[c]) for c in COLUMNS] for r in rows], dtype=torch.float32)
    return features, torch.tensor([int(r["label"]) for r in rows], dtype=torch.long)


def score(state: dict[str, torch.Tensor], home: Path) -> dict[str, float]:
    """The served model's accuracy and macro-F1 on the server's test records."""
    model = make_model()
    model.load_state_dict(state)
    features, labels = read_records(home / "data" / "server", "test.csv")
    logits = predict_logits(model, (features,))
    probabilities = torch.softmax(logits.double(), dim=1).numpy()
    accuracy = float((logits.argmax(1) == labels).double().mean())
    return {"accuracy": accuracy, **macro_f1(probabilities, labels.numpy())}


def app_config(seed: int, store: Path, **changes: object) -> dict[str, object]:
    """The example's run config as Flower reads it, with its seed and store set."""
    return {**declared_config(EXAMPLE), "seed": seed, "store": str(store), **changes}


def resolved(config: dict[str, object]) -> dict[str, object]:
    """fedforget's resolved training settings for ``config``: what plain Flower's client copies."""
    cfg = parse_run_config({**default_run_config(), **config}, warn=False)
    return {"num-rounds": cfg.num_rounds, "local-epochs": cfg.local_epochs, "batch-size": cfg.batch_size,
            "optimizer": cfg.optimizer, "lr": cfg.lr}


def served_state(store: Store) -> dict[str, torch.Tensor]:
    """The served artifact's tensors over the app's own init (a probe serves its trained layer only)."""
    ledger = store.ledger()
    try:
        shas = {a["artifact"]: a["sha256"] for a in ledger.artifacts()}
        (artifact,) = ledger.serving()["artifacts"]
    finally:
        ledger.close()
    state = make_model().state_dict()
    state.update({k: torch.from_numpy(np.array(v)) for k, v in store.get_arrays(shas[artifact]).items()})
    return state


def record_key(seed: int) -> str:
    """The store's record key for ``seed``. A store's own key is random and the nodes' records are keyed (and
    so ordered) by it; a key fixed per seed makes a rerun give the same bits."""
    return f"{seed:064x}"


def run_fedforget(seed: int, method: str, home: Path, probe: bool = False) -> dict[str, torch.Tensor]:
    from whole_mlp.client_app import app as client_app
    from whole_mlp.server_app import app as server_app

    store = home / "runs" / f"{method}-{seed}{'-probe' if probe else ''}"
    hand_over(store, record_key(seed))
    changes: dict[str, object] = {"method": method}
    if probe:
        changes["task"] = f"{__name__}:PROBE_TASK"
    with quiet_flower():
        run_in_process(app_config(seed, store, **changes), NODES, server_app=server_app, client_app=client_app)
    return served_state(Store.open(store))


def train_locally(model: torch.nn.Module, features: torch.Tensor, labels: torch.Tensor, settings: dict[str, object],
                  epochs: int, generator: torch.Generator) -> None:
    """Plain PyTorch: shuffled mini-batches, the task's loss, a fresh optimizer per call (as a Flower client)."""
    params = [p for p in model.parameters() if p.requires_grad]
    lr = float(settings["lr"])
    optimizer = (torch.optim.Adam(params, lr=lr) if settings["optimizer"] == "adam"
                 else torch.optim.SGD(params, lr=lr, momentum=0.9))
    batch = int(settings["batch-size"])
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(labels), batch):
            idx = order[start:start + batch]
            loss = smoothed_cross_entropy(model(features[idx]), labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()


def order_generator(seed: int, server_round: int, partition: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_000 + server_round * 1_000 + partition)


def plain_flower_apps(seed: int, settings: dict[str, object], home: Path,
                      result: dict[str, Any]) -> tuple[ServerApp, ClientApp]:
    """A ServerApp running Flower's own FedAvg and a ClientApp that trains the MLP on its node's train.csv."""
    server, client = ServerApp(), ClientApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=NODES,
                          min_available_nodes=NODES)
        outcome = strategy.start(grid=grid, initial_arrays=ArrayRecord(make_model().state_dict()),
                                 num_rounds=int(settings["num-rounds"]))
        result["state"] = outcome.arrays.to_torch_state_dict()

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        features, labels = read_records(home / "data" / f"node-{partition}", "train.csv")
        model = make_model()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        server_round = int(msg.content["config"]["server-round"])
        train_locally(model, features, labels, settings, int(settings["local-epochs"]),
                      order_generator(seed, server_round, partition))
        reply = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                            "metrics": MetricRecord({"num-examples": len(labels)})})
        return Message(reply, reply_to=msg)

    return server, client


def run_plain_flower(seed: int, settings: dict[str, object], home: Path) -> dict[str, torch.Tensor]:
    result: dict[str, Any] = {}
    server, client = plain_flower_apps(seed, settings, home, result)
    with quiet_flower():
        run_in_process({"seed": seed}, NODES, server_app=server, client_app=client)
    return result["state"]


def run_central(seed: int, settings: dict[str, object], home: Path) -> dict[str, torch.Tensor]:
    """All nodes' records in one place, as many passes as a node makes over its own in the federation."""
    parts = [read_records(home / "data" / f"node-{p}", "train.csv") for p in range(NODES)]
    features, labels = torch.cat([f for f, _ in parts]), torch.cat([y for _, y in parts])
    model = make_model()
    epochs = int(settings["num-rounds"]) * int(settings["local-epochs"])
    train_locally(model, features, labels, settings, epochs, order_generator(seed, 0, 0))
    return model.state_dict()


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """How far two served models' weights are apart: 0.0 only when they are the same bits."""
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def paired(rows: list[dict[str, Any]], method: str, against: str, metric: str) -> dict[str, Any]:
    """``method`` − ``against`` per seed, in points."""
    by = {(r["method"], r["seed"]): r[metric] for r in rows}
    seeds = sorted(s for (m, s) in by if m == method and (against, s) in by)
    return {"method": method, "against": against, "metric": metric, "seeds": seeds,
            **paired_interval([100 * (by[(method, s)] - by[(against, s)]) for s in seeds])}


def plot(summary: list[dict[str, Any]], diffs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    names = [s["method"] for s in summary]
    x = np.arange(len(names))
    for offset, metric in zip((-0.2, 0.2), METRICS, strict=True):
        left.bar(x + offset, [s[f"{metric}-mean"] for s in summary], 0.4,
                 yerr=[s[f"{metric}-sd"] for s in summary], capsize=3, label=metric)
    left.set_xticks(x, names)
    left.set_ylim(0.9, 1.0)  # every way of training lands within a few of the 80 test records
    left.set_ylabel("on the server's test.csv (mean ± sd over seeds)")
    left.legend(fontsize=8, loc="lower right")
    left.set_title("whole-mlp: served model", fontsize=9)
    for i, d in enumerate(diffs):
        right.errorbar(i, d["mean"], yerr=[[d["mean"] - d["ci95"][0]], [d["ci95"][1] - d["mean"]]], fmt="o",
                       capsize=4)
    right.axhline(0, color="grey", lw=0.8)
    right.set_xticks(range(len(diffs)), [f"{d['method']} − {d['against']}\n{d['metric']}" for d in diffs],
                     fontsize=7)
    right.set_ylabel("paired difference, points (95 % t-interval)")
    right.set_title("fedforget − plain Flower FedAvg, per seed", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_seed(seed: int, settings: dict[str, object], home: Path) -> list[dict[str, Any]]:
    """One row per way of training, all on this seed; each scored on the server's test records."""
    runs = {
        "replay": lambda: run_fedforget(seed, "replay", home),
        "fedavg": lambda: run_fedforget(seed, "fedavg", home),
        "flower": lambda: run_plain_flower(seed, settings, home),
        "probe": lambda: run_fedforget(seed, "replay", home, probe=True),
        "central": lambda: run_central(seed, settings, home),
    }
    init = make_model().state_dict()
    states, rows = {}, []
    for method, run in runs.items():
        started = time.monotonic()
        states[method] = run()
        rows.append({"method": method, "seed": seed, **score(states[method], home),
                     "wall-s": round(time.monotonic() - started, 2),
                     "trained": sorted(k for k, v in states[method].items() if not torch.equal(v, init[k]))})
    for row in rows:
        # to 4 digits: the plain loops leave torch's threads as they are, so their float sums vary in the 7th
        row["max-abs-weight-diff-vs-flower"] = round(max_abs_diff(states[row["method"]], states["flower"]), 4)
        print(f"seed {seed} {row['method']}: accuracy {row['accuracy']:.4f}, macro-F1 {row['macro-f1']:.4f}, "
              f"max |w - w_flower| {row['max-abs-weight-diff-vs-flower']:.3g}, {row['wall-s']:.1f} s", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--out", default=str(OUT), help="output path without suffix")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    home = Path(tempfile.mkdtemp(prefix="whole-model-utility-"))
    shutil.copytree(EXAMPLE / "data", home / "data")
    os.environ["FEDFORGET_HOME"] = str(home)
    rows: list[dict[str, Any]] = []
    configs: dict[int, dict[str, object]] = {}
    try:
        for seed in seeds:
            configs[seed] = resolved(app_config(seed, home / "runs" / "any"))
            rows += run_seed(seed, configs[seed], home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    diffs = [paired(rows, method, "flower", metric) for method in FEDFORGET for metric in METRICS]
    summary = summarise_by_method(rows, METRICS)
    path = Path(args.out).with_suffix(".json")
    doc = {"benchmark": "whole_model_utility", "machine": machine_info(),
           "setup": {"example": "examples/whole-mlp", "nodes": NODES, "seeds": seeds,
                     "app-config": {k: v for k, v in declared_config(EXAMPLE).items() if k not in ("store", "seed")},
                     "resolved": configs[seeds[0]], "test": "data/server/test.csv",
                     "plain-flower": "flwr.serverapp.strategy.FedAvg(fraction_train=1.0), a ClientApp of its own "
                                     "(plain PyTorch loop), data order torch.Generator(seed, round, node)",
                     "probe": "replay with Task(train=['fc2'])",
                     "central": "all nodes' train.csv in one place, num-rounds × local-epochs passes",
                     "record-key": "fixed per seed (the seed as 64 hex digits), handed over to each fedforget store",
                     "runtime": "in process (run_in_process)"},
           "rows": rows, "summary": summary, "paired": diffs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    plot(summary, diffs, path.with_suffix(".png"))
    for d in diffs:
        print(f"{d['method']} − {d['against']} {d['metric']}: {d['mean']:+.2f} points, 95 % CI {d['ci95']}")
    print(f"wrote {path} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
