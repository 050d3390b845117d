"""What does running on Flower cost? One ``fedavg`` job on four runtimes, timed, with artifacts compared.

The same job (method ``fedavg``, task, clients, rounds and seed fixed, every other key at its
``[tool.flwr.app.config]`` default) runs

* ``in-process``: the real ServerApp and ClientApp in this process (``fedforget.inprocess.run_in_process``);
* ``ray-simulation``: ``flwr run`` on Flower's managed local SuperLink with the Ray simulation engine;
* ``loopback-deployment``: ``flwr run`` on one SuperLink and N SuperNode processes on 127.0.0.1;
* ``floor``: the same gradient steps in one plain PyTorch loop in this process, without Flower:
  each round, each partition in order loads the global LoRA + head, trains with the seeds the
  ClientApp derives, and the states are averaged with FedAvg's weights in partition order;
* ``flower-floor``: Flower's own floor on the same loopback deployment (same SuperNodes and rounds):
  ``benchmarks/flower_floor``, a ServerApp sending the job's messages (one query, then per round one
  train message per node, and one evaluate message per node after the last round) to a NumPy ClientApp
  that replies at once.

The loopback deployment's round is then split into that Flower floor, the ClientApp's imports (a
fresh interpreter per message, timed per message type in ``import_costs``) and the training compute
(the plain loop's round); ``round_split`` in the JSON says how.

Each runtime writes its store under a temporary directory. The script checks that every runtime
served the same artifact (sha256 of the safetensors bytes) and writes
``docs/results/runtime_overhead.json`` and ``.png``.

    python benchmarks/runtime_overhead.py                                        # the full job
    python benchmarks/runtime_overhead.py --rounds 1 --clients 3 --task digits-mlp --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")

import numpy as np
import psutil
import torch
from bench_common import RoundWatcher, machine_info, quiet_flower, run_config_string
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedforget.core.config import RunConfig, parse_run_config, sample_clients
from fedforget.core.seeds import derive_seed
from fedforget.federation import run_setup
from fedforget.federation.run_setup import DEFAULT_ADAPTER, build_model, local_test_share
from fedforget.inprocess import default_run_config, run_in_process
from fedforget.launch import loopback_deployment, simulation_federation
from fedforget.methods.fedavg.server import ARTIFACT
from fedforget.store import Store
from fedforget.tasks import registry
from fedforget.tasks.registry import load_task_data, partition_plan
from fedforget.training.supervised import TrainSettings, evaluate, train_supervised

ROOT = Path(__file__).resolve().parent.parent
RUNTIMES = ("in-process", "ray-simulation", "loopback-deployment", "floor", "flower-floor")
FLOWER_FLOOR_APP = ROOT / "benchmarks" / "flower_floor"
#: what a fresh ClientApp process imports before it can answer each message type
MESSAGE_IMPORTS = {
    "clientapp-module": "fedforget.client_app",
    "query": "fedforget.client_app, fedforget.federation.client_site",
    "forget": "fedforget.client_app, fedforget.federation.forget_client",
    "train/evaluate (LoRA)": "fedforget.client_app, fedforget.methods.fedavg.client",
    "train.chain (FedSGT)": "fedforget.client_app, fedforget.federation.module_training",
}
LABELS = {
    "in-process": "in-process\n(run_in_process)",
    "ray-simulation": "Ray simulation\n(flwr run)",
    "loopback-deployment": "loopback deployment\n(flwr run,\nN SuperNodes)",
    "floor": "floor\n(plain PyTorch\nloop)",
    "flower-floor": "Flower floor\n(NumPy ClientApp,\nN SuperNodes)",
}
FLWR_RUN_TIMEOUT = 3600.0
console = Console()
if not console.is_terminal:  # a log file: wide enough for the summary table
    console.width = 140


# -- helpers ----------------------------------------------------------------------------------------
def cold_caches() -> None:
    """Forget every per-process cache (data, partition plans, models, file readers), so each
    in-process measurement pays for loading its data and backbone, as a fresh Flower process does."""
    registry._DATA.clear()
    registry._PLANS.clear()
    run_setup._MODELS.clear()
    for name, module in list(sys.modules.items()):
        if name.startswith("fedforget.tasks") and module is not None:
            for obj in vars(module).values():
                clear = getattr(obj, "cache_clear", None)
                if callable(clear):
                    clear()


def served(store: Store) -> tuple[str, dict[str, Any]]:
    ledger = store.ledger()
    try:
        shas = {a["artifact"]: a["sha256"] for a in ledger.artifacts()}
        return shas[ledger.serving()["artifacts"][0]], store.manifest()
    finally:
        ledger.close()


def phases(wall: float, rows: list[tuple[int, float, float]]) -> dict[str, float | None]:
    """Start-up (to the round-0 evaluation), the rounds, and the tail (store writing, shut-down)."""
    if len(rows) < 2:
        return {"startup_s": None, "rounds_s": None, "tail_s": None}
    first, last = rows[0][1], rows[-1][1]
    return {"startup_s": round(first, 3), "rounds_s": round(last - first, 3), "tail_s": round(wall - last, 3)}


def import_costs(repeats: int = 3) -> dict[str, dict[str, Any]]:
    """Seconds a fresh interpreter spends importing what each message type needs (median of
    ``repeats``, minus a bare interpreter's start), and which heavy packages that pulls in."""
    heavy = ("torch", "peft", "transformers", "datasets", "flwr_datasets", "seaborn", "scipy")

    def once(modules: str) -> tuple[float, list[str]]:
        code = (f"import time, sys; t = time.perf_counter(); import {modules}; "
                f"print(time.perf_counter() - t, [m for m in {heavy!r} if m in sys.modules])")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             timeout=600).stdout.strip().splitlines()[-1]
        seconds, pulled = out.split(" ", 1)
        return float(seconds), json.loads(pulled.replace("'", '"'))

    costs: dict[str, dict[str, Any]] = {}
    for message, modules in MESSAGE_IMPORTS.items():
        runs = [once(modules) for _ in range(repeats)]
        costs[message] = {"modules": modules, "import_s": round(statistics.median(r[0] for r in runs), 3),
                          "runs_s": [round(r[0], 3) for r in runs], "heavy_packages": runs[-1][1]}
    return costs


