"""The forget service under load, over loopback: `fedforget serve` (uvicorn) in a subprocess.

Measures forget requests per second and the latency from submitting a request to its being applied
(the answer of ``POST /v1/forget-requests`` comes once the ledger committed it and the purge ran) at
several numbers of concurrent callers, the latency of ``POST /v1/predict`` (the first call loads the
served plan), and a ``kill -9`` of the service in the middle of a burst: after a restart (which
applies what a crash left accepted) and a retry of every unanswered key, the ledger must hold every
answered request exactly where the answer said, and no sample forgotten by two requests.

    python benchmarks/forget_service.py                                  # 1, 10, 100 callers
    python benchmarks/forget_service.py --levels 1:10,10:30,100:100 --burst 40 --out /tmp/svc
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx
from bench_common import machine_info, quiet_flower

from fedforget.inprocess import run_in_process
from fedforget.launch import free_port
from fedforget.service.tokens import create_token
from fedforget.store import Store

CONFIG = {"task": "digits-mlp", "method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 2,
          "lr": 0.02, "local-epochs": 2}
NODES = 3


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Service:
    """`fedforget serve` in a subprocess (its own process: kill -9 hits it alone)."""

    def __init__(self, store: Path, env: dict[str, str]) -> None:
        self.store, self.env, self.port = store, env, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> float:
        began = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "fedforget.unlearning.cli", "serve", "--store",
                                      str(self.store), "--port", str(self.port)], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while time.perf_counter() - began < timeout:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    return time.perf_counter() - began
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("fedforget serve did not start")

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            self.proc.wait(timeout=60)


def submit(url: str, token: str, key: str, sample: int) -> tuple[int | None, dict[str, Any] | None, float]:
    began = time.perf_counter()
    try:
        answer = httpx.post(f"{url}/v1/forget-requests", json={"idempotency_key": key, "samples": [sample]},
                            headers={"Authorization": f"Bearer {token}"}, timeout=120)
    except httpx.TransportError:
        return None, None, time.perf_counter() - began
    return answer.status_code, answer.json(), time.perf_counter() - began


def load_level(svc: Service, token: str, callers: int, samples: list[int], max_seconds: float) -> dict[str, Any]:
    """``len(samples)`` requests (one sample each) from ``callers`` threads; stops issuing after ``max_seconds``."""
    began = time.perf_counter()

    def one(sample: int) -> tuple[int | None, dict[str, Any] | None, float] | None:
        if time.perf_counter() - began > max_seconds:
            return None
        return submit(svc.url, token, f"load-{callers}-{sample}", sample)

    with ThreadPoolExecutor(callers) as pool:
        results = [r for r in pool.map(one, samples) if r is not None]
    wall = time.perf_counter() - began
    ok = [r for r in results if r[0] == 201 and r[1] and r[1]["states"]["applied"]]
    latencies = [r[2] * 1000 for r in ok]
    return {"callers": callers, "requests": len(results), "applied": len(ok), "wall_s": wall,
            "requests_per_s": len(ok) / wall if wall else None, "p50_ms": pct(latencies, 0.5),
            "p99_ms": pct(latencies, 0.99), "max_ms": max(latencies, default=None)}


def predict_latency(svc: Service, token: str, inputs: list[list[float]], calls: int) -> dict[str, Any]:
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        answer = httpx.post(f"{svc.url}/v1/predict", json={"inputs": inputs},
                            headers={"Authorization": f"Bearer {token}"}, timeout=120)
        answer.raise_for_status()
        times.append((time.perf_counter() - began) * 1000)
    warm = times[1:]
    return {"calls": calls, "batch": len(inputs), "first_ms": times[0], "p50_ms": pct(warm, 0.5),
            "p99_ms": pct(warm, 0.99)}


def kill_burst(svc: Service, token: str, samples: list[int], callers: int, kill_after: int) -> dict[str, Any]:
    """Submit a burst, ``kill -9`` the service once ``kill_after`` answers came, restart, retry the rest."""
    answered: dict[str, int] = {}
    began = time.perf_counter()
    with ThreadPoolExecutor(callers) as pool:
        futures = {pool.submit(submit, svc.url, token, f"burst-{s}", s): s for s in samples}
        killed_at = None
        while any(not f.done() for f in futures):
            done = [f for f in futures if f.done() and f.result()[0] == 201]
            if killed_at is None and len(done) >= kill_after:
                svc.stop(kill=True)
                killed_at = time.perf_counter() - began
            time.sleep(0.005)
        for future, sample in futures.items():
            code, body, _ = future.result()
            if code in (200, 201) and body:
                answered[f"burst-{sample}"] = body["ledger_request"]
    restart_s = svc.start()
    retried = {}
    for sample in samples:
        key = f"burst-{sample}"
        if key not in answered:
            code, body, _ = submit(svc.url, token, key, sample)
            retried[key] = (code, body["ledger_request"] if body else None)
    ledger = Store.open(svc.store).ledger()
    try:
        requests = {r["request"]: r for r in ledger.requests()}
        forgotten = dict(ledger.db.execute("SELECT sample, request FROM forgotten"))
    finally:
        ledger.close()
    lost = [k for k, rid in answered.items() if rid not in requests
            or requests[rid]["spec"]["samples"] != [int(k.split("-")[1])]]
    naming = {}
    for r in requests.values():
        for s in r["spec"]["samples"]:
            naming[s] = naming.get(s, 0) + 1
    doubled = [s for s in samples if naming.get(s, 0) > 1]
    return {"burst": len(samples), "callers": callers, "killed_after_answers": kill_after,
            "killed_at_s": killed_at, "answered_before_kill": len(answered), "restart_s": restart_s,
            "retried_after_restart": len(retried),
            "retries_answered": sum(1 for c, _ in retried.values() if c in (200, 201)),
            "answered_lost": len(lost), "applied_twice": len(doubled),
            "every_sample_forgotten_once": all(s in forgotten for s in samples) and not doubled}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = result["levels"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    x = [str(lv["callers"]) for lv in levels]
    ax1.bar(x, [lv["requests_per_s"] or 0 for lv in levels], color="#1565c0")
    ax1.set_xlabel("concurrent callers")
    ax1.set_ylabel("forget requests applied / s")
    ax2.plot(x, [lv["p50_ms"] for lv in levels], "o-", label="p50")
    ax2.plot(x, [lv["p99_ms"] for lv in levels], "s--", label="p99")
    ax2.set_yscale("log")
    ax2.set_xlabel("concurrent callers")
    ax2.set_ylabel("request → applied (ms)")
    ax2.legend()
    fig.suptitle("fedforget serve on loopback (digits-mlp FedSGT store; machine busy, see JSON)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="1:20,10:60,100:200", help="CALLERS:REQUESTS,... (one sample each)")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="stop issuing a level's requests after")
    parser.add_argument("--predict", type=int, default=30, help="predict calls (8 inputs each)")
    parser.add_argument("--burst", type=int, default=60, help="requests in the kill -9 burst")
    parser.add_argument("--burst-callers", type=int, default=20)
    parser.add_argument("--note", default="", help="what else ran on the machine meanwhile")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" / "results"))
    args = parser.parse_args()
    levels = [tuple(int(v) for v in part.split(":")) for part in args.levels.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "FEDFORGET_SECRETS": str(root / "secrets")}
        os.environ["FEDFORGET_SECRETS"] = env["FEDFORGET_SECRETS"]
        store = root / "store"
        with quiet_flower():
            run_in_process({**CONFIG, "store": str(store)}, NODES)
        writer = create_token(store, "bench", ["forget:write"])[0]
        predictor = create_token(store, "bench-predict", ["predict"])[0]
        parts = Store.open(store).manifest()["partitions"]
        pool = [s for p in sorted(parts) for sl in parts[p] for s in sl]
        needed = sum(n for _, n in levels) + args.burst
        if needed > len(pool):
            raise SystemExit(f"{needed} samples needed, the store has {len(pool)}")
        from fedforget.tasks.registry import load_task_data
        from fedforget.unlearning.evaluate import stored_config

        inputs = load_task_data(stored_config(Store.open(store))).test.inputs[0][:8].tolist()
        svc = Service(store, env)
        start_s = svc.start()
        try:
            predict = predict_latency(svc, predictor, inputs, args.predict)  # before forgets empty the plan
            results, used = [], 0
            for callers, count in levels:
                results.append(load_level(svc, writer, callers, pool[used:used + count], args.max_seconds))
                used += count
                print(json.dumps(results[-1]), flush=True)
            crash = kill_burst(svc, writer, pool[used:used + args.burst], args.burst_callers, args.burst // 4)
            print(json.dumps(crash), flush=True)
        finally:
            svc.stop()
    result = {"machine": machine_info(), "config": {**CONFIG, "nodes": NODES, "levels": args.levels,
                                                     "max_seconds": args.max_seconds, "predict_calls": args.predict,
                                                     "burst": args.burst, "burst_callers": args.burst_callers},
              "note": args.note, "service_start_s": start_s, "levels": results, "predict": predict,
              "kill9": crash}
    (out / "forget_service.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot(result, out / "forget_service.png")
    print(f"wrote {out / 'forget_service.json'} and .png")


if __name__ == "__main__":
    main()
