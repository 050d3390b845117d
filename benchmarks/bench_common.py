"""Helpers the benchmark scripts share: machine facts, quiet Flower logs, a round watcher."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import logging
import os
import platform
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import numpy as np
import psutil
import torch

from fedforget.store.store import METRICS
from fedforget.training.determinism import TRAIN_THREADS


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def source_commit() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it: a figure names the code
    that made it. Results under ``docs/results/`` are outputs, not code: a benchmark that has written
    one figure (or a run that follows an uncommitted one) is not dirty for that."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)docs/results"], cwd=root,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git checkout)"
    return head + ("+dirty" if dirty else "")


def last_change(path: str = "fedforget") -> str:
    """The last commit that changed ``path`` (relative to the checkout): the code a measurement of it read,
    when the checkout's own commit only added measurements."""
    root = Path(__file__).resolve().parent.parent
    try:
        return subprocess.run(["git", "log", "-1", "--format=%H", "--", path], cwd=root, capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git checkout)"


def machine_info() -> dict[str, Any]:
    return {
        "commit": source_commit(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cores-usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory-gib": round(psutil.virtual_memory().total / 2**30, 1),
        "torch-threads-default": torch.get_num_threads(),
        "torch-threads-training": TRAIN_THREADS,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "flwr": version("flwr"),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "ray": version("ray"),
        "peft": version("peft"),
        "transformers": version("transformers"),
        "timm": version("timm"),
    }


@contextmanager
def quiet_flower() -> Iterator[None]:
    """Flower's INFO lines (several per round) would drown the progress bars of in-process runs."""
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_config_string(overrides: dict[str, object], store: Path) -> str:
    """``flwr run --run-config`` text: TOML values (strings quoted)."""
    parts = [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    return " ".join(parts) + f" store={json.dumps(str(store))}"


class Poller:
    """Calls ``tick`` every ``poll`` seconds in a daemon thread while the ``with`` block runs, and
    once more on leaving it (so the last state is never missed)."""

    def __init__(self, poll: float) -> None:
        self.poll = poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def tick(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.tick()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            self.tick()


class RoundWatcher(Poller):
    """Polls a store's ``metrics.jsonl`` in a thread and notes when each round's row appears.

    A row is written right after the central evaluation of a round (round 0 = before training), so
    the first row marks the end of start-up (package, launch, data and model load, node discovery,
    initial evaluation) and the rows after it time the rounds themselves.
    """

    def __init__(self, store: Path, t0: float, on_round: Callable[[int, float], None], poll: float = 0.05) -> None:
        super().__init__(poll)
        self.path = store / METRICS
        self.t0 = t0
        self.on_round = on_round
        self.rows: list[tuple[int, float, float]] = []  # (round, seconds since t0, accuracy)

    def tick(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError:
            return
        lines = [line for line in text.split("\n")[:-1] if line.strip()]  # complete lines only
        now = time.monotonic() - self.t0
        for line in lines[len(self.rows):]:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                return
            accuracy = float(row.get("accuracy", "nan"))  # a chain method's phase rows carry none
            self.rows.append((int(row.get("round", len(self.rows))), now, accuracy))
            self.on_round(self.rows[-1][0], accuracy)


def paired_interval(diffs: list[float]) -> dict[str, Any]:
    """Mean, standard deviation and 95 % t-interval (n - 1 degrees of freedom) of paired differences."""
    import statistics

    from scipy.stats import t

    n, mean = len(diffs), statistics.mean(diffs)
    sd = statistics.stdev(diffs) if n > 1 else float("nan")
    half = float(t.ppf(0.975, n - 1)) * sd / n**0.5 if n > 1 else float("nan")
    return {"per-seed": [round(d, 2) for d in diffs], "mean": round(mean, 2), "sd": round(sd, 2),
            "ci95": [round(mean - half, 2), round(mean + half, 2)], "n": n, "interval": "t, n-1 df"}


def summarise_by_method(rows: list[dict[str, Any]], metrics: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per method (in first-seen order) its seeds and each metric's mean and SD over them (0.0 for one seed)."""
    import statistics

    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        runs = [r for r in rows if r["method"] == method]
        out.append({"method": method, "seeds": [r["seed"] for r in runs],
                    **{f"{m}-mean": statistics.fmean(r[m] for r in runs) for m in metrics},
                    **{f"{m}-sd": statistics.stdev(r[m] for r in runs) if len(runs) > 1 else 0.0 for m in metrics}})
    return out


def plot_paired(ax: Any, paired: dict[str, dict[str, Any]], targets: dict[float, str]) -> None:
    """Each paired difference as its mean with its 95 % interval, beside zero and the ``targets`` lines."""
    names = list(paired)
    for i, name in enumerate(names):
        d = paired[name]
        ax.errorbar(i, d["mean"], yerr=[[d["mean"] - d["ci95"][0]], [d["ci95"][1] - d["mean"]]], fmt="o", capsize=4)
    ax.axhline(0, color="grey", lw=0.8)
    for (level, label), style in zip(targets.items(), (("green", "--"), ("orange", ":")), strict=False):
        ax.axhline(level, color=style[0], lw=0.8, ls=style[1], label=label)
    ax.set_xticks(range(len(names)), names, fontsize=7, rotation=15)
    ax.set_ylabel("paired difference, points (95 % t-interval)")
    ax.legend(fontsize=7)
