"""Forgetting erases: the bytes of every artifact that saw forgotten data, and every derived copy, go.

A forget request records *what* to purge inside its own transaction (one ``purged`` row per
invalidated artifact version: id, sha256, request, time — all the ledger keeps, as proof); the
files are deleted right after the commit. A crash between the two leaves the request applied with
its purge pending, and any later ``forget`` or ``fedforget purge`` finishes it (deleting is
idempotent). Deleting inside the transaction instead would lose bytes of a request that rolls back.

Nothing purged is ever needed again: serving and retraining start only from valid artifacts
(chains from the longest valid prefix, FedShard from valid children, SAFE and fedavg from scratch).
A file whose sha256 is still recorded for a valid artifact (identical bytes) is kept. ``fedforget purge``
(and ``--check``) also hash every file under the store, so a copy under any name is found too; an
artifact a run rebuilt from data forgotten while it ran is purged like one a request invalidated.

Values computed on the forgotten samples go too: the training values (losses, counts) of the
``metrics.jsonl`` rows written before the request, and the measurements of ``forget --audit-before``,
of which the ledger keeps only the decision (memorised or not). Copies on deployed nodes, which the
coordinator cannot delete, count as gone only once their node acknowledges dropping them (``acks``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedforget.core import known_methods
from fedforget.core.method import Method
from fedforget.store.acks import copies_dropped_up_to
from fedforget.store.content_scan import scan_store
from fedforget.store.crash import crash_point

PURGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS purged(artifact TEXT NOT NULL, sha256 TEXT NOT NULL, request INTEGER NOT NULL,
    at REAL NOT NULL, done INTEGER NOT NULL, PRIMARY KEY(artifact, sha256)) WITHOUT ROWID;
"""
#: metrics values computed on the clients' training samples (losses and counts over them)
TRAINING_VALUES = ("train-loss", "train-examples", "samples", "samples-total")
#: ledger meta: the request up to which, and how many leading lines of, metrics.jsonl are redacted
METRICS_MARK = "metrics-redacted"
#: ledger meta written by ``forget --audit-before``, and the keys of it that are decisions, not measurements
AUDIT_KEY = "audit-before"
AUDIT_DECISION = ("request", "forgotten", "held_out", "verdict", "memorised")


def record_purges(db: sqlite3.Connection, request: int, invalidated: list[str]) -> int:
    """Inside the forget transaction: note every invalidated artifact version as to be purged."""
    rows = []
    for artifact in invalidated:
        hit = db.execute("SELECT sha256 FROM artifacts WHERE artifact=?", (artifact,)).fetchone()
        if hit:
            rows.append((artifact, hit[0], request, time.time()))
    db.executemany("INSERT OR IGNORE INTO purged(artifact, sha256, request, at, done) VALUES(?, ?, ?, ?, 0)", rows)
    return len(rows)


def _has_table(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name='purged'").fetchone() is not None


def purged_rows(db: sqlite3.Connection, only: int | None = None) -> list[dict[str, Any]]:
    """The purge rows of every request, or of request ``only``."""
    if not _has_table(db):
        return []
    where, args = ("WHERE request=? ", (only,)) if only is not None else ("", ())
    rows = db.execute(f"SELECT artifact, sha256, request, at, done FROM purged {where}ORDER BY request, artifact", args)
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
    #: rows of metrics.jsonl written before a request that still hold values computed on training samples
    training_rows: int = 0
    #: ledger meta keys that still hold values computed on forgotten samples
    ledger_values: list[str] = field(default_factory=list)
    #: deployed nodes that may still hold a copy of a purged artifact: partition → the request to confirm
    client_copies: dict[int, int] = field(default_factory=dict)
    #: with ``by_content``: how many files were hashed, and what under the store could not be hashed (links
    #: out of it, fifos and devices, unreadable paths): none of these can be proven free of purged bytes
    hashed_files: int = 0
    outside_links: list[str] = field(default_factory=list)
    special_files: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    #: files under the store's SQLite names that SQLite does not take as a sound database, and WAL files
    not_databases: list[str] = field(default_factory=list)

    @property
    def unprovable(self) -> bool:
        """Something under the store that a purge must not delete and a check cannot hash."""
        return bool(self.outside_links or self.special_files or self.unreadable or self.not_databases)

    @property
    def clean(self) -> bool:
        return not (self.files or self.pending or self.feature_caches or self.metrics_rows or self.training_rows
                    or self.ledger_values or self.client_copies or self.unprovable)

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "pending": self.pending, "feature-caches": self.feature_caches,
                "metrics-rows": self.metrics_rows, "training-rows": self.training_rows,
                "ledger-values": self.ledger_values,
                "client-copies": [{"partition": p, "request": r} for p, r in sorted(self.client_copies.items())],
                "hashed-files": self.hashed_files, "outside-links": self.outside_links,
                "special-files": self.special_files, "unreadable": self.unreadable,
                "not-databases": self.not_databases, "clean": self.clean}