# -- the job ----------------------------------------------------------------------------------------
def job_overrides(args: argparse.Namespace) -> dict[str, object]:
    return {"method": "fedavg", "task": args.task, "num-rounds": args.rounds, "seed": args.seed}


def store_result(store_path: Path, wall: float, rows: list[tuple[int, float, float]]) -> dict[str, Any]:
    store = Store.open(store_path)
    sha, manifest = served(store)
    metrics = [m for m in store.metrics() if m.get("artifact") == ARTIFACT]
    return {
        "wall_s": round(wall, 3),
        **phases(wall, rows),
        "final_accuracy": float(metrics[-1]["accuracy"]),
        "accuracy_per_round": [float(m["accuracy"]) for m in metrics],
        "sha256": sha,
        "num-partitions": manifest.get("num-partitions"),
    }


def renice_supernodes(deploy_dir: Path, nice: int) -> None:
    """Lower the priority of the SuperNodes and everything they start (ClientApp processes inherit it).

    On a machine with fewer cores than SuperNodes, ten ClientApp processes starting at once can starve
    the SuperLink, whose SQLite state then reports "database is locked" (busy timeout 5 s); the SuperNode
    whose push failed drops its reply and the ServerApp waits out the round timeout. Keeping the
    SuperLink ahead in the CPU queue avoids that without changing the work done.
    """
    if nice <= 0:
        return
    for pid_file in sorted(deploy_dir.glob("supernode*.pid")):
        try:
            root = psutil.Process(int(pid_file.read_text(encoding="utf-8").strip()))
            for proc in [root, *root.children(recursive=True)]:
                proc.nice(nice)
        except (psutil.Error, ValueError, OSError):
            continue


