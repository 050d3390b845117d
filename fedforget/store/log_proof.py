"""A receipt's proof that its request is in the ledger's log: the request's ``forget`` entry, whole, and an
RFC 9162 inclusion proof of it under a head the coordinator signed.

Whoever holds the receipt and the coordinator's public key can check, without the store, that the entry (what
was forgotten: the request's row with record *commitments*, the artifacts it invalidated) is under that head;
whoever also holds a copy of the log can check that the head is the log's (its first ``size`` entries give its
root), so the log cannot have been rewritten or cut back under the receipt without that showing.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from fedforget.store.log import has_log, latest_head
from fedforget.store.merkle import inclusion_proof

#: The field of a receipt that holds its log section.
LOG_FIELD = "log"
#: How the store check says the ledger no longer holds what the newest receipt's head signed.
ROLLED_BACK_PAST_RECEIPT = "the ledger's log was rolled back past a receipt"


class UnloggedRequest(ValueError):
    """A request the ledger holds that no coordinator entry of its log inserted and its genesis did not adopt."""


def forget_entry(db: sqlite3.Connection, request: int) -> tuple[int, str, str] | None:
    """``(seq, entry text, leaf hex)`` of the coordinator's log entry that inserted request ``request``'s row,
    judged by the rows it wrote, not the kind it declares (None: the request predates the log, and the log's
    genesis entry adopted it). Raises :class:`UnloggedRequest` for a request neither inserted nor adopted."""
    for seq, text, leaf in db.execute(
            "SELECT seq, entry, leaf FROM log WHERE seq > 0 AND CASE WHEN json_valid(entry) THEN "
            "json_extract(entry, '$.request') = ? END ORDER BY seq", (request,)):
        entry = json.loads(text)
        if entry.get("writer") == "coordinator" and _inserts(entry, request):
            return int(seq), str(text), str(leaf)
    genesis = db.execute("SELECT entry FROM log WHERE seq = 0").fetchone()  # an adopted store's: its rows
    try:
        if genesis is not None and _inserts(json.loads(genesis[0]), request):
            return None
    except ValueError:
        pass
    raise UnloggedRequest(f"request {request} has no entry in the ledger's log that the coordinator wrote, and the "
                          "log did not adopt it: the store is not what it claims")


def _inserts(entry: Any, request: int) -> bool:
    rows = entry.get("rows") if isinstance(entry, dict) else None
    return isinstance(rows, list) and any(
        isinstance(r, list) and len(r) == 3 and r[0] == "requests" and r[1] == "+" and isinstance(r[2], list)
        and r[2][:1] == [request] for r in rows)


def log_section(db: sqlite3.Connection, request: int) -> dict[str, Any] | None:
    """The receipt's ``log`` section under the newest signed head (inside the caller's read snapshot): ``head``
    (the signed head as stored), ``entry`` (the forget entry's position, None when the request predates the
    log), ``leaf``, ``text`` (its canonical bytes) and ``proof`` (hex hashes, leaf to root). None: no signed head."""
    if not has_log(db):
        return None
    head = latest_head(db)
    if head is None:
        return None
    size = int(head["size"])
    found = forget_entry(db, request)
    if found is None or found[0] >= size:
        return {"head": head, "entry": None}
    seq, text, leaf = found
    leaves = [bytes.fromhex(r[0]) for r in db.execute("SELECT leaf FROM log WHERE seq < ? ORDER BY seq", (size,))]
    return {"head": head, "entry": seq, "leaf": leaf, "text": text,
            "proof": [p.hex() for p in inclusion_proof(seq, leaves)]}


#: A receipt is far below this (``fedforget.unlearning.receipt.MAX_RECEIPT_BYTES``).
MAX_RECEIPT_BYTES = 16 * 2**20


def newest_receipt_head(store_root: Path) -> dict[str, Any] | None:
    """The log head certified by the store's receipt of the highest request number (only that file is read,
    bounded), or None: no receipt, or one without a log section. A store rolled back past it no longer holds
    the entries that head signed."""
    import json
    import os
    import re

    from fedforget.store.bounded_read import read_bounded

    newest: tuple[int, str] | None = None
    try:
        with os.scandir(Path(store_root) / "receipts") as entries:
            for e in entries:
                match = re.fullmatch(r"request-([0-9]{1,19})\.json", e.name)
                if match and (newest is None or int(match[1]) > newest[0]):
                    newest = (int(match[1]), e.name)
    except OSError:
        return None
    if newest is None:
        return None
    try:
        receipt = json.loads(read_bounded(Path(store_root) / "receipts" / newest[1], MAX_RECEIPT_BYTES, "receipt"))
        head = receipt[LOG_FIELD]["head"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not isinstance(head, dict) or not isinstance(head.get("size"), int) or not isinstance(head.get("root"), str):
        return None
    return head
