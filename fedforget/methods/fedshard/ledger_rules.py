"""FedShard's step inside every forget transaction: a client that has left takes its update angle with it."""

from __future__ import annotations

import json
import sqlite3

from fedforget.methods.fedshard.costs import min_distances


def scrub_leaver_angles(db: sqlite3.Connection, request: int) -> list[str]:
    """Inside the forget transaction: drop the update angle of every client that has left (all its samples
    forgotten), keeping only what fairness needs of it: each client's distance to the nearest remaining one."""
    row = db.execute("SELECT value FROM meta WHERE key='client-angles'").fetchone()
    if row is None:
        return []
    angles = {int(c): float(a) for c, a in json.loads(row[0]).items()}
    held = dict(db.execute("SELECT u.partition, COUNT(*) FROM samples s JOIN units u ON u.unit = s.unit "
                           "GROUP BY u.partition"))
    gone = dict(db.execute("SELECT u.partition, COUNT(*) FROM forgotten f JOIN units u ON u.unit = f.unit "
                           "GROUP BY u.partition"))
    leavers = sorted(int(p) for p, n in held.items() if gone.get(p, 0) >= n)
    leaving = [c for c in leavers if c in angles]
    if not leaving:
        return []
    old = db.execute("SELECT value FROM meta WHERE key='leaver-min-distances'").fetchone()
    frozen = {int(c): float(d) for c, d in json.loads(old[0]).items()} if old else {}
    frozen.update(min_distances(angles, leavers))
    kept = {str(c): a for c, a in angles.items() if c not in set(leavers)}
    for key, value in (("client-angles", kept), ("leaver-min-distances", {str(c): d for c, d in frozen.items()})):
        db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, json.dumps(value, sort_keys=True)))
    return []  # invalidates nothing: it only drops what fairness no longer needs
