"""What a writer without the coordinator's key may append to the ledger's log, judged by what each entry changes.

A ServerApp run writes the store without the key: it trains artifacts, records their lineage and history, the
retrains it ran, the purges of what it built from data forgotten meanwhile (a purge row added, or marked done),
the clients' acknowledgements it received, its method's counters and the values it caches (serving plan,
accuracy, the manifest's pins). None of that can take a forget back. An entry that no head of the coordinator
covers in its own transaction (the check of the heads ties an entry that says it is the coordinator's to the
head the coordinator signed right after it) is held to an allow-list, :data:`RUN_WRITES`: per logged table,
what a run may do to its rows. A row is named by its key columns; a row removed and added back under the same
key is a change of the columns that differ, a row only removed is a deletion, a row only added an insertion.
Anything the list does not grant is refused, and so is a write to a table it does not name.

=============== ============ ================================================== ================================
table           insert       change (columns)                                   delete
=============== ============ ================================================== ================================
``artifacts``   yes          ``sha256``, ``watermark``, ``valid``, ``meta``;     no
                             made valid again only when rebuilt (a new
                             ``sha256`` and a higher ``watermark``)
``lineage``     yes          (key only)                                         only of an artifact the entry
                                                                                records anew
``history``     yes          no                                                 no
``retrains``    yes          no                                                 no
``purged``      yes          ``done`` (marked done, or not done again)          no
``meta``        the keys of  ``value`` of those keys; ``acks`` only grows       no
                RUN_META
``dp_exposure`` yes          (key only)                                         only of an artifact whose
                                                                                counter the entry records anew
``dp_budget``   yes          ``used``, ``k``                                    no
``requests``    no           no                                                 no
=============== ============ ================================================== ================================

So a run cannot remove, alter or invent a forget request (what is forgotten follows from the requests,
``fedforget.store.index_check``, and so does every raw record name a request keeps, ``log_check``), remove a
purge, lower or drop a client's acknowledgement (``meta`` ``acks``, which the log keeps in clear for this),
make an artifact a forget invalidated valid again without rebuilding it, or unlink an artifact from the data
it saw. Raw record names are not logged: only a coordinator's ``scrub`` entry removes them (``log_check``).

What an entry declares (``kind``, ``writer``) decides nothing here but which entries must be signed: a run that
declares itself the coordinator is refused by the check of the heads, and one that declares an innocent kind is
held to these rules like any other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedforget.store.acks import ACKS, COPIES_MARK
from fedforget.store.log import DIGEST_PREFIX

#: What a refusal tells the operator a run may do, after naming what the entry did.
RUN_MAY = "a run without the coordinator's key may only add to the ledger what a run writes"
#: acks marks that only grow
MARKS = ("up_to_request", COPIES_MARK)
#: ``meta`` keys a run writes: the plan, the serving plan and what it leaves unbuilt, cached accuracy (the
#: server's, and the nodes' with ``evaluate-on-nodes``) and a method's training values, the manifest's pins,
#: acknowledgements, and a finished purge's marks
RUN_META = frozenset({"plan", "serving", "unbuilt", "accuracy", "federated-accuracy", "client-angles",
                      "first-per-class-accuracy",
                      "manifest-identity", "manifest-sha256", ACKS, "purge-done-request", "metrics-redacted",
                      "audit-before"})

#: ``problem(removed, added)`` of one changed row (both as the log holds them): why the change is refused
ChangeRule = Callable[[list[Any], list[Any]], str | None]


@dataclass(frozen=True)
class RunMay:
    """What a run may do to one logged table's rows (as the log holds them: values in column order)."""

    columns: tuple[str, ...]
    #: the columns that name a row: a row removed and added under the same key is changed, not replaced
    key: tuple[str, ...]
    #: how a refusal names a row, from its values
    name: Callable[[list[Any]], str]
    insert: bool = False
    #: columns a run may change in a row it keeps
    change: frozenset[str] = frozenset()
    #: a row may be removed by an entry that adds a row of this table for the same artifact (a rebuilt artifact's
    #: lineage, a recorded counter's exposure)
    renewed_with: str | None = None
    #: the key values a run may write (None: any)
    keys: frozenset[str] | None = None
    #: a further rule on each changed row
    check: ChangeRule | None = None

    def position(self, column: str) -> int:
        return self.columns.index(column)


