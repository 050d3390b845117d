"""Forget requests applied per second by `fedforget serve`, this checkout beside an earlier commit, in one run.

Two services over loopback, each `fedforget serve` in its own process on its own copy of one trained store
(digits-mlp, FedSGT, 3 nodes; ``forget_service.CONFIG``): this checkout (``after``) and a ``git worktree`` of
``--before`` (default ``df08dbc``, one commit per forget request). Each request forgets one sample no request
named before, from caller threads of this process, each caller on its own keep-alive connection; the answer
counts when it is 201 and ``applied``. The levels run before, after, before, after, ... so that load from
other processes falls on both alike. Latency is submit → answer (the answer comes once the commit holding the
request is durable). Then, on ``after`` only, one ``POST /v1/forget-batches`` carrying every sample the levels
left (each its own request, one commit), timed end to end, and its cost per id.

The store holds 1,437 samples, so the batch is smaller than the 100,000 ids of an import; ``batch.per_id_ms``
times 100,000 is what such a batch would take if its cost per id held (a projection, labelled so in the JSON).

    python benchmarks/forget_service_throughput.py                       # 1, 10, 50 callers
    python benchmarks/forget_service_throughput.py --levels 1:10,50:100 --out /tmp/tp
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx
from bench_common import machine_info, quiet_flower
from forget_service import CONFIG, NODES, Service, pct

from fedforget.inprocess import run_in_process
from fedforget.service.tokens import create_token
from fedforget.store import Store
from fedforget.store.copy import copy_store

ROOT = Path(__file__).resolve().parent.parent
IMPORT_IDS = 100_000


def before_checkout(commit: str, where: Path) -> Path:
    """A ``git worktree`` of ``commit`` (removed at the end by the caller)."""
    subprocess.run(["git", "worktree", "add", "--detach", str(where), commit], cwd=ROOT, check=True,
                   capture_output=True, text=True)
    return where


class ServiceAt(Service):
    """`fedforget serve` from the source tree ``source`` (its ``fedforget`` first on the path)."""

    def __init__(self, store: Path, env: dict[str, str], source: Path) -> None:
        super().__init__(store, {**env, "PYTHONPATH": str(source)})
        self.source = source

    def start(self, timeout: float = 180.0) -> float:
        cwd = os.getcwd()
        os.chdir(self.source)  # ``python -m`` puts the working directory first on the path
        try:
            return super().start(timeout)
        finally:
            os.chdir(cwd)


def load_level(url: str, token: str, callers: int, samples: list[int], tag: str) -> dict[str, Any]:
    """One request per sample from ``callers`` threads, each on its own keep-alive connection (the standard
    library's ``http.client``: a light client, so that the machine's two cores go to the service)."""
    local = threading.local()
    host, port = url.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def one(sample: int) -> tuple[int | None, bool, float]:
        body = json.dumps({"idempotency_key": f"{tag}-{sample}", "samples": [sample]})
        began = time.perf_counter()
        for _attempt in range(2):  # a kept-alive connection the server closed is opened again, once
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(host, int(port), timeout=300)
            try:
                conn.request("POST", "/v1/forget-requests", body, headers)
                answer = conn.getresponse()
                data = json.loads(answer.read())
                break
            except (OSError, http.client.HTTPException):
                conn.close()
                local.conn = None
        else:
            return None, False, time.perf_counter() - began
        applied = answer.status == 201 and data["states"]["applied"]
        return answer.status, applied, time.perf_counter() - began

    began = time.perf_counter()
    with ThreadPoolExecutor(callers) as pool:
        results = list(pool.map(one, samples))
    wall = time.perf_counter() - began
    latencies = [r[2] * 1000 for r in results if r[1]]
    return {"callers": callers, "requests": len(results), "applied": len(latencies), "wall_s": round(wall, 3),
            "applied_per_s": round(len(latencies) / wall, 2) if wall else None,
            "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99), "max_ms": max(latencies, default=None)}


def batch(url: str, token: str, samples: list[int]) -> dict[str, Any]:
    began = time.perf_counter()
    answer = httpx.post(f"{url}/v1/forget-batches", json={"idempotency_key": "import", "samples": samples},
                        headers={"Authorization": f"Bearer {token}"}, timeout=3600)
    wall = time.perf_counter() - began
    body = answer.json()
    applied = sum(1 for r in body.get("requests", []) if r["ledger_request"] is not None and not r["no_op"])
    return {"ids": len(samples), "status": answer.status_code, "applied": applied, "refused": body.get("refused"),
            "wall_s": round(wall, 3), "per_id_ms": round(wall * 1000 / len(samples), 3),
            "projected_100k_s (per_id_ms x 100,000, not measured)": round(wall / len(samples) * IMPORT_IDS, 1)}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    sides = ("before", "after")
    callers = [lv["callers"] for lv in result["levels"]["after"]]
    width = 0.38
    for i, side in enumerate(sides):
        levels = result["levels"][side]
        xs = [j + (i - 0.5) * width for j in range(len(levels))]
        ax1.bar(xs, [lv["applied_per_s"] or 0 for lv in levels], width, label=f"{side} ({result['commits'][side][:7]})")
        ax2.plot(range(len(levels)), [lv["p50_ms"] for lv in levels], "o-", label=f"{side} p50")
        ax2.plot(range(len(levels)), [lv["p99_ms"] for lv in levels], "s--", label=f"{side} p99")
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(callers)), [str(c) for c in callers])
        ax.set_xlabel("concurrent callers")
    ax1.set_ylabel("forget requests applied / s")
    ax1.set_yscale("log")
    ax1.legend(fontsize=8)
    ax2.set_yscale("log")
    ax2.set_ylabel("submit → 201 (ms)")
    ax2.legend(fontsize=7)
    load = result["load_average_before"]
    fig.suptitle(f"fedforget serve, group commit vs one commit per request (2 shared cores, load {load[0]:.2f} "
                 f"at start; batch of {result['batch']['ids']} ids: {result['batch']['wall_s']:.2f} s)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1:40,10:200,50:600", help="CALLERS:REQUESTS,... (one sample each)")
    parser.add_argument("--before", default="df08dbc", help="the commit to compare with")
    parser.add_argument("--note", default="", help="what else ran on the machine meanwhile")
    parser.add_argument("--out", default=str(ROOT / "docs" / "results"))
    args = parser.parse_args()
    levels = [tuple(int(v) for v in part.split(":")) for part in args.levels.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "FEDFORGET_SECRETS": str(root / "secrets")}
        os.environ["FEDFORGET_SECRETS"] = env["FEDFORGET_SECRETS"]
        trained = root / "trained"
        with quiet_flower():
            run_in_process({**CONFIG, "store": str(trained)}, NODES)
        parts = Store.open(trained).manifest()["partitions"]
        pool = [s for p in sorted(parts) for sl in parts[p] for s in sl]
        needed = sum(n for _, n in levels)
        if needed >= len(pool):
            raise SystemExit(f"{needed} samples needed (and some left for the batch), the store has {len(pool)}")
        old = before_checkout(args.before, root / "before-src")
        commits = {"before": subprocess.run(["git", "rev-parse", "HEAD"], cwd=old, capture_output=True, text=True,
                                            check=True).stdout.strip(), "after": machine_info()["commit"]}
        services, tokens = {}, {}
        for side, source in (("before", old), ("after", ROOT)):
            store = copy_store(trained, root / side)
            tokens[side] = create_token(store, "bench", ["forget:write"])[0]
            services[side] = ServiceAt(store, env, source)
        results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        started = {side: svc.start() for side, svc in services.items()}
        try:
            used = 0
            for callers, count in levels:
                for side in ("before", "after"):
                    results[side].append(load_level(services[side].url, tokens[side], callers,
                                                    pool[used:used + count], f"{side}-{callers}"))
                    print(side, json.dumps(results[side][-1]), flush=True)
                used += count
            services["before"].stop()
            imported = batch(services["after"].url, tokens["after"], pool[used:])
            print("batch", json.dumps(imported), flush=True)
        finally:
            for svc in services.values():
                svc.stop()
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    before, after = results["before"], results["after"]
    ratio = [round(a["applied_per_s"] / b["applied_per_s"], 2) if b["applied_per_s"] else None
             for a, b in zip(after, before, strict=True)]
    result = {"machine": machine_info(), "commits": commits,
              "config": {**CONFIG, "nodes": NODES, "levels": args.levels, "before": args.before,
                         "store_samples": len(pool), "request": "one new sample per request, key per sample",
                         "callers": "threads of the benchmark process, one keep-alive http.client connection each"},
              "note": args.note, "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "service_start_s": started, "levels": results, "applied_per_s_after_over_before": ratio,
              "batch": imported}
    (out / "forget_service_throughput.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot(result, out / "forget_service_throughput.png")
    print(f"wrote {out / 'forget_service_throughput.json'} and .png; after/before applied/s: {ratio}")


if __name__ == "__main__":
    main()
