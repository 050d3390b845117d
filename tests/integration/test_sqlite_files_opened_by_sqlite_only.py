"""No Python code opens a store's SQLite files (``ledger.sqlite``, ``service.db``, ``opendsr.db``, their
journals and WAL): SQLite alone does. On Linux, closing any descriptor of a file drops every POSIX lock the
process holds on it, SQLite's included, so a stray ``open``/``close`` beside another thread's transaction lets a
second writer in and corrupts the database.

Python's ``open`` audit event fires for ``open``, ``io.open`` and ``os.open`` (SQLite's own opens are C
calls and never fire it). The hook watches every CLI command that reads or writes a store and every route of
the service; a negative control proves it sees a plain ``open`` of the ledger.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fedforget.service.app import create_app
from fedforget.store import Store
from fedforget.unlearning.cli import main

from .helpers import copy_store
from .service_helpers import bearer, tokens, train_service_store

SQLITE_FILE = re.compile(r"(^|/)(ledger\.sqlite|service\.db|opendsr\.db)(-journal|-wal|-shm)?$")
_opened: list[str] = []
_watching = [False]


def _hook(event: str, args: tuple) -> None:
    if event == "open" and _watching[0] and args and isinstance(args[0], str | bytes | Path):
        path = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        if SQLITE_FILE.search(path):
            _opened.append(path)


sys.addaudithook(_hook)


class Watch:
    """Record the SQLite files Python code opens inside the block."""

    def __enter__(self) -> list[str]:
        _opened.clear()
        _watching[0] = True
        return _opened

    def __exit__(self, *exc: object) -> None:
        _watching[0] = False


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("sqlite-only") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    return copy_store(trained, tmp_path).root


def _cli(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_the_watch_sees_a_python_open_of_the_ledger(store):
    with Watch() as opened:
        with open(store / "ledger.sqlite", "rb") as fh:
            fh.read(16)
    assert opened == [str(store / "ledger.sqlite")]


def test_no_cli_command_opens_the_ledger_outside_sqlite(store, capsys):
    with Watch() as opened:
        assert _cli("status", "--store", str(store), "--json") == 0
        assert _cli("samples", "--store", str(store), "--client", "1", "--json") == 0
        assert _cli("locate", "--store", str(store), "--sample", "3", "--json") == 0
        assert _cli("forget", "--store", str(store), "--sample", "3", "--json") == 0
        assert _cli("forget", "--store", str(store), "--slice", "2:1", "--json") == 0
        assert _cli("purge", "--store", str(store), "--check", "--json") == 0
        assert _cli("purge", "--store", str(store), "--json") == 0
        assert _cli("receipt", "1", "--store", str(store), "--no-verify", "--json") == 0
    capsys.readouterr()
    assert opened == []


def test_no_service_route_opens_a_sqlite_file_outside_sqlite(store):
    token = tokens(store)["all"]
    with Watch() as opened:
        http = TestClient(create_app(store))
        reply = http.post("/v1/forget-requests", headers=bearer(token), json={"idempotency_key": "k", "samples": [4]})
        assert reply.status_code == 201, reply.text
        for path in ("/v1/status", "/v1/forget-requests", "/v1/forget-requests/1", "/metrics", "/healthz"):
            assert http.get(path, headers=bearer(token)).status_code == 200, path
        assert http.get(f"/v1/receipts/{reply.json()['ledger_request']}", headers=bearer(token)).status_code == 200
    assert opened == []


def test_the_opendsr_routes_open_no_sqlite_file_outside_sqlite(store):
    import uuid

    from .opendsr_client import new_request
    from .service_helpers import OPENDSR_DOMAIN, private_ca

    private_ca(store.parent / "secrets")
    token = tokens(store)["all"]
    sid = str(uuid.uuid4())
    body = new_request([f"node-1:{Store.open(store).manifest()['partitions']['1'][0][0]}"], OPENDSR_DOMAIN,
                       subject_request_id=sid)
    with Watch() as opened:
        http = TestClient(create_app(store))
        for _ in range(2):  # the second: a replay, read from opendsr.db
            assert http.post("/opendsr/v2/requests", headers=bearer(token), json=body).status_code == 201
        assert http.get(f"/opendsr/v2/requests/{sid}", headers=bearer(token)).status_code == 200
        assert http.delete(f"/opendsr/v2/requests/{sid}", headers=bearer(token)).status_code == 400
    assert (store / "opendsr.db").is_file() and opened == []


def test_the_other_cli_commands_and_predict_open_no_sqlite_file_outside_sqlite(store, capsys):
    with Watch() as opened:
        assert _cli("evaluate", "--store", str(store), "--json") == 0
        assert _cli("token", "create", "--store", str(store), "--name", "t", "--scope", "predict") == 0
        assert _cli("token", "list", "--store", str(store), "--json") == 0
        assert _cli("token", "revoke", "--store", str(store), "--name", "t") == 0
        token = tokens(store)["predict"]
        http = TestClient(create_app(store))
        reply = http.post("/v1/predict", headers=bearer(token), json={"inputs": [[0.0] * 64]})
        assert reply.status_code == 200, reply.text
    capsys.readouterr()
    assert opened == []


def test_training_forgetting_retraining_and_purging_in_process_open_no_sqlite_file_outside_sqlite(tmp_path,
                                                                                                 monkeypatch):
    from fedforget.inprocess import run_in_process
    from fedforget.store import Store
    from fedforget.unlearning.forget import forget_request

    from .helpers import train_in_process

    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    with Watch() as opened:
        store = train_in_process(tmp_path / "trained", 3, method="fedsgt", **{"chains.groups": 2, "chains.budget": 2})
        forget_request(store, samples=[store.manifest()["partitions"]["0"][0][0]])
        run_in_process({**store.manifest()["config"], "store": str(store.root), "action": "retrain"}, 3)
        assert _cli("purge", "--store", str(store.root), "--json") == 0
        assert _cli("purge", "--store", str(store.root), "--check", "--json") == 0
        assert _cli("verify", "--store", str(store.root), "--json") in (0, 1)  # ran: 1 is what it found
        assert _cli("audit", "--store", str(store.root), "--json") == 0
        Store.open(store.root)
    assert opened == []
