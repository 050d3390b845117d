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

What the log cannot pin (a reservation not applied yet, which the service's next start applies; a request's
``spec`` once its record names left it; when it was applied; the served-accuracy history) the service seals:
each row carries ``seal``, an HMAC-SHA256 under a key of this store's log (``<secrets>/service-seals/<log
id>.key``, outside the store, owner-only, drawn when the service first opens the store), over every field of the
row; the accuracy history's seals chain, each over the row before. Where that key is (the coordinator's
machine), every row must carry its seal: a row inserted or edited by a writer without the key is refused, and a
reservation is applied only when its seal holds. A pending row's ``spec`` must also digest to its
``body_sha256`` (checked with or without the key). A ``service.db`` written before seals is sealed as it is when
the service first opens it after the whole check passed, as a log adopts a store: what was edited before that
cannot be told.

``service.db`` is read through SQLite only, read-only, inside the caller's read transaction on the ledger: the
service reserves a row before its ledger commit and links it after, and no ledger commit lands while the
ledger is read, so every ``via`` the read sees names a reserved row and every link it sees has its entry.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import secrets
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedforget.store.bounded_read import read_bounded
from fedforget.store.secret_files import MAX_SECRET_BYTES, create_once, secrets_dir

SERVICE_DB = "service.db"
#: the folder of the secrets directory holding one seal key per store (named by its log's id)
SEALS = "service-seals"
#: a request row's sealed fields, in order (``seal`` is the column that holds the seal)
REQUEST_COLUMNS = ("id", "idempotency_key", "body_sha256", "spec", "asked_by", "accepted_at", "ledger_request",
                   "no_op", "applied_at")
#: an accuracy row's sealed fields, in order
ACCURACY_COLUMNS = ("plan_id", "at", "forgotten", "last_request", "accuracy")
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
    readable manifest, which the store's own checks report). The service asks once per request and per check:
    the manifest is read again only when its file changed."""
    try:
        st = (Path(store_root) / "manifest.json").stat()
    except OSError:
        return None
    return _manifest_body_key(str(store_root), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _manifest_body_key(store_root: str, _ino: int, _size: int, _mtime_ns: int) -> str | None:
    from fedforget.core.record_ids import store_record_key
    from fedforget.store.store import Store, StoreError

    try:
        return store_record_key(Store.open(store_root).manifest())
    except (StoreError, ValueError):
        return None


def body_digest(spec: dict[str, Any]) -> str:
    """``body_sha256`` of a request as accepted: the sha256 of its canonical spec (records included)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def store_log_id(store_root: Path) -> str | None:
    """The id of the store's ledger log (the leaf hash of its genesis entry), read-only; None when it has none."""
    path = Path(store_root) / "ledger.sqlite"
    if not path.is_file():
        return None
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=60.0)
    try:
        row = db.execute("SELECT leaf FROM log WHERE seq=0").fetchone()
    except sqlite3.OperationalError:
        return None  # no log table yet
    finally:
        db.close()
    return None if row is None else str(row[0])


def seal_key_path(log_id: str) -> Path:
    return secrets_dir() / SEALS / f"{log_id}.key"


