"""The forget service commits concurrent requests together: one group is one ledger transaction, yet each
request leaves the evidence it would alone (its request row, its log entry with who asked, its signed head), a
bad request in a group fails alone, and a batch of ids is one call whose ids are each their own request. The
store written this way passes the store check, and a hand edit of it is still caught."""

from __future__ import annotations

import json
import sqlite3

import pytest

from fedforget.service.group_commit import Submission
from fedforget.service.requests_db import SERVICE_DB, IdempotencyConflict, canonical_spec
from fedforget.service.schemas import MAX_BATCH_IDS
from fedforget.service.service import Service
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.ledger import LedgerUsageError

from .service_helpers import bearer, client, private_copy, tokens, train_service_store


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("service-group") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    return private_copy(trained, tmp_path)


def samples_of(store, count: int) -> list[int]:  # noqa: ANN001
    parts = Store.open(store).manifest()["partitions"]
    return [s for p in sorted(parts) for sl in parts[p] for s in sl][:count]


def log_entries(store) -> list[dict]:  # noqa: ANN001
    db = sqlite3.connect(store / "ledger.sqlite")
    try:
        return [json.loads(r[0]) for r in db.execute("SELECT entry FROM log ORDER BY seq")]
    finally:
        db.close()


def head_sizes(store) -> set[int]:  # noqa: ANN001
    db = sqlite3.connect(store / "ledger.sqlite")
    try:
        return {int(r[0]) for r in db.execute("SELECT size FROM log_heads")}
    finally:
        db.close()


def sub(sample: int, key: str) -> Submission:
    return Submission(canonical_spec([sample], [], []), key, "crm")


def assert_checks(store) -> None:  # noqa: ANN001
    result = check_store(Store.open(store))
    assert result.ok, result.summary()


def test_a_group_is_one_commit_and_each_request_has_its_own_entry_and_signed_head(store):
    svc = Service(store)
    ids = samples_of(store, 6)
    subs = svc.committer.submit([sub(s, f"k-{s}") for s in ids])
    assert svc.committer.groups == 1 and svc.committer.committed == len(ids)
    rows = [s.outcome[0] for s in subs]
    assert [r.ledger_request for r in rows] == list(range(1, len(ids) + 1))  # in submission order
    forgets = [e for e in log_entries(store) if e["kind"] == "forget"]
    assert [e["request"] for e in forgets] == [r.ledger_request for r in rows]
    assert [e["via"]["service-request"] for e in forgets] == [r.id for r in rows]
    assert {e["seq"] + 1 for e in forgets} <= head_sizes(store)  # a signed head right after each entry
    ledger = Store.open(store).ledger()
    try:
        assert [r["spec"]["samples"] for r in ledger.requests()] == [[s] for s in ids]
    finally:
        ledger.close()
    assert_checks(store)


def test_a_bad_request_in_a_group_fails_alone_and_the_others_commit(store):
    svc = Service(store)
    first, second, third = samples_of(store, 3)
    svc.committer.submit([sub(first, "used")])
    subs = svc.committer.submit([sub(second, "good-1"), sub(10**12, "unknown"), sub(third, "used"),
                                 sub(third, "good-2")])
    good_1, unknown, conflict, good_2 = (s.outcome for s in subs)
    assert isinstance(unknown, LedgerUsageError) and "unknown sample id" in str(unknown)
    assert isinstance(conflict, IdempotencyConflict)
    assert good_1[0].ledger_request == 2 and good_2[0].ledger_request == 3 and good_1[1] and good_2[1]
    db = sqlite3.connect(store / SERVICE_DB)
    try:
        keys = [r[0] for r in db.execute("SELECT idempotency_key FROM requests ORDER BY id")]
    finally:
        db.close()
    assert keys == ["used", "good-1", "good-2"]  # the refused one's reservation is gone
    assert_checks(store)


def test_a_no_op_and_a_repeated_key_in_one_group_are_answered_as_alone(store):
    svc = Service(store)
    sample = samples_of(store, 1)[0]
    subs = svc.committer.submit([sub(sample, "a"), sub(sample, "b"), sub(sample, "a")])
    (a, a_new), (b, b_new), (again, again_new) = (s.outcome for s in subs)
    assert a_new and b_new and not again_new and again.id == a.id
    assert not a.no_op and b.no_op and b.ledger_request == a.ledger_request
    kinds = [(e["kind"], e.get("request")) for e in log_entries(store) if "via" in e]
    assert kinds == [("forget", a.ledger_request), ("service-no-op", a.ledger_request)]
    assert_checks(store)


