"""Nothing confirmed is lost: the forget service under many callers, CLI forgets and a retrain, all on one
store at once, each in its own process.

Every forget a caller was told succeeded (a ledger request id from the service or from ``fedforget forget
--json``) must end in the ledger exactly once, naming what it forgot, and both SQLite files must pass
``PRAGMA integrity_check``. A loss names the request ids that went missing. No timing is asserted: the soak
is bounded by a deadline and a number of requests, and it stops every process it started.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from fedforget.launch import free_port
from fedforget.service.requests_db import SERVICE_DB
from fedforget.store.ledger import LEDGER

from .helpers import copy_store
from .service_helpers import bearer, tokens, train_service_store

CALLERS = 12
CLI_WORKERS = 2
#: the soak's own bound: callers stop submitting at this deadline (the retrain is awaited after it)
SOAK_SECONDS = 60
REQUESTS_PER_CALLER = 12
CLI_FORGETS_PER_WORKER = 6

RETRAIN = """
import json, sys
from fedforget.core.config import stored_run_config
from fedforget.inprocess import run_in_process
from fedforget.store import Store
store = Store.open(sys.argv[1])
config = stored_run_config(store.manifest()["config"])
config.update(action="retrain", store=sys.argv[1])
run_in_process(config, int(store.manifest()["num-partitions"]))
print("retrained", flush=True)
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("soak") / "store")


def _integrity(path: Path) -> str:
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return " ".join(str(r[0]) for r in db.execute("PRAGMA integrity_check"))
    finally:
        db.close()


def _wait_healthy(base: str, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"fedforget serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("fedforget serve did not answer /healthz")


def _sample_ids(store: Path) -> list[int]:
    db = sqlite3.connect(f"{(store / LEDGER).absolute().as_uri()}?mode=ro", uri=True)
    try:
        return [int(r[0]) for r in db.execute("SELECT sample FROM samples ORDER BY sample")]
    finally:
        db.close()


def test_every_confirmed_forget_is_in_the_ledger_once_under_concurrent_service_cli_and_retrain(trained, tmp_path):
    store = copy_store(trained, tmp_path).root
    env = {**os.environ, "FEDFORGET_SECRETS": str(tmp_path / "secrets"), "COLUMNS": "200"}
    os.environ["FEDFORGET_SECRETS"] = env["FEDFORGET_SECRETS"]
    try:
        token = tokens(store)["all"]
    finally:
        del os.environ["FEDFORGET_SECRETS"]
    samples = _sample_ids(store)
    service_share = samples[: CALLERS * REQUESTS_PER_CALLER]
    cli_share = samples[len(service_share): len(service_share) + CLI_WORKERS * CLI_FORGETS_PER_WORKER + 1]
    cli_share, spare = cli_share[:-1], cli_share[-1]
    assert len(cli_share) == CLI_WORKERS * CLI_FORGETS_PER_WORKER, "the store holds too few samples for the soak"

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server_log = tmp_path / "serve.log"
    server = subprocess.Popen([sys.executable, "-m", "fedforget.unlearning.cli", "serve", "--store", str(store),
                               "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=server_log.open("w"))
    retrain = None
    confirmed: dict[int, list[int]] = {}  # ledger request id -> the samples its caller asked to forget
    duplicates: list[str] = []
    errors: list[str] = []
    lock = threading.Lock()

    def confirm(request: int | None, asked: list[int], who: str) -> None:
        if request is None:
            return
        with lock:
            if request in confirmed and confirmed[request] != asked:
                duplicates.append(f"request {request} confirmed to {who} for {asked} and earlier for "
                                  f"{confirmed[request]}")
            confirmed[request] = asked

    deadline = time.monotonic() + SOAK_SECONDS

    def caller(n: int) -> None:
        with httpx.Client(base_url=base, headers=bearer(token), timeout=120) as http:
            for i, sample in enumerate(service_share[n::CALLERS]):
                if time.monotonic() > deadline:
                    return
                reply = http.post("/v1/forget-requests", json={"idempotency_key": f"soak-{n}-{i}",
                                                               "samples": [sample]})
                if reply.status_code not in (200, 201):
                    errors.append(f"service {reply.status_code}: {reply.text[:300]}")
                    continue
                confirm(reply.json()["ledger_request"], [sample], f"caller {n}")
                http.get("/v1/status")  # a read beside every write: reads must never undo a writer's lock
                http.get("/v1/forget-requests", params={"limit": 5})

    def cli_worker(n: int) -> None:
        for sample in cli_share[n::CLI_WORKERS]:
            if time.monotonic() > deadline:
                return
            proc = subprocess.run([sys.executable, "-m", "fedforget.unlearning.cli", "forget", "--store", str(store),
                                   "--sample", str(sample), "--json"], env=env, capture_output=True, text=True,
                                  timeout=300)
            if proc.returncode != 0:
                errors.append(f"cli forget {sample} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
                continue
            confirm(json.loads(proc.stdout)["request"], [sample], f"cli worker {n}")

    try:
        _wait_healthy(base, server, server_log, time.monotonic() + 120)
        first = httpx.post(f"{base}/v1/forget-requests", headers=bearer(token), timeout=120,
                           json={"idempotency_key": "soak-first", "samples": [spare]})
        assert first.status_code == 201, first.text  # so the retrain has something to rebuild
        confirm(first.json()["ledger_request"], [spare], "the first caller")
        retrain = subprocess.Popen([sys.executable, "-c", RETRAIN, str(store)], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        with ThreadPoolExecutor(CALLERS + CLI_WORKERS) as pool:
            futures = [pool.submit(caller, n) for n in range(CALLERS)]
            futures += [pool.submit(cli_worker, n) for n in range(CLI_WORKERS)]
            for future in futures:
                future.result()
        out, err = retrain.communicate(timeout=300)
        assert retrain.returncode == 0, err[-2000:]
    finally:
        for proc in (server, retrain):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    assert server.returncode in (0, -15), server_log.read_text()[-3000:]
    assert not errors, errors[:5]
    assert not duplicates, duplicates[:5]
    assert confirmed, "no forget was confirmed: the soak exercised nothing"
    integrity = {name: _integrity(store / name) for name in (LEDGER, SERVICE_DB)}
    assert all(v == "ok" for v in integrity.values()), integrity
    db = sqlite3.connect(f"{(store / LEDGER).absolute().as_uri()}?mode=ro", uri=True)
    try:
        rows = {int(i): json.loads(spec) for i, spec in db.execute("SELECT id, spec FROM requests")}
        forgotten = {int(s): int(r) for s, r in db.execute("SELECT sample, request FROM forgotten")}
    finally:
        db.close()
    lost = sorted(r for r in confirmed if r not in rows)
    assert not lost, f"{len(lost)} confirmed request(s) are not in the ledger: {lost}"
    wrong = sorted(r for r, asked in confirmed.items() if rows[r]["samples"] != asked)
    assert not wrong, f"confirmed request(s) whose ledger row names other samples: {wrong}"
    unforgotten = sorted(r for r, asked in confirmed.items() if any(forgotten.get(s) != r for s in asked))
    assert not unforgotten, f"confirmed request(s) whose samples are not forgotten by them: {unforgotten}"
    named = [s for spec in rows.values() for s in spec["samples"]]
    assert len(named) == len(set(named)), "a sample was forgotten by two requests"
