"""Forgetting erases: the bytes of every artifact that saw forgotten data, and every derived copy, go.

A forget request records *what* to purge inside its own transaction (one ``purged`` row per
invalidated artifact version: id, sha256, request, time — all the ledger keeps, as proof); the
files are deleted right after the commit. A crash between the two leaves the request applied with
its purge pending, and any later ``forget`` or ``fedforget purge`` finishes it (deleting is
idempotent). Deleting inside the transaction instead would lose bytes of a request that rolls back.

Nothing purged is ever needed again: serving and retraining start only from valid artifacts
(chains from the longest valid prefix, FedShard from valid children, SAFE and fedavg from scratch).
A file whose sha256 is still recorded for a valid artifact (identical bytes) is kept.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedforget.store.crash import crash_point

PURGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS purged(artifact TEXT NOT NULL, sha256 TEXT NOT NULL, request INTEGER NOT NULL,
    at REAL NOT NULL, done INTEGER NOT NULL, PRIMARY KEY(artifact, sha256)) WITHOUT ROWID;
"""
#: per-client files in a client's state dir that hold features of its raw samples (recomputed on demand)
FEATURE_CACHE_GLOB = "safe-features-*"  # SAFE's frozen-backbone tokens (tasks.safe_features)


def record_purges(db: sqlite3.Connection, request: int, invalidated: list[str]) -> int:
    """Inside the forget transaction: note every invalidated artifact version as to be purged."""
    rows = []
    for artifact in invalidated:
        hit = db.execute("SELECT sha256 FROM artifacts WHERE artifact=?", (artifact,)).fetchone()
        if hit:
            rows.append((artifact, hit[0], request, time.time()))
    db.executemany("INSERT OR IGNORE INTO purged(artifact, sha256, request, at, done) VALUES(?, ?, ?, ?, 0)", rows)
    return len(rows)


def scrub_leaver_angles(db: sqlite3.Connection) -> list[int]:
    """Inside the forget transaction: drop the update angle of every client that has left (all its samples
    forgotten), keeping only what fairness needs of it: each client's distance to the nearest remaining one."""
    from fedforget.core.fedshard_costs import min_distances

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
    return leaving


def _has_table(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name='purged'").fetchone() is not None


def purged_rows(db: sqlite3.Connection) -> list[dict[str, Any]]:
    if not _has_table(db):
        return []
    rows = db.execute("SELECT artifact, sha256, request, at, done FROM purged ORDER BY request, artifact")
    return [{"artifact": a, "sha256": s, "request": r, "at": at, "done": bool(d)} for a, s, r, at, d in rows]


def purged_artifacts(db: sqlite3.Connection) -> set[str]:
    """Invalid artifacts whose current version was purged: their file is gone on purpose, not corrupt."""
    if not _has_table(db):
        return set()
    return {r[0] for r in db.execute("SELECT a.artifact FROM artifacts a JOIN purged p ON p.artifact = a.artifact "
                                     "AND p.sha256 = a.sha256 WHERE a.valid = 0")}


def kept_shas(db: sqlite3.Connection) -> set[str]:
    """sha256s still recorded for a valid artifact: their files stay even if an older version was purged."""
    return {r[0] for r in db.execute("SELECT sha256 FROM artifacts WHERE valid=1")}


def purged_shas(db: sqlite3.Connection) -> set[str]:
    """Every purged sha256 that no valid artifact holds now: no file may be named by one of these."""
    return {r["sha256"] for r in purged_rows(db)} - kept_shas(db)


PURGE_RECORD, PURGE_KEY = "purge", "purged-sha256"  # carried by query.forget: clients drop such files too


def purged_sha_list(store: Any) -> list[str]:
    """The purged sha256s no valid artifact holds, for the clients' own copies (sorted)."""
    ledger = store.ledger()
    try:
        return sorted(purged_shas(ledger.db))
    finally:
        ledger.close()


def delete_files_named_by(folder: Path, shas: list[str]) -> int:
    """On a client: delete every file in its state dir whose name starts with a purged sha256."""
    gone = 0
    for path in files_named_by(Path(folder), set(shas), subfolders=("",)):
        path.unlink(missing_ok=True)
        gone += 1
    return gone


def drop_purged_copies(msg: Any, state_dir: Path) -> int:
    """In a ``query.forget`` handler: delete the node's files named by the purged sha256s the message carries."""
    if PURGE_RECORD not in msg.content:
        return 0
    return delete_files_named_by(state_dir, [str(s) for s in msg.content[PURGE_RECORD][PURGE_KEY]])


def files_named_by(root: Path, shas: set[str], subfolders: tuple[str, ...] = ("artifacts", "clients")) -> list[Path]:
    """Files under ``artifacts/`` and ``clients/`` whose name starts with one of ``shas`` (any cache)."""
    if not shas:
        return []
    found = []
    for folder in (root / sub if sub else root for sub in subfolders):
        if not folder.is_dir():
            continue
        for path in folder.rglob("*"):
            name = path.name.lstrip(".")
            if path.is_file() and len(name) >= 64 and name[:64] in shas:
                found.append(path)
    return sorted(found)


@dataclass
class PurgeReport:
    """What a purge deleted (or, with ``check``, what it would delete)."""

    files: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    feature_caches: list[str] = field(default_factory=list)
    metrics_rows: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "pending": self.pending, "feature-caches": self.feature_caches,
                "metrics-rows": self.metrics_rows, "clean": not (self.files or self.pending or self.feature_caches
                                                                  or self.metrics_rows)}