def _key_of(data: bytes) -> bytes | None:
    try:
        key = bytes.fromhex(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return key if len(key) == 32 else None


def seal_key(log_id: str | None) -> bytes | None:
    """The seal key of the store whose log is ``log_id`` (None: this machine holds none)."""
    if not log_id:
        return None
    try:
        return _key_of(read_bounded(seal_key_path(log_id), MAX_SECRET_BYTES, "seal key"))
    except (OSError, ValueError):
        return None


def make_seal_key(log_id: str) -> tuple[bytes, bool]:
    """The store's seal key, drawn now if this machine holds none; and whether it was drawn by this call."""
    drawn = secrets.token_hex(32).encode("ascii")
    held = create_once(seal_key_path(log_id), drawn, lambda data: _key_of(data) is not None)
    key = _key_of(held)
    assert key is not None
    return key, held == drawn


def _mac(key: bytes, kind: str, values: Sequence[Any]) -> str:
    data = json.dumps([kind, *values], separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def request_seal(key: bytes, row: Sequence[Any]) -> str:
    """The seal of a request row (its :data:`REQUEST_COLUMNS`, as SQLite returns them)."""
    return _mac(key, "service-request", row)


def accuracy_seal(key: bytes, row: Sequence[Any], before: str | None) -> str:
    """The seal of an accuracy row (its :data:`ACCURACY_COLUMNS`), chained to the seal of the row before it."""
    return _mac(key, "served-accuracy", [*row, before])


def has_seals(db: sqlite3.Connection, table: str) -> bool:
    return any(r[1] == "seal" for r in db.execute(f"PRAGMA table_info({table})"))


def read_service_rows(store_root: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]] | str:
    """Every request row of ``service.db`` (its :data:`REQUEST_COLUMNS` and seal) and every accuracy row (its
    :data:`ACCURACY_COLUMNS` and seal, in the order written); empty lists when there is none, or why it cannot be
    read. A ``service.db`` written before seals reads as unsealed (None)."""
    path = Path(store_root) / SERVICE_DB
    if not path.is_file():
        return [], []
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=60.0)
        try:
            db.execute("BEGIN")  # one snapshot of both tables
            out = []
            for table, cols in (("requests", REQUEST_COLUMNS), ("accuracy", ACCURACY_COLUMNS)):
                seal = "seal" if has_seals(db, table) else "NULL"
                out.append(db.execute(f"SELECT {', '.join(cols)}, {seal} FROM {table} ORDER BY rowid").fetchall())
            db.execute("COMMIT")
            return out[0], out[1]
        finally:
            db.close()
    except sqlite3.Error as exc:
        return f"{SERVICE_DB} is unreadable ({str(exc)[:200]})"


def seal_problems(rows: list[tuple[Any, ...]], history: list[tuple[Any, ...]], key: bytes | None) -> list[str]:
    """Each pending request's spec is the body it was accepted with; with the store's seal key, each row carries
    the seal the service wrote."""
    for row in rows:
        rid, body, spec, ledger_request = row[0], row[2], row[3], row[6]
        if ledger_request is None:
            try:
                same = body_digest(json.loads(spec)) == body
            except (TypeError, ValueError):
                same = False
            if not same:
                return [f"{SERVICE_DB}'s service request {rid} is pending with a spec that is not the body it was "
                        "accepted with (its body_sha256)"]
    if key is None:
        return []
    for row in rows:
        if not isinstance(row[-1], str) or not hmac.compare_digest(row[-1], request_seal(key, row[:-1])):
            return [f"{SERVICE_DB}'s service request {row[0]} is not as the service wrote it (its seal does not "
                    "hold: inserted or edited by hand)"]
    before = None
    for n, row in enumerate(history, 1):
        if not isinstance(row[-1], str) or not hmac.compare_digest(row[-1], accuracy_seal(key, row[:-1], before)):
            return [f"{SERVICE_DB}'s served-accuracy history is not as the service wrote it (point {n} of "
                    f"{len(history)}: its seal does not hold)"]
        before = row[-1]
    return []


def evidence_problems(store_root: Path, vias: dict[Any, list[tuple[int, str, Any, Any]]],
                      started: float | None, log_id: str | None = None) -> list[str]:
    """What ``service.db`` says that the log's ``vias`` (service request → its entries, as
    :class:`fedforget.store.log_check.Replay` collects them) do not; ``started``: when the log began; ``log_id``:
    the log's id, whose seal key (when this machine holds it) every row's seal is checked with."""
    read = read_service_rows(store_root)
    if isinstance(read, str):  # no service's database: wrong only when the log says the service wrote one
        return [read] if vias else []
    rows, history = read
    # what the log names first (the most precise line), then the seals of what it cannot name
    return (_via_problems(rows, vias, started, store_body_key(store_root))
            or seal_problems(rows, history, seal_key(log_id)))


def _via_problems(sealed_rows: list[tuple[Any, ...]], vias: dict[Any, list[tuple[int, str, Any, Any]]],
                  started: float | None, record_key: str | None) -> list[str]:
    rows = [(r[0], r[1], r[2], r[4], r[5], r[6], r[7], r[8]) for r in sealed_rows]  # all but spec and seal
    by_id = {int(r[0]): r for r in rows}
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
