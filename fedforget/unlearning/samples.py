"""``fedforget samples`` and ``fedforget locate``: find what to forget, from the ledger's sample index.

Training records every sample id under its unit, a client's slice ``PARTITION:SLICE`` (the ``units`` and
``samples`` tables of ``ledger.sqlite``); ``forget`` resolves ids through the same index. Each answer also
names the node holding the sample and, for a node of public records, the record (``NODE:RECORD_ID``); a
node's own records are named by their owner only (``fedforget.store.records``). No torch, no Flower:
read-only look-ups in milliseconds.
"""

from __future__ import annotations

from typing import Any

from fedforget.methods.registry import held_samples
from fedforget.store import Store
from fedforget.store.ledger import FIND_COMMANDS, LedgerUsageError
from fedforget.store.records import node_named, node_of_partition, record_of, record_sample_id


def _partitions(db) -> list[int]:  # noqa: ANN001 - a sqlite3.Connection
    return [int(r[0]) for r in db.execute("SELECT DISTINCT partition FROM units ORDER BY partition")]


def _ranges(values: list[int]) -> str:
    return f"{values[0]}..{values[-1]}" if values else "none"


def client_samples(store: Store, client: int, slice_: int | None = None) -> dict[str, Any]:
    """Client ``client``'s slices (or only ``slice_``): each with its unit, sample ids, and which are forgotten.

    Raises :class:`LedgerUsageError` (one line) for a client or slice the store does not have."""
    ledger = store.ledger()
    try:
        db = ledger.db
        units = [(str(u), int(n)) for u, n in db.execute("SELECT unit, size FROM units WHERE partition=?", (client,))]
        if not units:
            raise LedgerUsageError(f"unknown client {client}: this store has clients (partitions) "
                                   f"{_ranges(_partitions(db))}")
        units.sort(key=lambda un: int(un[0].split(":")[1]))
        if slice_ is not None:
            chosen = [un for un in units if un[0] == f"{client}:{slice_}"]
            if not chosen:
                raise LedgerUsageError(f"unknown slice {slice_} of client {client}: it has slices "
                                       f"{_ranges([int(u.split(':')[1]) for u, _ in units])}")
            units = chosen
        out = []
        for unit, _ in units:
            ids = [int(r[0]) for r in db.execute("SELECT sample FROM samples WHERE unit=? ORDER BY sample", (unit,))]
            gone = {int(s): int(r) for s, r in db.execute("SELECT sample, request FROM forgotten WHERE unit=?",
                                                           (unit,))}
            out.append({"slice": int(unit.split(":")[1]), "unit": unit, "samples": ids,
                        "forgotten": sorted(gone), "held": len(ids) - len(gone)})
    finally:
        ledger.close()
    node = node_of_partition(store.manifest(), client)
    return {"store": str(store.root), "client": client, "slices": out,
            "samples": sum(len(s["samples"]) for s in out), "forgotten": sum(len(s["forgotten"]) for s in out),
            "node": None if node is None else node.name, "records": None if node is None else node.records}


def node_samples(store: Store, name: str, slice_: int | None = None) -> dict[str, Any]:
    """:func:`client_samples` of the node called ``name`` (its partition); :class:`RecordError` for a name the
    store's manifest does not hold."""
    return client_samples(store, node_named(store.manifest(), name).partition, slice_)


def locate_sample(store: Store, sample: int) -> dict[str, Any]:
    """Which client, slice and unit hold ``sample``, and whether (by which request) it is forgotten.

    Raises :class:`LedgerUsageError` (one line) for an id the store does not hold."""
    manifest = store.manifest()
    for held in held_samples():
        if sample in set(manifest.get(held.key) or []):
            raise LedgerUsageError(f"sample {sample} is in the server-held {held.name}, not in any client's data "
                                   f"(the {held.name} is never forgotten)")
    ledger = store.ledger()
    try:
        db = ledger.db
        row = db.execute("SELECT s.unit, u.partition FROM samples s JOIN units u ON u.unit = s.unit "
                         "WHERE s.sample=?", (sample,)).fetchone() if 0 <= sample < 2**63 else None
        if row is None:
            total = db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
            raise LedgerUsageError(f"unknown sample {sample}: not in this store's training data ({total} samples; "
                                   f"ids index the task's train split); {FIND_COMMANDS}")
        unit, partition = str(row[0]), int(row[1])
        gone = db.execute("SELECT request FROM forgotten WHERE sample=?", (sample,)).fetchone()
    finally:
        ledger.close()
    node = node_of_partition(store.manifest(), partition)
    return {"store": str(store.root), "sample": sample, "client": partition, "slice": int(unit.split(":")[1]),
            "unit": unit, "forgotten": gone is not None, "request": None if gone is None else int(gone[0]),
            "node": None if node is None else node.name, "records": None if node is None else node.records,
            "record": None if node is None else record_of(node, sample)}


def locate_record(store: Store, record: str) -> dict[str, Any]:
    """:func:`locate_sample` of the record ``NODE:RECORD_ID``, naming the record as given.

    Raises :class:`RecordError` (one line) for text that is not a record, or a record the store does not hold."""
    sample = record_sample_id(store.manifest(), record)
    return {**locate_sample(store, sample), "record": record}
