"""The store's own receipts agree with its ledger: what the coordinator certified was not taken back since.

Every receipt in ``receipts/`` certifies one forget request; the full store check reads each one (bounded) and
refuses the store when:

- the ledger no longer holds the request, or holds another row under its number (the receipt's
  ``ledger_digest`` of the row, with the record names in its spec as an older receipt saw them);
- the receipt was issued under another log than the ledger's (a receipt of another store, or this store's log
  replaced);
- its log entry is not the entry that inserted the request in this log, or it says its request predates the
  log while the log's genesis entry did not adopt it.

A receipt that is not one (unreadable, not JSON, no request number) certifies nothing and is left to
``fedforget receipt --check``. The signatures are not checked here: a receipt the coordinator did not sign
cannot take anything back either, it can only fail to match.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedforget.store.bounded_read import read_bounded
from fedforget.store.log_check import Replay
from fedforget.store.log_proof import LOG_FIELD, MAX_RECEIPT_BYTES

RECEIPTS = "receipts"
NAME = re.compile(r"request-([0-9]{1,19})\.json")
#: The ``ledger_digest`` key holding the request row's digest (``fedforget.unlearning.receipt_ledger``).
DIGEST_FIELD = "ledger_digest"
REQUEST_COLUMNS = "id, at, kind, spec, samples, units, invalidated"


def rows_digest(rows: Iterable[Any]) -> tuple[str, int]:
    """sha256 over one canonical JSON line per row (streamed: a request may forget millions of samples)."""
    h, count = hashlib.sha256(), 0
    for row in rows:
        h.update(json.dumps(list(row), separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n")
        count += 1
    return h.hexdigest(), count


def request_digests(db: sqlite3.Connection, request: int) -> set[str]:
    """The digests a receipt may hold of request ``request``'s row: as it is, and with its kept record names in
    its spec (as a receipt issued before the ledger kept commitments saw it). Empty: no such request."""
    row = db.execute(f"SELECT {REQUEST_COLUMNS} FROM requests WHERE id=?", (request,)).fetchone()
    if row is None:
        return set()
    out = {rows_digest([row])[0]}
    if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='record_names'").fetchone():
        names = [r[0] for r in db.execute("SELECT record FROM record_names WHERE request=? ORDER BY record",
                                          (request,))]
        if names:
            try:
                spec = json.loads(row[3])
                spec["records"] = names
                out.add(rows_digest([(*row[:3], json.dumps(spec), *row[4:])])[0])
            except (ValueError, TypeError):
                pass
    return out


def receipt_files(root: Path) -> list[tuple[int, Path]]:
    """``(request, path)`` of each receipt file in the store, by request."""
    try:
        with os.scandir(Path(root) / RECEIPTS) as entries:
            found = [(int(m[1]), Path(e.path)) for e in entries if (m := NAME.fullmatch(e.name))]
    except OSError:
        return []
    return sorted(found)


def receipt_problems(root: Path, db: sqlite3.Connection, log: Replay | None) -> list[str]:
    """Each receipt in the store against the ledger and its log (``log``: the replay of the whole log, None when
    the ledger has none), inside the caller's read transaction. At most one problem line."""
    for request, path in receipt_files(root):
        try:
            body = json.loads(read_bounded(path, MAX_RECEIPT_BYTES, "receipt"))
            named = body["request"]["id"]
        except (OSError, ValueError, TypeError, KeyError):
            continue
        where = f"{RECEIPTS}/{path.name}"
        if named != request or isinstance(named, bool):
            return [f"{where} certifies request #{str(named)[:20]}, not the request its name says"]
        held = request_digests(db, request)
        if not held:
            return [f"{where} certifies forget request #{request}, which the ledger no longer holds"]
        problem = _log_problem(where, request, body.get(LOG_FIELD), db, log)
        if problem:
            return [problem]
        digest = body.get(DIGEST_FIELD)
        signed = digest.get("request") if isinstance(digest, dict) else None
        if signed is not None and signed not in held:
            return [f"{where} certifies forget request #{request} as another row than the ledger holds"]
    return []


def _log_problem(where: str, request: int, section: Any, db: sqlite3.Connection, log: Replay | None) -> str | None:
    if not isinstance(section, dict) or not isinstance(section.get("head"), dict):
        return None  # issued before receipts carried a log section
    if log is None:
        return f"{where} was issued under a log the ledger no longer has"
    if section["head"].get("log") != log.log_id:
        return f"{where} was issued under another log than the ledger's (a receipt of another store, or the log " \
               "was replaced)"
    seq = section.get("entry")
    inserted = log.requested.get(request)
    if seq is None:
        if inserted != 0:
            return f"{where} says forget request #{request} predates the log, but the log's genesis entry did not " \
                   "adopt it"
        return None
    row = db.execute("SELECT leaf FROM log WHERE seq=?", (seq,)).fetchone() if isinstance(seq, int) else None
    if inserted != seq or row is None or row[0] != section.get("leaf"):
        return f"{where} proves a log entry that is not the one that recorded forget request #{request}"
    return None
