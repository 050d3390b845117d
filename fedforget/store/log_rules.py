"""What a writer without the coordinator's key may append to the ledger's log, judged by what each entry changes.

A ServerApp run writes the store without the key: it trains artifacts, records their lineage and history, the
retrains it ran, the purges of what it built from data forgotten meanwhile (a purge row added, or marked done),
and the clients' acknowledgements it received. None of that can take a forget back. So an entry that no head of
the coordinator covers in its own transaction (the check of the heads ties an entry that says it is the
coordinator's to the head the coordinator signed right after it) may not:

- insert, delete or change a row of ``requests`` (a forget request; what is forgotten follows from the requests,
  ``fedforget.store.index_check``, and so does every raw record name a request keeps, ``log_check``);
- delete a ``purged`` row, unless the same entry puts it back with only its ``done`` mark changed;
- lower or drop a client's acknowledgement (``meta`` ``acks``, which the log keeps in clear for this);
- scrub raw record names (only a coordinator's ``scrub`` entry counts as one).

What an entry declares (``kind``, ``writer``) decides nothing here but which entries must be signed: a run that
declares itself the coordinator is refused by the check of the heads, and one that declares an innocent kind is
held to these rules like any other.
"""

from __future__ import annotations

import json
from typing import Any

from fedforget.store.acks import ACKS, COPIES_MARK
from fedforget.store.log import DIGEST_PREFIX

#: What a refusal tells the operator a run may do, after naming what the entry did.
RUN_MAY = "a run without the coordinator's key may only add to the ledger"
#: ``purged`` columns that name a purge; only ``done`` (the last) may change
PURGE_KEY = 4
#: acks marks that only grow
MARKS = ("up_to_request", COPIES_MARK)


def is_coordinator(entry: dict[str, Any]) -> bool:
    """Whether ``entry`` says the coordinator wrote it (the heads' check holds it to a head signed right after)."""
    return entry.get("writer") == "coordinator"


def run_entry_problem(seq: int, entry: dict[str, Any], rows: list[Any]) -> str | None:
    """Why entry ``seq``, written without the key, changes what only the coordinator may (None: it does not)."""
    added: dict[str, list[list[Any]]] = {}
    removed: dict[str, list[list[Any]]] = {}
    for table, op, values in rows:
        (added if op == "+" else removed).setdefault(str(table), []).append(list(values))
    what = _requests(added, removed) or _purges(added, removed) or _acks(added, removed)
    if what is None:
        return None
    return (f"the ledger's log entry {seq} ({str(entry.get('kind'))[:40]}), written without the coordinator's key, "
            f"{what}: {RUN_MAY}")


def _requests(added: dict[str, list[list[Any]]], removed: dict[str, list[list[Any]]]) -> str | None:
    gone = {_id(r) for r in removed.get("requests", [])}
    new = {_id(r) for r in added.get("requests", [])}
    if gone & new:
        return f"changes forget request #{min(gone & new)}"
    if gone:
        return f"removes forget request #{min(gone)}"
    if new:
        return f"inserts forget request #{min(new)}"
    return None


def _id(row: list[Any]) -> Any:
    return row[0] if row else None


def _purges(added: dict[str, list[list[Any]]], removed: dict[str, list[list[Any]]]) -> str | None:
    kept = {json.dumps(r[:PURGE_KEY], default=repr) for r in added.get("purged", []) if len(r) > PURGE_KEY}
    for row in removed.get("purged", []):
        if len(row) <= PURGE_KEY or json.dumps(row[:PURGE_KEY], default=repr) not in kept:
            return f"removes the purge of artifact {str(row[0] if row else '?')[:60]}"
    return None


def _acks(added: dict[str, list[list[Any]]], removed: dict[str, list[list[Any]]]) -> str | None:
    before = [r for r in removed.get("meta", []) if len(r) == 2 and r[0] == ACKS]
    after = [r for r in added.get("meta", []) if len(r) == 2 and r[0] == ACKS]
    if not before:
        if after and _clear(after[0][1]) is None:
            return "records acknowledgements the log cannot show"
        return None
    old = _clear(before[0][1])
    if old is None:  # a log written before it kept acknowledgements in clear: nothing to compare with
        return None if not after or _clear(after[0][1]) is not None else \
            "records acknowledgements the log cannot show"
    new = _clear(after[0][1]) if after else None
    if new is None:
        return "drops the clients' acknowledgements"
    for partition, mark in sorted(old.items()):
        now = new.get(partition)
        for name in MARKS:
            was = _mark(mark, name)
            if was and (not isinstance(now, dict) or _mark(now, name) < was):
                return f"lowers partition {str(partition)[:20]}'s acknowledgement ({name} {was})"
    return None


def _clear(value: Any) -> dict[str, Any] | None:
    """An acks value the log kept in clear (None: a digest, or not an acks table)."""
    if not isinstance(value, str) or value.startswith(DIGEST_PREFIX):
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _mark(entry: Any, name: str) -> int:
    value = entry.get(name) if isinstance(entry, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
