"""Does ``service.db`` say what the ledger's log says about the forget service's requests?

``service.db`` holds who asked for each request (``asked_by``), its idempotency key, when it was accepted and
which ledger request it became; nothing in the ledger pinned those, so a hand edit could change who asked.
The service now puts its side into the ledger's log: the ``forget`` entry of a request it applied, or a
``service-no-op`` entry for one that forgot nothing new, carries ``via``: the service request's id, the sha256 of
its idempotency key and of its body, who asked and when it was accepted (digests only: a body may name records,
which the append-only log must never hold). This check holds ``service.db`` to them:

- every ``via`` in the log names a row of ``service.db`` whose key, body, asker and acceptance time it matches
  (a row deleted, its ``asked_by`` or key edited, is caught);
- every row ``service.db`` links to a ledger request (applied, or a no-op) has its entry in the log, of the
  right kind and naming that ledger request. A row applied before the log began (an adopted store) has none.

A row reserved but not applied yet (a crash between the ledger's commit and ``service.db``'s) is checked by its
``via`` when the ledger committed, and left alone otherwise: the service applies it on its next start.

``service.db`` is read through SQLite only, read-only, inside the caller's read transaction on the ledger: the
service reserves a row before its ledger commit and links it after, and no ledger commit lands while the
ledger is read, so every ``via`` the read sees names a reserved row and every link it sees has its entry.
"""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
from pathlib import Path
from typing import Any

SERVICE_DB = "service.db"
#: the ``via`` fields, in the order a problem names them
FIELDS = ("asked-by", "key-sha256", "body-sha256", "accepted-at")


def evidence_of(rid: int, key: str, body_sha256: str, asked_by: str, accepted_at: float,
                record_key: str | None = None) -> dict[str, Any]:
    """The ``via`` of one service request, as its log entry carries it. A body names records, and a guessed
    body's sha256 could be matched against the log: in a store with a record key (its manifest's ``record-ids``)
    ``body-sha256`` is ``hmac-sha256(record key, sha256 of the body)``, which only the key's holder can match."""
    body = str(body_sha256)
    if record_key is not None:
        body = hmac.new(bytes.fromhex(record_key), body.encode("ascii", "replace"), hashlib.sha256).hexdigest()
    return {"service-request": int(rid), "key-sha256": hashlib.sha256(str(key).encode("utf-8")).hexdigest(),
            "body-sha256": body, "asked-by": str(asked_by), "accepted-at": float(accepted_at)}


def store_body_key(store_root: Path) -> str | None:
    """The record key ``body-sha256`` is keyed with in the store at ``store_root`` (None: unkeyed, or no
    readable manifest, which the store's own checks report)."""
    from fedforget.core.record_ids import store_record_key
    from fedforget.store.store import Store, StoreError

    try:
        return store_record_key(Store.open(store_root).manifest())
    except (StoreError, ValueError):
        return None


def read_service_rows(store_root: Path) -> list[tuple[Any, ...]] | str:
    """Every request row of ``service.db`` (an empty list when there is none), or why it cannot be read."""
    path = Path(store_root) / SERVICE_DB
    if not path.is_file():
        return []
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=60.0)
        try:
            return db.execute("SELECT id, idempotency_key, body_sha256, asked_by, accepted_at, ledger_request, no_op, "
                              "applied_at FROM requests").fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        return f"{SERVICE_DB} is unreadable ({str(exc)[:200]})"


def evidence_problems(store_root: Path, vias: dict[Any, list[tuple[int, str, Any, Any]]],
                      started: float | None) -> list[str]:
    """What ``service.db`` says that the log's ``vias`` (service request → its entries, as
    :class:`fedforget.store.log_check.Replay` collects them) do not; ``started``: when the log began."""
    rows = read_service_rows(store_root)
    if isinstance(rows, str):  # no service's database: wrong only when the log says the service wrote one
        return [rows] if vias else []
    by_id = {int(r[0]): r for r in rows}
    record_key = store_body_key(store_root)
    for named, entries in sorted(vias.items(), key=lambda kv: str(kv[0])):
        seq = entries[0][0]
        if not isinstance(named, int) or isinstance(named, bool):
            return [f"the ledger's log entry {seq} names no service request in its via"]
        row = by_id.get(named)
        if row is None:
            return [f"{SERVICE_DB} lost service request {named}, which the ledger's log entry {seq} names"]
        want = evidence_of(*row[:5], record_key=record_key)
        for seq, _kind, _request, via in entries:
            wrong = [f for f in FIELDS if not isinstance(via, dict) or via.get(f) != want[f]]
            if wrong:
                return [f"{SERVICE_DB} does not match the ledger's log: service request {named}'s {wrong[0]} is not "
                        f"the one log entry {seq} recorded"]
    for rid, _key, _body, _asked, _at, ledger_request, no_op, applied_at in rows:
        if ledger_request is None:
            continue
        kind = "service-no-op" if no_op else "forget"
        if any(k == kind and r == ledger_request for _s, k, r, _v in vias.get(int(rid), [])):
            continue
        if started is not None and applied_at is not None and float(applied_at) < float(started):
            continue  # applied before the log began
        return [f"{SERVICE_DB} does not match the ledger's log: service request {rid} is recorded as "
                f"{'a no-op of' if no_op else 'applied as'} ledger request {ledger_request}, which no {kind} log "
                "entry of that service request says"]
    return []
