"""Does the HO-SFL client learn on the language model? ``rt-smollm``, tuned on validation, paired seeds.

The comparison of ``benchmarks/hosfl_learns.py`` on SmolLM2-135M (cut after decoder layer 3, so the
client holds the embeddings and layers 0–2 with their LoRA, d_c = 46,080; the server the other 27
layers, their LoRA and the head). 10 IID clients, 3 a round, batch 16, the server's default Adam step.
HO-SFL perturbs the LoRA ``B`` factors of the client's layers (``hosfl.zo-params=lora_B``, 18,432
coordinates) with P = 20 directions a round; P and the subspace are fixed up front, not searched.

1. Tuning, on ``rt-smollm-val`` (rt-smollm's training rows cut 4:1 into client rows and validation rows;
   the test split is never read): the same budget per method, ``len(GRID[m])`` client step sizes
   (and HO-SFL's momentum) x the validation seeds.
2. Final, on ``rt-smollm`` (train-size rows, evaluated on test-size test rows), seeds 1..S: arms hosfl,
   the frozen client (``hosfl.client-lr=0``), sfl (local epochs with the same number of training samples)
   and zo-sfl; paired differences per seed with a 95 % t-interval (n - 1 degrees of freedom).

Runs go to a pool of worker processes (``--workers``), each a real in-process Flower run
(:func:`fedforget.inprocess.run_in_process`); forwards run on CUDA when one is visible
(``hosfl.device=auto``). The tuning runs go first (only for methods with a final arm), the frozen arm
fills the workers they leave idle, then the final runs go seed by seed; the result JSON is rewritten
after every run (``partial`` until done), so a run cut short still reports every finished seed.

    python benchmarks/hosfl_learns_llm.py --workers 16 --rounds 150       # a GPU machine, 16 cores
    python benchmarks/hosfl_learns_llm.py --workers 2 --rounds 30 --train-size 1000 --test-size 300 \\
        --arms hosfl,hosfl-frozen,sfl --out docs/results/hosfl_learns_llm_cpu.json   # 2 CPU cores: ~2 h
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_common import machine_info, paired_interval, plot_paired, quiet_flower  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = 10
BASE: dict[str, Any] = {"task": "rt-smollm", "hosfl.cut": 3, "partitioner": "iid", "hosfl.clients-per-round": 3,
                        "batch-size": 16, "hosfl.mu": 1e-3, "hosfl.perturbations": 20, "hosfl.zo-params": "lora_B"}
#: The search space per method, (client-lr, client-momentum): the same number of settings for each.
GRID: dict[str, list[tuple[float, float]]] = {
    "hosfl": [(0.01, 0.0), (0.03, 0.0), (0.01, 0.9), (0.03, 0.9)],  # effective steps 0.01, 0.03, 0.1, 0.3
    "sfl": [(0.01, 0.0), (0.03, 0.0), (0.1, 0.0), (0.3, 0.0)],
    "zo-sfl": [(1e-4, 0.0), (3e-4, 0.0), (1e-3, 0.0), (3e-3, 0.0)],  # one direction in all of d_c: small steps
}
VAL_SEEDS = (11,)
PAIRS = {"hosfl-minus-frozen": ("hosfl", "hosfl-frozen"), "sfl-minus-frozen": ("sfl", "hosfl-frozen"),
         "hosfl-minus-sfl": ("hosfl", "sfl"), "zo-sfl-minus-frozen": ("zo-sfl", "hosfl-frozen")}


def run_config(method: str, lr: float, beta: float, rounds: int, per_client: int, batch: int) -> dict[str, Any]:
    """One run's overrides: SFL makes a local epoch a round, so it gets the samples of ``rounds`` one-batch
    rounds of the ZO methods."""
    cfg: dict[str, Any] = {"method": method, "hosfl.client-lr": lr, "local-epochs": 1}
    if method == "hosfl":
        cfg["hosfl.client-momentum"] = beta
    n = max(1, round(rounds * batch / per_client)) if method == "sfl" else rounds
    cfg.update({"num-rounds": n, "hosfl.eval-every": n})
    return cfg


def one(config: dict[str, Any], result: Path) -> None:
    """Run one configuration in this process and write what it measured to ``result``."""
    from fedforget.inprocess import run_in_process
    from fedforget.methods.hosfl.plan import summarize_traffic
    from fedforget.store import Store

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hosfl-llm-") as tmp:
        with quiet_flower():
            run_in_process({**config, "store": str(Path(tmp) / "store")}, CLIENTS)
        store = Store.open(Path(tmp) / "store")
        rows, split = store.metrics(), store.manifest()["split"]
    traffic = summarize_traffic(rows)
    method, client_rounds = config["method"], traffic["client-rounds"]
    steps = sum(int(r.get("local-steps", 0)) * len(r.get("forward-ok", [])) for r in rows) if method == "sfl" else 0
    forwards = {"hosfl": client_rounds * (1 + int(config["hosfl.perturbations"])), "zo-sfl": 2 * client_rounds,
                "sfl": steps}[method]
    final = [r for r in rows if "accuracy" in r][-1]
    total = traffic["total"]
    result.write_text(json.dumps({
        "accuracy": final["accuracy"], "loss": final.get("loss"), "rounds": config["num-rounds"],
        "samples": final.get("samples-total", 0),
        "client-rounds": client_rounds, "client-forwards": forwards, "client-backwards": steps,
        "bytes-up": sum(total["up"].values()), "bytes-down": sum(total["down"].values()),
        "bytes-up-aggregation": total["up"]["aggregation"], "d_c": split["d_c"], "zo-dim": split.get("zo-dim"),
        "seconds": round(time.monotonic() - t0, 1)}) + "\n", encoding="utf-8")


class Benchmark:
    """The job queue, the results so far, and the JSON they are written to."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        earlier = json.loads(Path(args.resume).read_text(encoding="utf-8")) if args.resume else None
        tuned = {key.split("/")[1] for key in (earlier or {}).get("runs", {}) if key.startswith("tune/")}
        # a method is tuned when it has a final arm (or was tuned by the run this one resumes)
        self.grid = {m: g[: args.grid_size] for m, g in GRID.items() if m in args.arms or m in tuned}
        self.seeds = tuple(range(1, args.seeds + 1))
        self.lock = threading.Lock()
        self.res: dict[str, Any] = {
            "benchmark": "hosfl_learns_llm", "partial": True, "machine": self._machine(),
            "config": {**BASE, "clients": CLIENTS, "rounds": args.rounds, "train-size": args.train_size,
                       "test-size": args.test_size, "validation-task": "rt-smollm-val",
                       "validation-train-size": args.train_size, "workers": args.workers},
            "grid": {m: [list(g) for g in grid] for m, grid in self.grid.items()},
            "validation-seeds": list(VAL_SEEDS), "seeds": list(self.seeds), "final-arms": list(args.arms), "runs": {}}
        if earlier is not None:  # finished runs of an earlier invocation with the same set-up are kept, not rerun
            if earlier["config"] | {"workers": args.workers} != self.res["config"]:
                raise SystemExit(f"--resume {args.resume}: its config differs from this invocation's; "
                                 "pass the same --rounds, --train-size and --test-size")
            self.res["runs"] = earlier["runs"]
            self.res["earlier-machines"] = [*earlier.get("earlier-machines", []), earlier["machine"]]

    def _machine(self) -> dict[str, Any]:
        import torch

        info = machine_info()
        if self.args.commit:  # a copy of the checkout without git (a lent GPU machine) names its commit here
            info["commit"] = self.args.commit
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
        return info

    def tuning_jobs(self) -> list[tuple[str, dict[str, Any]]]:
        per_client = int(self.args.train_size * 0.8) // CLIENTS
        return [(f"tune/{m}/lr={lr}/beta={beta}/{seed}",
                 {**BASE, **run_config(m, lr, beta, self.args.rounds, per_client, BASE["batch-size"]),
                  "task": "rt-smollm-val", "train-size": self.args.train_size, "seed": seed})
                for m, grid in self.grid.items() for lr, beta in grid for seed in VAL_SEEDS]

    def final_jobs(self, arms: dict[str, tuple[str, float, float]]) -> list[tuple[str, dict[str, Any]]]:
        per_client = self.args.train_size // CLIENTS
        return [(f"final/{arm}/{seed}",
                 {**BASE, **run_config(m, lr, beta, self.args.rounds, per_client, BASE["batch-size"]),
                  "train-size": self.args.train_size, "test-size": self.args.test_size, "seed": seed})
                for seed in self.seeds for arm, (m, lr, beta) in arms.items()]

    def chosen(self) -> dict[str, dict[str, float]]:
        out = {}
        for method, grid in self.grid.items():
            scores = []
            for lr, beta in grid:
                accs = [self.res["runs"][f"tune/{method}/lr={lr}/beta={beta}/{s}"]["accuracy"] for s in VAL_SEEDS]
                scores.append((statistics.mean(accs), -lr, lr, beta))
            best = max(scores)  # ties: the smaller step
            out[method] = {"client-lr": best[2], "client-momentum": best[3], "validation": round(best[0], 4)}
        return out

    def record(self, key: str, result: dict[str, Any], config: dict[str, Any]) -> None:
        with self.lock:
            self.res["runs"][key] = {**result, "config": config}
            self.summarise()
            self.save()

    def summarise(self) -> None:
        runs = self.res["runs"]
        arms = ("hosfl", "hosfl-frozen", "sfl", "zo-sfl")
        seeds = [s for s in self.seeds if all(f"final/{a}/{s}" in runs for a in self.args.arms)]
        self.res["seeds-complete"] = seeds
        self.res["arms"] = {}
        for arm in arms:
            done = [s for s in self.seeds if f"final/{arm}/{s}" in runs]
            if done:
                accs = [runs[f"final/{arm}/{s}"]["accuracy"] for s in done]
                first = runs[f"final/{arm}/{done[0]}"]
                self.res["arms"][arm] = {
                    "seeds": done, "mean": round(statistics.mean(accs), 4), "min": min(accs), "max": max(accs),
                    "budget-per-run": {k: first[k] for k in ("rounds", "samples", "client-rounds", "client-forwards",
                                                            "client-backwards", "bytes-up", "bytes-down",
                                                            "bytes-up-aggregation", "seconds")}}
        self.res["paired-points"] = {}
        for name, (a, b) in PAIRS.items():
            both = [s for s in self.seeds if f"final/{a}/{s}" in runs and f"final/{b}/{s}" in runs]
            if len(both) > 1:
                self.res["paired-points"][name] = paired_interval(
                    [100 * (runs[f"final/{a}/{s}"]["accuracy"] - runs[f"final/{b}/{s}"]["accuracy"]) for s in both])

    def save(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.res, indent=1) + "\n", encoding="utf-8")
        tmp.replace(self.out)