def complete_purges(store: Any, method: Method | None, check: bool = False, by_content: bool = False,
                    run_saw_forgotten: bool = False) -> PurgeReport:
    """Delete every file a purge names (or only list them with ``check``); mark the purges done.

    ``method`` is the declaration of the store's method (None: a method no package runs): its
    ``feature_caches`` and ``copy_holders`` say which derived files and which nodes' copies a purge covers.

    Covers the store's artifacts, any file under ``clients/<partition>/`` named by a purged sha256
    (client caches), the feature caches of partitions that lost samples, per-client metrics rows of
    clients that left, the training values of metrics rows written before the newest request, and
    the audit's measurements. Copies on nodes whose state dir is not under ``clients/`` are reported
    until their node acknowledges. Idempotent: a second call finds nothing.

    ``by_content`` (``fedforget purge``) also hashes every file under the store
    (:func:`~fedforget.store.content_scan.scan_store`): one holding purged bytes goes whatever its name,
    and links out of the store and non-files are reported, never followed, opened or deleted. The purge
    after each ``forget`` goes by name only, so a request stays milliseconds whatever the store's size.

    Every metrics row so far is redacted while a purge is pending or with ``run_saw_forgotten`` (the run
    that just finished trained on data a request forgot while it ran): the mark covers a leading span of
    rows only, and rows a run wrote after it may have seen the data (a retrain killed before its end).
    """
    ledger = store.ledger()
    try:
        db = ledger.db
        rows = purged_rows(db)
        doomed = purged_shas(db)
        pending = sorted({r["artifact"] for r in rows if not r["done"]})
        seen = [(r["artifact"], r["sha256"]) for r in rows if not r["done"]]
        touched = _partitions_with_forgotten(db, since_done=True)
        gone = set(ledger.exhausted_partitions())
        last = ledger.last_request()
        mark = _metrics_mark(db)
        audit = ledger.get_meta(AUDIT_KEY)
        copies = unconfirmed_copies(db, visible_partitions(store.root), method)
    finally:
        ledger.close()
    report = PurgeReport(pending=pending, client_copies=copies)
    whole = run_saw_forgotten or bool(pending)  # a pending purge: rows since the mark may have seen its data
    files = files_named_by(store.root, doomed)
    if by_content:
        scan = scan_store(store.root)
        report.hashed_files = len(scan.hashed)
        report.outside_links, report.special_files, report.unreadable = (scan.outside_links, scan.special,
                                                                          scan.unreadable)
        report.not_databases = scan.not_databases
        files = sorted({*files, *(store.root / rel for rel, sha in scan.hashed.items() if sha in doomed)})
    report.files = [str(p.relative_to(store.root)) for p in files]
    caches = [p for part in sorted(touched) for pattern in feature_cache_patterns(method)
              for p in sorted((store.root / "clients" / str(part)).glob(pattern))]
    report.feature_caches = [str(p.relative_to(store.root)) for p in caches]
    span = _metrics_span(store.root, last, mark, whole)
    report.metrics_rows = scrub_metrics(store.root, gone, dry_run=True, span=span)
    report.training_rows = redact_training_values(store.root, span, dry_run=True)
    report.ledger_values = [AUDIT_KEY] if audit_leftover(audit) else []
    if check:
        return report
    for path in (*files, *caches):
        path.unlink(missing_ok=True)
        crash_point("purge:file-deleted")
    scrub_metrics(store.root, gone, dry_run=False, span=span)
    span = _metrics_span(store.root, last, mark, whole)  # after the scrub dropped rows
    redact_training_values(store.root, span, dry_run=False)
    ledger = store.ledger()
    try:
        with ledger.transaction("purge") as tx:
            if _has_table(tx):  # only the rows read above: a stale artifact recorded since is still to delete
                tx.executemany("UPDATE purged SET done=1 WHERE artifact=? AND sha256=? AND done=0", seen)
            ledger._set_meta(tx, "purge-done-request", ledger.last_request())
            if last:
                ledger._set_meta(tx, METRICS_MARK, {"request": last, "lines": span})  # the rows redacted, no more
            if audit_leftover(audit):
                ledger._set_meta(tx, AUDIT_KEY, audit_decision(audit))
    finally:
        ledger.close()
    return report


