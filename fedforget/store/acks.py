"""Clients' acknowledgements that they deleted forgotten samples, per partition and per request.

A client acknowledges a ``query.forget`` (sent by ``forget --propagate`` or by a retrain, whichever
reaches it first) after writing the samples to its tombstones. The ledger keeps, per partition, the
newest request whose samples it has confirmed (it is always sent all of its forgotten samples), so a
request is acknowledged by a partition when that mark reaches it; an offline client stays pending and
is caught up by the next run that reaches it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from fedforget.store.ledger import Ledger

ACKS = "acks"


def record_acks(ledger: Ledger, deleted: dict[int, int]) -> dict[str, Any]:
    """Partitions in ``deleted`` confirmed every forgotten sample they hold (as of now)."""
    with ledger.transaction() as db:
        row = db.execute("SELECT value FROM meta WHERE key=?", (ACKS,)).fetchone()
        acks = json.loads(row[0]) if row else {}
        for partition, n in sorted(deleted.items()):
            top = db.execute("SELECT MAX(f.request) FROM forgotten f JOIN units u ON u.unit = f.unit "
                             "WHERE u.partition=?", (int(partition),)).fetchone()[0]
            acks[str(partition)] = {"up_to_request": int(top or 0), "at": time.time(), "deleted": int(n)}
        ledger._set_meta(db, ACKS, acks)
    return acks


def request_acks(ledger: Ledger) -> dict[int, dict[str, list[int]]]:
    """request → the partitions that hold its samples, which acknowledged it, which are still pending."""
    acks = ledger.get_meta(ACKS) or {}
    owners: dict[int, set[int]] = {}
    for request, partition in ledger.db.execute(
            "SELECT DISTINCT f.request, u.partition FROM forgotten f JOIN units u ON u.unit = f.unit"):
        owners.setdefault(int(request), set()).add(int(partition))
    out = {}
    for request, parts in sorted(owners.items()):
        done = sorted(p for p in parts if int((acks.get(str(p)) or {}).get("up_to_request", 0)) >= request)
        out[request] = {"owners": sorted(parts), "acknowledged": done, "pending": sorted(parts - set(done))}
    return out
