"""Writing the store's deadline settings (``fedforget deadlines``): each change appended to ``service.db`` as the
one in force. Here, beside the service's database, because a fresh ``service.db`` is created with the service's
own schema (:mod:`fedforget.service.requests_db`); reading them is the coordinator's
(:mod:`fedforget.unlearning.deadline_settings`)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from fedforget.service.requests_db import SCHEMA
from fedforget.store.service_evidence import SERVICE_DB
from fedforget.unlearning.deadline_settings import SETTINGS_SCHEMA, TABLE, DeadlineSettings


def write_settings(store_root: Path, settings: DeadlineSettings) -> DeadlineSettings:
    """Check ``settings`` and append them as the ones in force (nothing is written when they are refused)."""
    settings.checked()
    path = Path(store_root) / SERVICE_DB
    fresh = not path.exists()
    db = sqlite3.connect(path, timeout=60.0, isolation_level=None)
    try:
        if fresh:
            os.chmod(path, 0o600)
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(SCHEMA + SETTINGS_SCHEMA)  # a fresh service.db is one the service can open as its own
        db.execute("BEGIN IMMEDIATE")
        db.execute(f"INSERT INTO {TABLE}(at, policy, completion_point, nearing_days) VALUES(?, ?, ?, ?)",
                   (time.time(), settings.policy, settings.completion_point, float(settings.nearing_days)))
        db.execute("COMMIT")
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")
        db.close()
    return settings
