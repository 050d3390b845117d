"""Check only what was appended to the ledger's log since a whole check, in time that does not grow with the log.

A whole check (:func:`fedforget.store.log_check.log_problems`) replays every entry and compares every logged
table with the rows the replay rebuilt. After it, a coordinator that keeps the :class:`Replay` can check each
later commit by itself:

- the new entries continue the chain the replay ended (position, ``prev``, stored leaf hash, canonical bytes)
  and are folded into its frontier, which must be the stored frontier;
- each new entry no coordinator head covers only adds to the ledger (``fedforget.store.log_rules``, applied
  by the replay itself);
- every head written since has the root of the entries under it and a signature that holds, each new entry the
  coordinator wrote is followed by its head, and every new coordinator entry is under a signed head;
- ``log_state`` and ``sqlite_sequence`` (a few rows) are what the log gives;
- each row the new entries wrote or deleted is looked up in its table by its primary key: the table holds that
  row exactly as many times as the whole replay says (a row the writer logged deleting but that the log never
  wrote, because a hand edit changed it first, is caught here too);
- each logged table holds as many rows as the replay leaves in it, and each INTEGER column the sum of the
  integers the replay leaves in it (a row added, deleted, made valid again or given another watermark by hand beside an
  honest commit): one pass over the small logged tables in SQLite, no row read into Python.

What it cannot see is a hand edit in place of a text or real value no new entry touches, made in the same
moment as an honest commit (a hand edit alone changes the file without a new entry, which the caller answers
with a whole check).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedforget.store.log import COORDINATOR_KINDS, _quoted, compared_row, head_digest, logged_tables
from fedforget.store.log_check import Replay, _row_key, check_head_run, check_state, replay, shown_row


def follow(db: sqlite3.Connection, log: Replay, rows: list[tuple[int, str, str]],
           trusted: Callable[[bytes], bool] | None, problems: list[str]) -> dict[str, set[tuple[Any, ...]]]:
    """Fold ``rows`` (the entries at ``log.size`` and after) into ``log`` and check them and their heads, inside
    the caller's read transaction. Returns table → the row keys they touched."""
    start = log.size
    heads = dict(db.execute("SELECT size, head FROM log_heads WHERE size > ?", (start,)).fetchall())
    log.touched = {}
    try:
        replay(rows, {int(s) for s in heads}, problems, into=log)
        touched = log.touched
    finally:
        log.touched = None
    if problems:
        return touched
    layout = schema(db)
    check_state(db, log, problems)
    _check_sequences(db, log, layout, problems)
    _check_new_heads(db, log, start, heads, trusted, problems)
    _check_touched(db, log, layout, touched, problems)
    return touched


def _check_sequences(db: sqlite3.Connection, log: Replay, layout: Layout, problems: list[str]) -> None:
    """:func:`~fedforget.store.log_check.check_sequences` with the AUTOINCREMENT tables read from the cached
    schema: only ``sqlite_sequence`` itself is read."""
    if not layout.has_sequences:
        return
    want = sorted((table, highest) for table, key in layout.autoincrement
                  if (highest := log.highest.get(table, {}).get(key)) is not None)
    have = sorted((str(n), s) for n, s in db.execute("SELECT name, seq FROM sqlite_sequence"))
    if have != want:
        problems.append("the ledger's sqlite_sequence is not the one its log gives (the next request id would "
                        "not follow the logged ones)")


def _check_new_heads(db: sqlite3.Connection, log: Replay, start: int, heads: dict[int, str],
                     trusted: Callable[[bytes], bool] | None, problems: list[str]) -> None:
    last = db.execute("SELECT head FROM log_heads WHERE size <= ? ORDER BY size DESC LIMIT 1", (start,)).fetchone()
    newest = check_head_run([(int(size), str(heads[size])) for size in sorted(heads)],
                            head_digest(str(last[0])) if last else None, log, trusted, problems)
    signed = {size for size in range(start + 1, log.size + 1) if size in log.signed_sizes}  # the new entries' own
    if signed != set(heads):
        missing = sorted(signed - set(heads))
        problems.append(f"the ledger lost the log head the coordinator signed at {missing[0]} entries" if missing
                        else f"the ledger holds a log head at {min(set(heads) - signed)} entries that no coordinator "
                        "write signed")
    if newest is None:
        row = db.execute("SELECT MAX(size) FROM log_heads").fetchone()
        covered = int(row[0] or 0)
    else:
        covered = int(newest["size"])
    late = [seq for seq in range(start, log.size) if log.kinds.get(seq) in COORDINATOR_KINDS and seq >= covered]
    if late:
        problems.append(f"the ledger's log entry {late[0]} ({log.kinds[late[0]]}) is under no signed head: the "
                        "coordinator signs its own entries when it writes them")


@dataclass(frozen=True)
class Table:
    """What the check needs of one logged table's schema."""

    name: str
    columns: list[str]
    #: positions of its primary key's columns (all of them when it has none)
    keys: list[int]
    #: positions of its INTEGER columns, whose sums are compared
    integers: list[int]
    #: ``SELECT * FROM table WHERE`` its key columns ``IS ?``
    lookup: str


