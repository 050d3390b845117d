"""Concurrent writers on a store trained by a user's own Flower app (examples/tabular-mlp, ``task =
"module:ATTR"``): ``fedforget forget --record`` processes and the forget service (``fedforget serve``, its own
process) forget the app's records at once. Every forget a caller was told succeeded is in the ledger exactly
once, naming the sample its record resolves to; a record asked for by both is forgotten by one request (the
other caller is told it was already forgotten); both SQLite files pass ``integrity_check``; ``purge --check``
is clean, and once retrained through the app what it serves is exact (``verify``'s comparison, its reference
trained through the app in this process, as ``verify --federation`` has the nodes do). The processes run from
the app's directory without its package on ``PYTHONPATH``: the store's manifest is what names the app. A third
party holding only the exported log cannot link a guessed record name to its sample id or its request's body."""

from __future__ import annotations

import json
import os
import re
import shutil
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
from fedforget.process_tree import kill_tree
from fedforget.service.requests_db import SERVICE_DB
from fedforget.store import Store
from fedforget.store.ledger import LEDGER
from fedforget.unlearning.verify import verify_store

from .service_helpers import bearer, tokens
from .test_example_tabular_mlp_app import EXAMPLE, reference_through_the_app, run_app

CLI_RECORDS = [f"node-{p}:patient-{p}-{i:03d}" for p in range(3) for i in (3, 4)]
SERVICE_RECORDS = [f"node-{p}:patient-{p}-{i:03d}" for p in range(3) for i in (10, 11, 12)]
BOTH = "node-2:patient-2-020"  # asked by a CLI process and by the service at once


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("app-conc")
    shutil.copytree(EXAMPLE / "data", home / "data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEDFORGET_HOME", str(home))
        mp.syspath_prepend(str(EXAMPLE))
        run_app(home / "runs" / "tabular-mlp")
    return home


