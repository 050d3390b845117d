"""The forget service takes records as their owners know them (``records: ["NODE:RECORD_ID", ...]``): the
request and its receipt say which records were asked for, a repeated key is the same request, and a record
the store does not hold is 422 with one line, nothing written."""

from __future__ import annotations

import sqlite3

import pytest

from fedforget.service.requests_db import SERVICE_DB
from fedforget.service.schemas import MAX_IDS
from fedforget.store import Store
from fedforget.store.record_commitments import commitment

from .service_helpers import bearer, client, private_copy, tokens, train_service_store


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("service-records") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    monkeypatch.delenv("FEDFORGET_RECEIPT_KEY", raising=False)
    return private_copy(trained, tmp_path)


@pytest.fixture
def tok(store):
    return tokens(store)


def sample_of(store, partition: int, slice_: int = 0, at: int = 0) -> int:  # noqa: ANN001
    return Store.open(store).manifest()["partitions"][str(partition)][slice_][at]


def ledger_specs(store) -> list[dict]:  # noqa: ANN001
    ledger = Store.open(store).ledger()
    try:
        return [spec for _, spec in ledger.request_specs()]
    finally:
        ledger.close()


def service_rows(store) -> int:  # noqa: ANN001
    path = store / SERVICE_DB
    if not path.exists():
        return 0
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
    finally:
        db.close()


def test_a_record_is_forgotten_and_its_request_and_receipt_name_it(store, tok):
    c = client(store)
    sid, other = sample_of(store, 1), sample_of(store, 2)
    record = f"node-1:{sid}"
    body = {"idempotency_key": "dsr-r", "records": [record, record], "samples": [other]}
    first = c.post("/v1/forget-requests", json=body, headers=bearer(tok["forget:write"]))
    assert first.status_code == 201, first.text
    data = first.json()
    assert data["spec"]["samples"] == sorted([sid, other]) and "records" not in data["spec"]
    [opening] = data["record_openings"]  # the requester's proof; the ledger keeps only the commitment
    assert opening["record"] == record and opening["commitment"] == commitment(opening["key"], record)
    assert ledger_specs(store) == [{"samples": sorted([sid, other]), "slices": [], "clients": [],
                                    "records": [opening["commitment"]]}]
    read = c.get(f"/v1/forget-requests/{data['id']}", headers=bearer(tok["all"]))  # openings: forget:write too
    assert read.status_code == 200, read.text  # the ledger's spec matches the service's: no 503
    assert read.json()["receipt"]["request"]["spec"]["records"] == [opening["commitment"]]
    again = c.post("/v1/forget-requests", json={**body, "records": [record]}, headers=bearer(tok["forget:write"]))
    assert again.status_code == 200 and again.json()["id"] == data["id"]
    assert service_rows(store) == 1 and len(ledger_specs(store)) == 1



