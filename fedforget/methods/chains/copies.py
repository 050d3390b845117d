"""Which nodes may still hold a copy of a purged chain module (pure: the ledger's tables, no torch).

Nodes keep only the frozen modules of a chain (their module cache, ``store.module_cache``): a module goes to
the nodes that train a later position of its chain, and those are the partitions of that position's lineage.
The chains' declaration hands this to ``fedforget purge`` and ``forget --propagate`` (``copy_holders``).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any


def copy_holders(db: sqlite3.Connection) -> dict[int, int]:
    """partition → the newest request whose purged chain modules its node may hold a copy of."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name='purged'").fetchone() is None:
        return {}
    by_chain: dict[tuple[Any, Any], list[tuple[int, set[int]]]] = {}
    for artifact, meta in db.execute("SELECT artifact, meta FROM artifacts"):
        where = _chain_place(meta)
        if where is not None:
            parts = {int(r[0]) for r in db.execute("SELECT DISTINCT u.partition FROM lineage l JOIN units u "
                                                   "ON u.unit = l.unit WHERE l.artifact=?", (artifact,))}
            by_chain.setdefault(where[0], []).append((where[1], parts))
    holders: dict[int, int] = {}
    rows = db.execute("SELECT p.request, a.meta FROM purged p JOIN artifacts a ON a.artifact = p.artifact "
                      "WHERE p.sha256 NOT IN (SELECT sha256 FROM artifacts WHERE valid=1)")
    for request, meta in rows:
        where = _chain_place(meta)
        if where is None:
            continue
        for position, parts in by_chain.get(where[0], []):
            if position > where[1]:
                for part in parts:
                    holders[part] = max(holders.get(part, 0), int(request))
    return holders


def _chain_place(meta: str) -> tuple[tuple[Any, Any], int] | None:
    """((shard, sequence), position) of a chain module, from its ledger meta; None for other artifacts."""
    try:
        data = json.loads(meta)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("position"), int) or "sequence" not in data:
        return None
    return (json.dumps(data.get("shard")), json.dumps(data.get("sequence"))), data["position"]
