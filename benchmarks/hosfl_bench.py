"""HO-SFL against first-order SFL and zeroth-order SFL: accuracy, traffic, client memory, P and μ sweeps.

All runs use the real ServerApp and ClientApp in the in-process harness (``run_in_process``); traffic is
what the strategy measured on the real messages (payload bytes per record kind, written to
``metrics.jsonl``); client memory is measured in a fresh subprocess per (task, mode) as the rise of the
process's peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs``) over one client step.

    python benchmarks/hosfl_bench.py all                  # about 15 min on 2 loaded cores
    python benchmarks/hosfl_bench.py accuracy --quick     # smoke
    python benchmarks/hosfl_bench.py memory
    python benchmarks/hosfl_bench.py control-llm         # the frozen-client control on rt-smollm (about 70 min)

Writes ``docs/results/hosfl_<part>.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
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

from fedforget.core.config import parse_run_config  # noqa: E402
from fedforget.inprocess import run_in_process  # noqa: E402
from fedforget.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
CLIENTS = 10
BASE = {"task": "fmnist-cnn", "hosfl.cut": 2, "hosfl.clients-per-round": 3, "batch-size": 32, "hosfl.perturbations": 5,
        "hosfl.mu": 1e-3, "lr": 0.005, "optimizer": "adam", "train-size": 6000, "test-size": 1000, "seed": 1}
#: Client step sizes (SGD on θ_c), the best test accuracy after 40 IID rounds of a small sweep on this
#: set-up: hosfl {3e-3: .689, 1e-2: .688, 3e-2: .681, 0.1: .616}; sfl {3e-2: .707, 0.1: .706, 0.3: .721};
#: zo-sfl {1e-4: .142, 1e-3: .119, 1e-2: diverged} (ZO-SFL's step also drives the server's ZO-SGD).
CLIENT_LR = {"hosfl": 0.01, "sfl": 0.3, "zo-sfl": 1e-4}


def _run(store: Path, **overrides: Any) -> tuple[list[dict[str, Any]], dict[str, Any], float]:
    t0 = time.monotonic()
    with quiet_flower():
        run_in_process({**BASE, "store": str(store), **overrides}, CLIENTS)
    s = Store.open(store)
    return s.metrics(), s.manifest(), time.monotonic() - t0


def _curve(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    ev = [r for r in rows if "accuracy" in r]
    return {"round": [r["round"] for r in ev], "samples": [r.get("samples-total", 0) for r in ev],
            "accuracy": [r["accuracy"] for r in ev]}


# -- 1. accuracy vs rounds / samples ----------------------------------------------------------------
def accuracy(quick: bool, tmp: Path) -> dict[str, Any]:
    rounds = 12 if quick else 150
    results: dict[str, Any] = {"rounds": rounds, "config": {**BASE, "clients": CLIENTS}, "client-lr": CLIENT_LR,
                               "runs": {}}
    for part_name, part in (("iid", {"partitioner": "iid"}), ("dirichlet-1", {"partitioner": "dirichlet",
                                                                              "dirichlet-alpha": 1.0})):
        for method in ("hosfl", "sfl", "zo-sfl"):
            rows, _, secs = _run(tmp / f"acc-{part_name}-{method}", method=method, **part,
                                 **{"num-rounds": rounds, "hosfl.eval-every": max(1, rounds // 10),
                                    "hosfl.client-lr": CLIENT_LR[method]})
            results["runs"][f"{part_name}/{method}"] = {**_curve(rows), "seconds": round(secs, 1)}
            print(f"accuracy {part_name} {method}: {results['runs'][f'{part_name}/{method}']['accuracy'][-1]:.4f} "
                  f"({secs:.0f} s)", flush=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for key, run in results["runs"].items():
        part_name, method = key.split("/")
        style = "-" if part_name == "iid" else "--"
        axes[0].plot(run["round"], run["accuracy"], style, label=key)
        axes[1].plot(run["samples"], run["accuracy"], style, label=key)
    axes[0].set_xlabel("round")
    axes[1].set_xlabel("training samples processed (all clients)")
    for ax in axes:
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"fmnist-cnn, cut after block 2, {CLIENTS} clients, 3 per round, batch 32, P=5, μ=1e-3")
    fig.tight_layout()
    fig.savefig(OUT / "hosfl_accuracy.png", dpi=110)
    return results


# -- 2. traffic by kind and direction, and vs client model size ---------------------------------------
def _fedavg_bytes(lora_r: int) -> int:
    """FedAvg's payload per client per round and direction: LoRA + head, as fedavg's ArrayRecord carries it."""
    from fedforget.federation.run_setup import DEFAULT_ADAPTER, build_model

    common = {k: v for k, v in BASE.items() if not k.startswith("hosfl.")}  # fedavg refuses the split keys
    cfg = parse_run_config({**common, "method": "fedavg", "lora-r": lora_r, "lora-alpha": 2 * lora_r})
    state = build_model(cfg, 10).model.trainable_state(DEFAULT_ADAPTER)
    return sum(int(t.numel() * t.element_size()) for t in state.values())


def traffic(quick: bool, tmp: Path) -> dict[str, Any]:
    rounds = 3
    table: dict[str, Any] = {}
    for method in ("hosfl", "sfl", "zo-sfl"):
        rows, manifest, _ = _run(tmp / f"traffic-{method}", method=method, partitioner="iid",
                                 **{"num-rounds": rounds, "hosfl.eval-every": rounds,
                                    "hosfl.client-lr": CLIENT_LR[method]})
        rows = [r for r in rows if "bytes" in r]
        client_rounds = sum(len(r["forward-ok"]) for r in rows)
        per = {d: {k: sum(r["bytes"][d][k] for r in rows) / client_rounds for k in rows[0]["bytes"][d]}
               for d in ("up", "down")}
        table[method] = {"per-client-round": per, "d_c": manifest["split"]["d_c"],
                         "wire-per-client-round": {d: sum(r["wire-bytes"][d] for r in rows) / client_rounds
                                                   for d in ("up", "down")}}
    lora_r = parse_run_config({**BASE, "method": "hosfl"}).lora_r  # the rank the split runs above resolved
    fed = _fedavg_bytes(lora_r)
    table["fedavg"] = {"per-client-round": {d: {"activations": 0, "feedback": 0, "aggregation": fed, "control": 0}
                                            for d in ("up", "down")}}
    sizes = []
    for r in ((2, 8) if quick else (1, 2, 4, 8, 16, 32)):
        row: dict[str, Any] = {"lora-r": r}
        for method in ("hosfl", "sfl"):
            rows, manifest, _ = _run(tmp / f"size-{method}-{r}", method=method, partitioner="iid",
                                     **{"num-rounds": 1, "hosfl.eval-every": 1, "lora-r": r, "lora-alpha": 2 * r,
                                        "hosfl.client-lr": CLIENT_LR[method]})
            last = rows[-1]
            k = len(last["forward-ok"])
            row["d_c"] = manifest["split"]["d_c"]
            row[method] = {d: sum(last["bytes"][d].values()) / k for d in ("up", "down")}
            row[f"{method}-aggregation-up"] = last["bytes"]["up"]["aggregation"] / k
        row["fedavg"] = _fedavg_bytes(r)
        sizes.append(row)
        print(f"traffic r={r}: d_c={row['d_c']} hosfl agg up {row['hosfl-aggregation-up']:.0f} B, "
              f"sfl {row['sfl-aggregation-up']:.0f} B, fedavg {row['fedavg']} B", flush=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    d = [s["d_c"] for s in sizes]
    axes[0].loglog(d, [s["hosfl-aggregation-up"] for s in sizes], "o-", label="hosfl (P=5 float32 scalars)")
    axes[0].loglog(d, [s["sfl-aggregation-up"] for s in sizes], "s-", label="sfl (client LoRA, float32)")
    axes[0].loglog(d, [s["fedavg"] for s in sizes], "^-", label="fedavg (all LoRA + head)")
    axes[0].set_xlabel("client trainable parameters d_c (LoRA rank 1..32)")
    axes[0].set_ylabel("model-aggregation upload, bytes / client / round")
    axes[0].legend(fontsize=8)
    axes[0].grid(alpha=0.3, which="both")
    methods = ["hosfl", "sfl", "zo-sfl", "fedavg"]
    kinds = ["activations", "feedback", "aggregation", "control"]
    bottom_up = [0.0] * len(methods)
    for kind in kinds:
        ups = [table[m]["per-client-round"]["up"][kind] / 1e3 for m in methods]
        downs = [table[m]["per-client-round"]["down"][kind] / 1e3 for m in methods]
        axes[1].bar([i - 0.2 for i in range(len(methods))], ups, 0.4, bottom=bottom_up, label=f"up {kind}")
        axes[1].bar([i + 0.2 for i in range(len(methods))], downs, 0.4,
                    bottom=[sum(table[m]["per-client-round"]["down"][k] / 1e3 for k in kinds[: kinds.index(kind)])
                            for m in methods], label=f"down {kind}", hatch="//", alpha=0.6)
        bottom_up = [b + u for b, u in zip(bottom_up, ups, strict=True)]
    axes[1].set_xticks(range(len(methods)), methods)
    axes[1].set_ylabel("kB / client / round (left bar up, right bar down)")
    axes[1].legend(fontsize=6, ncol=2)
    fig.suptitle("fmnist-cnn, cut 2, batch 32: traffic measured on the messages")
    fig.tight_layout()
    fig.savefig(OUT / "hosfl_traffic.png", dpi=110)
    return {"rounds": rounds, "config": {**BASE, "clients": CLIENTS, "partitioner": "iid", "lora-r": lora_r},
            "client-lr": CLIENT_LR, "per-method": table, "vs-client-size": sizes}


# -- 3. client peak memory, one subprocess per measurement ---------------------------------------------
MEMORY_PROBE = r"""
import json, sys, gc, weakref, torch
from pathlib import Path
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