def _shown(value: Any, limit: int = 60) -> str:
    return str(value)[:limit]


def _revalidated(old: list[Any], new: list[Any]) -> str | None:
    """An artifact a forget invalidated turns valid only as a rebuild: new bytes, at a later watermark."""
    if old[4] == 0 and new[4] != 0 and (new[1] == old[1] or not _int(new[3]) > _int(old[3])):
        return f"makes artifact {_shown(old[0])} valid again without rebuilding it (the artifacts table)"
    return None


def _acks_grow(old: list[Any], new: list[Any]) -> str | None:
    return _acks(old[1], new[1]) if old[0] == ACKS else None


RUN_WRITES: dict[str, RunMay] = {
    "artifacts": RunMay(("artifact", "sha256", "kind", "watermark", "valid", "meta"), ("artifact",),
                        lambda r: f"artifact {_shown(r[0])}", insert=True,
                        change=frozenset({"sha256", "watermark", "valid", "meta"}), check=_revalidated),
    "lineage": RunMay(("unit", "artifact"), ("unit", "artifact"),
                      lambda r: f"the lineage of artifact {_shown(r[1])} (unit {_shown(r[0], 20)})", insert=True,
                      renewed_with="artifacts"),
    "history": RunMay(("artifact", "sha256", "watermark", "at"), ("artifact", "sha256", "watermark", "at"),
                      lambda r: f"a history row of artifact {_shown(r[0])}", insert=True),
    "retrains": RunMay(("id", "at", "watermark", "rebuilt"), ("id",), lambda r: f"retrain #{_shown(r[0], 20)}",
                       insert=True),
    "purged": RunMay(("artifact", "sha256", "request", "at", "done"), ("artifact", "sha256"),
                     lambda r: f"the purge of artifact {_shown(r[0])}", insert=True, change=frozenset({"done"})),
    "meta": RunMay(("key", "value"), ("key",), lambda r: f"the {_shown(r[0], 40)!r} value", insert=True,
                   change=frozenset({"value"}), keys=RUN_META, check=_acks_grow),
    "dp_exposure": RunMay(("unit", "artifact"), ("unit", "artifact"),
                          lambda r: f"the DP exposure of artifact {_shown(r[1])} (unit {_shown(r[0], 20)})",
                          insert=True, renewed_with="dp_budget"),
    "dp_budget": RunMay(("artifact", "used", "k"), ("artifact",), lambda r: f"the DP counter of {_shown(r[0])}",
                        insert=True, change=frozenset({"used", "k"})),
    "requests": RunMay(("id", "at", "kind", "spec", "samples", "units", "invalidated", "latency_ms"), ("id",),
                       lambda r: f"forget request #{_shown(r[0], 20)}"),
}

#: one change of an entry: (table, ``insert`` | ``delete`` | ``change``, the column changed, the row, the row after)
Change = tuple[str, str, str | None, list[Any], list[Any] | None]


def is_coordinator(entry: dict[str, Any]) -> bool:
    """Whether ``entry`` says the coordinator wrote it (the heads' check holds it to a head signed right after)."""
    return entry.get("writer") == "coordinator"


def run_entry_problem(seq: int, entry: dict[str, Any], rows: list[Any]) -> str | None:
    """Why entry ``seq``, written without the key, changes what a run may not (None: it does not)."""
    what = entry_problem(rows)
    if what is None:
        return None
    return (f"the ledger's log entry {seq} ({str(entry.get('kind'))[:40]}), written without the coordinator's key, "
            f"{what}: {RUN_MAY}")


def entry_problem(rows: list[Any]) -> str | None:
    """What the first change of ``rows`` that :data:`RUN_WRITES` does not grant does (None: it grants them all)."""
    anew = {rule.renewed_with for rule in RUN_WRITES.values() if rule.renewed_with}
    renewed = {(str(table), str(values[RUN_WRITES[table].position("artifact")])) for table, op, values in rows
               if op == "+" and table in anew and len(values) == len(RUN_WRITES[table].columns)}
    for table, op, column, old, new in entry_changes(rows):
        rule = RUN_WRITES.get(table)
        if rule is None:
            return f"writes the {_shown(table, 40)} table, which a run never writes"
        problem = _problem(table, rule, op, column, old, new, renewed)
        if problem:
            return problem
    return None


