"""The store's deadline settings: which legal clock its forget requests run on, the state that completes one,
and how close to its deadline a request counts as nearing it.

Kept in ``service.db`` (table ``deadline_settings``), so ``fedforget status``, the running service and the
OpenDSR answers read one setting. Each change is appended with its time, never overwriting the one before
(the table is the settings' history); the newest row is in force. A store whose ``service.db`` has no such
table (older, or never set) runs on the defaults: ``gdpr``, ``purged``, 7 days. The table is not part of the
requests' evidence (``fedforget.store.service_evidence`` seals and checks the ``requests`` and ``accuracy``
tables): a setting changes how deadlines are read, never what a request was.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fedforget.store.service_evidence import SERVICE_DB
from fedforget.unlearning.legal_clock import (
    COMPLETION_POINTS,
    DEFAULT_COMPLETION_POINT,
    DEFAULT_NEARING_DAYS,
    DEFAULT_POLICY,
    POLICIES,
)

TABLE = "deadline_settings"
SETTINGS_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE}(id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, policy TEXT NOT NULL,
    completion_point TEXT NOT NULL, nearing_days REAL NOT NULL);
"""


class DeadlineSettingError(ValueError):
    """A setting no clock can run on (an unknown policy or completion point, a negative window); one line."""


@dataclass(frozen=True)
class DeadlineSettings:
    policy: str = DEFAULT_POLICY
    completion_point: str = DEFAULT_COMPLETION_POINT
    nearing_days: float = DEFAULT_NEARING_DAYS

    def checked(self) -> DeadlineSettings:
        """These settings, or :class:`DeadlineSettingError` saying what to pass instead."""
        if self.policy not in POLICIES:
            raise DeadlineSettingError(f"unknown deadline policy {self.policy!r}: use one of {', '.join(POLICIES)}")
        if self.completion_point not in COMPLETION_POINTS:
            raise DeadlineSettingError(f"unknown completion point {self.completion_point!r}: use one of "
                                       f"{', '.join(COMPLETION_POINTS)}")
        if not math.isfinite(self.nearing_days) or self.nearing_days < 0:
            raise DeadlineSettingError(f"the nearing window must be a finite number of days >= 0, got "
                                       f"{self.nearing_days}")
        return self

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_settings(store_root: Path) -> DeadlineSettings:
    """The settings in force (read-only; the defaults when none were set). A row that no longer names a known
    policy (written by another version) is read as the defaults rather than stop every status."""
    path = Path(store_root) / SERVICE_DB
    if not path.is_file():
        return DeadlineSettings()
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=60.0)
    try:
        row = db.execute(f"SELECT policy, completion_point, nearing_days FROM {TABLE} "
                         "ORDER BY id DESC LIMIT 1").fetchone()
    except sqlite3.OperationalError:  # no settings table: never set
        return DeadlineSettings()
    finally:
        db.close()
    if row is None:
        return DeadlineSettings()
    try:
        return DeadlineSettings(str(row[0]), str(row[1]), float(row[2])).checked()
    except (DeadlineSettingError, TypeError, ValueError):
        return DeadlineSettings()


def settings_history(store_root: Path) -> list[dict[str, Any]]:
    """Every setting written, oldest first, with when (what an auditor asks: which clock ran when)."""
    path = Path(store_root) / SERVICE_DB
    if not path.is_file():
        return []
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=60.0)
    try:
        rows = db.execute(f"SELECT at, policy, completion_point, nearing_days FROM {TABLE} ORDER BY id").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()
    return [{"at": at, "policy": p, "completion_point": c, "nearing_days": n} for at, p, c, n in rows]
