"""Does the HO-SFL client learn without backprop? A positive control, every choice made on validation.

Fixed a priori (not searched; the earlier set-up and the budget): 10 clients (IID), 3 per round, batch 32,
server Adam lr 0.02, LoRA rank 4 (the default), 100 rounds, μ = 1e-3 (HO-SFL's and ZO-SFL's default).
Everything else is chosen on a *validation* split carved from the clients' training data (digits'
training split cut 4:1, ``fedforget/tasks/digits_validation.py``); the 360 test images are read only by
the final runs, after every choice is made:

1. ``control`` (which task and cut make the positive control): candidates ``digits-mlp`` and
   ``digits-mlp-perm`` (the same digits under a fixed, seeded pixel permutation,
   ``fedforget/tasks/digits_permuted.py``) x cut after block 1 or 2. On each candidate's ``-val`` task:
   the frozen client (``hosfl.client-lr=0``) and first-order SFL at 3 of its step sizes, 2 seeds each. The
   candidate with the largest validation gap (best SFL mean - frozen mean) is the control; HO-SFL plays
   no part in this choice.
2. ``tune`` (on the chosen control's ``-val`` task): the same budget for every method, 9 settings x 2
   seeds: hosfl over P ∈ {20, 50, 100} perturbations x 3 client steps scaled with P (lr = c P / 50,
   c ∈ {0.05, 0.1, 0.2}: a P-direction estimate's noise shrinks like 1/P, so its stable step may grow with P;
   at P = 50 the grid reaches 0.2, twice the old grid's top), sfl and zo-sfl over 9 step sizes each (sfl's
   3 from step 1 count towards its 9). Best validation mean wins; ties go to the cheaper setting.
3. ``final``: the chosen settings on the control's test task, seeds 1..5, arms hosfl, the frozen client
   (``hosfl.client-lr=0``, same P), sfl (local epochs, the same number of training samples) and zo-sfl;
   paired differences per seed with a 95 % t-interval (n - 1 degrees of freedom).

    python benchmarks/hosfl_learns.py all     # 100 runs of 15-50 s: about 35 min on 2 loaded cores

``control``, ``tune`` and ``final`` run one step each (each needs the ones before it in the JSON).
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
from bench_common import machine_info, paired_interval, plot_paired, quiet_flower  # noqa: E402

from fedforget.inprocess import run_in_process  # noqa: E402
from fedforget.methods.hosfl.plan import summarize_traffic  # noqa: E402
from fedforget.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
CLIENTS = 10
ROUNDS = int(os.environ.get("HOSFL_LEARNS_ROUNDS", "100"))
BASE: dict[str, Any] = {"partitioner": "iid", "lr": 0.02, "optimizer": "adam", "hosfl.clients-per-round": 3,
                        "batch-size": 32, "hosfl.mu": 1e-3, "lora-r": 4}
#: Positive-control candidates: (test task, cut); each tunes on its "-val" twin.
CONTROLS: list[tuple[str, int]] = [("digits-mlp", 1), ("digits-mlp", 2), ("digits-mlp-perm", 1),
                                   ("digits-mlp-perm", 2)]
#: Training rows the clients hold: the -val tasks hold 4/5 of digits' 1,437 training rows.
ROWS = {"val": 1150, "test": 1437}
#: The search space, 9 settings per method (the same budget); a setting is (P, client-lr), P = 0 if unused.
GRID: dict[str, list[tuple[int, float]]] = {
    "hosfl": [(p, round(c * p / 50, 4)) for p in (20, 50, 100) for c in (0.05, 0.1, 0.2)],
    "sfl": [(0, lr) for lr in (0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5)],
    "zo-sfl": [(0, lr) for lr in (1e-5, 3e-5, 1e-4, 2e-4, 5e-4, 1e-3, 1.5e-3, 2e-3, 3e-3)],
}
#: SFL's steps in the control search (a subset of its grid, so they count towards its tuning budget).
CONTROL_SFL = (0.03, 0.1, 0.2)
#: The frozen client's P in the control search (θ_c never moves, so P changes only the client's forwards).
CONTROL_FROZEN_P = 20
VAL_SEEDS = (11, 12)
SEEDS = tuple(range(1, 1 + int(os.environ.get("HOSFL_LEARNS_SEEDS", "5"))))


def _overrides(task: str, cut: int, method: str, p: int, lr: float, rows: int) -> dict[str, Any]:
    o: dict[str, Any] = {"task": task, "hosfl.cut": cut, "method": method, "hosfl.client-lr": lr,
                         "local-epochs": 1}
    if method == "hosfl":
        o["hosfl.perturbations"] = p
    # SFL makes a local epoch per round: give it the samples of ROUNDS one-batch rounds
    per_client = rows // CLIENTS
    n = max(1, round(ROUNDS * BASE["batch-size"] / per_client)) if method == "sfl" else ROUNDS
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
    forwards = {"hosfl": client_rounds * (1 + int(cfg.get("hosfl.perturbations", 0))), "zo-sfl": 2 * client_rounds,
                "sfl": steps}[method]
    total = traffic["total"]
    return {"accuracy": final["accuracy"], "rounds": cfg["num-rounds"], "samples": final.get("samples-total", 0),
            "client-rounds": client_rounds, "client-forwards": forwards,
            "client-backwards": steps, "bytes-up": sum(total["up"].values()), "bytes-down": sum(total["down"].values()),
            "bytes-up-aggregation": total["up"]["aggregation"], "d_c": s.manifest()["split"]["d_c"],
            "seconds": round(time.monotonic() - t0, 1)}


def _save(res: dict[str, Any], partial: bool) -> None:
    (OUT / "hosfl_learns.json").write_text(json.dumps({"benchmark": "hosfl_learns", "partial": partial, **res},
                                                      indent=1) + "\n", encoding="utf-8")


def _validate(res: dict[str, Any], tmp: Path, task: str, cut: int, method: str, p: int, lr: float) -> float:
    """Mean validation accuracy of one setting over VAL_SEEDS (cached in the JSON by its key)."""
    key = f"{task}-val/cut={cut}/{method}/P={p}/lr={lr}"
    runs = res.setdefault("validation-runs", {})
    if key not in runs or len(runs[key]["per-seed"]) != len(VAL_SEEDS):
        accs, secs = [], 0.0
        for seed in VAL_SEEDS:
            cfg = {**_overrides(f"{task}-val", cut, method, p, lr, ROWS["val"]), "seed": seed}
            r = _run(tmp / f"val-{task}-{cut}-{method}-{p}-{lr}-{seed}", cfg)
            accs.append(r["accuracy"])
            secs += r["seconds"]
            print(f"validation {key} seed {seed}: {r['accuracy']:.4f} ({r['seconds']:.0f} s)", flush=True)
        runs[key] = {"task": f"{task}-val", "cut": cut, "method": method, "P": p, "client-lr": lr,
                     "per-seed": accs, "mean": round(statistics.mean(accs), 4), "seconds": round(secs, 1)}
        _save(res, True)
    return runs[key]["mean"]


def control(res: dict[str, Any], tmp: Path) -> None:
    cands = {}
    for task, cut in CONTROLS:
        frozen = _validate(res, tmp, task, cut, "hosfl", CONTROL_FROZEN_P, 0.0)
        sfl = {lr: _validate(res, tmp, task, cut, "sfl", 0, lr) for lr in CONTROL_SFL}
        best = max(sfl, key=lambda lr: (sfl[lr], -lr))
        cands[f"{task}/cut={cut}"] = {"task": task, "cut": cut, "frozen": frozen, "sfl-best": sfl[best],
                                      "sfl-best-lr": best, "gap-points": round(100 * (sfl[best] - frozen), 2)}
    res["control-search"] = cands
    pick = max(cands.values(), key=lambda c: c["gap-points"])
    res["control"] = {"task": pick["task"], "cut": pick["cut"], "validation-task": f"{pick['task']}-val",
                      "rule": "largest validation gap: best SFL (of its control steps) - frozen client"}
    _save(res, True)


def tune(res: dict[str, Any], tmp: Path) -> None:
    task, cut = res["control"]["task"], res["control"]["cut"]
    chosen = {}
    for method, grid in GRID.items():
        means = {(p, lr): _validate(res, tmp, task, cut, method, p, lr) for p, lr in grid}
        (p, lr) = max(means, key=lambda s: (means[s], -s[0], -s[1]))  # ties: fewer forwards, smaller step
        chosen[method] = {"P": p, "client-lr": lr, "validation": means[(p, lr)]}
    res["chosen"] = chosen
    _save(res, True)


def _arms(res: dict[str, Any]) -> dict[str, tuple[str, int, float]]:
    chosen = res["chosen"]
    return {"hosfl": ("hosfl", chosen["hosfl"]["P"], chosen["hosfl"]["client-lr"]),
            "hosfl-frozen": ("hosfl", chosen["hosfl"]["P"], 0.0),
            "sfl": ("sfl", 0, chosen["sfl"]["client-lr"]),
            "zo-sfl": ("zo-sfl", 0, chosen["zo-sfl"]["client-lr"])}


def final(res: dict[str, Any], tmp: Path) -> None:
    task, cut = res["control"]["task"], res["control"]["cut"]
    arms = _arms(res)
    runs = res.setdefault("runs", {})
    for seed in SEEDS:  # seed-major: every finished seed gives a complete paired row
        for arm, (method, p, lr) in arms.items():
            key = f"{arm}/{seed}"
            if key in runs:
                continue
            cfg = {**_overrides(task, cut, method, p, lr, ROWS["test"]), "seed": seed}
            runs[key] = {**_run(tmp / f"final-{arm}-{seed}", cfg), "config": cfg}
            print(f"final {arm} seed {seed}: test {runs[key]['accuracy']:.4f} ({runs[key]['seconds']:.0f} s)",
                  flush=True)
            _summarise(res)
            _save(res, True)
    _summarise(res)


def _summarise(res: dict[str, Any]) -> None:
    runs, arms = res["runs"], list(_arms(res))
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
                                                                         "bytes-up-aggregation", "d_c")}}
    pairs = {"hosfl-minus-frozen": ("hosfl", "hosfl-frozen"), "sfl-minus-frozen": ("sfl", "hosfl-frozen"),
             "hosfl-minus-sfl": ("hosfl", "sfl"), "zo-sfl-minus-frozen": ("zo-sfl", "hosfl-frozen")}
    res["paired-points"] = {name: paired_interval([100 * (runs[f"{a}/{s}"]["accuracy"]
                                                           - runs[f"{b}/{s}"]["accuracy"])
                                       for s in seeds]) for name, (a, b) in pairs.items() if len(seeds) > 1}


def plot(res: dict[str, Any]) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    cands = res["control-search"]
    names = list(cands)
    axes[0].bar(range(len(names)), [c["gap-points"] for c in cands.values()], 0.6)
    axes[0].set_xticks(range(len(names)), names, fontsize=7, rotation=15)
    axes[0].set_ylabel("validation: best SFL - frozen client, points")
    axes[0].set_title("control search (validation)", fontsize=9)
    arms = list(res["arms"])
    for i, arm in enumerate(arms):
        accs = [res["runs"][f"{arm}/{s}"]["accuracy"] for s in res["seeds-complete"]]
        axes[1].scatter([i] * len(accs), accs, s=14, alpha=0.7)
        axes[1].bar(i, res["arms"][arm]["mean"], 0.6, alpha=0.35)
    axes[1].set_xticks(range(len(arms)), arms, fontsize=8)
    axes[1].set_ylabel("test accuracy (bars: mean; dots: seeds)")
    axes[1].set_ylim(0, 1)
    axes[1].set_title("final runs (test)", fontsize=9)
    plot_paired(axes[2], res["paired-points"], {3: "+3 (target: hosfl - frozen)", 5: "+5 (target: sfl - frozen)"})
    axes[2].legend(fontsize=7)
    c, ch = res["control"], res["chosen"]
    fig.suptitle(f"{c['task']} cut {c['cut']}, {ROUNDS} rounds, seeds {res['seeds-complete']}; chosen on "
                 f"{c['validation-task']}: hosfl P={ch['hosfl']['P']} lr={ch['hosfl']['client-lr']}, "
                 f"sfl lr={ch['sfl']['client-lr']}, zo-sfl lr={ch['zo-sfl']['client-lr']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT / "hosfl_learns.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["control", "tune", "final", "all"])
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    config = {**BASE, "clients": CLIENTS, "rounds": ROUNDS, "controls": [list(c) for c in CONTROLS],
              "control-sfl-steps": list(CONTROL_SFL), "control-frozen-P": CONTROL_FROZEN_P,
              "grid": {m: [list(g) for g in grid] for m, grid in GRID.items()}, "validation-seeds": list(VAL_SEEDS),
              "seeds": list(SEEDS)}
    path = OUT / "hosfl_learns.json"
    res: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    if res.get("config") != config:  # another design's file: start afresh
        res = {}
    res.pop("benchmark", None)
    res.pop("partial", None)
    res.update({"machine": machine_info(), "config": config})
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hosfl-learns-") as tmp:
        if args.part in ("control", "all"):
            control(res, Path(tmp))
        if args.part in ("tune", "all"):
            tune(res, Path(tmp))
        if args.part in ("final", "all"):
            final(res, Path(tmp))
            plot(res)
    res["seconds-this-invocation"] = round(time.monotonic() - t0, 1)
    _save(res, args.part != "all" and "paired-points" not in res)
    print(json.dumps({k: res.get(k) for k in ("control", "chosen", "arms", "paired-points")}, indent=1), flush=True)


if __name__ == "__main__":
    sys.exit(main())