def test_a_hand_edit_of_a_store_written_by_groups_is_caught(store):
    svc = Service(store)
    svc.committer.submit([sub(s, f"k-{s}") for s in samples_of(store, 4)])
    assert_checks(store)
    db = sqlite3.connect(store / "ledger.sqlite")
    try:
        db.execute("UPDATE requests SET spec=replace(spec, '\"samples\": [', '\"samples\": [1, ') WHERE id=2")
        db.commit()
    finally:
        db.close()
    assert not check_store(Store.open(store)).ok


def test_a_batch_is_one_call_whose_ids_are_each_a_request_and_a_retry_is_the_same(store):
    tok = tokens(store)
    c = client(store)
    ids = samples_of(store, 5)
    node_record = f"node-1:{Store.open(store).manifest()['partitions']['1'][0][1]}"
    body = {"idempotency_key": "import-1", "samples": [*ids, 10**12], "records": [node_record]}
    answer = c.post("/v1/forget-batches", json=body, headers=bearer(tok["forget:write"]))
    assert answer.status_code == 201, answer.text
    data = answer.json()
    assert data["created"] == 6 and data["refused"] == 1
    items = data["requests"]
    assert [i["position"] for i in items] == list(range(7))
    assert "unknown sample id" in items[5]["error"] and items[5]["id"] is None
    assert [i["ledger_request"] for i in items if i["error"] is None] == [1, 2, 3, 4, 5, 6]
    one = c.get(f"/v1/forget-requests/{items[6]['id']}", headers=bearer(tok["all"])).json()
    assert one["idempotency_key"] == "import-1/6" and len(one["record_openings"]) == 1
    retry = c.post("/v1/forget-batches", json=body, headers=bearer(tok["forget:write"]))
    assert retry.status_code == 200 and retry.json()["created"] == 0
    assert [i["id"] for i in retry.json()["requests"]] == [i["id"] for i in items]
    vias = [e for e in log_entries(store) if e["kind"] == "forget"]
    assert len(vias) == 6
    assert_checks(store)


def test_a_batch_over_its_bounds_is_refused_with_one_line_and_writes_nothing(store):
    tok = tokens(store)
    c = client(store)
    over = c.post("/v1/forget-batches", json={"idempotency_key": "big", "samples": list(range(MAX_BATCH_IDS + 1))},
                  headers=bearer(tok["forget:write"]))
    assert over.status_code == 422 and "split it into several batches" in over.json()["detail"]
    huge = b'{"idempotency_key": "huge", "samples": [' + b"1," * (3 * 2**20) + b"1]}"
    refused = c.post("/v1/forget-batches", content=huge, headers={**bearer(tok["forget:write"]),
                                                                   "content-type": "application/json"})
    assert refused.status_code == 413 and "split the batch" in refused.json()["detail"]
    record = c.post("/v1/forget-batches", json={"idempotency_key": "r", "records": ["node-1:999999999"]},
                    headers=bearer(tok["forget:write"]))
    assert record.status_code == 422 and "nothing of the batch was written" in record.json()["detail"]
    assert not (store / SERVICE_DB).exists() or _rows(store) == 0
    single = c.post("/v1/forget-requests", content=huge, headers={**bearer(tok["forget:write"]),
                                                                   "content-type": "application/json"})
    assert single.status_code == 413  # the single route keeps its own, smaller bound


def _rows(store) -> int:  # noqa: ANN001
    db = sqlite3.connect(store / SERVICE_DB)
    try:
        return int(db.execute("SELECT COUNT(*) FROM requests").fetchone()[0])
    finally:
        db.close()


def test_a_group_whose_ledger_write_fails_answers_every_caller_and_keeps_no_reservation(store, monkeypatch):
    from fedforget.store.ledger import Ledger

    svc = Service(store)

    def broken(self, items, clock=None):  # noqa: ANN001, ANN202
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Ledger, "forget_group", broken)
    subs = svc.committer.submit([sub(s, f"k-{s}") for s in samples_of(store, 3)])
    assert all(isinstance(s.outcome, sqlite3.OperationalError) for s in subs)
    assert _rows(store) == 0  # nothing left accepted for the next start to apply behind the callers' backs
    monkeypatch.undo()
    again = svc.committer.submit([sub(s, f"k-{s}") for s in samples_of(store, 3)])
    assert all(s.outcome[1] for s in again)
    assert_checks(store)
