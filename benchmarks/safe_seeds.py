"""SAFE against SISA over seeds, with the reference rows, on fmnist-effnet (paper's Table 1 and Fig. 4).

Every SAFE/SISA row is a real run through the ServerApp/ClientApp on the in-process runtime with the
user's defaults (core/defaults.py: the same AdamW step budget per adapter for every n); only the
graph (coarse, fine, prototypes) is set. The backbone tokens are computed once for the whole train
pool and test split and written into each node's state dir (what the node would cache itself), so a
run spends its time on training. Reference rows, on the same frozen features: a linear probe
(multinomial logistic regression on the pooled features, central), prototypes only (the cosine
prototype classifier SAFE mixes in), and one InCA adapter per class without sharding (SAFE, n = 1).
Instant forgetting: m random cliques / shards (and their cells' prototypes) leave without retraining.

    python benchmarks/safe_seeds.py --seeds 1,2,3 --shards 8,16,32,64 --train-size 2000 --test-size 2000

Writes ``docs/results/safe_seeds.json`` and ``safe_seeds.png``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import machine_info, quiet_flower
from safetensors.numpy import save_file

from fedforget.core.config import parse_run_config
from fedforget.inprocess import run_in_process
from fedforget.store import Store

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"
# SAFE's n_f per n (n_c = n / n_f): five classes a clique up to n = 16 (the paper's Table 4 picks (8, 2) at 16
# for most of its sets; safe_topology.py measures n_f = 1/2/4 there), then 2–3 (n_f = 4) at 32 and 64
FINE = {1: 1, 8: 2, 16: 2, 32: 4, 64: 4}
SERIES = {
    "SAFE": lambda n: {"method": "safe", "safe.coarse": n // FINE[n], "safe.fine": FINE[n]},
    "SISA": lambda n: {"method": "protosisa", "safe.coarse": n, "safe.fine": 1, "safe.prototypes": False},
    "ProtoSISA": lambda n: {"method": "protosisa", "safe.coarse": n, "safe.fine": 1},
}


def token_table(base: dict[str, Any], work: Path) -> dict[str, np.ndarray]:
    """Tokens and pooled features of the whole train pool and test split (one backbone pass, cached)."""
    from fedforget.methods.safe.client import frozen_backbone
    from fedforget.methods.safe.features import compute_tokens
    from fedforget.tasks.registry import load_task_data

    path = work / f"tokens-{base['task']}-{base['train-size']}-{base['test-size']}.npz"
    if path.is_file():
        return dict(np.load(path))
    cfg = parse_run_config(base)
    data = load_task_data(cfg)
    module = frozen_backbone(cfg.task, cfg.hf.model, cfg.seed).module
    tr, trp = compute_tokens(module, data.train.inputs)
    te, tep = compute_tokens(module, data.test.inputs)
    table = {"train-ids": data.train.ids.numpy(), "train": tr, "train-pooled": trp, "train-labels": data.train.labels
             .numpy(), "test-ids": data.test.ids.numpy(), "test": te, "test-pooled": tep,
             "test-labels": data.test.labels.numpy()}
    work.mkdir(parents=True, exist_ok=True)
    np.savez(path, **table)
    return table


def prefill(store_dir: Path, config: dict[str, Any], nodes: int, table: dict[str, np.ndarray]) -> None:
    """Each node's token cache file (exactly its own samples) and the store's test-split cache."""
    from fedforget.methods.fedavg.client import dataset_key
    from fedforget.methods.safe.client import frozen_backbone
    from fedforget.methods.safe.features import CACHE_PREFIX, cache_key
    from fedforget.tasks.registry import partition_plan

    cfg = parse_run_config(config)
    sha = frozen_backbone(cfg.task, cfg.hf.model, cfg.seed).weights_sha256
    row = {int(i): r for r, i in enumerate(table["train-ids"].tolist())}
    plan = partition_plan(cfg, nodes)
    for p in range(nodes):
        ids = sorted(plan.partition_ids(p))
        rows = [row[i] for i in ids]
        kind = f"train-{dataset_key(cfg)}"
        folder = store_dir / "clients" / str(p)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({"tokens": np.ascontiguousarray(table["train"][rows]),
                   "pooled": np.ascontiguousarray(table["train-pooled"][rows]),
                   "ids": np.asarray(ids, dtype=np.int64)},
                  str(folder / f"{CACHE_PREFIX}{kind}-{cache_key(kind, sha, ids)}.safetensors"))
    ids = table["test-ids"].tolist()
    kind = f"test-{cfg.task}"
    save_file({"tokens": np.ascontiguousarray(table["test"]), "pooled": np.ascontiguousarray(table["test-pooled"]),
               "ids": np.asarray(ids, dtype=np.int64)},
              str(store_dir / f"{CACHE_PREFIX}{kind}-{cache_key(kind, sha, ids)}.safetensors"))


def train(work: Path, name: str, config: dict[str, Any], nodes: int, table: dict[str, np.ndarray]
          ) -> tuple[Store, float]:
    path = work / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    full = {**config, "store": str(path)}
    prefill(path, full, nodes, table)
    t0 = time.perf_counter()
    with quiet_flower():
        run_in_process(full, nodes)
    return Store.open(path), time.perf_counter() - t0


def final(store: Store) -> dict[str, Any]:
    return [m for m in store.metrics() if m.get("final")][-1]


def drop_curve(store: Store, drops: list[int], seed: int) -> list[float]:
    """Accuracy as m random cliques leave the ensemble without retraining (and their cells' prototypes)."""
    from fedforget.methods.safe.graph import SafePlan
    from fedforget.methods.safe.serve import safe_accuracy
    from fedforget.unlearning.evaluate import stored_config

    cfg = stored_config(store)
    ledger = store.ledger()
    try:
        plan_json, serving, artifacts = ledger.plan(), ledger.serving(), ledger.artifacts()
    finally:
        ledger.close()
    plan = SafePlan.from_json(plan_json)
    order = [c for c, *_ in plan.cliques()]
    random.Random(seed).shuffle(order)
    out = []
    for m in drops:
        gone = order[:m]
        units = {u for c in gone for u in plan.members[c]}
        dropped = set(gone) | {plan.proto_id(u) for u in units}
        kept = [a for a in serving["artifacts"] if a not in dropped]
        if not any("/proto/" not in a for a in kept):
            out.append(float("nan"))
            continue
        out.append(safe_accuracy(cfg, store, plan_json, {**serving, "artifacts": kept}, artifacts)["accuracy"])
    return out


def fedavg_probe(table: dict[str, np.ndarray], base: dict[str, Any], nodes: int, seed: int, steps: int = 100,
                 rounds: int = 5, lr: float = 0.001) -> float:
    """A linear probe trained like SAFE's adapters are: FedAvg over the run's partition, AdamW steps per node.

    Multinomial logistic regression on each sample's LayerNormed pooled features (no statistics shared
    across nodes), ``steps`` AdamW steps of 32 samples per node over ``rounds`` rounds (SAFE's default
    budget), averaged by sample count. It is what the central probe becomes under the same client drift.
    """
    import torch
    from torch.nn import functional as F

    from fedforget.tasks.registry import partition_plan

    plan = partition_plan(parse_run_config({**base, "method": "safe", "seed": seed}), nodes)
    row = {int(i): r for r, i in enumerate(table["train-ids"].tolist())}
    dim = table["train-pooled"].shape[1]
    x = F.layer_norm(torch.from_numpy(table["train-pooled"]).float(), (dim,))
    y = torch.from_numpy(table["train-labels"]).long()
    parts = [torch.tensor([row[i] for i in sorted(plan.partition_ids(p))]) for p in range(nodes)]
    k = int(y.max()) + 1
    weight, bias = torch.zeros(dim, k), torch.zeros(k)
    g = torch.Generator().manual_seed(seed)
    for _ in range(rounds):
        outs = []
        for idx in parts:
            w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
            opt = torch.optim.AdamW([w, b], lr=lr)
            for _ in range(steps // rounds):
                batch = idx[torch.randint(len(idx), (32,), generator=g)]
                loss = F.cross_entropy(x[batch] @ w + b, y[batch])
                opt.zero_grad()
                loss.backward()
                opt.step()
            outs.append((w.detach(), b.detach(), len(idx)))
        total = sum(n for *_, n in outs)
        weight = sum(w * n / total for w, _, n in outs)
        bias = sum(b * n / total for _, b, n in outs)
    xt = F.layer_norm(torch.from_numpy(table["test-pooled"]).float(), (dim,))
    return float(((xt @ weight + bias).argmax(1).numpy() == table["test-labels"]).mean())


def references(table: dict[str, np.ndarray]) -> dict[str, float]:
    """Linear probe and prototypes only, on the pooled frozen features SAFE's prototypes use."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    def unit(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    xtr, xte = table["train-pooled"], table["test-pooled"]
    ytr, yte = table["train-labels"], table["test-labels"]
    scaler = StandardScaler().fit(xtr)
    probe = LogisticRegression(max_iter=2000, C=0.1).fit(scaler.transform(xtr), ytr)
    k = int(ytr.max()) + 1
    held = [c for c in range(k) if (ytr == c).any()]  # a class the subset lacks cannot be predicted
    protos = unit(np.stack([unit(xtr[ytr == c]).mean(0) for c in held]))
    return {"linear-probe": float((probe.predict(scaler.transform(xte)) == yte).mean()),
            "prototypes-only": float((np.asarray(held)[(unit(xte) @ protos.T).argmax(1)] == yte).mean())}


def mean_std(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values}


def summarise(rows: list[dict[str, Any]], refs: dict[str, float], shards: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"references": refs}
    for series in ("SAFE n=1 (no sharding)", *SERIES):
        picked = {n: [r["accuracy"] for r in rows if r["series"] == series and r["n"] == n] for n in [1, *shards]}
        out[series] = {str(n): mean_std(v) for n, v in picked.items() if v}
    gaps = {}
    for n in shards:
        pairs = {(r["seed"]): r["accuracy"] for r in rows if r["series"] == "SAFE" and r["n"] == n}
        sisa = {(r["seed"]): r["accuracy"] for r in rows if r["series"] == "SISA" and r["n"] == n}
        diffs = [pairs[s] - sisa[s] for s in pairs if s in sisa]
        if diffs:
            gaps[str(n)] = mean_std(diffs)
    out["SAFE - SISA (paired)"] = gaps
    curves = [r for r in rows if "drops" in r]
    if curves:
        out["instant-forgetting"] = {
            series: mean_std([r["drops"][-1] / r["drops"][0] for r in curves if r["series"] == series])
            for series in {r["series"] for r in curves}}
    return out


def plot(report: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, shards = report["summary"], report["shards"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for series in SERIES:
        have = [n for n in shards if str(n) in summary.get(series, {})]
        if not have:
            continue
        m = [100 * summary[series][str(n)]["mean"] for n in have]
        s = [100 * summary[series][str(n)]["std"] for n in have]
        ax.errorbar(have, m, yerr=s, marker="o", capsize=3, label=series)
    for name, value in summary["references"].items():
        ax.axhline(100 * value, ls=":", color="grey")
        ax.annotate(name, (shards[0], 100 * value), fontsize=7, color="grey")
    flat = summary["SAFE n=1 (no sharding)"].get("1")
    if flat:
        ax.axhline(100 * flat["mean"], ls="--", color="k", label="SAFE n=1 (no sharding)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("shards n (cliques for SAFE)")
    ax.set_ylabel("test accuracy (%), mean ± std over seeds")
    ax.set_title(f"{report['config']['task']}, {report['nodes']} nodes, {len(report['seeds'])} seeds")
    ax.legend(fontsize=7)
    curves = [r for r in report["rows"] if "drops" in r]
    by_series = {s: [r["drops"] for r in curves if r["series"] == s] for s in sorted({r["series"] for r in curves})}
    plot_drop_curves(bx, by_series, report["dropped"], report["drop-n"])
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def plot_drop_curves(ax: Any, curves: dict[str, list[list[float]]], dropped: list[int], n: int,
                     relative: bool = True) -> None:
    """Accuracy kept (%, the paper's Fig. 4) or test accuracy (%) as cliques / shards leave without
    retraining, mean ± std over seeds."""
    for label, runs in curves.items():
        kept = 100 * np.array([[a / run[0] if relative else a for a in run] for run in runs])
        if len(kept):
            ax.errorbar(dropped, kept.mean(0), yerr=kept.std(0, ddof=1) if len(kept) > 1 else None,
                        marker="o", capsize=3, label=label)
    ax.set_xlabel(f"cliques / shards dropped without retraining (of n = {n})")
    ax.set_ylabel("accuracy kept (%)" if relative else "test accuracy (%)")
    ax.set_title("instant forgetting, relative (paper Fig. 4)" if relative else "instant forgetting, accuracy")
    ax.legend(fontsize=7)


def merge(paths: list[Path], out: Path) -> None:
    """Reports of disjoint (series, n, seed) rows into one, summarised and plotted."""
    parts = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    report = {**parts[0], "rows": [r for p in parts for r in p["rows"]],
              "seeds": sorted({s for p in parts for s in p["seeds"]})}
    refs = dict(parts[0]["summary"]["references"])
    probes = [(len(p["seeds"]), p["summary"]["references"]["fedavg-probe"]) for p in parts]  # a mean over seeds
    refs["fedavg-probe"] = sum(w * v for w, v in probes) / sum(w for w, _ in probes)
    report["summary"] = summarise(report["rows"], refs, report["shards"])
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    plot(report, out.with_suffix(".png"))
    print(json.dumps(report["summary"], indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="fmnist-effnet")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--shards", default="8,16,32,64")
    parser.add_argument("--series", default="SAFE,SISA")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=2000)
    parser.add_argument("--drop-n", type=int, default=16)
    parser.add_argument("--work", default="runs/safe-seeds")
    parser.add_argument("--out", default=str(OUT / "safe_seeds.json"))
    parser.add_argument("--extra", default="{}", help="JSON run-config overrides for every run")
    parser.add_argument("--merge", default="", help="comma-separated reports (e.g. one per seed): merge, plot")
    args = parser.parse_args()
    if args.merge:
        merge([Path(p) for p in args.merge.split(",")], Path(args.out))
        return
    work = Path(args.work).resolve()
    base = {"task": args.task, "train-size": args.train_size, "test-size": args.test_size}
    table = token_table(base, work)
    base = {**base, **json.loads(args.extra)}
    seeds = [int(s) for s in args.seeds.split(",")]
    shards = [int(n) for n in args.shards.split(",")]
    dropped = [0, 2, 4, 8, 12][: 1 + sum(1 for d in (2, 4, 8, 12) if d < args.drop_n)]
    out = Path(args.out)
    old = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    rows: list[dict[str, Any]] = old.get("rows", [])
    done = {(r["series"], r["n"], r["seed"]) for r in rows}
    report: dict[str, Any] = {"machine": machine_info(), "config": base, "nodes": args.nodes, "seeds": seeds,
                              "shards": shards, "fine": {str(n): FINE[n] for n in shards}, "drop-n": args.drop_n,
                              "dropped": dropped, "rows": rows}
    federated = [fedavg_probe(table, base, args.nodes, s) for s in seeds]
    refs = {**references(table), "fedavg-probe": mean_std(federated)["mean"]}
    jobs = []  # seed-major: a stopped run still has whole seeds
    for s in seeds:
        jobs += [("SAFE n=1 (no sharding)", 1, s)]
        jobs += [(series, n, s) for n in shards for series in args.series.split(",")]
    for series, n, seed in jobs:
        if (series, n, seed) in done:
            continue
        config = {"method": "safe", "safe.coarse": 1, "safe.fine": 1,
                  "safe.prototypes": False} if n == 1 else SERIES[series](n)
        store, secs = train(work, f"{series.split()[0].lower()}-{n}-s{seed}", {**base, **config, "seed": seed},
                            args.nodes, table)
        row = {"series": series, "n": n, "seed": seed, "accuracy": final(store)["accuracy"],
               "seconds": round(secs, 1), "samples-visited": final(store)["samples-visited"],
               "client-rounds": final(store)["client-rounds"]}
        if n == args.drop_n and series in SERIES:
            row["drops"] = drop_curve(store, dropped, seed)
        rows.append(row)
        print(json.dumps(row), flush=True)
        report["summary"] = summarise(rows, refs, shards)
        out.write_text(json.dumps(report, indent=2), encoding="utf-8")
        shutil.rmtree(store.root, ignore_errors=True)
    report["summary"] = summarise(rows, refs, shards)
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    plot(report, out.with_suffix(".png"))
    print(json.dumps(report["summary"], indent=2))


if __name__ == "__main__":
    main()