def _launch(key: str, config: dict[str, Any], scratch: Path, threads: int) -> dict[str, Any]:
    result = scratch / (key.replace("/", "_") + ".json")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, __file__, "one", "--config", json.dumps(config), "--result", str(result)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not result.is_file():
        raise RuntimeError(f"{key} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(result.read_text())


def drive(args: argparse.Namespace) -> None:
    bench = Benchmark(args)
    t0 = time.monotonic()
    tuning = bench.tuning_jobs()
    frozen = bench.final_jobs({"hosfl-frozen": ("hosfl", 0.0, 0.0)} if "hosfl-frozen" in args.arms else {})
    queue = [job for job in tuning if job[0] not in bench.res["runs"]]
    # the frozen arm needs no tuning: it fills workers the tuning leaves idle, and otherwise runs seed by seed
    # beside the tuned arms, so a run cut short ends with complete seeds
    filler = [job for job in frozen if job[0] not in bench.res["runs"]]
    threads = max(1, (os.cpu_count() or 2) // max(1, args.workers))
    running: dict[Future[dict[str, Any]], tuple[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="hosfl-llm-jobs-") as scratch, \
            ThreadPoolExecutor(max_workers=args.workers) as pool:
        while True:
            if "chosen" not in bench.res and all(k in bench.res["runs"] for k, _ in tuning):
                chosen = bench.chosen()
                bench.res["chosen"] = chosen
                later = bench.final_jobs({m: (m, c["client-lr"], c["client-momentum"]) for m, c in chosen.items()
                                          if m in args.arms})
                queue.extend(sorted((job for job in later + filler if job[0] not in bench.res["runs"]),
                                    key=lambda job: int(job[0].rsplit("/", 1)[1])))  # seed-major
                filler = []
                print(f"chosen on validation: {json.dumps(chosen)}", flush=True)
            while (queue or filler) and len(running) < args.workers and time.monotonic() - t0 < args.start_until_s:
                key, config = (queue or filler).pop(0)
                running[pool.submit(_launch, key, config, Path(scratch), threads)] = (key, config)
            if not running:
                break  # all done, or the start window closed
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                key, config = running.pop(fut)
                try:
                    bench.record(key, fut.result(), config)
                    run = bench.res["runs"][key]
                    print(f"[{time.monotonic() - t0:6.0f} s] {key}: accuracy {run['accuracy']:.4f} "
                          f"({run['seconds']:.0f} s)", flush=True)
                except RuntimeError as exc:
                    print(f"[{time.monotonic() - t0:6.0f} s] {exc}", flush=True)
                    bench.res.setdefault("failed", []).append(key)
    bench.res["partial"] = len(bench.res.get("seeds-complete", [])) < len(bench.seeds)
    bench.res["seconds"] = round(time.monotonic() - t0, 1)
    bench.save()
    plot(bench.res, bench.out.with_suffix(".png"))
    print(json.dumps({k: bench.res.get(k) for k in ("chosen", "arms", "paired-points")}, indent=1), flush=True)


def plot(res: dict[str, Any], path: Path) -> None:
    """Validation accuracy of every tuning setting, test accuracy per arm, and the paired differences."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for method, grid in res["grid"].items():
        keys = [f"tune/{method}/lr={lr}/beta={beta}/{VAL_SEEDS[0]}" for lr, beta in grid]
        pts = [(i, res["runs"][k]["accuracy"]) for i, k in enumerate(keys) if k in res["runs"]]
        axes[0].plot([i for i, _ in pts], [a for _, a in pts], "o-", label=method)
    axes[0].set_xticks(range(len(res["grid"]["hosfl"])), [f"setting {i + 1}" for i in range(len(res["grid"]["hosfl"]))],
                       fontsize=8)
    axes[0].set_ylabel("validation accuracy (rt-smollm-val)")
    axes[0].set_title("tuning: the grid of each method, in its order", fontsize=8)
    axes[0].legend(fontsize=7)
    arms = list(res.get("arms", {}))
    for i, arm in enumerate(arms):
        accs = [res["runs"][f"final/{arm}/{s}"]["accuracy"] for s in res["arms"][arm]["seeds"]]
        axes[1].scatter([i] * len(accs), accs, s=14, alpha=0.7)
        axes[1].bar(i, res["arms"][arm]["mean"], 0.6, alpha=0.35)
    axes[1].set_xticks(range(len(arms)), arms, fontsize=8)
    axes[1].set_ylabel("test accuracy (bars: mean; dots: seeds)")
    axes[1].set_ylim(0.4, 1)
    plot_paired(axes[2], res.get("paired-points", {}), {3: "+3 points (target for hosfl - frozen)"})
    if not res.get("paired-points"):
        axes[2].set_title("no paired seeds yet", fontsize=8)
    cfg = res["config"]
    fig.suptitle(f"rt-smollm cut {cfg['hosfl.cut']}, {cfg['rounds']} rounds, train {cfg['train-size']} / test "
                 f"{cfg['test-size']}, complete seeds {res.get('seeds-complete')}; steps tuned on rt-smollm-val "
                 f"({res['machine'].get('cuda') or 'CPU'})" + (" - partial" if res.get("partial") else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="part")
    single = sub.add_parser("one", help="one run (what a worker process does)")
    single.add_argument("--config", required=True)
    single.add_argument("--result", required=True)
    sub.add_parser("plot", help="redraw the PNG beside --out from its JSON")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--grid-size", type=int, default=len(GRID["hosfl"]), help="the first N settings per method")
    parser.add_argument("--start-until-s", type=float, default=float("inf"),
                        help="start no run after this many seconds (the JSON then says partial)")
    parser.add_argument("--arms", type=lambda text: tuple(text.split(",")),
                        default=("hosfl", "hosfl-frozen", "sfl", "zo-sfl"),
                        help="the final arms (comma-separated); a complete seed has all of them")
    parser.add_argument("--resume", default="", help="a result JSON whose finished runs to keep")
    parser.add_argument("--commit", default="", help="the commit this copy holds, where it has no .git")
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "hosfl_learns_llm.json"))
    args = parser.parse_args()
    if args.part == "one":
        one(json.loads(args.config), Path(args.result))
    elif args.part == "plot":
        plot(json.loads(Path(args.out).read_text(encoding="utf-8")), Path(args.out).with_suffix(".png"))
    else:
        drive(args)


if __name__ == "__main__":
    sys.exit(main())