def feature_cache_patterns(method: Method | None) -> list[str]:
    """Every feature cache a method of this process declares (``method``'s first): a cache holds features of raw
    samples, so a purge drops any it finds, whichever method's run left it in the client's folder."""
    return list(dict.fromkeys([*(method.feature_caches if method else ()),
                               *(p for m in known_methods.families() for p in m.feature_caches)]))


def complete_requests(ledger: Any) -> list[int]:
    """Requests that are done everywhere: retrained, every client that held their samples acknowledged, their
    purge finished. Their raw record names have no further use: the coordinator scrubs them
    (:mod:`fedforget.unlearning.scrub`), never a purge a run finishes."""
    from fedforget.store.acks import request_acks

    db = ledger.db
    named = [int(r[0]) for r in db.execute("SELECT DISTINCT request FROM record_names ORDER BY request")]
    if not named:
        return []
    retrained = ledger.retrained_watermark()
    acks = request_acks(ledger)
    open_purges = {int(r[0]) for r in db.execute("SELECT DISTINCT request FROM purged WHERE done=0")}
    return [r for r in named if r <= retrained and not (acks.get(r) or {}).get("pending") and r not in open_purges]


def drop_receipts_with_names(root: Path, requests: list[int]) -> list[int]:
    """Delete the receipts of ``requests`` that carry their record names (``record_openings``: a receipt
    issued before the request was complete), which would otherwise outlive the scrub; the next
    ``fedforget receipt N`` (the service: the next fetch) issues one without them. Returns the requests whose
    receipt was deleted."""
    from fedforget.store.bounded_read import read_bounded
    from fedforget.store.log_proof import MAX_RECEIPT_BYTES

    dropped = []
    for request in requests:
        path = root / "receipts" / f"request-{int(request)}.json"
        try:
            receipt = json.loads(read_bounded(path, MAX_RECEIPT_BYTES, "receipt"))
        except (OSError, ValueError):
            continue
        if isinstance(receipt, dict) and receipt.get("record_openings"):
            path.unlink(missing_ok=True)
            dropped.append(int(request))
    return dropped


def finish_pending_purges(store: Any, method: Method | None, watermark: int) -> PurgeReport | None:
    """At the end of a training or retrain run (its ``watermark``): delete what it built from data a request
    forgot while it ran (recorded stale and purged by ``Ledger.record_artifact``), redact the training values
    it computed on that data, and finish a purge a crash left pending. Runs only once the run is recorded,
    since a stale module can be the base of a later one; None when there was nothing to do."""
    ledger = store.ledger()
    try:
        db = ledger.db
        if not _has_table(db):
            return None
        pending = db.execute("SELECT 1 FROM purged WHERE done=0 LIMIT 1").fetchone() is not None
        saw = db.execute("SELECT 1 FROM artifacts a JOIN purged p ON p.artifact = a.artifact AND p.sha256 = a.sha256 "
                         "WHERE a.watermark=? AND a.valid=0 AND p.request > ? LIMIT 1",
                         (watermark, watermark)).fetchone() is not None
    finally:
        ledger.close()
    return complete_purges(store, method, run_saw_forgotten=saw) if pending or saw else None


def purge_mark(db: sqlite3.Connection) -> int:
    """The newest request whose purged artifacts a ``query.forget`` sent now names (0 if none)."""
    if not _has_table(db):
        return 0
    return int(db.execute("SELECT MAX(request) FROM purged").fetchone()[0] or 0)


def visible_partitions(root: Path) -> set[int]:
    """Partitions whose node state dir is the store's ``clients/<partition>/`` (simulation): the
    coordinator deletes and checks their copies itself. A deployed node's state dir is elsewhere."""
    folder = Path(root) / "clients"
    if not folder.is_dir():
        return set()
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit() and p.is_dir()}