def _problem(table: str, rule: RunMay, op: str, column: str | None, old: list[Any], new: list[Any] | None,
             renewed: set[tuple[str, str]]) -> str | None:
    if len(old) != len(rule.columns) or (new is not None and len(new) != len(rule.columns)):
        return f"writes a row of {len(old)} values into the {table} table, which has {len(rule.columns)} columns"
    if rule.keys is not None and str(old[0]) not in rule.keys and op != "delete":
        return f"writes {rule.name(old)} into the {table} table, a key no run writes"
    if op == "insert":
        if rule.insert:
            return _acks_added(old) if table == "meta" and old[0] == ACKS else None
        return f"inserts {rule.name(old)} into the {table} table"
    if op == "delete":
        if rule.renewed_with and (rule.renewed_with, str(old[rule.position("artifact")])) in renewed:
            return None
        if table == "meta" and old[0] == ACKS:
            return "drops the clients' acknowledgements (the meta table)"
        return f"removes {rule.name(old)} from the {table} table"
    assert new is not None and column is not None
    if column not in rule.change:
        return f"changes the {column} of {rule.name(old)} in the {table} table"
    return rule.check(old, new) if rule.check is not None else None


def entry_changes(rows: list[Any]) -> list[Change]:
    """An entry's rows as changes ``(table, op, column, row, new row)``: ``insert`` (the row added), ``delete``
    (the row removed) or ``change`` of ``column`` (the row before and after; one change per column that differs),
    pairing a removed and an added row of a table by the key :data:`RUN_WRITES` names (a table it does not name
    is keyed by the whole row)."""
    removed: dict[str, dict[str, list[list[Any]]]] = {}
    added: dict[str, dict[str, list[list[Any]]]] = {}
    order: list[str] = []
    for table, op, values in rows:
        table, values = str(table), list(values)
        if table not in order:
            order.append(table)
        side = added if op == "+" else removed
        side.setdefault(table, {}).setdefault(_key(table, values), []).append(values)
    out: list[Change] = []
    for table in order:
        rule = RUN_WRITES.get(table)
        gone, new = removed.get(table, {}), added.get(table, {})
        for key, olds in gone.items():
            news = new.get(key, [])
            for old, now in zip(olds, news, strict=False):
                columns = rule.columns if rule is not None and len(now) == len(old) == len(rule.columns) else \
                    tuple(str(i) for i in range(max(len(old), len(now))))
                out += [(table, "change", c, old, now) for i, c in enumerate(columns)
                        if i >= len(old) or i >= len(now) or old[i] != now[i]]
            out += [(table, "delete", None, old, None) for old in olds[len(news):]]
        for key, news in new.items():
            out += [(table, "insert", None, row, None) for row in news[len(gone.get(key, [])):]]
    return out


def _key(table: str, values: list[Any]) -> str:
    rule = RUN_WRITES.get(table)
    if rule is not None and len(values) == len(rule.columns):
        values = [values[rule.position(c)] for c in rule.key]
    return json.dumps(values, default=repr)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _acks_added(value: list[Any]) -> str | None:
    if _clear(value[1]) is None:
        return "records acknowledgements the log cannot show (the meta table)"
    return None


def _acks(before: Any, after: Any) -> str | None:
    """Why acks ``before`` → ``after`` (as the log holds them) is not a raise of every partition's marks."""
    old = _clear(before)
    new = _clear(after)
    if new is None:
        return "records acknowledgements the log cannot show (the meta table)"
    if old is None:  # a log written before it kept acknowledgements in clear: nothing to compare with
        return None
    for partition, mark in sorted(old.items()):
        now = new.get(partition)
        for name in MARKS:
            was = _mark(mark, name)
            if was and (not isinstance(now, dict) or _mark(now, name) < was):
                return f"lowers partition {str(partition)[:20]}'s acknowledgement ({name} {was}; the meta table)"
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
