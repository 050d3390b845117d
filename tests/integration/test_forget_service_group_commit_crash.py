"""Grouped commits from separate processes. ``kill -9`` of `fedforget serve` in the middle of a burst: after a
restart, every request that got its 201 is in the ledger where its answer said, none is applied twice, a retry of
every unanswered key applies it once, and the store passes its check. Two services on one store at once lose and
double nothing either."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from fedforget.launch import free_port
from fedforget.store import Store
from fedforget.store.check import check_store

from .service_helpers import bearer, private_copy, tokens, train_service_store


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("service-group-crash") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    return private_copy(trained, tmp_path)


def serve(store, port: int) -> subprocess.Popen:  # noqa: ANN001
    proc = subprocess.Popen([sys.executable, "-m", "fedforget.unlearning.cli", "serve", "--store", str(store),
                             "--port", str(port)], env=dict(os.environ), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return proc
        except httpx.TransportError:
            assert proc.poll() is None, "fedforget serve exited"
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("fedforget serve did not start")


def test_kill_9_mid_burst_loses_no_answered_request_and_applies_none_twice(store):
    tok = tokens(store)["forget:write"]
    parts = Store.open(store).manifest()["partitions"]
    samples = [s for p in sorted(parts) for sl in parts[p] for s in sl][:90]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = serve(store, port)

    def post(sample: int) -> tuple[int, int | None, int | None]:
        try:
            answer = httpx.post(f"{url}/v1/forget-requests", json={"idempotency_key": f"b-{sample}",
                                                                    "samples": [sample]},
                                headers=bearer(tok), timeout=60)
        except httpx.TransportError:
            return sample, None, None
        return sample, answer.status_code, answer.json().get("ledger_request")

    try:
        with ThreadPoolExecutor(20) as pool:
            futures = [pool.submit(post, s) for s in samples]
            while sum(f.done() and f.result()[1] == 201 for f in futures) < 20:
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            results = [f.result() for f in futures]
    finally:
        if proc.poll() is None:
            proc.kill()
    answered = {s: lr for s, code, lr in results if code == 201}
    assert len(answered) >= 20 and len(answered) < len(samples), "the kill came after every answer"
    proc = serve(store, port)  # the restart applies or links what the crash left accepted
    try:
        retried = [post(s) for s in samples if s not in answered]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert all(code in (200, 201) for _, code, _ in retried), retried
    ledger = Store.open(store).ledger()
    try:
        specs = dict(ledger.request_specs())
        forgotten = dict(ledger.db.execute("SELECT sample, request FROM forgotten"))
    finally:
        ledger.close()
    for sample, ledger_request in answered.items():  # every 201 is where its answer said
        assert specs[ledger_request]["samples"] == [sample] and forgotten[sample] == ledger_request
    naming = Counter(s for spec in specs.values() for s in spec["samples"])
    assert set(naming) == set(samples) and set(naming.values()) == {1}  # each applied once, none twice
    result = check_store(Store.open(store))
    assert result.ok, result.summary()


def test_two_services_in_separate_processes_on_one_store_lose_and_double_nothing(store):
    """Two `fedforget serve` processes group-commit into one ledger at once (each with its own callers); a sample
    both are asked for is forgotten by one request and is a no-op of the other."""
    tok = tokens(store)["forget:write"]
    parts = Store.open(store).manifest()["partitions"]
    samples = [s for p in sorted(parts) for sl in parts[p] for s in sl][:41]
    shared, own = samples[0], {0: samples[1:21], 1: samples[21:41]}
    ports = [free_port(), free_port()]
    procs = [serve(store, port) for port in ports]

    def post(args: tuple[int, int]) -> tuple[int, int, dict]:
        side, sample = args
        answer = httpx.post(f"http://127.0.0.1:{ports[side]}/v1/forget-requests",
                            json={"idempotency_key": f"s{side}-{sample}", "samples": [sample]}, headers=bearer(tok),
                            timeout=120)
        return side, answer.status_code, answer.json()

    try:
        jobs = [(side, s) for side in (0, 1) for s in [shared, *own[side]]]
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(post, jobs))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=60)
    assert {code for _, code, _ in answers} == {201}, answers
    assert sorted(body["no_op"] for _, _, body in answers).count(True) == 1  # the shared sample, on one side
    ledger = Store.open(store).ledger()
    try:
        specs = dict(ledger.request_specs())
    finally:
        ledger.close()
    naming = Counter(s for spec in specs.values() for s in spec["samples"])
    assert set(naming) == set(samples) and set(naming.values()) == {1}
    result = check_store(Store.open(store))
    assert result.ok, result.summary()
