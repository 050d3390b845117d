"""The forget service's side of each request (who asked, its idempotency key, its body, when it was accepted)
is in the ledger's log, so a hand edit of ``service.db`` is refused by every CLI command and by the service;
the log holds digests of the key and body only, never a raw record name."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from fedforget.service.requests_db import SERVICE_DB
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.unlearning.cli import main

from .service_helpers import bearer, client, private_copy, tokens, train_service_store

FORGET = "/v1/forget-requests"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_service_store(tmp_path_factory.mktemp("service-evidence") / "store")


@pytest.fixture
def store(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDFORGET_SECRETS", str(tmp_path / "secrets"))
    monkeypatch.delenv("FEDFORGET_RECEIPT_KEY", raising=False)
    return private_copy(trained, tmp_path)


def _log(store) -> list[dict]:  # noqa: ANN001
    db = sqlite3.connect(store / "ledger.sqlite")
    try:
        return [json.loads(r[0]) for r in db.execute("SELECT entry FROM log ORDER BY seq")]
    finally:
        db.close()


def _edit(store, statement: str) -> None:  # noqa: ANN001
    db = sqlite3.connect(store / SERVICE_DB, isolation_level=None)
    try:
        db.execute(statement)
    finally:
        db.close()


def _status(store) -> int:  # noqa: ANN001
    try:
        main(["status", "--store", str(store), "--json"])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _applied(store):  # noqa: ANN001, ANN202
    """A service that applied one request naming a record and one that forgot nothing new."""
    http, tok = client(store), tokens(store)
    sid = Store.open(store).manifest()["partitions"]["1"][0][0]
    body = {"idempotency_key": "dsr-1", "records": [f"node-1:{sid}"]}
    assert http.post(FORGET, json=body, headers=bearer(tok["all"])).status_code == 201
    again = {"idempotency_key": "dsr-2", "samples": [sid]}
    reply = http.post(FORGET, json=again, headers=bearer(tok["all"]))
    assert reply.status_code == 201 and reply.json()["no_op"], reply.text
    return http, tok, sid


def test_each_applied_request_and_each_no_op_log_who_asked_without_the_body(store):
    http, tok, sid = _applied(store)
    entries = [e for e in _log(store) if "via" in e]
    assert [e["kind"] for e in entries] == ["forget", "service-no-op"]
    db = sqlite3.connect(store / SERVICE_DB)
    try:
        rows = db.execute("SELECT id, idempotency_key, body_sha256, asked_by, accepted_at, ledger_request "
                          "FROM requests ORDER BY id").fetchall()
    finally:
        db.close()
    for entry, (rid, key, body, asked_by, accepted_at, ledger_request) in zip(entries, rows, strict=True):
        assert entry["via"] == {"service-request": rid, "key-sha256": hashlib.sha256(key.encode()).hexdigest(),
                                "body-sha256": body, "asked-by": asked_by, "accepted-at": accepted_at}
        assert entry["request"] == ledger_request
    text = json.dumps(_log(store))
    assert f"node-1:{sid}" not in text, "a raw record name entered the log"
    assert check_store(Store.open(store)).ok and _status(store) == 0  # the negative control of the edits below
    assert http.get("/v1/status", headers=bearer(tok["all"])).status_code == 200


def _spec_of(sample: int) -> tuple[str, str]:
    """A spec naming ``sample`` and its body digest, as a writer without the key can compute them."""
    spec = {"samples": [sample], "slices": [], "clients": []}
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return json.dumps(spec), hashlib.sha256(canonical.encode()).hexdigest()


UNFORGOTTEN = 2  # a sample of partition 0 (the requests below forget partition 1's first)
SPEC, BODY = _spec_of(UNFORGOTTEN)
OTHER_SPEC, OTHER_BODY = _spec_of(UNFORGOTTEN + 1)
EDITS = {
    "asked_by edited": "UPDATE requests SET asked_by = 'someone-else' WHERE id = 1",
    "a row deleted": "DELETE FROM requests WHERE id = 1",
    "an idempotency key changed": "UPDATE requests SET idempotency_key = 'other' WHERE id = 2",
    "a no-op relinked to another ledger request": "UPDATE requests SET ledger_request = 99 WHERE id = 2",
    "a request marked a no-op": "UPDATE requests SET no_op = 1 WHERE id = 1",
    # a writer without the key: what the log cannot pin is held by the rows' seals
    "an accepted row inserted": "INSERT INTO requests(idempotency_key, body_sha256, spec, asked_by, accepted_at) "
                                f"VALUES('invented', '{BODY}', '{SPEC}', 'mallory', 1.0)",
    "applied_at edited": "UPDATE requests SET applied_at = 1.0 WHERE id = 1",
    "an applied row's spec edited": f"UPDATE requests SET spec = '{SPEC}' WHERE id = 2",
    "the accuracy history edited": "UPDATE accuracy SET accuracy = 0.99",
    "an accuracy point inserted": "INSERT INTO accuracy(plan_id, at, forgotten, last_request, accuracy) "
                                  "VALUES('x', 0, 0, 0, 0.99)",
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_service_db_is_refused_by_the_cli_and_the_service(store, edit):
    http, tok, _ = _applied(store)
    assert http.get("/v1/status", headers=bearer(tok["all"])).status_code == 200
    _edit(store, EDITS[edit])
    refused = http.get("/v1/status", headers=bearer(tok["all"]))
    assert refused.status_code == 503 and SERVICE_DB in refused.json()["detail"], refused.text
    assert _status(store) == 1
    assert any(SERVICE_DB in p for p in check_store(Store.open(store)).problems)


def test_a_forged_via_naming_no_row_is_refused(store):
    """A log entry naming a service request service.db never held (written through the ledger, so the log
    itself is sound): the evidence points nowhere."""
    from fedforget.store.ledger import Ledger
    from fedforget.store.service_evidence import evidence_of
    from fedforget.unlearning.log_signer import act_as_coordinator

    _applied(store)
    act_as_coordinator()
    ledger = Ledger(store / "ledger.sqlite", create=False)
    try:
        with ledger.transaction("service-no-op", request=1, via=evidence_of(7, "k", "0" * 64, "x", 0.0)):
            pass
    finally:
        ledger.close()
    assert any("lost service request 7" in p for p in check_store(Store.open(store)).problems)


def test_a_request_that_fails_after_its_forget_committed_keeps_its_row_and_is_applied_on_recovery(store, monkeypatch):
    """The ledger's log names the service request once its forget commits: dropping the row then would leave
    the log naming a row service.db lost, and the store refused for good."""
    import fedforget.unlearning.forget as forget_module
    from fedforget.service.requests_db import RequestsDB, canonical_spec

    def purge_fails(*_):  # noqa: ANN002, ANN202
        raise OSError("disk gone")

    db = RequestsDB(Store.open(store))
    with monkeypatch.context() as patched, pytest.raises(OSError):
        patched.setattr(forget_module, "complete_purges", purge_fails)
        db.submit(canonical_spec([3], [], []), "k-fail", "alice")
    [row] = db.list()
    assert row.ledger_request is None
    assert check_store(Store.open(store)).ok, "the pending row is what the log names"
    assert db.recover() == [row.id]
    applied = db.get(row.id)
    assert applied.ledger_request is not None and applied.no_op
    assert check_store(Store.open(store)).ok


def _pending(store):  # noqa: ANN001, ANN202
    """A reservation a crash left pending (its forget never committed), as the service wrote it."""
    from fedforget.service.requests_db import RequestsDB, canonical_spec

    db = RequestsDB(Store.open(store))

    def crash(*_args):  # noqa: ANN202
        raise KeyboardInterrupt

    db._apply, db._drop = crash, lambda _rid: None
    with pytest.raises(KeyboardInterrupt):
        db.submit(canonical_spec([UNFORGOTTEN], [], []), "k-pending", "alice")
    return RequestsDB(Store.open(store))


PENDING_EDITS = {
    "its spec edited": f"UPDATE requests SET spec = '{OTHER_SPEC}'",
    "its spec and body_sha256 edited together":
        f"UPDATE requests SET spec = '{OTHER_SPEC}', body_sha256 = '{OTHER_BODY}'",
    "its asker edited": "UPDATE requests SET asked_by = 'mallory'",
}


@pytest.mark.parametrize("edit", sorted(PENDING_EDITS))
def test_a_pending_reservation_edited_by_a_writer_without_the_key_is_refused_and_never_applied(store, edit):
    db = _pending(store)
    assert check_store(Store.open(store)).ok  # negative control: the crash's own pending row passes
    _edit(store, PENDING_EDITS[edit])
    problems = check_store(Store.open(store)).problems
    assert any(SERVICE_DB in p for p in problems), problems
    before = len(_log(store))
    assert db.recover() == [] and len(_log(store)) == before, "an edited reservation was applied"


def test_an_inserted_reservation_is_never_applied_and_the_log_never_records_its_caller(store):
    _applied(store)
    _edit(store, EDITS["an accepted row inserted"])
    from fedforget.service.requests_db import RequestsDB

    assert RequestsDB(Store.open(store)).recover() == []
    assert "mallory" not in json.dumps(_log(store))


def test_the_crashs_own_reservation_is_applied_on_recovery(store):
    db = _pending(store)
    [row] = db.list()
    assert db.recover() == [row.id] and db.get(row.id).ledger_request is not None
    assert check_store(Store.open(store)).ok


def test_a_service_db_written_before_seals_is_sealed_on_its_first_open_and_held_to_them_after(store):
    """An existing service.db opens: it gains its seal columns and is sealed as it is (after the whole check), as a
    log adopts a store; an edit after that is refused. Dropping the seals while the key is kept is refused too."""
    from fedforget.service.requests_db import RequestsDB
    from fedforget.store.log import log_id
    from fedforget.store.service_evidence import seal_key_path

    _, tok, _ = _applied(store)
    ledger = Store.open(store).ledger()
    try:
        key = seal_key_path(log_id(ledger.db))
    finally:
        ledger.close()
    for table in ("requests", "accuracy"):
        _edit(store, f"ALTER TABLE {table} DROP COLUMN seal")
    assert any(SERVICE_DB in p for p in check_store(Store.open(store)).problems), "seals dropped, key kept"
    key.unlink()  # as written before seals: no key, no seal column
    assert check_store(Store.open(store)).ok
    assert client(store).get("/v1/status", headers=bearer(tok["all"])).status_code == 200
    assert key.is_file() and check_store(Store.open(store)).ok and _status(store) == 0
    assert [r.id for r in RequestsDB(Store.open(store)).list()] == [1, 2]
    _edit(store, EDITS["applied_at edited"])
    assert any(SERVICE_DB in p for p in check_store(Store.open(store)).problems)
