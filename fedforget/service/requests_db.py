"""``service.db``: idempotency keys, who asked, and the link from a service request to its ledger request.

A separate SQLite file inside the store, so stores without a service load exactly as before (the
ledger's schema, its checks and its receipts' digests are untouched). A submission first reserves its
idempotency key here (one ``BEGIN IMMEDIATE`` transaction, so two callers with one key get one row),
then is applied by the ledger — the forget service commits concurrent submissions in groups
(``fedforget.service.group_commit``), a recovered one alone through the CLI's
:func:`fedforget.unlearning.forget.forget_request`, each serialised against every other coordinator by the
ledger's own transaction — and finally records which ledger request it became. A crash between the two
leaves a row ``accepted``: the next start applies it, and forgetting what is already forgotten is a no-op in
the ledger, so it is never applied twice; its link is then found from the ledger's ``forgotten`` rows (the
request that forgot what it names).

Every row is sealed as it is written (``fedforget.store.service_evidence``: an HMAC under the store's seal key,
outside the store), so a reservation inserted or edited by a writer without that key is never applied, and the
store check refuses it. A ``service.db`` written before seals gains its ``seal`` columns and is sealed as it is
on its first open (after the service's whole check passed).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedforget.store import Store
from fedforget.store.ledger import CHUNK, LedgerUsageError
from fedforget.store.service_evidence import (
    ACCURACY_COLUMNS,
    REQUEST_COLUMNS,
    SERVICE_DB,
    accuracy_seal,
    body_digest,
    evidence_of,
    has_seals,
    make_seal_key,
    request_seal,
    seal_problems,
    store_body_key,
    store_log_id,
)
from fedforget.unlearning.forget import forget_request, parse_slices

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests(id INTEGER PRIMARY KEY AUTOINCREMENT, idempotency_key TEXT NOT NULL UNIQUE,
    body_sha256 TEXT NOT NULL, spec TEXT NOT NULL, asked_by TEXT NOT NULL, accepted_at REAL NOT NULL,
    ledger_request INTEGER, no_op INTEGER NOT NULL DEFAULT 0, applied_at REAL, seal TEXT);
CREATE INDEX IF NOT EXISTS requests_by_ledger ON requests(ledger_request);
CREATE TABLE IF NOT EXISTS accuracy(plan_id TEXT PRIMARY KEY, at REAL NOT NULL, forgotten INTEGER NOT NULL,
    last_request INTEGER NOT NULL, accuracy REAL NOT NULL, seal TEXT);
"""
REQUEST_FIELDS = ", ".join(REQUEST_COLUMNS)
ACCURACY_FIELDS = ", ".join(ACCURACY_COLUMNS)


class IdempotencyConflict(ValueError):
    """The idempotency key was used before with another body; nothing was written."""


@dataclass(frozen=True)
class ServiceRequest:
    """One row of ``service.db``: a forget request as the service received it."""

    id: int
    idempotency_key: str
    spec: dict[str, list[Any]]
    asked_by: str
    accepted_at: float
    ledger_request: int | None
    no_op: bool
    applied_at: float | None


def canonical_spec(samples: Sequence[int], slices: Sequence[str], clients: Sequence[int],
                   records: Mapping[str, int] | None = None) -> dict[str, list[Any]]:
    """The request as the ledger will read it (sorted, deduplicated, slices in ``P:S`` form), so two bodies
    that name the same things in another order are one request under one key. ``records`` (``NODE:RECORD_ID``
    → its sample id, resolved against the manifest) add their sample ids to ``samples`` and are kept as
    given under ``records``, a key present only when some were named (as in the ledger's spec)."""
    records = records or {}
    spec: dict[str, list[Any]] = {"samples": sorted({int(s) for s in (*samples, *records.values())}),
                                  "slices": sorted(set(parse_slices(slices))),
                                  "clients": sorted({int(c) for c in clients})}
    if records:
        spec["records"] = sorted(records)
    return spec


def same_spec(ledger_spec: Any, spec: dict[str, list[Any]]) -> bool:
    """Whether the ledger's record of a request names what a service request named (each list as a set)."""
    if not isinstance(ledger_spec, dict):
        return False
    # records are in ``samples`` already (resolved); the ledger keeps only their keyed commitments
    return all(sorted(map(str, ledger_spec.get(k) or [])) == sorted(map(str, spec.get(k) or []))
               for k in ("samples", "slices", "clients"))