def complete_purges(store: Any, check: bool = False) -> PurgeReport:
    """Delete every file a purge names (or only list them with ``check``); mark the purges done.

    Covers the store's artifacts, any file under ``clients/<partition>/`` named by a purged sha256
    (client caches), the feature caches of partitions that lost samples, and per-client metrics
    rows of clients that left. Idempotent: a second call finds nothing.
    """
    ledger = store.ledger()
    try:
        db = ledger.db
        rows = purged_rows(db)
        doomed = purged_shas(db)
        pending = sorted({r["artifact"] for r in rows if not r["done"]})
        touched = _partitions_with_forgotten(db, since_done=True)
        gone = set(ledger.exhausted_partitions())
    finally:
        ledger.close()
    report = PurgeReport(pending=pending)
    files = files_named_by(store.root, doomed)
    report.files = [str(p.relative_to(store.root)) for p in files]
    caches = [p for part in sorted(touched) for p in (store.root / "clients" / str(part)).glob(FEATURE_CACHE_GLOB)]
    report.feature_caches = [str(p.relative_to(store.root)) for p in caches]
    report.metrics_rows = scrub_metrics(store.root, gone, dry_run=True)
    if check:
        return report
    for path in (*files, *caches):
        path.unlink(missing_ok=True)
        crash_point("purge:file-deleted")
    scrub_metrics(store.root, gone, dry_run=False)
    ledger = store.ledger()
    try:
        with ledger.transaction() as tx:
            if _has_table(tx):
                tx.execute("UPDATE purged SET done=1 WHERE done=0")
            ledger._set_meta(tx, "purge-done-request", ledger.last_request())
    finally:
        ledger.close()
    return report


def _partitions_with_forgotten(db: sqlite3.Connection, since_done: bool) -> set[int]:
    """Partitions that lost samples in requests whose purge is not done yet (all, without ``since_done``)."""
    row = db.execute("SELECT value FROM meta WHERE key='purge-done-request'").fetchone()
    after = int(json.loads(row[0])) if (row and since_done) else 0
    rows = db.execute("SELECT DISTINCT u.partition FROM forgotten f JOIN units u ON u.unit = f.unit "
                      "WHERE f.request > ?", (after,))
    return {int(r[0]) for r in rows}


def _is_row_of(row: dict[str, Any], partitions: set[int]) -> bool:
    return any(isinstance(row.get(k), int) and row[k] in partitions for k in ("partition", "partition-id", "client"))


def _scrubbed(row: dict[str, Any], partitions: set[int]) -> dict[str, Any]:
    """A metrics row without per-client entries of ``partitions`` (maps keyed by partition id)."""
    names = {str(p) for p in partitions}
    out = {}
    for key, value in row.items():
        if isinstance(value, dict) and value and all(str(k).isdigit() for k in value):
            value = {k: v for k, v in value.items() if str(k) not in names}
        out[key] = value
    return out


def scrub_metrics(root: Path, partitions: set[int], dry_run: bool) -> int:
    """Per-client metrics rows of clients that left: dropped, and their entries in per-client maps."""
    from fedforget.store.atomic import atomic_write_bytes

    path = root / "metrics.jsonl"
    if not partitions or not path.is_file():
        return 0
    kept, changed = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            kept.append(line)
            continue
        if not isinstance(row, dict):
            kept.append(line)
            continue
        if _is_row_of(row, partitions):
            changed += 1
            continue
        clean = _scrubbed(row, partitions)
        changed += clean != row
        kept.append(json.dumps(clean, sort_keys=True) if clean != row else line)
    if changed and not dry_run:
        atomic_write_bytes(path, ("\n".join(kept) + "\n").encode("utf-8"))
    return changed
