"""SAFE-DP's per-adapter request counters, kept in the ledger so a forget request charges them in
the same transaction that records it (applied or pending, never half).

An adapter's *exposure* is the units it read only through DP-SGD (its clique neighbours). A forgotten
sample in an exposure unit does not invalidate the adapter (group privacy covers it) but counts
against its budget ``k``; the ``(k+1)``-th sample invalidates it, and `fedforget retrain` rebuilds it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from fedforget.methods.safe.dp import over_budget
from fedforget.store.ledger import Ledger

SCHEMA = """
CREATE TABLE IF NOT EXISTS dp_exposure(unit TEXT NOT NULL, artifact TEXT NOT NULL, PRIMARY KEY(unit, artifact))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dp_budget(artifact TEXT PRIMARY KEY, used INTEGER NOT NULL, k INTEGER NOT NULL);
"""


def set_dp_exposure(ledger: Ledger, artifact: str, units: Sequence[str], k: int) -> None:
    """Record a (re)trained adapter's DP exposure; its counter restarts at the samples forgotten from
    that exposure by requests newer than the artifact's watermark (those it still saw)."""
    ledger.db.executescript(SCHEMA)
    with ledger.transaction("dp-exposure", artifact=artifact) as db:
        db.execute("DELETE FROM dp_exposure WHERE artifact=?", (artifact,))
        db.executemany("INSERT INTO dp_exposure VALUES(?, ?)", ((u, artifact) for u in units))
        watermark = db.execute("SELECT watermark FROM artifacts WHERE artifact=?", (artifact,)).fetchone()[0]
        used = db.execute("SELECT COUNT(*) FROM forgotten f JOIN dp_exposure e ON e.unit = f.unit "
                          "WHERE e.artifact=? AND f.request > ?", (artifact, watermark)).fetchone()[0]
        db.execute("INSERT OR REPLACE INTO dp_budget VALUES(?, ?, ?)", (artifact, int(used), int(k)))
        if over_budget(int(used), int(k)):
            db.execute("UPDATE artifacts SET valid=0 WHERE artifact=?", (artifact,))


def charge_dp_budget(db: sqlite3.Connection, request: int) -> list[str]:
    """Inside a forget transaction: add this request's samples to every exposed adapter's counter and
    return the valid adapters that went over budget (now invalid). A no-op for stores without SAFE-DP."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name='dp_budget'").fetchone() is None:
        return []
    rows = db.execute("SELECT e.artifact, COUNT(*) FROM forgotten f JOIN dp_exposure e ON e.unit = f.unit "
                      "WHERE f.request=? GROUP BY e.artifact", (request,)).fetchall()
    over = []
    for artifact, n in rows:
        db.execute("UPDATE dp_budget SET used = used + ? WHERE artifact=?", (int(n), artifact))
        used, k = db.execute("SELECT used, k FROM dp_budget WHERE artifact=?", (artifact,)).fetchone()
        valid = db.execute("SELECT valid FROM artifacts WHERE artifact=?", (artifact,)).fetchone()
        if over_budget(int(used), int(k)) and valid and valid[0]:
            db.execute("UPDATE artifacts SET valid=0 WHERE artifact=?", (artifact,))
            over.append(str(artifact))
    return over


def dp_budgets(ledger: Ledger) -> dict[str, dict[str, int]]:
    """artifact -> {"used", "k"} (empty for stores without SAFE-DP)."""
    if ledger.db.execute("SELECT 1 FROM sqlite_master WHERE name='dp_budget'").fetchone() is None:
        return {}
    rows = ledger.db.execute("SELECT artifact, used, k FROM dp_budget")
    return {a: {"used": int(u), "k": int(k)} for a, u, k in rows}


def dp_exposed_to_forgotten(ledger: Ledger) -> set[str]:
    """Adapters that still carry forgotten samples through DP only (covered by (α, β), not exact)."""
    if ledger.db.execute("SELECT 1 FROM sqlite_master WHERE name='dp_budget'").fetchone() is None:
        return set()
    rows = ledger.db.execute("SELECT DISTINCT e.artifact FROM dp_exposure e JOIN forgotten f ON f.unit = e.unit "
                             "JOIN artifacts a ON a.artifact = e.artifact WHERE f.request > a.watermark")
    return {r[0] for r in rows}


def dp_training_nodes(ledger: Ledger) -> dict[str, set[int]]:
    """DP adapter -> the partitions that trained it (own cells and DP neighbours: their noise is in it)."""
    if ledger.db.execute("SELECT 1 FROM sqlite_master WHERE name='dp_budget'").fetchone() is None:
        return {}
    rows = ledger.db.execute("SELECT b.artifact, u.unit FROM dp_budget b JOIN (SELECT unit, artifact FROM dp_exposure "
                             "UNION SELECT unit, artifact FROM lineage) u ON u.artifact = b.artifact")
    out: dict[str, set[int]] = {}
    for artifact, unit in rows:
        out.setdefault(str(artifact), set()).add(int(str(unit).split(":")[0]))
    return out
