"""Keyed commitments of record names: the log proves a record was forgotten without naming it.

A forget request that names records (``NODE:RECORD_ID``) keeps in its spec, and so in the log, one
commitment per record: ``hmac-sha256(key, name)`` under a random 32-byte key drawn for that record. The name
and its key (the *opening*) are kept in ``record_names``, the one ledger table the log does not copy, until
the request is complete; then forgetting scrubs them. Whoever holds an opening (the requester, who is handed
it when the request is accepted) can show that the name was forgotten: the commitment is in a logged entry
under a signed head. Without it, a commitment says nothing about the name, however guessable the name is.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

PREFIX = "hmac-sha256:"
RECORD_NAMES_SCHEMA = """
CREATE TABLE IF NOT EXISTS record_names(request INTEGER NOT NULL, record TEXT NOT NULL, key TEXT NOT NULL,
    PRIMARY KEY(request, record)) WITHOUT ROWID;
"""


def commitment(key: str, name: str) -> str:
    """The commitment of record ``name`` under ``key`` (hex)."""
    return PREFIX + hmac.new(bytes.fromhex(key), name.encode("utf-8"), hashlib.sha256).hexdigest()


def is_commitment(text: Any) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX) and len(text) == len(PREFIX) + 64


def draw_openings(names: Iterable[str]) -> dict[str, str]:
    """A fresh key per record name."""
    return {name: secrets.token_hex(32) for name in sorted(set(names))}


def commitments_of(openings: dict[str, str]) -> list[str]:
    return sorted(commitment(key, name) for name, key in openings.items())


def keep_openings(db: sqlite3.Connection, request: int, openings: dict[str, str]) -> None:
    """Inside the forget transaction: keep the names and keys until the request is complete."""
    db.executemany("INSERT OR REPLACE INTO record_names(request, record, key) VALUES(?, ?, ?)",
                   ((request, name, key) for name, key in sorted(openings.items())))


def openings(db: sqlite3.Connection, request: int) -> list[dict[str, str]]:
    """The kept openings of a request: name, key and commitment (empty once scrubbed)."""
    if not _has_table(db):
        return []
    return [{"record": name, "key": key, "commitment": commitment(key, name)}
            for name, key in db.execute("SELECT record, key FROM record_names WHERE request=? ORDER BY record",
                                        (request,))]


def names_of(db: sqlite3.Connection, request: int) -> list[str]:
    return [o["record"] for o in openings(db, request)]


def scrub(db: sqlite3.Connection, requests: Sequence[int]) -> int:
    """Delete the kept names of ``requests`` (their secure-deleted pages are zeroed)."""
    if not _has_table(db) or not requests:
        return 0
    before = db.total_changes
    db.executemany("DELETE FROM record_names WHERE request=?", ((int(r),) for r in requests))
    return db.total_changes - before


def migrate_raw_names(db: sqlite3.Connection) -> int:
    """A store written before commitments kept raw names in its requests' specs: move each into
    ``record_names`` and leave its commitment in the spec (done once, when the store adopts its log)."""
    import json

    moved = 0
    for rid, text in db.execute("SELECT id, spec FROM requests ORDER BY id").fetchall():
        try:
            spec = json.loads(text)
        except ValueError:
            continue
        names = spec.get("records") if isinstance(spec, dict) else None
        if not names or all(is_commitment(n) for n in names):
            continue
        raw = [str(n) for n in names if not is_commitment(n)]
        opened = draw_openings(raw)
        spec["records"] = sorted([n for n in names if is_commitment(n)] + commitments_of(opened))
        db.execute("UPDATE requests SET spec=? WHERE id=?", (json.dumps(spec), rid))
        keep_openings(db, int(rid), opened)
        moved += len(opened)
    return moved


def _has_table(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='record_names'").fetchone() is not None