def _env(home: Path, secrets: Path) -> dict[str, str]:
    """A user's shell in the app's directory: its FEDFORGET_HOME, the example's package not importable."""
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != EXAMPLE]
    return {**os.environ, "FEDFORGET_HOME": str(home), "FEDFORGET_SECRETS": str(secrets), "COLUMNS": "200",
            "PYTHONPATH": os.pathsep.join(path)}


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedforget.unlearning.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _wait_healthy(base: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"fedforget serve exited: {log.read_text()[-2000:]}"
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("fedforget serve did not answer /healthz")


def _integrity(path: Path) -> str:
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return " ".join(str(r[0]) for r in db.execute("PRAGMA integrity_check"))
    finally:
        db.close()


def _sample_of(home: Path, record: str) -> int:
    """The ledger's sample id of a record, as the store resolves it."""
    from fedforget.store.records import record_sample_ids

    return record_sample_ids(Store.open(home / "runs" / "tabular-mlp").manifest(), [record])[record]


def _exported_log(env: dict[str, str], home: Path, store: Path) -> str:
    out = home / "log.jsonl"
    proc = _cli(env, home, "log", "export", "--store", str(store), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out.read_text(encoding="utf-8")


def _third_party_cannot_link_a_guessed_record(export: str, store: Path, records: list[str]) -> None:
    """Holding only the exported log, a guess of a forgotten record's name (``node-1:patient-1-010``) finds
    neither its sample id (the unkeyed sha256 a guess computes) nor its service body's sha256; the log does
    hold the store's keyed sample ids (positive control: the search would find them)."""
    from fedforget.core.record_ids import local_sample_id, parse_record

    numbers = set(re.findall(r"\d{6,}", export))
    keyed = {_sample_of(store.parents[1], r) for r in records}
    assert {str(s) for s in keyed} <= numbers  # what the log holds: the keyed ids
    guessed = {str(local_sample_id(*parse_record(r))) for r in records}
    assert not guessed & numbers
    db = sqlite3.connect(f"{(store / SERVICE_DB).absolute().as_uri()}?mode=ro", uri=True)
    try:
        bodies = [b for (b,) in db.execute("SELECT body_sha256 FROM requests")]
    finally:
        db.close()
    assert bodies and not any(b in export for b in bodies)  # a guessed body's sha256 is not in the log either
    assert export.count("body-sha256") >= len(bodies)  # the log does carry each body's (keyed) digest


def test_concurrent_cli_and_service_forgets_on_a_user_app_store_are_each_in_the_ledger_once(trained, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(trained, home)
    store = home / "runs" / "tabular-mlp"
    env = _env(home, tmp_path / "secrets")
    os.environ["FEDFORGET_SECRETS"] = env["FEDFORGET_SECRETS"]
    try:
        token = tokens(store)["forget:write"]
    finally:
        del os.environ["FEDFORGET_SECRETS"]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        server = subprocess.Popen([sys.executable, "-m", "fedforget.unlearning.cli", "serve", "--store",
                                   str(store), "--port", str(port)], env=env, cwd=home, stdout=subprocess.DEVNULL,
                                  stderr=sink)
    confirmed: dict[int, list[str]] = {}  # ledger request -> the records its caller was told it forgot
    already: list[str] = []  # records a caller was told were forgotten before
    errors: list[str] = []
    lock = threading.Lock()

    def confirm(request: int | None, record: str, who: str) -> None:
        with lock:
            if request is None:
                already.append(record)
            elif request in confirmed:
                errors.append(f"request {request} confirmed to {who} for {record} and before for {confirmed[request]}")
            else:
                confirmed[request] = [record]

    def forget_by_cli(record: str) -> None:
        proc = _cli(env, home, "forget", "--store", str(store), "--record", record, "--json")
        if proc.returncode != 0:
            errors.append(f"cli forget {record} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
            return
        confirm(json.loads(proc.stdout)["request"], record, "the CLI")

    def forget_by_service(record: str) -> None:
        reply = httpx.post(f"{base}/v1/forget-requests", headers=bearer(token), timeout=120,
                           json={"idempotency_key": f"k-{record}", "records": [record]})
        if reply.status_code not in (200, 201):
            errors.append(f"service {reply.status_code} for {record}: {reply.text[:300]}")
            return
        body = reply.json()
        confirm(None if body.get("no_op") else body["ledger_request"], record, "the service")

    try:
        _wait_healthy(base, server, log)
        with ThreadPoolExecutor(6) as pool:
            jobs = [pool.submit(forget_by_cli, r) for r in [*CLI_RECORDS, BOTH]]
            jobs += [pool.submit(forget_by_service, r) for r in [*SERVICE_RECORDS, BOTH]]
            for job in jobs:
                job.result()
    finally:
        kill_tree(server.pid, timeout=30)  # SIGTERM, then SIGKILL if it hangs
        server.wait()
    assert server.returncode in (0, -15), log.read_text()[-3000:]
    assert not errors, errors[:5]
    assert already == [BOTH], (already, confirmed)  # the record both asked for: one request, one "already"
    assert sorted(r for rs in confirmed.values() for r in rs) == sorted([*CLI_RECORDS, *SERVICE_RECORDS, BOTH])

    assert all(_integrity(store / name) == "ok" for name in (LEDGER, SERVICE_DB))
    db = sqlite3.connect(f"{(store / LEDGER).absolute().as_uri()}?mode=ro", uri=True)
    try:
        rows = {int(i): json.loads(spec) for i, spec in db.execute("SELECT id, spec FROM requests")}
        forgotten = [(int(s), int(r)) for s, r in db.execute("SELECT sample, request FROM forgotten")]
    finally:
        db.close()
    assert sorted(rows) == sorted(confirmed)  # none lost, none doubled, none the callers were not told of
    by_sample = dict(forgotten)
    assert len(by_sample) == len(forgotten)  # a sample is forgotten by one request
    for request, (record,) in confirmed.items():
        sample = _sample_of(home, record)
        assert rows[request]["samples"] == [sample] and by_sample[sample] == request, (request, record)

    _third_party_cannot_link_a_guessed_record(_exported_log(env, home, store), store,
                                              [*CLI_RECORDS, *SERVICE_RECORDS])
    check = _cli(env, home, "purge", "--store", str(store), "--check", "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["clean"], check.stdout + check.stderr
    with pytest.MonkeyPatch.context() as mp:  # the retrain through the app itself, in this process
        mp.setenv("FEDFORGET_HOME", str(home))
        mp.syspath_prepend(str(EXAMPLE))
        run_app(store, action="retrain")
    refused = _cli(env, home, "verify", "--store", str(store))  # the nodes' own records: only through them
    assert refused.returncode == 2 and "--federation" in refused.stderr, refused.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEDFORGET_HOME", str(home))
        mp.syspath_prepend(str(EXAMPLE))
        report = verify_store(Store.open(store), reference=reference_through_the_app)
        # negative control: a reference whose node 2 kept one forgotten record differs from what is served
        kept = verify_store(Store.open(store), reference=lambda st, wd, gone: reference_through_the_app(
            st, wd, {**gone, 2: sorted(gone[2])[1:]}))
    assert report["exact"] is True, report
    assert kept["exact"] is False, kept
    check = _cli(env, home, "purge", "--store", str(store), "--check", "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["clean"], check.stdout + check.stderr