class FlowerRunFailed(RuntimeError):
    def __init__(self, reason: str, wall: float, rounds_done: int, locked: bool) -> None:
        super().__init__(reason)
        self.reason, self.wall, self.rounds_done, self.locked = reason, wall, rounds_done, locked


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, progress: Progress) -> None:
        self.args = args
        self.work = work
        self.progress = progress
        self.overrides = job_overrides(args)

    def _bar(self, name: str) -> tuple[int, Callable[[int, float], None]]:
        task = self.progress.add_task(name, total=self.args.rounds, acc="starting")

        def on_round(rnd: int, acc: float) -> None:
            self.progress.update(task, completed=rnd, acc=f"round {rnd}: accuracy {acc:.4f}")

        return task, on_round

    def _done(self, task: int, result: dict[str, Any]) -> None:
        self.progress.update(task, completed=self.args.rounds, acc=f"done in {result['wall_s']:.1f} s")
        self.progress.stop_task(task)
        name = next(t.description for t in self.progress.tasks if t.id == task)
        self.progress.console.print(f"{name}: {result['wall_s']:.1f} s, accuracy {result['final_accuracy']:.4f}, "
                                    f"sha256 {result['sha256'][:16]}")

    # (a)
    def in_process(self) -> dict[str, Any]:
        store = self.work / "in-process" / "store"
        task, on_round = self._bar("in-process")
        cold_caches()
        t0 = time.monotonic()
        with quiet_flower(), RoundWatcher(store, t0, on_round) as watch:
            run_in_process({**self.overrides, "store": str(store)}, self.args.clients)
        wall = time.monotonic() - t0
        result = store_result(store, wall, watch.rows)
        self._done(task, result)
        return result

    # (b)
    def ray_simulation(self) -> dict[str, Any]:
        folder = self.work / "ray-simulation"
        store = folder / "store"
        task, on_round = self._bar("ray-simulation")
        with simulation_federation(folder / "flwr-home", self.args.clients) as fed:
            t0 = time.monotonic()
            with RoundWatcher(store, t0, on_round) as watch:
                proc = fed.flwr_run(run_config_string(self.overrides, store), timeout=FLWR_RUN_TIMEOUT)
            wall = time.monotonic() - t0
        self._check(proc, folder, wall, watch.rows)
        result = store_result(store, wall, watch.rows)
        self._done(task, result)
        return result

    # (c)
    def loopback(self) -> dict[str, Any]:
        task, on_round = self._bar("loopback-deployment")
        failures: list[dict[str, Any]] = []
        for attempt in range(1, self.args.deploy_attempts + 1):
            folder = self.work / "loopback-deployment" / f"attempt{attempt}"
            self.progress.update(task, completed=0,
                                 acc=f"attempt {attempt}: starting 1 SuperLink + {self.args.clients} SuperNodes")
            try:
                result = self._loopback_once(folder, on_round)
            except FlowerRunFailed as exc:
                failures.append({"attempt": attempt, "wall_s": round(exc.wall, 3), "rounds_done": exc.rounds_done,
                                 "reason": exc.reason, "superlink_sqlite_locked": exc.locked})
                self.progress.console.print(f"[yellow]loopback-deployment attempt {attempt} failed after "
                                            f"{exc.wall:.0f} s (round {exc.rounds_done}): {exc.reason}[/]")
                continue
            result.update({"attempt": attempt, "failed_attempts": failures})
            self._done(task, result)
            return result
        raise RuntimeError(f"every loopback-deployment attempt failed: {failures}")

    def _loopback_once(self, folder: Path, on_round: Callable[[int, float], None]) -> dict[str, Any]:
        store = folder / "store"
        t_up = time.monotonic()
        try:
            with loopback_deployment(folder / "deploy", self.args.clients) as fed:
                up = time.monotonic() - t_up
                renice_supernodes(folder / "deploy" / "deploy", self.args.deploy_nice)
                t0 = time.monotonic()
                with RoundWatcher(store, t0, on_round) as watch:
                    proc = fed.flwr_run(run_config_string(self.overrides, store), timeout=FLWR_RUN_TIMEOUT)
                wall = time.monotonic() - t0
                t_down = time.monotonic()
        finally:
            logs = folder / "deploy" / "deploy"
            if logs.is_dir():  # keep the SuperLink/SuperNode logs next to the flwr run log
                for log in logs.glob("*.log"):
                    shutil.copy2(log, folder / log.name)
        down = time.monotonic() - t_down
        self._check(proc, folder, wall, watch.rows)
        result = store_result(store, wall, watch.rows)
        starts = sum(log.read_text(encoding="utf-8", errors="replace").count("Start `flwr-clientapp` process")
                     for log in folder.glob("supernode*.log"))
        result.update({"deploy_up_s": round(up, 3), "deploy_down_s": round(down, 3), "clientapp_processes": starts,
                       "supernode_nice": self.args.deploy_nice})
        return result

    def _check(self, proc: Any, folder: Path, wall: float, rows: list[tuple[int, float, float]]) -> None:
        """``flwr run --stream`` exits 0 even when the ServerApp raised: look for the store line too."""
        (folder / "flwr-run.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr, encoding="utf-8")
        if proc.returncode != 0 or "store written to" not in proc.stdout:
            text = proc.stdout + proc.stderr
            lines = [ln for ln in text.splitlines() if "NodeFailure" in ln or "Error:" in ln or "ERROR" in ln]
            reason = lines[0].strip() if lines else text[-500:]
            log = folder / "superlink.log"
            locked = log.is_file() and "database is locked" in log.read_text(encoding="utf-8", errors="replace")
            raise FlowerRunFailed(f"exit {proc.returncode}: {reason} (log: {folder / 'flwr-run.log'})", wall,
                                  rows[-1][0] if rows else -1, locked)

    # (e)
    def flower_floor(self) -> dict[str, Any]:
        """The job's message pattern on the same loopback deployment, answered at once by a NumPy ClientApp."""
        task, _ = self._bar("flower-floor")
        folder = self.work / "flower-floor"
        with loopback_deployment(folder / "deploy", self.args.clients) as fed:
            renice_supernodes(folder / "deploy" / "deploy", self.args.deploy_nice)
            t0 = time.monotonic()
            proc = subprocess.run(["flwr", "run", str(FLOWER_FLOOR_APP), fed.connection, "--stream", "--run-config",
                                   f"num-rounds={self.args.rounds}"], env=fed.env, cwd=FLOWER_FLOOR_APP,
                                  capture_output=True, text=True, timeout=FLWR_RUN_TIMEOUT, check=False)
            wall = time.monotonic() - t0
        (folder / "flwr-run.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr, encoding="utf-8")
        found = re.search(r"flower-floor: query ([0-9.]+) s; rounds ([0-9. ]+) s", proc.stdout)
        if proc.returncode != 0 or not found:
            tail = (proc.stdout + proc.stderr)[-500:]
            raise RuntimeError(f"flower-floor run failed (exit {proc.returncode}): {tail}")
        per_round = [float(x) for x in found.group(2).split()]
        result = {"wall_s": round(wall, 3), "startup_s": round(wall - sum(per_round), 3),
                  "rounds_s": round(sum(per_round), 3), "query_s": float(found.group(1)),
                  "per_round_s": per_round, "messages_per_round": 2 * self.args.clients,
                  "final_accuracy": None, "sha256": ""}
        self.progress.update(task, completed=self.args.rounds, acc=f"done in {wall:.1f} s")
        self.progress.stop_task(task)
        return result

    # (d)
    def floor(self) -> dict[str, Any]:
        store = self.work / "floor" / "store"
        task, on_round = self._bar("floor")
        cold_caches()
        t0 = time.monotonic()
        result = plain_fedavg(parse_run_config({**default_run_config(), **self.overrides, "store": str(store)}),
                              self.args.clients, store, t0, on_round)
        wall = time.monotonic() - t0
        rows = result.pop("rows")
        client_eval = result["client_eval_s"]
        out = {
            "wall_s": round(wall - client_eval, 3),
            **phases(wall - client_eval, [(r, t - c, a) for r, t, a, c in rows]),
            "wall_with_client_eval_s": round(wall, 3),
            **result,
        }
        self._done(task, out)
        return out


def plain_fedavg(cfg: RunConfig, num_partitions: int, store_path: Path, t0: float,
                 on_round: Callable[[int, float], None]) -> dict[str, Any]:
    """FedAvg of LoRA + head as one loop, with exactly the ClientApp's and strategy's arithmetic.

    Mirrors ``client_work.train_adapter`` (model reset, global state loaded, ``TrainSettings`` and the
    data-order seed), Flower's ``aggregate_arrayrecords`` (weights ``n_i / sum n`` as Python floats,
    ``acc = a_0 * w_0; acc += a_i * w_i`` in float32, in partition order) and ``run_fedavg``'s central
    evaluation. The ServerApp's client-side evaluation (each partition's share of the test split) is
    done too but timed apart, so the floor can be quoted with and without it.
    """
    data = load_task_data(cfg)
    plan = partition_plan(cfg, num_partitions)
    model = build_model(cfg, data.num_classes).model
    global_state = {k: v.detach().numpy().copy() for k, v in model.trainable_state(DEFAULT_ADAPTER).items()}
    examples = []
    for p in range(num_partitions):
        slices = plan.slices[p]
        examples.append(data.train.by_ids(sorted(i for s in range(len(slices)) for i in slices[s])))

    rows: list[tuple[int, float, float, float]] = []  # (round, seconds since t0, accuracy, client-eval s so far)
    client_eval_s = 0.0
    accuracy: list[float] = []

    def central(server_round: int) -> None:
        model = build_model(cfg, data.num_classes).model
        model.load_trainable_state(DEFAULT_ADAPTER, {k: torch.from_numpy(v) for k, v in global_state.items()})
        acc = evaluate(model, data.test.inputs, data.test.labels)["accuracy"]
        accuracy.append(acc)
        rows.append((server_round, time.monotonic() - t0, acc, client_eval_s))
        on_round(server_round, acc)

    def tensors(state: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(v.copy()) for k, v in state.items()}

    central(0)
    for server_round in range(1, cfg.num_rounds + 1):
        chosen = sample_clients(list(range(num_partitions)), cfg.fraction_train,
                                derive_seed(cfg.seed, "sample", ARTIFACT, server_round))
        replies: list[tuple[int, dict[str, np.ndarray]]] = []
        for p in chosen:
            model = build_model(cfg, data.num_classes).model
            model.activate([DEFAULT_ADAPTER], trainable=[DEFAULT_ADAPTER])
            model.load_trainable_state(DEFAULT_ADAPTER, tensors(global_state))
            settings = TrainSettings(
                epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr, optimizer=cfg.optimizer,
                seed=derive_seed(cfg.seed, cfg.method, ARTIFACT, server_round, p, "train-order"),
            )
            trained = train_supervised(model, examples[p].inputs, examples[p].labels, settings)
            state = {k: v.detach().numpy().copy() for k, v in model.trainable_state(DEFAULT_ADAPTER).items()}
            replies.append((trained.num_examples, state))
        total = sum(n for n, _ in replies)
        merged: dict[str, np.ndarray] = {}
        for n, state in replies:
            weight = n / total
            for key, value in state.items():
                if key not in merged:
                    merged[key] = value * weight
                else:
                    merged[key] += value * weight
        global_state = {k: np.asarray(v) for k, v in merged.items()}

        t_eval = time.monotonic()  # the ServerApp's client-side evaluation, timed apart
        for p in range(num_partitions):
            model = build_model(cfg, data.num_classes).model
            model.load_trainable_state(DEFAULT_ADAPTER, tensors(global_state))
            share = local_test_share(data, p, num_partitions, cfg.seed)
            evaluate(model, share.inputs, share.labels)
        client_eval_s += time.monotonic() - t_eval
        central(server_round)

    store = Store.create(store_path, {"task": cfg.task, "method": "floor"})
    final = {k: np.ascontiguousarray(v) for k, v in global_state.items()}
    sha = store.put_arrays(final, {"artifact": ARTIFACT, "method": cfg.method, "task": cfg.task})
    return {
        "client_eval_s": round(client_eval_s, 3),
        "final_accuracy": float(accuracy[-1]),
        "accuracy_per_round": [float(a) for a in accuracy],
        "sha256": sha,
        "rows": rows,
    }


def round_split(results: dict[str, dict[str, Any]], imports: dict[str, dict[str, Any]], args: argparse.Namespace,
                cores: int) -> dict[str, Any] | None:
    """One loopback deployment round, apportioned: Flower's floor (its own round, measured), the imports
    (one fresh ClientApp per train message, and per evaluate message after the last round, run ``cores``
    at a time), the compute (the plain loop's round, client-side evaluation included) and what is left
    (data loading, model building, serialisation, the store)."""
    deploy, flower, floor = (results.get(n, {}) for n in ("loopback-deployment", "flower-floor", "floor"))
    if not all(r.get("rounds_s") for r in (deploy, flower, floor)):
        return None
    rounds = args.rounds
    deployment_round = deploy["rounds_s"] / rounds
    flower_round = flower["rounds_s"] / rounds
    lora = imports["train/evaluate (LoRA)"]["import_s"]
    messages = (rounds + 1) / rounds  # per node and round: one train, plus one evaluate after the last round
    imports_round = messages * args.clients * lora / max(cores, 1)
    compute_round = (floor["rounds_s"] + floor.get("client_eval_s", 0.0)) / rounds
    return {
        "deployment_round_s": round(deployment_round, 3),
        "flower_floor_round_s": round(flower_round, 3),
        "imports_round_s": round(imports_round, 3),
        "compute_round_s": round(compute_round, 3),
        "rest_round_s": round(deployment_round - flower_round - imports_round - compute_round, 3),
        "model": f"imports = {messages:.2f} messages x {args.clients} nodes x {lora:.2f} s (LoRA handler imports) "
                 f"/ {cores} cores",
    }


# -- output -----------------------------------------------------------------------------------------
def plot(report: dict[str, Any], path: Path) -> None:
    """Wall seconds per runtime on a log axis (the deployment is tens of times the rest), ratio on each bar."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    results, job, machine = report["runtimes"], report["job"], report["machine"]
    names = [n for n in RUNTIMES if "wall_s" in results.get(n, {})]
    fig, ax = plt.subplots(figsize=(9, 5.2))
    xs = np.arange(len(names))
    walls = [results[n]["wall_s"] for n in names]
    colors = {"in-process": "#4c72b0", "ray-simulation": "#dd8452", "loopback-deployment": "#55a868",
              "floor": "#8c8c8c", "flower-floor": "#c44e52"}
    ax.bar(xs, walls, color=[colors[n] for n in names], width=0.6)
    for x, n in zip(xs, names, strict=True):
        r = results[n]
        text = f"{r['wall_s']:.1f} s"
        if r.get("ratio_to_floor") is not None:
            text += f"\n×{r['ratio_to_floor']:.2f} floor"
        if r.get("startup_s") is not None and r.get("rounds_s") is not None:
            text += f"\nstart-up {r['startup_s']:.0f} s, rounds {r['rounds_s']:.0f} s"
        ax.text(x, r["wall_s"] * 1.08, text, ha="center", va="bottom", fontsize=9)
    ax.set_xticks(xs, [LABELS[n] for n in names], fontsize=9)
    ax.set_yscale("log")
    ax.set_ylabel("wall seconds (log scale)")
    ax.set_ylim(min(walls) / 2, max(walls) * 5)
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.set_title(f"fedavg, {job['task']}, {job['num-partitions']} clients, {job['num-rounds']} round(s): wall seconds\n"
                 f"{machine['cores']} CPU cores, {machine['torch-threads-training']} torch thread per training call; "
                 f"same served sha256: {report['sha256_flower_runtimes_match']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary_table(results: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="runtime overhead")
    for col in ("runtime", "wall s", "× floor", "start-up s", "rounds s", "× floor (rounds)", "accuracy", "sha256"):
        table.add_column(col, justify="left" if col in ("runtime", "sha256") else "right")
    for name in RUNTIMES:
        r = results.get(name)
        if r is None:
            continue
        if "error" in r:
            table.add_row(name, "failed", "", "", "", "", "", r["error"][:40])
            continue

        def fmt(v: Any, spec: str = ".1f") -> str:
            return "" if v is None else format(v, spec)

        table.add_row(name, fmt(r["wall_s"]), fmt(r.get("ratio_to_floor"), ".2f"), fmt(r.get("startup_s")),
                      fmt(r.get("rounds_s")), fmt(r.get("rounds_ratio_to_floor"), ".2f"),
                      fmt(r["final_accuracy"], ".4f"), r["sha256"][:16])
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="num-rounds")
    parser.add_argument("--clients", type=int, default=10, help="nodes / SuperNodes / partitions")
    parser.add_argument("--task", default="fmnist-cnn", help="task run-config value")
    parser.add_argument("--seed", type=int, default=1, help="run seed")
    parser.add_argument("--skip-deploy", action="store_true", help="skip the loopback deployment")
    parser.add_argument("--deploy-attempts", type=int, default=2,
                        help="tries of the loopback deployment (a failed try is recorded, not hidden)")
    parser.add_argument("--deploy-nice", type=int, default=10,
                        help="niceness of the loopback SuperNodes and their ClientApps (0: leave as is)")
    parser.add_argument("--skip-sim", action="store_true", help="skip the Ray simulation")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="where the .json and .png go")
    parser.add_argument("--keep", action="store_true", help="keep the temporary stores and logs")
    parser.add_argument("--replot", action="store_true", help="only redraw the .png from the .json in --out")
    args = parser.parse_args(argv)
    if args.replot:
        plot(json.loads((args.out / "runtime_overhead.json").read_text(encoding="utf-8")),
             args.out / "runtime_overhead.png")
        return 0

    order = ["floor", "in-process"]
    if not args.skip_sim:
        order.append("ray-simulation")
    if not args.skip_deploy:
        order += ["loopback-deployment", "flower-floor"]

    info = machine_info()
    job = {**default_run_config(), **job_overrides(args), "num-partitions": args.clients}
    job.pop("store")
    console.rule(f"[bold]fedforget runtime overhead: fedavg, {args.task}, {args.clients} clients, {args.rounds} rounds")
    console.print(f"[dim]{info['cpu']}, {info['cores']} cores; python {info['python']}, flwr {info['flwr']}, "
                  f"torch {info['torch']}[/]")
    work = Path(tempfile.mkdtemp(prefix="fedforget-overhead-"))
    console.print(f"[dim]stores and logs under {work}[/]")

    results: dict[str, dict[str, Any]] = {}
    with Progress(SpinnerColumn(), TextColumn("[bold blue]{task.description:<20}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[acc]}"), TimeElapsedColumn(), console=console) as progress:
        bench = Bench(args, work, progress)
        runs = {"floor": bench.floor, "in-process": bench.in_process, "ray-simulation": bench.ray_simulation,
                "loopback-deployment": bench.loopback, "flower-floor": bench.flower_floor}
        for name in order:
            try:
                results[name] = runs[name]()
            except Exception as exc:  # report and go on: one broken runtime should not hide the others
                progress.console.print(f"[red]{name} failed:[/] {exc}")
                progress.console.print(traceback.format_exc(), markup=False, highlight=False)
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}

    floor = results.get("floor", {})
    for r in results.values():
        if "wall_s" in r and "wall_s" in floor:
            r["ratio_to_floor"] = round(r["wall_s"] / floor["wall_s"], 3)
            if r.get("rounds_s") and floor.get("rounds_s"):
                r["rounds_ratio_to_floor"] = round(r["rounds_s"] / floor["rounds_s"], 3)
    imports = import_costs()
    split = round_split(results, imports, args, info["cores"])
    artifact_runs = [n for n in order if n != "flower-floor"]
    flower = {n: results[n].get("sha256") for n in artifact_runs if n != "floor"}
    ok = all("sha256" in results[n] for n in artifact_runs)
    flower_match = ok and len(set(flower.values())) == 1
    floor_match = ok and flower_match and floor.get("sha256") in flower.values()

    notes = [
        "wall_s of in-process and floor: this process, after clearing every data/model cache (imports already done).",
        "wall_s of ray-simulation and loopback-deployment: the whole `flwr run --stream` (packaging, submission, "
        "for the simulation the local SuperLink and Ray start-up, ServerApp/ClientApp processes, shut-down); the "
        "loopback SuperLink and SuperNodes are started before the clock starts (deploy_up_s) and stopped after.",
        "startup_s: until the round-0 central evaluation is written to the store; rounds_s: from there to the last "
        "round's evaluation; tail_s: the rest (storing the artifact, exit). Taken by polling metrics.jsonl "
        "every 50 ms.",
        "floor wall_s excludes the client-side evaluation the ServerApp runs every round (each partition's share of "
        "the test split, i.e. one more pass over the test split per round); wall_with_client_eval_s includes it.",
        "The floor does not do fedforget's store bookkeeping of a run (manifest, backbone copy, ledger).",
        "loopback-deployment: the SuperNodes and their ClientApp processes run at nice supernode_nice so that the "
        "SuperLink is not starved (its SQLite state fails with 'database is locked' when it is, a reply is lost "
        "and the ServerApp waits out the round timeout); failed_attempts lists any try that failed anyway.",
    ]
    report = {
        "benchmark": "runtime_overhead",
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "job": job,
        "machine": info,
        "runtimes": {n: results[n] for n in RUNTIMES if n in results},
        "import_costs": imports,
        "round_split": split,
        "sha256_flower_runtimes_match": flower_match,
        "sha256_floor_matches": floor_match,
        "notes": notes,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / "runtime_overhead.json", args.out / "runtime_overhead.png"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    plot(report, png_path)

    console.print(summary_table(results))
    for message, cost in imports.items():
        heavy = ", ".join(cost["heavy_packages"]) or "-"
        console.print(f"imports for {message}: {cost['import_s']:.2f} s (heavy: {heavy})")
    if split:
        console.print(f"a deployment round: {split['deployment_round_s']:.1f} s = Flower floor "
                      f"{split['flower_floor_round_s']:.1f} s + imports ~{split['imports_round_s']:.1f} s + compute "
                      f"{split['compute_round_s']:.1f} s + rest {split['rest_round_s']:.1f} s")
    style = "green" if flower_match else "red"
    console.print(f"[{style}]Flower runtimes served the same artifact: {flower_match}[/]; "
                  f"the floor matches too: {floor_match}")
    console.print(f"wrote {json_path} and {png_path}")
    if args.keep:
        console.print(f"[dim]kept {work}[/]")
    else:
        shutil.rmtree(work, ignore_errors=True)
    failed = [n for n in order if "error" in results[n]]
    return 1 if failed or not flower_match else 0


if __name__ == "__main__":
    sys.exit(main())
