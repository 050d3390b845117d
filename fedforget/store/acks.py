"""Clients' acknowledgements that they deleted forgotten samples and their copies of purged artifacts.

A client acknowledges a ``query.forget`` (sent by ``forget --propagate`` or by a retrain, whichever
reaches it first) after writing the samples to its tombstones and deleting the files in its state dir
named by the purged sha256s the message carried. The ledger keeps, per partition, the newest request
whose samples it has confirmed (it is always sent all of its forgotten samples), so a request is
acknowledged by a partition when that mark reaches it; an offline client stays pending and is caught
up by the next run that reaches it. A second mark, ``copies_up_to_request``, is the newest request
whose purged artifacts the node has dropped its copies of: a node that trained on top of a module
(and so may cache it) holds a copy even when none of its own samples was forgotten.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import AbstractContextManager
from typing import Any, Protocol

ACKS = "acks"
COPIES_MARK = "copies_up_to_request"


class Ledger(Protocol):
    """What acknowledgements read and write of the ledger (:class:`fedforget.store.ledger.Ledger` is one): typed
    here, not imported, because the purge that the ledger module imports reads this module."""

    db: sqlite3.Connection

    def transaction(self, kind: str = "update", **fields: Any) -> AbstractContextManager[sqlite3.Connection]: ...

    def get_meta(self, key: str, default: Any = None) -> Any: ...

    def set_meta_in(self, key: str, value: Any) -> None: ...


def record_acks(ledger: Ledger, deleted: dict[int, int], copies_up_to: int | None = None) -> dict[str, Any]:
    """Partitions in ``deleted`` confirmed every forgotten sample they hold (as of now) and, when
    ``copies_up_to`` is given, dropped their copies of the artifacts purged up to that request."""
    with ledger.transaction("acks") as db:
        row = db.execute("SELECT value FROM meta WHERE key=?", (ACKS,)).fetchone()
        acks = json.loads(row[0]) if row else {}
        for partition, n in sorted(deleted.items()):
            top = db.execute("SELECT MAX(f.request) FROM forgotten f JOIN units u ON u.unit = f.unit "
                             "WHERE u.partition=?", (int(partition),)).fetchone()[0]
            entry = {"up_to_request": int(top or 0), "at": time.time(), "deleted": int(n)}
            copies = max(_int((acks.get(str(partition)) or {}).get(COPIES_MARK)), int(copies_up_to or 0))
            if copies:
                entry[COPIES_MARK] = copies
            acks[str(partition)] = entry
        ledger.set_meta_in(ACKS, acks)
    return acks


def _int(value: Any) -> int:
    """A mark read from the ledger: an int, or 0 for anything else (an edited or missing value)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def request_acks(ledger: Ledger, only: int | None = None) -> dict[int, dict[str, list[int]]]:
    """request → the partitions that hold its samples, which acknowledged it, which are still pending
    (every request, or only request ``only``)."""
    acks = ledger.get_meta(ACKS) or {}
    owners: dict[int, set[int]] = {}
    where, args = (" WHERE f.request=?", (only,)) if only is not None else ("", ())
    for request, partition in ledger.db.execute(
            "SELECT DISTINCT f.request, u.partition FROM forgotten f JOIN units u ON u.unit = f.unit" + where, args):
        owners.setdefault(int(request), set()).add(int(partition))
    out = {}
    for request, parts in sorted(owners.items()):
        done = sorted(p for p in parts if int((acks.get(str(p)) or {}).get("up_to_request", 0)) >= request)
        out[request] = {"owners": sorted(parts), "acknowledged": done, "pending": sorted(parts - set(done))}
    return out


def copies_dropped_up_to(db: sqlite3.Connection) -> dict[int, int]:
    """partition → the newest request whose purged artifacts its node confirmed it holds no copy of.

    A confirmed ``query.forget`` always carried the sha256s purged by then, which includes those of
    the partition's own newest forgotten request, so ``up_to_request`` counts too (acknowledgements
    recorded before the copies mark existed)."""
    row = db.execute("SELECT value FROM meta WHERE key=?", (ACKS,)).fetchone()
    try:
        acks = json.loads(row[0]) if row else {}
    except ValueError:
        acks = {}
    out = {}
    for partition, entry in (acks.items() if isinstance(acks, dict) else ()):
        if str(partition).isdigit() and isinstance(entry, dict):
            out[int(partition)] = max(_int(entry.get("up_to_request")), _int(entry.get(COPIES_MARK)))
    return out
