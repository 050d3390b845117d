"""Does the HO-SFL client learn without backprop? A positive control, honest tuning, paired seeds.

Set-up (the positive control): ``digits-mlp`` cut after block 2, so the client holds the whole
pretrained MLP body (fc1 and fc2 with their LoRA, d_c = 1,536) and the server only the linear head. A
frozen client is then a linear probe on MNIST-pretrained features; training the client's layers matters.
10 clients (IID), 3 per round, batch 32, server Adam lr 0.02, μ = 1e-3, HO-SFL P = 50 perturbations.

1. ``tune``: every client step size (and HO-SFL's momentum) is picked on ``digits-mlp-val`` (the digits
   training split cut 4:1 into client data and a validation split; the test split is never read), with
   the same search budget for hosfl, zo-sfl and sfl: 6 settings x 2 validation seeds each.
2. ``final``: the chosen settings on ``digits-mlp`` (all training rows, the 360 test rows), seeds 1..5,
   arms hosfl, the frozen client (``hosfl.client-lr=0``), sfl (local epochs, the same number of training
   samples) and zo-sfl; paired differences per seed with a 95 % t-interval (n - 1 degrees of freedom).

    python benchmarks/hosfl_learns.py all        # about 25 min on 2 loaded cores
    python benchmarks/hosfl_learns.py llm        # rt-smollm, reduced: hosfl vs frozen, seed 1 (CPU, ~30 min)

``llm`` is the language-model check at a size 2 CPU cores allow (SmolLM2-135M cut 3, 240 / 200 snippets,
batch 16, 40 rounds, IID): hosfl with P = 20 directions in the LoRA B factors of the client's three layers
(``hosfl.zo-params=lora_B``, 18,432 of d_c = 46,080) at the method's default client step 0.01, against
the frozen client. **Not tuned** (no validation split of rt-smollm here); it writes
``docs/results/hosfl_learns_llm.json``.

Writes ``docs/results/hosfl_learns.json`` (rewritten after every run, ``partial`` until done) and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from bench_common import machine_info, quiet_flower  # noqa: E402

from fedforget.inprocess import run_in_process  # noqa: E402
from fedforget.methods.hosfl.plan import summarize_traffic  # noqa: E402
from fedforget.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
CLIENTS = 10
ROUNDS = int(os.environ.get("HOSFL_LEARNS_ROUNDS", "100"))
BASE: dict[str, Any] = {"task": "digits-mlp", "hosfl.cut": 2, "partitioner": "iid", "lr": 0.02, "optimizer": "adam",
                        "hosfl.clients-per-round": 3, "batch-size": 32, "hosfl.mu": 1e-3}
P = 50
#: The search space, 6 settings per method (the same budget): (client-lr, client-momentum).
GRID: dict[str, list[tuple[float, float]]] = {
    "hosfl": [(0.003, 0.9), (0.006, 0.9), (0.01, 0.9), (0.02, 0.9), (0.03, 0.0), (0.1, 0.0)],
    "sfl": [(0.01, 0.0), (0.03, 0.0), (0.1, 0.0), (0.3, 0.0), (0.6, 0.0), (1.0, 0.0)],
    "zo-sfl": [(1e-5, 0.0), (3e-5, 0.0), (1e-4, 0.0), (3e-4, 0.0), (1e-3, 0.0), (3e-3, 0.0)],
}
VAL_SEEDS = (11, 12)
SEEDS = tuple(range(1, 1 + int(os.environ.get("HOSFL_LEARNS_SEEDS", "5"))))


def _t975(df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def _overrides(method: str, lr: float, beta: float, rounds: int, per_client: int) -> dict[str, Any]:
    o: dict[str, Any] = {"method": method, "hosfl.client-lr": lr, "local-epochs": 1}
    if method == "hosfl":
        o.update({"hosfl.perturbations": P, "hosfl.client-momentum": beta})
    # SFL makes a local epoch per round: give it the samples of ``rounds`` one-batch rounds
    n = max(1, round(rounds * BASE["batch-size"] / per_client)) if method == "sfl" else rounds
    o.update({"num-rounds": n, "hosfl.eval-every": n})
    return o


def _run(store: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    with quiet_flower():
        run_in_process({**BASE, **cfg, "store": str(store)}, CLIENTS)
    s = Store.open(store)
    rows = s.metrics()
    final = [r for r in rows if "accuracy" in r][-1]
    traffic = summarize_traffic(rows)
    client_rounds = traffic["client-rounds"]
    method = cfg["method"]
    steps = sum(int(r.get("local-steps", 0)) * len(r.get("forward-ok", [])) for r in rows) if method == "sfl" else 0
    # client passes: hosfl 1 + P forwards per client-round; zo-sfl 2; sfl one forward + one backward per local step
    forwards = {"hosfl": client_rounds * (1 + int(cfg.get("hosfl.perturbations", 5))), "zo-sfl": 2 * client_rounds,
                "sfl": steps}[method]
    total = traffic["total"]
    return {"accuracy": final["accuracy"], "rounds": cfg["num-rounds"], "samples": final.get("samples-total", 0),
            "client-rounds": client_rounds, "client-forwards": forwards,
            "client-backwards": steps, "bytes-up": sum(total["up"].values()), "bytes-down": sum(total["down"].values()),
            "bytes-up-aggregation": total["up"]["aggregation"], "seconds": round(time.monotonic() - t0, 1)}


def _save(res: dict[str, Any], partial: bool) -> None:
    (OUT / "hosfl_learns.json").write_text(json.dumps({"benchmark": "hosfl_learns", "partial": partial, **res},
                                                      indent=1) + "\n", encoding="utf-8")


def tune(res: dict[str, Any], tmp: Path) -> None:
    per_client = 1150 // CLIENTS
    tuning = res.setdefault("tuning", {})
    for method, grid in GRID.items():
        for lr, beta in grid:
            key = f"{method}/lr={lr}/beta={beta}"
            if key in tuning and len(tuning[key]["per-seed"]) == len(VAL_SEEDS):
                continue
            accs = []
            for seed in VAL_SEEDS:
                cfg = {**_overrides(method, lr, beta, ROUNDS, per_client), "task": "digits-mlp-val", "seed": seed}
                r = _run(tmp / f"tune-{method}-{lr}-{beta}-{seed}", cfg)
                accs.append(r["accuracy"])
                print(f"tune {key} seed {seed}: validation {r['accuracy']:.4f} ({r['seconds']:.0f} s)", flush=True)
            tuning[key] = {"method": method, "client-lr": lr, "client-momentum": beta, "per-seed": accs,
                           "mean": round(statistics.mean(accs), 4)}
            _save(res, True)
    chosen = {}
    for method in GRID:
        rows = [v for v in tuning.values() if v["method"] == method]
        best = max(rows, key=lambda v: (v["mean"], -v["client-lr"]))  # ties: the smaller step
        chosen[method] = {"client-lr": best["client-lr"], "client-momentum": best["client-momentum"],
                          "validation": best["mean"]}
    res["chosen"] = chosen
    _save(res, True)


def _ci(diffs: list[float]) -> dict[str, Any]:
    n = len(diffs)
    mean = statistics.mean(diffs)
    sd = statistics.stdev(diffs) if n > 1 else float("nan")
    half = _t975(n - 1) * sd / n**0.5 if n > 1 else float("nan")
    return {"per-seed": [round(d, 2) for d in diffs], "mean": round(mean, 2), "sd": round(sd, 2),
            "ci95": [round(mean - half, 2), round(mean + half, 2)], "n": n, "interval": "t, n-1 df"}


def final(res: dict[str, Any], tmp: Path) -> None:
    per_client = 1437 // CLIENTS
    chosen = res["chosen"]
    arms = {"hosfl": ("hosfl", chosen["hosfl"]["client-lr"], chosen["hosfl"]["client-momentum"]),
            "hosfl-frozen": ("hosfl", 0.0, chosen["hosfl"]["client-momentum"]),
            "sfl": ("sfl", chosen["sfl"]["client-lr"], 0.0),
            "zo-sfl": ("zo-sfl", chosen["zo-sfl"]["client-lr"], 0.0)}
    runs = res.setdefault("runs", {})
    for seed in SEEDS:  # seed-major: every finished seed gives a complete paired row
        for arm, (method, lr, beta) in arms.items():
            key = f"{arm}/{seed}"
            if key in runs:
                continue
            cfg = {**_overrides(method, lr, beta, ROUNDS, per_client), "seed": seed}
            runs[key] = {**_run(tmp / f"final-{arm}-{seed}", cfg), "config": cfg}
            print(f"final {arm} seed {seed}: test {runs[key]['accuracy']:.4f} ({runs[key]['seconds']:.0f} s)",
                  flush=True)
            _summarise(res, list(arms))
            _save(res, True)
    _summarise(res, list(arms))


def _summarise(res: dict[str, Any], arms: list[str]) -> None:
    runs = res["runs"]
    seeds = [s for s in SEEDS if all(f"{a}/{s}" in runs for a in arms)]
    res["seeds-complete"] = seeds
    res["arms"] = {}
    for arm in arms:
        accs = [runs[f"{arm}/{s}"]["accuracy"] for s in seeds]
        if accs:
            first = runs[f"{arm}/{seeds[0]}"]
            res["arms"][arm] = {"mean": round(statistics.mean(accs), 4), "min": min(accs), "max": max(accs),
                                "budget-per-run": {k: first[k] for k in ("rounds", "samples", "client-rounds",
                                                                         "client-forwards", "client-backwards",
                                                                         "bytes-up", "bytes-down",
                                                                         "bytes-up-aggregation")}}
    pairs = {"hosfl-minus-frozen": ("hosfl", "hosfl-frozen"), "sfl-minus-frozen": ("sfl", "hosfl-frozen"),
             "hosfl-minus-sfl": ("hosfl", "sfl"), "zo-sfl-minus-frozen": ("zo-sfl", "hosfl-frozen")}
    res["paired-points"] = {name: _ci([100 * (runs[f"{a}/{s}"]["accuracy"] - runs[f"{b}/{s}"]["accuracy"])
                                       for s in seeds]) for name, (a, b) in pairs.items() if len(seeds) > 1}


def plot(res: dict[str, Any]) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    arms = list(res["arms"])
    for i, arm in enumerate(arms):
        accs = [res["runs"][f"{arm}/{s}"]["accuracy"] for s in res["seeds-complete"]]
        axes[0].scatter([i] * len(accs), accs, s=14, alpha=0.7)
        axes[0].bar(i, res["arms"][arm]["mean"], 0.6, alpha=0.35)
    axes[0].set_xticks(range(len(arms)), arms, fontsize=8)
    axes[0].set_ylabel("test accuracy (bars: mean; dots: seeds)")
    axes[0].set_ylim(0, 1)
    names = list(res["paired-points"])
    for i, name in enumerate(names):
        d = res["paired-points"][name]
        axes[1].errorbar(i, d["mean"], yerr=[[d["mean"] - d["ci95"][0]], [d["ci95"][1] - d["mean"]]], fmt="o",
                         capsize=4)
    axes[1].axhline(0, color="grey", lw=0.8)
    axes[1].axhline(3, color="green", lw=0.8, ls="--", label="+3 points (target for hosfl - frozen)")
    axes[1].set_xticks(range(len(names)), names, fontsize=7, rotation=15)
    axes[1].set_ylabel("paired difference, points (95 % t-interval)")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"digits-mlp cut 2 (client: fc1+fc2 LoRA, server: head), {ROUNDS} rounds, "
                 f"seeds {res['seeds-complete']}; step sizes tuned on validation", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT / "hosfl_learns.png", dpi=110)


LLM_BASE: dict[str, Any] = {"task": "rt-smollm", "hosfl.cut": 3, "partitioner": "iid", "hosfl.clients-per-round": 3,
                            "batch-size": 16, "hosfl.mu": 1e-3, "train-size": 240, "test-size": 200,
                            "method": "hosfl", "hosfl.perturbations": 20, "hosfl.zo-params": "lora_B"}
LLM_ARMS = {"hosfl": 0.01, "hosfl-frozen": 0.0}


def llm() -> None:
    rounds = int(os.environ.get("HOSFL_LEARNS_LLM_ROUNDS", "40"))
    seeds = tuple(int(s) for s in os.environ.get("HOSFL_LEARNS_LLM_SEEDS", "1").split(","))
    path = OUT / "hosfl_learns_llm.json"
    res: dict[str, Any] = {"benchmark": "hosfl_learns_llm", "partial": True, "machine": machine_info(),
                           "config": {**LLM_BASE, "rounds": rounds, "clients": CLIENTS}, "seeds": list(seeds),
                           "tuned": False, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="hosfl-learns-llm-") as tmp:
        for seed in seeds:
            for arm, lr in LLM_ARMS.items():
                cfg = {"hosfl.client-lr": lr, "num-rounds": rounds, "hosfl.eval-every": rounds, "seed": seed}
                t0 = time.monotonic()
                with quiet_flower():
                    run_in_process({**LLM_BASE, **cfg, "store": str(Path(tmp) / f"{arm}-{seed}")}, CLIENTS)
                s = Store.open(Path(tmp) / f"{arm}-{seed}")
                rows = s.metrics()
                traffic = summarize_traffic(rows)
                res["runs"][f"{arm}/{seed}"] = {
                    "accuracy": [r for r in rows if "accuracy" in r][-1]["accuracy"], "rounds": rounds,
                    "client-rounds": traffic["client-rounds"],
                    "client-forwards": traffic["client-rounds"] * (1 + LLM_BASE["hosfl.perturbations"]),
                    "bytes-up": sum(traffic["total"]["up"].values()),
                    "bytes-down": sum(traffic["total"]["down"].values()),
                    "bytes-up-aggregation": traffic["total"]["up"]["aggregation"],
                    "d_c": s.manifest()["split"]["d_c"], "zo-dim": s.manifest()["split"].get("zo-dim"),
                    "seconds": round(time.monotonic() - t0, 1)}
                print(f"llm {arm} seed {seed}: {res['runs'][f'{arm}/{seed}']['accuracy']:.4f} "
                      f"({time.monotonic() - t0:.0f} s)", flush=True)
                path.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
            diffs = [100 * (res["runs"][f"hosfl/{x}"]["accuracy"] - res["runs"][f"hosfl-frozen/{x}"]["accuracy"])
                     for x in seeds if f"hosfl-frozen/{x}" in res["runs"]]
            res["paired-points"] = {"hosfl-minus-frozen": [round(d, 2) for d in diffs]}
    res["partial"] = False
    path.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["tune", "final", "all", "llm"])
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.part == "llm":
        llm()
        return
    path = OUT / "hosfl_learns.json"
    res: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    res.pop("benchmark", None)
    res.pop("partial", None)
    res.update({"machine": machine_info(), "config": {**BASE, "clients": CLIENTS, "hosfl.perturbations": P,
                                                      "rounds": ROUNDS},
                "grid": {m: [list(g) for g in grid] for m, grid in GRID.items()}, "validation-seeds": list(VAL_SEEDS),
                "seeds": list(SEEDS), "validation-task": "digits-mlp-val"})
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hosfl-learns-") as tmp:
        if args.part in ("tune", "all"):
            tune(res, Path(tmp))
        if args.part in ("final", "all"):
            final(res, Path(tmp))
            plot(res)
    res["seconds-this-invocation"] = round(time.monotonic() - t0, 1)
    _save(res, args.part != "all" and "paired-points" not in res)
    print(json.dumps({k: res.get(k) for k in ("chosen", "arms", "paired-points")}, indent=1), flush=True)


if __name__ == "__main__":
    sys.exit(main())