def files_and_times(store) -> dict[str, tuple[bytes, int]]:  # noqa: ANN001
    return {str(p.relative_to(store)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(store.rglob("*"))
            if p.is_file()}


def log_kinds(store) -> list[str]:  # noqa: ANN001
    db = sqlite3.connect(store / "ledger.sqlite")
    try:
        return [r[0] for r in db.execute("SELECT json_extract(entry, '$.kind') FROM log ORDER BY seq")]
    finally:
        db.close()


def test_a_no_op_post_logs_who_asked_and_nothing_else_and_its_retry_writes_nothing(store, tok):
    """A record forgotten by a request that is complete but not yet scrubbed (its retrain ran; the coordinator's
    scrub comes after it): asking again under a new key records the asker (service.db and one service-no-op
    entry) and scrubs nothing; the same key again changes no file."""
    from fedforget.store.acks import record_acks

    c, record = client(store), f"node-1:{sample_of(store, 1)}"
    asked = c.post("/v1/forget-requests", json={"idempotency_key": "dsr-1", "records": [record]},
                   headers=bearer(tok["forget:write"]))
    assert asked.status_code == 201, asked.text
    assert c.get("/v1/receipts/1", headers=bearer(tok["all"])).status_code == 200
    ledger = Store.open(store).ledger()
    try:
        ledger.finish_retrain(1, [])
        record_acks(ledger, {1: 1})
    finally:
        ledger.close()
    before, kinds = files_and_times(store), log_kinds(store)
    again = c.post("/v1/forget-requests", json={"idempotency_key": "dsr-2", "records": [record]},
                   headers=bearer(tok["forget:write"]))
    assert again.status_code == 201 and again.json()["no_op"], again.text
    assert log_kinds(store) == [*kinds, "service-no-op"]
    after = files_and_times(store)
    assert {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} == {"ledger.sqlite",
                                                                                           SERVICE_DB}
    retry = c.post("/v1/forget-requests", json={"idempotency_key": "dsr-2", "records": [record]},
                   headers=bearer(tok["forget:write"]))
    assert retry.status_code == 200 and retry.json()["id"] == again.json()["id"]
    assert files_and_times(store) == after

def test_a_body_naming_only_records_is_accepted(store, tok):
    record = f"node-0:{sample_of(store, 0)}"
    response = client(store).post("/v1/forget-requests", json={"idempotency_key": "r", "records": [record]},
                                  headers=bearer(tok["forget:write"]))
    assert response.status_code == 201, response.text
    assert [o["record"] for o in response.json()["record_openings"]] == [record]


@pytest.mark.parametrize(("records", "needle"), [
    (["node-1:999999"], "unknown record 'node-1:999999'"),
    (["node-7:1"], "unknown node 'node-7'"),
    (["node-1:01"], "without leading zeros"),
    ("OTHER", "not in node node-1's training data"),  # a row that exists, in node-0
])
def test_a_record_the_store_does_not_hold_is_422_one_line_and_nothing_is_written(store, tok, records, needle):
    if records == "OTHER":
        records = [f"node-1:{sample_of(store, 0)}"]
    before = (store / "ledger.sqlite").read_bytes()
    response = client(store).post("/v1/forget-requests", json={"idempotency_key": "k", "records": records},
                                  headers=bearer(tok["forget:write"]))
    assert response.status_code == 422 and needle in response.json()["detail"], response.text
    assert "\n" not in response.json()["detail"]
    assert (store / "ledger.sqlite").read_bytes() == before and service_rows(store) == 0


@pytest.mark.parametrize(("records", "needle"), [
    ([17], "body.records.0"),
    (["node-1"], "body.records.0"),
    (["node-1:"], "body.records.0"),
    (["node-1:" + "x" * 400], "body.records.0"),
    (["nöde:1"], "body.records.0"),
    ("node-1:1", "body.records"),
    (["node-1:1"] * (MAX_IDS + 1), "body.records"),
], ids=["int", "no-colon", "empty-id", "too-long", "bad-node", "not-a-list", "too-many"])
def test_a_records_field_the_contract_refuses_is_422_naming_it(store, tok, records, needle):
    response = client(store).post("/v1/forget-requests", json={"idempotency_key": "k", "records": records},
                                  headers=bearer(tok["forget:write"]))
    assert response.status_code == 422 and response.json()["detail"].startswith(needle), response.text
    assert service_rows(store) == 0 and ledger_specs(store) == []


def test_records_and_samples_share_the_bound_on_ids(store, tok):
    body = {"idempotency_key": "k", "records": ["node-1:1"] * (MAX_IDS // 2 + 1), "samples": [1] * (MAX_IDS // 2)}
    response = client(store).post("/v1/forget-requests", json=body, headers=bearer(tok["forget:write"]))
    assert response.status_code == 422 and "at most" in response.json()["detail"]


def test_a_nodes_table_training_never_writes_is_503_not_a_caller_error(store, tok):
    c = client(store)
    Store.open(store).update_manifest(nodes={"0": {"name": "node-0", "records": "public"}})
    record = f"node-0:{sample_of(store, 0)}"
    response = c.post("/v1/forget-requests", json={"idempotency_key": "k", "records": [record]},
                                  headers=bearer(tok["forget:write"]))
    assert response.status_code == 503 and "partition 1 has no node" in response.json()["detail"], response.text
    assert service_rows(store) == 0 and ledger_specs(store) == []
