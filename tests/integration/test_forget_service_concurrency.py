"""The forget service beside the CLI on one store, over real HTTP (uvicorn on 127.0.0.1): concurrent
callers lose and double nothing, one idempotency key is one request, a crash between reserving a key
and applying it is finished once at the next start, and `fedforget serve` speaks HTTPS when told to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from fedforget.launch import free_port
from fedforget.service.app import create_app
from fedforget.service.requests_db import RequestsDB
from fedforget.store import Store
from fedforget.unlearning.forget import forget_request

from .service_helpers import Running, bearer, private_copy, self_signed, tokens, train_service_store


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("service-conc") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    return private_copy(trained, tmp_path)


def samples_of(store, count: int) -> list[int]:  # noqa: ANN001
    parts = Store.open(store).manifest()["partitions"]
    return [s for p in sorted(parts) for sl in parts[p] for s in sl][:count]


def ledger_view(store) -> tuple[list[dict], Counter]:  # noqa: ANN001
    ledger = Store.open(store).ledger()
    try:
        requests = ledger.requests()
        by_sample = Counter(r[0] for r in ledger.db.execute("SELECT sample FROM forgotten"))
    finally:
        ledger.close()
    return requests, by_sample


def test_concurrent_service_callers_and_cli_forgets_lose_and_double_nothing(store):
    tok = tokens(store)
    ids = samples_of(store, 14)
    mine, theirs = ids[:10], ids[10:]
    env = {**os.environ, "COLUMNS": "200"}
    with Running(store) as url:
        cli = [subprocess.Popen([sys.executable, "-m", "fedforget.unlearning.cli", "forget", "--store", str(store),
                                 "--sample", str(s), "--json"], env=env, stdout=subprocess.PIPE, text=True)
               for s in theirs]

        def post(sample: int) -> httpx.Response:
            return httpx.post(f"{url}/v1/forget-requests", json={"idempotency_key": f"k-{sample}",
                                                                  "samples": [sample]},
                              headers=bearer(tok["forget:write"]), timeout=120)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(post, mine))
        cli_out = [json.loads(p.communicate(timeout=300)[0]) for p in cli]
    assert [a.status_code for a in answers] == [201] * len(mine)
    requests, by_sample = ledger_view(store)
    assert len(requests) == len(ids)  # none lost, none doubled
    assert set(by_sample) == set(ids) and set(by_sample.values()) == {1}
    applied = [a.json()["ledger_request"] for a in answers] + [o["request"] for o in cli_out]
    assert sorted(applied) == [r["request"] for r in requests]
    for answer in answers:
        row = next(r for r in requests if r["request"] == answer.json()["ledger_request"])
        assert row["spec"]["samples"] == answer.json()["spec"]["samples"]


def test_one_idempotency_key_from_many_callers_at_once_is_one_request(store):
    tok = tokens(store)
    sample = samples_of(store, 1)[0]
    with Running(store) as url:
        def post(_: int) -> httpx.Response:
            return httpx.post(f"{url}/v1/forget-requests", json={"idempotency_key": "same", "samples": [sample]},
                              headers=bearer(tok["forget:write"]), timeout=120)

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(post, range(6)))
        final = httpx.get(f"{url}/v1/forget-requests", headers=bearer(tok["status:read"]), timeout=60).json()
    codes = Counter(a.status_code for a in answers)
    assert codes[201] == 1 and codes[200] == 5, codes
    assert {a.json()["id"] for a in answers} == {1}
    assert len(final["requests"]) == 1 and final["requests"][0]["ledger_request"] == 1
    requests, _ = ledger_view(store)
    assert len(requests) == 1


def _reserve(store, key: str, spec: dict) -> None:  # noqa: ANN001
    """A row as a crash right after the reservation leaves it: accepted (and sealed), never applied or answered."""
    db = RequestsDB(Store.open(store))

    def crash(*_args: object) -> None:
        raise KeyboardInterrupt

    db._apply, db._drop = crash, lambda _rid: None
    with pytest.raises(KeyboardInterrupt):
        db.submit(spec, key, "crm")


def test_a_request_a_crash_left_accepted_is_applied_once_at_the_next_start(store):
    first, second = samples_of(store, 2)
    _reserve(store, "never-applied", {"samples": [first], "slices": [], "clients": []})
    # the other crash point: the ledger committed, the service died before recording the link
    applied = forget_request(Store.open(store), [second]).request
    _reserve(store, "applied-unlinked", {"samples": [second], "slices": [], "clients": []})
    create_app(store)
    rows = {r.idempotency_key: r for r in RequestsDB(Store.open(store)).list()}
    requests, by_sample = ledger_view(store)
    assert len(requests) == 2 and by_sample[first] == 1 and by_sample[second] == 1  # applied once each
    assert rows["applied-unlinked"].ledger_request == applied and rows["applied-unlinked"].no_op
    assert rows["never-applied"].ledger_request not in (None, applied) and not rows["never-applied"].no_op


def test_fedforget_serve_answers_over_https_with_a_token_and_stops_on_sigterm(store, tmp_path):
    tok = tokens(store)
    cert, key = self_signed(tmp_path)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fedforget.unlearning.cli", "serve", "--store", str(store),
                             "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while True:
            try:
                health = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=str(cert), timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.time() < deadline, proc.stdout.read() if proc.poll() else "slow"
                time.sleep(0.2)
        assert health.json() == {"status": "ok"}
        status = httpx.get(f"https://127.0.0.1:{port}/v1/status", headers=bearer(tok["status:read"]),
                           verify=str(cert), timeout=60)
        assert status.status_code == 200 and status.json()["task"] == "digits-mlp"
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).raise_for_status()
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) in (0, -15)  # uvicorn shuts down, then re-raises SIGTERM
