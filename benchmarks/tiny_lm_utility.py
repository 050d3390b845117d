"""Does the language-model example learn, through FedSGT as through FedAvg-LoRA, near training in one place?

``examples/tiny-lm`` (SmolLM2-135M's first two layers and tied LM head over 4,096 tokens, LoRA on ``q_proj``,
``v_proj`` and the LM head, the language-model loss, three nodes of 40 review snippets each) is trained per seed:

* ``fedsgt``: the example's own ServerApp and ClientApp, its run config with ``seed`` set;
* ``fedavg``: the same app and task with ``method=fedavg`` (FedAvg of the LoRA modules, ``num-rounds`` rounds);
* ``central``: the same model, LoRA and training loop (fedforget's ``train_supervised``, the example's loss,
  optimizer, learning rate and batch size) on all nodes' texts in one place, ``num-rounds`` × ``local-epochs``
  passes;
* ``untrained``: the model with its LoRA modules at their init (B = 0: the pretrained model itself).

Each is scored the same way, on the server's 32 test texts: perplexity (exp of the mean negative log-likelihood
per next token) and token accuracy, by fedforget's own evaluation (the final metrics row of a run; the same
function on the central model). Paired differences per seed give a mean and a t-based 95 % interval.

    python benchmarks/tiny_lm_utility.py [--seeds 1,2,3]

Results: ``docs/results/tiny_lm_utility.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import pyarrow.parquet as pq
import torch
from bench_common import machine_info, paired_interval, quiet_flower, summarise_by_method

import fedforget.methods.registry  # noqa: F401 - the method declarations parse_run_config reads
from fedforget.core.config import parse_run_config
from fedforget.federation.record_key import hand_over
from fedforget.inprocess import default_run_config, run_in_process
from fedforget.store import Store
from fedforget.tasks.base import Backbone
from fedforget.tasks.peft_modules import build_task_model
from fedforget.training.supervised import TrainSettings, evaluate, train_supervised
from fedforget.unlearning.user_app import declared_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny-lm"
NODES = 3
ROUNDS = 3  # fedavg's rounds, and the central model's passes over the texts are ROUNDS × local-epochs
OUT = ROOT / "docs" / "results" / "tiny_lm_utility"
METRICS = ("perplexity", "accuracy")

sys.path.insert(0, str(EXAMPLE))
from tiny_lm.task import TASK, TinyLM, encode, language_model_loss, next_tokens  # noqa: E402


def app_config(seed: int, store: Path, **changes: object) -> dict[str, object]:
    """The example's run config with its seed and store set; FedSGT's own keys only where it runs."""
    declared = {k: v for k, v in declared_config(EXAMPLE).items()
                if changes.get("method", "fedsgt") == "fedsgt" or not k.startswith("chains.")}
    return {**declared, "seed": seed, "store": str(store), **changes}


def texts(path: Path) -> list[str]:
    return pq.read_table(path).column("text").to_pylist()


def run_fedforget(seed: int, method: str, home: Path) -> dict[str, float]:
    """The final metrics row of the example's run: fedforget's evaluation on the server's test texts."""
    from tiny_lm.client_app import app as client_app
    from tiny_lm.server_app import app as server_app

    store = home / "runs" / f"{method}-{seed}"
    hand_over(store, f"{seed:064x}")  # a key fixed per seed: a rerun gives the same bits
    changes: dict[str, object] = {"method": method, **({"num-rounds": ROUNDS} if method == "fedavg" else {})}
    with quiet_flower():
        run_in_process(app_config(seed, store, **changes), NODES, server_app=server_app, client_app=client_app)
    final = next(row for row in reversed(Store.open(store).metrics()) if row.get("final"))
    return {"perplexity": final["perplexity"], "accuracy": final["accuracy"], "loss": final["loss"]}


def lora_model(seed: int, cfg: Any) -> torch.nn.Module:  # noqa: ANN401 - a RunConfig
    backbone = Backbone(TinyLM(), TASK.feature_dim, list(TASK.lora_targets))
    return build_task_model(backbone, TASK.num_classes, cfg.lora_r, cfg.lora_alpha, seed, head=False)


def score(model: torch.nn.Module, home: Path) -> dict[str, float]:
    inputs = encode(texts(home / "data" / "server" / "test.parquet"))
    result = evaluate(model, inputs, next_tokens(*inputs))
    return {"perplexity": math.exp(result["loss"]), "accuracy": result["accuracy"], "loss": result["loss"]}