class RequestsDB:
    """A handle on ``<store>/service.db``; every method opens its own connection (thread-safe)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = Path(store.root) / SERVICE_DB
        log = store_log_id(Path(store.root))
        #: None only for a store without a log (the service adopts one before it opens this)
        self.key, drawn = make_seal_key(log) if log is not None else (None, False)
        db = self._connect()
        try:
            db.executescript(SCHEMA)
            db.execute("BEGIN IMMEDIATE")
            try:
                for table in ("requests", "accuracy"):
                    if not has_seals(db, table):  # written before seals: gains the column
                        db.execute(f"ALTER TABLE {table} ADD COLUMN seal TEXT")
                if drawn:  # this store's first key here: seal what the whole check just accepted
                    self._seal_all(db)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        finally:
            db.close()

    # -- seals ---------------------------------------------------------------------------------
    def _seal_all(self, db: sqlite3.Connection) -> None:
        for (rid,) in db.execute("SELECT id FROM requests").fetchall():
            self._seal(db, rid)
        before = None
        for rowid, *row in db.execute(f"SELECT rowid, {ACCURACY_FIELDS} FROM accuracy ORDER BY rowid").fetchall():
            before = self._seal_point(db, rowid, row, before)

    def _seal(self, db: sqlite3.Connection, rid: int) -> None:
        """Seal request ``rid`` as SQLite now holds it (inside the caller's write transaction)."""
        if self.key is None:
            return
        row = db.execute(f"SELECT {REQUEST_FIELDS} FROM requests WHERE id=?", (rid,)).fetchone()
        db.execute("UPDATE requests SET seal=? WHERE id=?", (request_seal(self.key, row), rid))

    def _seal_point(self, db: sqlite3.Connection, rowid: int, row: list[Any], before: str | None) -> str | None:
        if self.key is None:
            return None
        seal = accuracy_seal(self.key, row, before)
        db.execute("UPDATE accuracy SET seal=? WHERE rowid=?", (seal, rowid))
        return seal

    def sealed(self, rid: int) -> bool:
        """Whether request ``rid`` is as the service wrote it (its seal holds, a pending spec is its body)."""
        db = self._connect()
        try:
            row = db.execute(f"SELECT {REQUEST_FIELDS}, seal FROM requests WHERE id=?", (rid,)).fetchone()
        finally:
            db.close()
        return row is not None and not seal_problems([row], [], self.key)

    def _connect(self) -> sqlite3.Connection:
        fresh = not self.path.exists()
        db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA secure_delete=ON")  # a deleted row's bytes are zeroed, not left in free pages
        if fresh:
            os.chmod(self.path, 0o600)
        return db

    # -- submissions --------------------------------------------------------------------------
    def submit(self, spec: dict[str, list[Any]], key: str, asked_by: str) -> tuple[ServiceRequest, bool]:
        """Apply ``spec`` once per ``key``; returns the request and whether this call created it.

        Raises :class:`IdempotencyConflict` when ``key`` named another body, ``LedgerUsageError`` when the
        ledger refuses the ids (the reservation is dropped: nothing is written)."""
        digest = body_digest(spec)
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT id, body_sha256 FROM requests WHERE idempotency_key=?", (key,)).fetchone()
                if row is None:
                    cur = db.execute("INSERT INTO requests(idempotency_key, body_sha256, spec, asked_by, accepted_at) "
                                     "VALUES(?, ?, ?, ?, ?)", (key, digest, json.dumps(spec), asked_by, time.time()))
                    rid = int(cur.lastrowid)
                    self._seal(db, rid)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        finally:
            db.close()
        if row is not None:
            if row[1] != digest:
                raise IdempotencyConflict(f"idempotency_key {key!r} was used for another body (request {row[0]}); "
                                          "use a new key for a new request")
            return self.get(int(row[0])), False
        try:
            self._apply(rid, spec)
        except BaseException:
            self._drop(rid)
            raise
        return self.get(rid), True

    def _apply(self, rid: int, spec: dict[str, list[Any]]) -> None:
        via = self.via(rid)
        result = forget_request(self.store, spec["samples"], spec["slices"], spec["clients"],
                                records=spec.get("records") or [], log_fields={"via": via})
        ledger_request = result.request if result.request is not None else self.forgetting_request(spec)
        if result.request is None:  # nothing new to forget: the log still records that the service was asked
            ledger = self.store.ledger()
            try:
                with ledger.transaction("service-no-op", request=ledger_request, via=via):
                    pass
            finally:
                ledger.close()
        # once applied, the record names leave service.db: the ledger keeps their keyed commitments, and their
        # openings (handed to the caller now) only until the request is complete
        kept = {k: v for k, v in spec.items() if k != "records"}
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE requests SET ledger_request=?, no_op=?, applied_at=?, spec=? WHERE id=?",
                       (ledger_request, int(result.request is None), time.time(), json.dumps(kept), rid))
            self._seal(db, rid)
            db.execute("COMMIT")
        finally:
            if db.in_transaction:
                db.execute("ROLLBACK")
            db.close()

    def via(self, rid: int) -> dict[str, Any]:
        """What the ledger's log keeps of a service request (``fedforget.store.service_evidence``): who asked and
        when, and digests of its key and body, never the body itself (it may name records)."""
        db = self._connect()
        try:
            key, body, asked_by, accepted_at = db.execute("SELECT idempotency_key, body_sha256, asked_by, accepted_at "
                                                          "FROM requests WHERE id=?", (rid,)).fetchone()
        finally:
            db.close()
        return evidence_of(rid, key, body, asked_by, accepted_at, store_body_key(self.store.root))

    def _drop(self, rid: int) -> None:
        """Forget a reservation whose request failed, unless the ledger's log already names it (the forget
        committed, then something after it failed): that row is evidence, applied again on the next start."""
        if self._logged(rid):
            return
        db = self._connect()
        try:
            db.execute("DELETE FROM requests WHERE id=? AND ledger_request IS NULL", (rid,))
        finally:
            db.close()

    def _logged(self, rid: int) -> bool:
        from fedforget.store.log import has_log

        ledger = self.store.ledger()
        try:
            if not has_log(ledger.db):
                return False
            # entries are canonical JSON (sorted keys): the via's last key is its service request
            return ledger.db.execute("SELECT 1 FROM log WHERE entry LIKE ? LIMIT 1",
                                     (f'%"service-request":{int(rid)}}}%',)).fetchone() is not None
        finally:
            ledger.close()

    def recover(self) -> list[int]:
        """Apply every request a crash left ``accepted`` (reserved, never answered); returns their ids.
        One the ledger now refuses (its ids unknown) is dropped, as it would have been then."""
        done = []
        for request in self.list(limit=None):
            if request.ledger_request is None and self.sealed(request.id):  # never one a writer without the key made
                try:
                    self._apply(request.id, request.spec)
                except LedgerUsageError:
                    self._drop(request.id)
                    continue
                done.append(request.id)
        return done

    def forgetting_request(self, spec: dict[str, list[Any]]) -> int | None:
        """The newest ledger request that forgot what ``spec`` names (for a request that was a no-op)."""
        ledger = self.store.ledger()
        try:
            units = list(spec["slices"])
            for client in spec["clients"]:
                units += ledger.units_of_partition(int(client))
            newest = 0
            for column, values in (("sample", spec["samples"]), ("unit", units)):
                for i in range(0, len(values), CHUNK):
                    chunk = values[i : i + CHUNK]
                    row = ledger.db.execute(f"SELECT MAX(request) FROM forgotten WHERE {column} IN "
                                            f"({','.join('?' * len(chunk))})", chunk).fetchone()
                    newest = max(newest, int(row[0] or 0))
        finally:
            ledger.close()
        return newest or None

    # -- reads --------------------------------------------------------------------------------
    def get(self, rid: int) -> ServiceRequest | None:
        found = self._rows("WHERE id=?", (rid,))
        return found[0] if found else None

    def by_key(self, key: str) -> ServiceRequest | None:
        """The request accepted under idempotency key ``key``, if any."""
        rows = self._rows("WHERE idempotency_key=?", (key,))
        return rows[0] if rows else None

    def list(self, limit: int | None = 100, after: int = 0) -> list[ServiceRequest]:
        return self._rows("WHERE id>? ORDER BY id" + ("" if limit is None else f" LIMIT {int(limit)}"), (after,))

    def asked_by_ledger_request(self) -> dict[int, list[str]]:
        """ledger request → the token names whose service requests it applied (for the console)."""
        out: dict[int, list[str]] = {}
        for r in self.list(limit=None):
            if r.ledger_request is not None and not r.no_op:
                out.setdefault(r.ledger_request, []).append(r.asked_by)
        return out

    def _rows(self, where: str, args: tuple[Any, ...]) -> list[ServiceRequest]:
        db = self._connect()
        try:
            rows = db.execute("SELECT id, idempotency_key, spec, asked_by, accepted_at, ledger_request, no_op, "
                              f"applied_at FROM requests {where}", args).fetchall()
        finally:
            db.close()
        return [ServiceRequest(int(i), k, json.loads(s), a, float(at), None if lr is None else int(lr), bool(n),
                               None if ap is None else float(ap)) for i, k, s, a, at, lr, n, ap in rows]

    # -- served accuracy history (the console's plot) ----------------------------------------------
    def record_accuracy(self, plan_id: str, forgotten: int, last_request: int, accuracy: float) -> None:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            cur = db.execute(f"INSERT OR IGNORE INTO accuracy({ACCURACY_FIELDS}) VALUES(?, ?, ?, ?, ?)",
                             (plan_id, time.time(), int(forgotten), int(last_request), float(accuracy)))
            if cur.rowcount == 1:
                rowid = int(cur.lastrowid)
                before = db.execute("SELECT seal FROM accuracy WHERE rowid < ? ORDER BY rowid DESC LIMIT 1",
                                    (rowid,)).fetchone()
                row = db.execute(f"SELECT {ACCURACY_FIELDS} FROM accuracy WHERE rowid=?", (rowid,)).fetchone()
                self._seal_point(db, rowid, list(row), before[0] if before else None)
            db.execute("COMMIT")
        finally:
            if db.in_transaction:
                db.execute("ROLLBACK")
            db.close()

    def accuracy_history(self) -> list[dict[str, Any]]:
        db = self._connect()
        try:
            rows = db.execute("SELECT at, forgotten, last_request, accuracy, plan_id FROM accuracy "
                              "ORDER BY rowid").fetchall()
        finally:
            db.close()
        return [{"at": at, "forgotten": f, "last_request": r, "accuracy": a, "plan_id": p} for at, f, r, a, p in rows]
