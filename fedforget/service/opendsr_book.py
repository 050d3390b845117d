"""``<store>/opendsr.db``: which controller sent which OpenDSR request body under a ``subject_request_id``.

The forget itself is a row of ``service.db`` under the idempotency key :func:`service_key` (sealed there like
every request the ``/v1`` routes accept), so the two APIs share one request; this file only remembers what
OpenDSR needs besides: the digest of the body first sent under the id (a replay with another body is refused)
and the controller (the token's name). A file of its own, so ``service.db`` and the stores without OpenDSR are
unchanged.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

OPENDSR_DB = "opendsr.db"
SCHEMA = """
CREATE TABLE IF NOT EXISTS subject_requests(subject_request_id TEXT PRIMARY KEY, body_sha256 TEXT NOT NULL,
    controller_id TEXT NOT NULL, received_at REAL NOT NULL);
"""
#: the ``service.db`` idempotency key of an OpenDSR request: this prefix and its ``subject_request_id``
KEY_PREFIX = "opendsr:"


def service_key(subject_request_id: str) -> str:
    return KEY_PREFIX + subject_request_id


def body_sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class SubjectRequest:
    subject_request_id: str
    body_sha256: str
    controller_id: str
    received_at: float


class OpenDSRBook:
    """A handle on ``<store>/opendsr.db``; each call opens its own connection (thread-safe)."""

    def __init__(self, store_root: Path) -> None:
        self.path = Path(store_root) / OPENDSR_DB

    def _connect(self) -> sqlite3.Connection:
        new = not self.path.exists()
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        if new:  # owner-only, as service.db: it names the controllers
            os.chmod(self.path, 0o600)
        db.executescript(SCHEMA)
        return db

    def get(self, subject_request_id: str) -> SubjectRequest | None:
        if not self.path.exists():
            return None
        db = self._connect()
        try:
            row = db.execute("SELECT subject_request_id, body_sha256, controller_id, received_at FROM "
                             "subject_requests WHERE subject_request_id=?", (subject_request_id,)).fetchone()
        finally:
            db.close()
        return SubjectRequest(*row) if row else None

    def add(self, entry: SubjectRequest) -> SubjectRequest:
        """Record ``entry`` unless its id is there; return what the file holds for the id."""
        db = self._connect()
        try:
            db.execute("INSERT OR IGNORE INTO subject_requests VALUES(?, ?, ?, ?)",
                       (entry.subject_request_id, entry.body_sha256, entry.controller_id, entry.received_at))
        finally:
            db.close()
        held = self.get(entry.subject_request_id)
        assert held is not None
        return held