def run_central(seed: int, cfg: Any, home: Path) -> dict[str, float]:  # noqa: ANN401 - a RunConfig
    model = lora_model(seed, cfg)
    train = [t for p in range(NODES) for t in texts(home / "data" / f"node-{p}" / "train.parquet")]
    inputs = encode(train)
    settings = TrainSettings(epochs=ROUNDS * cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                             optimizer=cfg.optimizer, seed=seed, loss=language_model_loss)
    train_supervised(model, inputs, next_tokens(*inputs), settings)
    return score(model, home)


def run_seed(seed: int, home: Path) -> list[dict[str, Any]]:
    cfg = parse_run_config({**default_run_config(), **app_config(seed, home / "runs" / "any")}, warn=False)
    runs = {"fedsgt": lambda: run_fedforget(seed, "fedsgt", home),
            "fedavg": lambda: run_fedforget(seed, "fedavg", home),
            "central": lambda: run_central(seed, cfg, home),
            "untrained": lambda: score(lora_model(seed, cfg), home)}
    rows = []
    for method, run in runs.items():
        started = time.monotonic()
        rows.append({"method": method, "seed": seed, **run(), "wall-s": round(time.monotonic() - started, 1)})
        print(f"seed {seed} {method}: perplexity {rows[-1]['perplexity']:.1f}, token accuracy "
              f"{rows[-1]['accuracy']:.4f}, {rows[-1]['wall-s']} s", flush=True)
    return rows


def paired(rows: list[dict[str, Any]], method: str, against: str) -> dict[str, Any]:
    """``method`` − ``against`` per seed: the mean loss per token (log perplexity), in nats."""
    by = {(r["method"], r["seed"]): r["loss"] for r in rows}
    seeds = sorted(s for (m, s) in by if m == method and (against, s) in by)
    return {"method": method, "against": against, "metric": "loss (nats per token)", "seeds": seeds,
            **paired_interval([by[(method, s)] - by[(against, s)] for s in seeds])}


def plot(summary: list[dict[str, Any]], diffs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trained = [s for s in summary if s["method"] != "untrained"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(range(len(trained)), [s["perplexity-mean"] for s in trained], yerr=[s["perplexity-sd"] for s in trained],
             capsize=3)
    left.set_xticks(range(len(trained)), [s["method"] for s in trained])
    left.set_ylabel("perplexity on the server's 32 texts (mean ± sd)")
    untrained = next(s for s in summary if s["method"] == "untrained")
    left.set_title(f"tiny-lm (untrained: {untrained['perplexity-mean']:.3g})", fontsize=9)
    for i, d in enumerate(diffs):
        right.errorbar(i, d["mean"], yerr=[[d["mean"] - d["ci95"][0]], [d["ci95"][1] - d["mean"]]], fmt="o",
                       capsize=4)
    right.axhline(0, color="grey", lw=0.8)
    right.set_xticks(range(len(diffs)), [f"{d['method']} − {d['against']}" for d in diffs], fontsize=8)
    right.set_ylabel("paired difference in loss, nats per token (95 % t-interval)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--out", default=str(OUT), help="output path without suffix")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    home = Path(tempfile.mkdtemp(prefix="tiny-lm-utility-"))
    shutil.copytree(EXAMPLE / "data", home / "data")
    os.environ["FEDFORGET_HOME"] = str(home)
    rows: list[dict[str, Any]] = []
    try:
        for seed in seeds:
            rows += run_seed(seed, home)
        resolved = parse_run_config({**default_run_config(), **app_config(seeds[0], home / "x")}, warn=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    diffs = [paired(rows, "fedsgt", "fedavg"), paired(rows, "fedsgt", "central"), paired(rows, "fedavg", "central")]
    summary = summarise_by_method(rows, METRICS)
    path = Path(args.out).with_suffix(".json")
    doc = {"benchmark": "tiny_lm_utility", "machine": machine_info(),
           "setup": {"example": "examples/tiny-lm", "nodes": NODES, "seeds": seeds, "fedavg-rounds": ROUNDS,
                     "app-config": {k: v for k, v in declared_config(EXAMPLE).items() if k not in ("store", "seed")},
                     "resolved": {"local-epochs": resolved.local_epochs, "batch-size": resolved.batch_size,
                                  "optimizer": resolved.optimizer, "lr": resolved.lr, "lora-r": resolved.lora_r,
                                  "lora-alpha": resolved.lora_alpha},
                     "central": "all nodes' texts in one place, fedforget's train_supervised, fedavg-rounds × "
                                "local-epochs passes",
                     "test": "data/server/test.parquet (32 texts)", "runtime": "in process (run_in_process)"},
           "rows": rows, "summary": summary, "paired": diffs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    plot(summary, diffs, path.with_suffix(".png"))
    for d in diffs:
        print(f"{d['method']} − {d['against']}: {d['mean']:+.3f} nats per token, 95 % CI {d['ci95']}")
    print(f"wrote {path} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
