"""A request's state, read from the ledger the way ``status``, ``purge --check`` and receipts read it.

States, in order: ``accepted`` (the service holds it, the ledger not yet), ``applied`` (the ledger
committed it: artifacts invalidated, serving re-planned), ``purged`` (every file it invalidated is
deleted: its ``purged`` rows are done), ``acknowledged`` (every client holding its samples confirmed
deleting them, ``status``'s acknowledgements), ``retrained`` (a retrain covered it: clients dropped the
data for good and the invalid artifacts were rebuilt). ``state`` is the furthest one reached; a
request can be retrained before every client acknowledged, so ``states`` gives each flag.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from fedforget.store import Store
from fedforget.store.acks import ACKS, request_acks
from fedforget.store.ledger import LEDGER, Ledger
from fedforget.store.purge import purged_rows
from fedforget.store.record_commitments import openings

ORDER = ("accepted", "applied", "purged", "acknowledged", "retrained")


def ledger_states(store: Store, only: int | None = None) -> dict[int, dict[str, Any]]:
    """ledger request id → ``state``, ``states`` (each flag), timestamps and what it named, from one snapshot;
    for every request, or only for request ``only`` (what one answer needs: its cost does not grow with
    the ledger's other requests)."""
    return ledger_states_of(store, None if only is None else [only])


def ledger_states_of(store: Store, ids: Collection[int] | None) -> dict[int, dict[str, Any]]:
    """:func:`ledger_states` for every request (``None``) or for ``ids`` alone, from one snapshot: a group of
    forgets reads its answers' states at once, instead of one reader per answer contending with the writer."""
    # a few requests' states (the answers to forgets) are read through a read-only handle: no schema script,
    # no log writer, a fraction of a millisecond instead of one per answer
    ledger = Ledger.reader(store.root / LEDGER) if ids is not None else store.ledger()
    requests: list[dict[str, Any]] = []
    purged: dict[int, list[bool]] = {}
    acks: dict[int, Any] = {}
    try:
        with ledger.snapshot():
            for only in [None] if ids is None else sorted(set(ids)):
                requests += ledger.requests(only)
                for row in purged_rows(ledger.db, only):
                    purged.setdefault(int(row["request"]), []).append(bool(row["done"]))
                acks.update(request_acks(ledger, only))
            ack_rows = ledger.get_meta(ACKS) or {}
            retrains = ledger.db.execute("SELECT watermark, at FROM retrains ORDER BY id").fetchall()
            opened = {r["request"]: openings(ledger.db, r["request"]) for r in requests if r["spec"].get("records")}
    finally:
        ledger.close()
    out = {}
    for r in requests:
        rid = r["request"]
        a = acks.get(rid, {"owners": [], "acknowledged": [], "pending": []})
        flags = {"accepted": True, "applied": True, "purged": all(purged.get(rid, [])),
                 "acknowledged": bool(a["owners"]) and not a["pending"], "retrained": r["state"] == "retrained"}
        ack_times = [float((ack_rows.get(str(p)) or {}).get("at", 0.0)) for p in a["acknowledged"]]
        out[rid] = {
            "ledger_request": rid, "state": [s for s in ORDER if flags[s]][-1], "states": flags,
            "applied_at": r["at"],
            "acknowledged_at": max(ack_times) if flags["acknowledged"] and ack_times else None,
            "retrained_at": next((at for wm, at in retrains if wm >= rid), None),
            "kind": r["kind"], "spec": r["spec"], "samples": r["samples"], "units": r["units"],
            "invalidated": r["invalidated"], "latency_ms": r["latency-ms"], "acknowledgements": a,
            "record_openings": opened.get(rid, []),
        }
    return out


def accepted_state() -> dict[str, Any]:
    """The state of a request the service holds but the ledger does not (yet)."""
    return {"ledger_request": None, "state": "accepted", "applied_at": None, "acknowledged_at": None,
            "retrained_at": None, "states": {s: s == "accepted" for s in ORDER}}