class LiveBytes(TorchDispatchMode):
    '''Peak bytes of the tensor storages a block of code creates and still holds (views are not counted).'''

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.owned: set[int] = set()

    def _free(self, ptr: int, n: int) -> None:
        self.owned.discard(ptr)
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                ptr = t.untyped_storage().data_ptr()
                if ptr and ptr not in inputs and ptr not in self.owned:
                    n = t.untyped_storage().nbytes()
                    self.owned.add(ptr)
                    self.live += n
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(t, self._free, ptr, n)
        return out

from fedforget.core.config import parse_run_config
from fedforget.methods.hosfl.split_model import build_split_model
from fedforget.tasks.registry import load_task_data
from fedforget.methods.hosfl import zo
from fedforget.training.determinism import deterministic_torch
task, cut, mode, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
cfg = parse_run_config({"method": "hosfl", "task": task, "hosfl.cut": cut, "train-size": 512, "test-size": 64})
data = load_task_data(cfg)
split = build_split_model(cfg, data.num_classes, "client")  # rt-smollm: embeddings + client layers only
inputs = tuple(t[:batch] for t in data.train.inputs)
theta = split.client_vector()
names = split.client_names
def vm(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
with torch.no_grad():
    z = split.client(*inputs)[0]
lam = torch.randn_like(z) * 1e-3
gc.collect()
Path("/proc/self/clear_refs").write_text("5")   # reset the peak RSS (VmHWM) to the current RSS
base = vm("VmRSS:")
with deterministic_torch(), LiveBytes() as live:
    if mode == "forward-only":
        with torch.no_grad():
            out = split.client(*inputs)[0]
    elif mode == "hosfl":  # the ZO phase: z (kept from the forward phase) and λ are resident, P forwards
        v = zo.zo_scalars(split.client, names, theta, inputs, z, lam, list(range(5)), 1e-3)
    elif mode == "sfl":
        th = theta.clone().requires_grad_(True)
        params, start = {}, 0
        for n, p in split.client_params:
            params[n] = th[start:start + p.numel()].view_as(p); start += p.numel()
        out = torch.func.functional_call(split.client, params, inputs)[0]
        (g,) = torch.autograd.grad((out * lam).sum(), th)
# what the step holds besides what it creates: hosfl z (kept) and λ (received), sfl λ
resident = {"forward-only": 0, "hosfl": 2, "sfl": 1}[mode] * z.numel() * z.element_size()
print(json.dumps({"base-rss-mb": base, "peak-rss-mb": vm("VmHWM:"), "d_c": split.d_c,
                  "tensor-peak-mb": (live.peak + resident) / 2**20,
                  "activation-shape": list(z.shape)}))
"""


def memory(quick: bool, tmp: Path) -> dict[str, Any]:
    cases = [("rt-smollm", 3, 16), ("fmnist-cnn", 2, 256), ("rt-minilm", 3, 32)] if not quick else \
        [("fmnist-cnn", 2, 64)]
    out: dict[str, Any] = {"repeats": 1 if quick else 2, "cases": []}
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for task, cut, batch in cases:
        probe = parse_run_config({"method": "hosfl", "task": task, "hosfl.cut": cut, "train-size": 512,
                                  "test-size": 64})
        case: dict[str, Any] = {"task": task, "cut": cut, "batch": batch, "lora-r": probe.lora_r,
                                "lora-alpha": probe.lora_alpha, "perturbations": 5, "mu": 1e-3}
        for mode in ("forward-only", "hosfl", "sfl"):
            rises = []
            for _ in range(out["repeats"]):
                proc = subprocess.run([sys.executable, "-c", MEMORY_PROBE, task, str(cut), mode, str(batch)],
                                      capture_output=True, text=True, env=env, check=True, timeout=600)
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                rises.append(res["peak-rss-mb"] - res["base-rss-mb"])
            case[mode] = {"step-peak-rise-mb": round(min(rises), 2), "process-peak-mb": round(res["peak-rss-mb"], 1),
                          "base-mb": round(res["base-rss-mb"], 1), "tensor-peak-mb": round(res["tensor-peak-mb"], 3)}
            case["d_c"], case["activation-shape"] = res["d_c"], res["activation-shape"]
            print(f"memory {task} {mode}: +{min(rises):.1f} MB over {res['base-rss-mb']:.0f} MB, tensors "
                  f"{res['tensor-peak-mb']:.2f} MB", flush=True)
        f = case["forward-only"]
        case["hosfl-over-forward"] = {"tensor-peak": round(case["hosfl"]["tensor-peak-mb"] / f["tensor-peak-mb"], 3),
                                      "process-peak": round(case["hosfl"]["process-peak-mb"] / f["process-peak-mb"], 3)}
        out["cases"].append(case)
    fig, ax = plt.subplots(figsize=(7, 4))
    modes = ["forward-only", "hosfl", "sfl"]
    for i, case in enumerate(out["cases"]):
        ax.bar([j + 0.3 * i for j in range(3)], [case[m]["step-peak-rise-mb"] for m in modes], 0.3,
               label=f"{case['task']} cut {case['cut']} batch {case['batch']}")
    ax.set_xticks([j + 0.15 for j in range(3)], modes)
    ax.set_ylabel("peak RSS rise over one client step (MB)")
    ax.legend(fontsize=8)
    ax.set_title("client memory: HO-SFL (1+P forwards) vs SFL (backprop) vs inference")
    fig.tight_layout()
    fig.savefig(OUT / "hosfl_memory.png", dpi=110)
    return out


# -- 4. sweeps of P and μ ----------------------------------------------------------------------------
def sweeps(quick: bool, tmp: Path) -> dict[str, Any]:
    rounds = 10 if quick else 100
    res: dict[str, Any] = {"rounds": rounds, "P": {}, "mu": {}}
    for p in ((1, 5) if quick else (1, 5, 20)):
        rows, _, _ = _run(tmp / f"p{p}", method="hosfl", partitioner="iid", **{"hosfl.perturbations": p},
                          **{"num-rounds": rounds, "hosfl.eval-every": max(1, rounds // 5),
                             "hosfl.client-lr": CLIENT_LR["hosfl"]})
        res["P"][str(p)] = _curve(rows)
        print(f"sweep P={p}: {res['P'][str(p)]['accuracy'][-1]:.4f}", flush=True)
    for mu in ((1e-3,) if quick else (1e-5, 1e-3, 1e-1)):
        rows, _, _ = _run(tmp / f"mu{mu}", method="hosfl", partitioner="iid", **{"hosfl.mu": mu},
                          **{"num-rounds": rounds, "hosfl.eval-every": max(1, rounds // 5),
                             "hosfl.client-lr": CLIENT_LR["hosfl"]})
        res["mu"][str(mu)] = _curve(rows)
        print(f"sweep mu={mu}: {res['mu'][str(mu)]['accuracy'][-1]:.4f}", flush=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for key, curve in res["P"].items():
        axes[0].plot(curve["round"], curve["accuracy"], label=f"P={key}")
    for key, curve in res["mu"].items():
        axes[1].plot(curve["round"], curve["accuracy"], label=f"μ={key}")
    for ax, title in zip(axes, ("perturbations P (μ=1e-3)", "smoothing μ (P=5)"), strict=True):
        ax.set_xlabel("round")
        ax.set_ylabel("test accuracy")
        ax.set_title(title)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT / "hosfl_sweeps.png", dpi=110)
    return res


# -- 5. does the ZO client learn? hosfl vs its frozen-client control, over seeds --------------------------
#: Arms of the control experiment: (method, client step). ``hosfl-frozen`` is the same run with client-lr=0.
ARMS = {"hosfl": ("hosfl", CLIENT_LR["hosfl"]), "hosfl-frozen": ("hosfl", 0.0), "sfl": ("sfl", CLIENT_LR["sfl"]),
        "zo-sfl": ("zo-sfl", CLIENT_LR["zo-sfl"])}


def _paired(res: dict[str, Any], part_name: str, arm: str, ref: str) -> dict[str, Any] | None:
    """arm − ref per seed (the same data, partition and initialisation), in accuracy points."""
    runs = res["runs"]
    diffs = [100 * (runs[f"{part_name}/{arm}/{s}"]["accuracy"] - runs[f"{part_name}/{ref}/{s}"]["accuracy"])
             for s in res["seeds"] if f"{part_name}/{arm}/{s}" in runs and f"{part_name}/{ref}/{s}" in runs]
    if len(diffs) < 2:
        return None
    return {"per-seed": [round(d, 2) for d in diffs], "mean": round(statistics.mean(diffs), 2),
            "std": round(statistics.stdev(diffs), 2)}


def _partial_runs(path: Path, res: dict[str, Any]) -> dict[str, Any]:
    """The finished runs of an interrupted experiment with the same settings (its JSON says ``partial``)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    same = all(old.get(k) == res[k] for k in ("config", "seeds", "rounds", "sfl-rounds"))
    return dict(old.get("runs", {})) if old.get("partial") and same else {}


def _summarise(res: dict[str, Any], parts: tuple[tuple[str, dict[str, Any]], ...],
               arms: dict[str, tuple[str, float]]) -> None:
    """Per arm: mean, min, max and spread over the seeds run so far; paired differences to the frozen client."""
    for part_name, _ in parts:
        for arm in arms:
            keys = [f"{part_name}/{arm}/{s}" for s in res["seeds"]]
            finals = [res["runs"][k]["accuracy"] for k in keys if k in res["runs"]]
            if finals:
                res["arms"][f"{part_name}/{arm}"] = {"mean": round(sum(finals) / len(finals), 4), "min": min(finals),
                                                     "max": max(finals), "spread": round(max(finals) - min(finals), 4),
                                                     "per-seed": finals}
            if arm != "hosfl-frozen" and (paired := _paired(res, part_name, arm, "hosfl-frozen")):
                res["paired-vs-frozen"][f"{part_name}/{arm}"] = paired


def plot_control(res: dict[str, Any], name: str, title: str) -> None:
    """Mean final accuracy per arm with the seeds' min-max, as ``hosfl_<name>.png``."""
    fig, ax = plt.subplots(figsize=(8, 4))
    keys = list(res["arms"])
    means = [res["arms"][k]["mean"] for k in keys]
    errs = [[max(0.0, res["arms"][k]["mean"] - res["arms"][k]["min"]) for k in keys],
            [max(0.0, res["arms"][k]["max"] - res["arms"][k]["mean"]) for k in keys]]
    ax.bar(range(len(keys)), means, yerr=errs, capsize=3)
    ax.set_xticks(range(len(keys)), keys, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("final test accuracy (mean, min-max over seeds)")
    ax.set_ylim(0, 1)
    ax.set_title(f"{title}\n{res['rounds']} rounds (sfl: {res['sfl-rounds']} local-epoch rounds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(OUT / f"hosfl_{name}.png", dpi=110)


def _control(name: str, tmp: Path, base: dict[str, Any], seeds: tuple[int, ...], rounds: int,
             parts: tuple[tuple[str, dict[str, Any]], ...], arms: dict[str, tuple[str, float]],
             title: str) -> dict[str, Any]:
    """Arms × partitionings × seeds; SFL gets the samples of ``rounds`` hosfl rounds as local-epoch rounds.

    Arms run in order of importance (hosfl and its control first) and ``hosfl_<name>.json`` is rewritten
    after every run, so a partial result is never lost. Paired differences against the frozen client
    are per seed (same data, partition and initialisation).
    """
    per_client = int(base["train-size"]) // CLIENTS
    sfl_rounds = max(1, round(rounds * int(base["batch-size"]) / per_client))  # the same samples processed
    res: dict[str, Any] = {"config": base, "seeds": list(seeds), "rounds": rounds, "sfl-rounds": sfl_rounds,
                           "arms": {}, "runs": {}, "paired-vs-frozen": {}}
    done = _partial_runs(OUT / f"hosfl_{name}.json", res)
    for arm, (method, client_lr) in arms.items():
        for part_name, part in parts:
            for seed in seeds:
                if (key := f"{part_name}/{arm}/{seed}") in done:  # an interrupted run's result is kept
                    res["runs"][key] = done[key]
                    continue
                n = sfl_rounds if method == "sfl" else rounds
                rows, _, secs = _run(tmp / f"{name}-{part_name}-{arm}-{seed}",
                                     **{**base, "method": method, "seed": seed, **part, "num-rounds": n,
                                        "hosfl.eval-every": n, "hosfl.client-lr": client_lr, "local-epochs": 1})
                final = [r for r in rows if "accuracy" in r][-1]
                res["runs"][key] = {"accuracy": final["accuracy"], "samples": final.get("samples-total", 0),
                                    "seconds": round(secs, 1)}
                print(f"{name} {part_name} {arm} seed {seed}: {final['accuracy']:.4f} "
                      f"({final.get('samples-total', 0)} samples, {secs:.0f} s)", flush=True)
                _summarise(res, parts, arms)
                (OUT / f"hosfl_{name}.json").write_text(json.dumps({"benchmark": f"hosfl_{name}", "partial": True,
                                                                    "machine": machine_info(), **res}, indent=1))
    _summarise(res, parts, arms)
    plot_control(res, name, title)
    return res


def control(quick: bool, tmp: Path) -> dict[str, Any]:
    """hosfl against the same run with the client frozen, SFL with a local epoch per round (the paper's
    SFLv1, given the same number of training samples), and ZO-SFL on ``fmnist-cnn``; IID and
    Dirichlet(1); seeds 1..3."""
    rounds = 8 if quick else int(os.environ.get("HOSFL_CONTROL_ROUNDS", "40"))
    parts = (("iid", {"partitioner": "iid"}), ("dirichlet-1", {"partitioner": "dirichlet", "dirichlet-alpha": 1.0}))
    seeds = (1,) if quick else (1, 2, 3)
    return _control("control", tmp, {**BASE, "train-size": 3000, "test-size": 500}, seeds, rounds, parts, ARMS,
                    "fmnist-cnn: hosfl vs frozen client")


def control_llm(quick: bool, tmp: Path) -> dict[str, Any]:
    """The same control on the language model (``rt-smollm``, SmolLM2-135M cut after 3 decoder layers,
    batch 16), reduced to fit 2 CPU cores: 480 / 400 snippets, IID, 40 rounds, the task's and method's
    defaults for every step size (client-lr 0.01, server Adam lr 1e-3); hosfl, frozen client and SFL."""
    rounds = 2 if quick else int(os.environ.get("HOSFL_CONTROL_LLM_ROUNDS", "40"))
    base = {"task": "rt-smollm", "hosfl.cut": 3, "hosfl.clients-per-round": 3, "batch-size": 16,
            "hosfl.perturbations": 5, "hosfl.mu": 1e-3, "train-size": 160 if quick else 480,
            "test-size": 48 if quick else 400}
    arms = {"hosfl": ("hosfl", 0.01), "hosfl-frozen": ("hosfl", 0.0), "sfl": ("sfl", 0.01)}
    return _control("control_llm", tmp, base, (1,) if quick else (1, 2, 3), rounds, (("iid", {"partitioner": "iid"}),),
                    arms, "rt-smollm (SmolLM2-135M, cut 3): hosfl vs frozen client")


# -- 6. traffic at language-model scale (the paper's Table 3, per training sample) ----------------------
def traffic_llm(quick: bool, tmp: Path) -> dict[str, Any]:
    """Measured bytes of real hosfl and sfl rounds on rt-smollm (cut 3, batch 16, 40 tokens), per client-round
    and per training sample; the totals for a training budget follow by multiplying by the samples."""
    base = {"task": "rt-smollm", "hosfl.cut": 3, "batch-size": 16, "train-size": 320, "test-size": 16,
            "hosfl.clients-per-round": 3, "partitioner": "iid", "lr": 1e-3, "optimizer": "adam"}
    out: dict[str, Any] = {"config": base, "methods": {}}
    for method, rounds in (("hosfl", 2), ("sfl", 1)):
        store = tmp / f"llm-traffic-{method}"
        t0 = time.monotonic()
        with quiet_flower():
            run_in_process({**base, "method": method, "store": str(store), "num-rounds": rounds,
                            "hosfl.eval-every": rounds, "local-epochs": 1,
                            "hosfl.client-lr": CLIENT_LR[method]}, CLIENTS)
        s = Store.open(store)
        rows = [r for r in s.metrics() if "bytes" in r]
        samples = sum(r["samples"] for r in rows)
        total = {d: sum(sum(r["bytes"][d].values()) for r in rows) for d in ("up", "down")}
        kinds = {d: {k: sum(r["bytes"][d][k] for r in rows) for k in rows[0]["bytes"][d]} for d in ("up", "down")}
        out["methods"][method] = {"rounds": rounds, "samples": samples, "bytes": kinds, "total": total,
                                  "bytes-per-sample": {d: total[d] / samples for d in total},
                                  "d_c": s.manifest()["split"]["d_c"], "seconds": round(time.monotonic() - t0, 1)}
        print(f"llm traffic {method}: {samples} samples, up {total['up'] / samples:.0f} B/sample, "
              f"down {total['down'] / samples:.0f} B/sample", flush=True)
    return out


# -- 7. honest tuning of the client step: does any client-lr beat the frozen client? ---------------------
def tune(quick: bool, tmp: Path) -> dict[str, Any]:
    """digits-mlp (fast), cut 1, IID, 10 clients, 3 per round: client-lr ∈ {0 (frozen), 0.01, 0.1, 0.3} x seeds."""
    seeds = (1,) if quick else (1, 2, 3)
    rounds = 10 if quick else int(os.environ.get("HOSFL_TUNE_ROUNDS", "60"))
    base = {"task": "digits-mlp", "hosfl.cut": 1, "partitioner": "iid", "lr": 0.02, "hosfl.clients-per-round": 3,
            "hosfl.perturbations": 5, "hosfl.mu": 1e-3, "batch-size": 32, "num-rounds": rounds,
            "hosfl.eval-every": rounds}
    res: dict[str, Any] = {"config": base, "seeds": list(seeds), "arms": {}}
    for client_lr in (0.0, 0.01, 0.1, 0.3):
        finals = []
        for seed in seeds:
            store = tmp / f"tune-{client_lr}-{seed}"
            with quiet_flower():
                run_in_process({**base, "method": "hosfl", "seed": seed, "hosfl.client-lr": client_lr,
                                "store": str(store)}, CLIENTS)
            finals.append([r for r in Store.open(store).metrics() if "accuracy" in r][-1]["accuracy"])
            print(f"tune client-lr {client_lr} seed {seed}: {finals[-1]:.4f}", flush=True)
        res["arms"][str(client_lr)] = {"per-seed": finals, "mean": round(sum(finals) / len(finals), 4),
                                       "spread": round(max(finals) - min(finals), 4)}
        (OUT / "hosfl_tune.json").write_text(json.dumps({"benchmark": "hosfl_tune", "partial": True, **res}, indent=1))
    return res


PARTS = {"traffic-llm": traffic_llm, "accuracy": accuracy, "traffic": traffic, "memory": memory, "sweeps": sweeps,
         "control": control, "control-llm": control_llm, "tune": tune}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=[*PARTS, "all"])
    parser.add_argument("--quick", action="store_true", help="tiny budgets, for a smoke run")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    names = [n for n in PARTS if n not in ("traffic-llm", "control-llm")] if args.part == "all" else [args.part]
    with tempfile.TemporaryDirectory(prefix="hosfl-bench-") as tmp:
        for name in names:
            t0 = time.monotonic()
            result = PARTS[name](args.quick, Path(tmp))
            payload = {"benchmark": f"hosfl_{name}", "quick": args.quick, "seconds": round(time.monotonic() - t0, 1),
                       "machine": machine_info(), **result}
            path = OUT / f"hosfl_{name.replace('-', '_')}.json"
            path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
            print(f"wrote hosfl_{name.replace('-', '_')}.json ({payload['seconds']} s)", flush=True)


if __name__ == "__main__":
    main()