@dataclass(frozen=True)
class Layout:
    """The logged tables and what the check reads of them, per schema version."""

    tables: dict[str, Table]
    #: one statement: per logged table (in ``tables``' order) a row ``name, COUNT(*), TOTAL(integer column),
    #: ...``, padded with NULLs to the widest
    census: str
    #: whether the ledger has ``sqlite_sequence``, and (table, position of its INTEGER PRIMARY KEY) of each
    #: AUTOINCREMENT table
    has_sequences: bool
    autoincrement: list[tuple[str, int]]


_schemas: dict[tuple[str, int], Layout] = {}


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def schema(db: sqlite3.Connection) -> Layout:
    """The logged tables (cached per database file and schema version: two pragmas per call)."""
    path = db.execute("PRAGMA database_list").fetchone()[2]
    version = int(db.execute("PRAGMA main.schema_version").fetchone()[0])
    cached = _schemas.get((path, version))
    if cached is not None:
        return cached
    tables, parts = {}, []
    for table in logged_tables(db):
        info = list(db.execute(f"PRAGMA main.table_info({_quoted(table)})"))
        cols = [str(r[1]) for r in info]
        keys = [i for i, r in sorted(enumerate(info), key=lambda r: r[1][5]) if r[5] > 0] or list(range(len(cols)))
        integers = [i for i, r in enumerate(info) if str(r[2]).upper() == "INTEGER"]
        where = " AND ".join(f"{_quoted(cols[i])} IS ?" for i in keys)
        tables[table] = Table(table, cols, keys, integers, f"SELECT * FROM {_quoted(table)} WHERE {where}")
        parts.append((table, [f"TOTAL(CASE WHEN typeof({_quoted(cols[i])}) = 'integer' THEN {_quoted(cols[i])} END)"
                              for i in integers]))
    width = max((len(sums) for _, sums in parts), default=0)
    census = " UNION ALL ".join(f"SELECT {_literal(table)}, COUNT(*)"
                                f"{''.join(', ' + x for x in [*sums, *['NULL'] * (width - len(sums))])}"
                                f" FROM {_quoted(table)}" for table, sums in parts)
    has_sequences = db.execute("SELECT 1 FROM sqlite_master WHERE name='sqlite_sequence'").fetchone() is not None
    autoincrement = []
    for table, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type='table' ORDER BY name"):
        if "AUTOINCREMENT" in str(sql).upper():
            key = [r[0] for r in db.execute(f"PRAGMA table_info({_quoted(table)})") if r[5] == 1]
            if key:
                autoincrement.append((str(table), key[0]))
    out = Layout(tables, census, has_sequences, autoincrement)
    if len(_schemas) > 64:
        _schemas.clear()
    _schemas[(path, version)] = out
    return out


def _check_touched(db: sqlite3.Connection, log: Replay, layout: Layout, touched: dict[str, set[tuple[Any, ...]]],
                   problems: list[str]) -> None:
    tables = layout.tables
    census = db.execute(layout.census).fetchall() if tables else []
    if [str(row[0]) for row in census] != list(tables):
        problems.append("the ledger's logged tables are not the ones its schema names")
        return
    for (table, info), (_, held, *totals) in zip(tables.items(), census, strict=True):
        if held != log.totals.get(table, 0):
            problems.append(f"the ledger's {table} table holds {held} rows, its log wrote {log.totals.get(table, 0)}")
            return
        want = log.sums.get(table, {})
        edited = [info.columns[i] for i, total in zip(info.integers, totals, strict=False)
                  if abs(total - want.get(i, 0)) >= 0.5]
        if edited:
            problems.append(f"the ledger's {table} table's {edited[0]} column holds values its log never wrote")
            return
    for table in sorted(touched):
        if table not in tables:
            problems.append(f"the ledger lost its {table} table, which its log wrote rows into")
            return
        info = tables[table]
        cols, keys = info.columns, info.keys
        expected = log.tables.get(table, {})
        for key in sorted(touched[table], key=shown_row):
            values = list(key)
            if len(values) != len(cols):
                problems.append(f"the ledger's log wrote a row of {table} with {len(values)} of its {len(cols)} "
                                f"columns: {shown_row(key)}")
                return
            found = db.execute(info.lookup, [values[i] for i in keys])
            have = sum(1 for row in found if _row_key(compared_row(table, row)) == key)
            want = expected.get(key, 0)
            if want < 0:
                problems.append(f"the ledger's log deleted a row of {table} it never wrote (it was edited by hand "
                                f"first): {shown_row(key)}")
                return
            if have > want:
                problems.append(f"the ledger's {table} table holds a row its log never wrote: {shown_row(key)}")
                return
            if have < want:
                problems.append(f"the ledger's {table} table lost a row its log wrote: {shown_row(key)}")
                return