def unconfirmed_copies(db: sqlite3.Connection, visible: set[int], method: Method | None) -> dict[int, int]:
    """Possible holders the coordinator cannot see whose node has not confirmed dropping their copies:
    partition → the request it has yet to confirm. Which nodes keep copies of which artifacts is the
    store's method's to say (its declaration's ``copy_holders``; none keeps any without one)."""
    if method is None or method.copy_holders is None or not _has_table(db):
        return {}
    confirmed = copies_dropped_up_to(db)
    holders = method.copy_holders(db)
    return {p: r for p, r in sorted(holders.items()) if p not in visible and confirmed.get(p, 0) < r}


def audit_leftover(value: Any) -> bool:
    """Whether the audit's ledger record still holds measurements (anything beyond the decision)."""
    return isinstance(value, dict) and bool(set(value) - set(AUDIT_DECISION))


def audit_decision(measured: dict[str, Any]) -> dict[str, Any]:
    """What the ledger keeps of an audit: whether the forgotten samples were memorised (the loss-threshold
    attack told them from held-out samples with 95% confidence), not the losses or AUCs behind it."""
    if "memorised" in measured:
        memorised = measured["memorised"]
    else:
        result = measured.get("result")
        ci = result.get("loss_threshold_ci95") if isinstance(result, dict) else None
        usable = measured.get("verdict") is None and isinstance(ci, list) and ci and isinstance(ci[0], int | float)
        memorised = bool(ci[0] > 0.5) if usable else None
    return {**{k: measured.get(k) for k in AUDIT_DECISION}, "memorised": memorised}


def _metrics_mark(db: sqlite3.Connection) -> dict[str, int] | None:
    row = db.execute("SELECT value FROM meta WHERE key=?", (METRICS_MARK,)).fetchone()
    try:
        mark = json.loads(row[0]) if row else None
    except ValueError:
        return None
    if not (isinstance(mark, dict) and all(isinstance(mark.get(k), int) for k in ("request", "lines"))):
        return None
    return mark


def _line_count(root: Path) -> int:
    path = root / "metrics.jsonl"
    return len(path.read_text(encoding="utf-8").splitlines()) if path.is_file() else 0


def _metrics_span(root: Path, last_request: int, mark: dict[str, int] | None, whole: bool) -> int:
    return _line_count(root) if whole else _redacted_span(root, last_request, mark)


def _redacted_span(root: Path, last_request: int, mark: dict[str, int] | None) -> int:
    """How many leading lines of metrics.jsonl were written by runs whose data held a forgotten sample:
    all of them while a request is newer than the mark, else the lines the last purge covered (later
    lines come from retrains, which never see forgotten data)."""
    if not last_request:
        return 0
    lines = _line_count(root)
    if mark is None or mark["request"] < last_request:
        return lines
    return min(mark["lines"], lines)


def redact_training_values(root: Path, span: int, dry_run: bool) -> int:
    """Drop the training values (``TRAINING_VALUES``) of the first ``span`` rows of metrics.jsonl; the
    row stays with what the plan alone determines (round, bytes, client-rounds, test-split evaluations)."""
    from fedforget.store.atomic import atomic_write_bytes

    path = root / "metrics.jsonl"
    if not span or not path.is_file():
        return 0
    lines = path.read_text(encoding="utf-8").splitlines()
    changed = 0
    for i, line in enumerate(lines[:span]):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and any(k in row for k in TRAINING_VALUES):
            changed += 1
            lines[i] = json.dumps({k: v for k, v in row.items() if k not in TRAINING_VALUES}, sort_keys=True)
    if changed and not dry_run:
        atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))
    return changed


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


def scrub_metrics(root: Path, partitions: set[int], dry_run: bool, span: int | None = None) -> int:
    """Per-client metrics rows of clients that left: dropped, and their entries in per-client maps; only
    among the first ``span`` rows (all without it), those of runs that still had the clients' data."""
    from fedforget.store.atomic import atomic_write_bytes

    path = root / "metrics.jsonl"
    if not partitions or not path.is_file():
        return 0
    kept, changed = [], 0
    lines = path.read_text(encoding="utf-8").splitlines()
    span = len(lines) if span is None else span
    for n, line in enumerate(lines):
        if n >= span:
            kept.append(line)
            continue
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
