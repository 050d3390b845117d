"""What a receipt commits to in the ledger, so that editing the ledger afterwards is caught.

A receipt carries ``ledger_digest``: sha256 digests of the ledger rows it certifies — the request's
row, its ``forgotten`` rows, its ``purged`` rows (artifact, sha256, time; not ``done``, which a later
purge sets) — and of the serving plan at issue time, with the point in the ledger's history it was
taken at (last request, number of retrains). ``receipt --check --store S`` recomputes them. The
request, forgotten and purged rows never change once the request committed, so any difference is an
edit. The serving plan legitimately moves on with a later request or retrain; it is compared only
while neither happened.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from fedforget.store.check_receipts import request_digests
from fedforget.store.check_receipts import rows_digest as _digest
from fedforget.store.ledger import Ledger

DIGEST_FIELD = "ledger_digest"


def _has_table(db: sqlite3.Connection, name: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def ledger_state(ledger: Ledger, request: int) -> dict[str, Any]:
    """The digests of request ``request``'s rows and of the serving plan, as the ledger holds them now."""
    db = ledger.db
    request_row, _ = _digest(db.execute("SELECT id, at, kind, spec, samples, units, invalidated FROM requests "
                                        "WHERE id=?", (request,)))
    forgotten, forgotten_rows = _digest(db.execute("SELECT sample, unit FROM forgotten WHERE request=? "
                                                   "ORDER BY sample", (request,)))
    purged, purged_rows = _digest(db.execute("SELECT artifact, sha256, at FROM purged WHERE request=? ORDER BY "
                                             "artifact, sha256", (request,))) if _has_table(db, "purged") else \
        _digest(())
    serving, _ = _digest([[json.dumps(ledger.serving(), sort_keys=True)]])
    return {"algorithm": "sha256", "request": request_row, "forgotten": forgotten, "forgotten_rows": forgotten_rows,
            "purged": purged, "purged_rows": purged_rows, "serving": serving,
            "as_of": {"last_request": ledger.last_request(),
                      "retrains": db.execute("SELECT COUNT(*) FROM retrains").fetchone()[0]}}


def compare_ledger(ledger: Ledger, body: dict[str, Any]) -> dict[str, Any]:
    """Compare a checked receipt's ``ledger_digest`` with ``ledger``.

    Returns ``{"digest": bool, "differs": [parts...], "serving": "equal" | "differs" | "moved on" | None}``;
    ``differs`` names each part that no longer matches, with row counts where they help."""
    signed = body.get(DIGEST_FIELD)
    if not isinstance(signed, dict):
        return {"digest": False, "differs": [], "serving": None}
    request = body["request"]["id"]
    now = ledger_state(ledger, request)
    differs = []
    if not ledger.db.execute("SELECT 1 FROM requests WHERE id=?", (request,)).fetchone():
        differs.append(f"request #{request} is not in the ledger")
    elif signed.get("request") not in request_digests(ledger.db, request):
        differs.append(f"request #{request}'s row")
    for part in ("forgotten", "purged"):
        if now[part] != signed.get(part):
            differs.append(f"request #{request}'s {part} rows (receipt: {signed.get(f'{part}_rows')}, "
                           f"ledger: {now[f'{part}_rows']})")
    serving = "moved on"
    if now["as_of"] == signed.get("as_of"):
        serving = "equal" if now["serving"] == signed.get("serving") else "differs"
        if serving == "differs":
            differs.append("the serving plan (no request or retrain since the receipt)")
    return {"digest": True, "differs": differs, "serving": serving}
