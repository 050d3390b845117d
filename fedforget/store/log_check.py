"""Does the ledger say what its log says? Replays the log and compares, in one pass over the entries.

- the entries are whole and in order: positions 0, 1, 2, ... with no gap, each entry's ``prev`` is the leaf
  hash of the one before and its stored leaf hash is the hash of its bytes (an edited, deleted, inserted or
  reordered entry breaks this at that point);
- every head's root is the Merkle root of the entries under it and its signature holds (with the
  coordinator's key when this machine has it); the heads are exactly the ones the coordinator's transactions
  signed (one after each entry it wrote), so a head deleted is missed; every coordinator entry (a forget, a
  receipt) is under a signed head: a training run's entries may wait for the next head, a forget may not;
- replaying every entry's rows rebuilds each logged table row for row: a row edited, deleted or added behind
  the log's back, a table dropped or added, differs; SQLite's ``sqlite_sequence`` (no trigger can watch it)
  holds, for each AUTOINCREMENT table, the highest id the log ever inserted (the ledger never deletes those
  rows but to empty the store for a new run, which empties ``sqlite_sequence`` and starts a new log);
- every entry no coordinator head covers (a run's, whatever kind it declares) only adds to the ledger: it
  takes back no forget request, purge, acknowledgement or record name (``fedforget.store.log_rules``), and
  only an adopting genesis entry holds rows;
- ``log_state`` holds what the log derives, byte for byte: the frontier of its leaves, and the adoption
  marker exactly when the genesis entry adopted a store;
- raw record names kept for a request open to the commitments its logged spec holds, and only a coordinator's
  ``scrub`` entry deleted any.

Cost: linear in the log (the logged tables are small: artifacts, lineage, requests, purges, meta), never in
the sample index, which :mod:`fedforget.store.index_check` compares with the fingerprinted manifest.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fedforget.store.log import (
    COORDINATOR_KINDS,
    HEAD_FORMAT,
    _quoted,
    adopted_marker,
    canonical,
    compared_row,
    frontier_text,
    head_digest,
    logged_tables,
)
from fedforget.store.log_rules import is_coordinator, run_entry_problem
from fedforget.store.merkle import Frontier, leaf_hash

#: A problem quotes at most this much of a row.
SHOWN = 160


@dataclass
class Replay:
    """What a pass over the log found: its size and frontier, and the rows it wrote, by table."""

    size: int = 0
    frontier: Frontier = field(default_factory=Frontier)
    tables: dict[str, Counter] = field(default_factory=dict)
    #: position → the entry's kind (coordinator-only kinds must be signed)
    kinds: dict[int, str] = field(default_factory=dict)
    #: head size → the root the entries under it give
    roots: dict[int, str] = field(default_factory=dict)
    log_id: str | None = None
    last_leaf: str | None = None
    adopted: bool = False
    #: request id → the record commitments its forget entry logged
    commitments: dict[int, set[str]] = field(default_factory=dict)
    #: requests whose raw record names a coordinator's logged scrub deleted
    scrubbed: set[int] = field(default_factory=set)
    #: request id → the position of the entry that inserted its row (0: adopted by the genesis entry)
    requested: dict[int, int] = field(default_factory=dict)
    #: head sizes the coordinator signed: one after each entry it wrote (a genesis shares its transaction's head)
    signed_sizes: set[int] = field(default_factory=set)
    #: table → column index → the highest integer the log ever inserted there
    highest: dict[str, dict[int, int]] = field(default_factory=dict)
    #: table → how many rows the entries leave in it
    totals: Counter = field(default_factory=Counter)
    #: table → column position → the sum of the integer values the entries leave in that column
    sums: dict[str, Counter] = field(default_factory=dict)
    #: service request id → ``(position, kind, ledger request, via)`` of each entry the service wrote for it
    vias: dict[Any, list[tuple[int, str, Any, Any]]] = field(default_factory=dict)
    #: when the log began (its genesis entry's ``at``)
    started: float | None = None
    #: table → the rows entries wrote or deleted, collected only when set (a check of what was appended)
    touched: dict[str, set[tuple[Any, ...]]] | None = None


def _row_key(values: Iterable[Any]) -> tuple[Any, ...]:
    """A row as a multiset key: its values (hashable scalars; a list or dict in a logged row is malformed)."""
    return tuple(values)


def shown_row(key: tuple[Any, ...]) -> str:
    """A row as a problem line quotes it (at most :data:`SHOWN` characters)."""
    return json.dumps(list(key), separators=(",", ":"), ensure_ascii=False, default=repr)[:SHOWN]


def replay(rows: Iterable[tuple[int, str, str]], head_sizes: set[int], problems: list[str],
           into: Replay | None = None) -> Replay:
    """Walk entries ``(seq, entry, leaf)`` in order (continuing ``into``), noting the first break."""
    out = into or Replay()
    for seq, text, leaf in rows:
        if seq != out.size:
            problems.append(f"the ledger's log lost or reordered entries: entry {seq} where {out.size} belongs")
            return out
        data = text.encode("utf-8")
        computed = leaf_hash(data)
        if computed.hex() != leaf:
            problems.append(f"the ledger's log entry {seq} was edited (its hash is not its stored leaf hash)")
            return out
        try:
            entry = json.loads(text)  # its bytes are what the leaf hash covers: any form of them is the entry
            if not isinstance(entry, dict):
                raise ValueError("not an entry")
        except ValueError:
            problems.append(f"the ledger's log entry {seq} is not an entry")
            return out
        if entry.get("seq") != seq or entry.get("prev") != out.last_leaf:
            problems.append(f"the ledger's log entry {seq} does not follow entry {seq - 1}")
            return out
        if seq == 0:
            out.log_id = leaf
            out.adopted = bool(entry.get("adopted"))
            out.started = entry.get("at") if isinstance(entry.get("at"), int | float) else None
        elif entry.get("kind") == "genesis":
            problems.append(f"the ledger's log entry {seq} starts a second log")
            return out
        out.kinds[seq] = str(entry.get("kind"))
        coordinator = is_coordinator(entry)
        if coordinator and seq:
            out.signed_sizes.add(seq + 1)
        rows = entry.get("rows") or []
        if not _well_formed(rows):
            problems.append(f"the ledger's log entry {seq} holds a malformed row")
            return out
        if seq and not coordinator:
            problem = run_entry_problem(seq, entry, rows)
            if problem:
                problems.append(problem)
                return out
        elif not seq and rows and not out.adopted:
            problems.append("the ledger's log begins with rows its genesis entry says it did not adopt")
            return out
        for table, op, values in rows:
            try:
                key, step = _row_key(compared_row(str(table), values, logged=True)), 1 if op == "+" else -1
                out.tables.setdefault(str(table), Counter())[key] += step
                out.totals[str(table)] += step
                sums = out.sums.setdefault(str(table), Counter())
                for i, value in enumerate(values):
                    if type(value) is int:
                        sums[i] += step * value
                if out.touched is not None:
                    out.touched.setdefault(str(table), set()).add(key)
                if op == "+":
                    _note_highest(out.highest.setdefault(str(table), {}), values)
                    if table == "requests" and values and isinstance(values[0], int):
                        out.requested.setdefault(values[0], seq)
            except (TypeError, ValueError):
                problems.append(f"the ledger's log entry {seq} holds a malformed row")
                return out
        if "via" in entry:
            via = entry["via"]
            named = via.get("service-request") if isinstance(via, dict) else None
            out.vias.setdefault(named, []).append((seq, str(entry.get("kind")), entry.get("request"), via))
        if entry.get("kind") == "scrub" and coordinator and isinstance(entry.get("requests"), list):
            out.scrubbed.update(int(r) for r in entry["requests"] if isinstance(r, int))
        for request, made in _commitments(entry.get("rows") or []).items():
            out.commitments.setdefault(request, set()).update(made)
        out.frontier.append(computed)
        out.last_leaf = leaf
        out.size += 1
        if out.size in head_sizes:
            out.roots[out.size] = out.frontier.root().hex()
    return out


def _well_formed(rows: Any) -> bool:
    """An entry's rows are ``[table, "+" | "-", [values]]`` of scalar values."""
    return isinstance(rows, list) and all(
        isinstance(r, list) and len(r) == 3 and isinstance(r[0], str) and r[1] in ("+", "-") and
        isinstance(r[2], list) and not any(isinstance(v, list | dict) for v in r[2]) for r in rows)


def _note_highest(highest: dict[int, int], values: list[Any]) -> None:
    for i, value in enumerate(values):
        if isinstance(value, int) and not isinstance(value, bool) and value > highest.get(i, value - 1):
            highest[i] = value


def _commitments(rows: list[Any]) -> dict[int, set[str]]:
    """request → the record commitments the request rows an entry wrote hold in their spec."""
    out: dict[int, set[str]] = {}
    for item in rows:
        if isinstance(item, list) and len(item) == 3 and item[0] == "requests" and item[1] == "+":
            try:
                spec = json.loads(item[2][3])
                out.setdefault(int(item[2][0]), set()).update(str(c) for c in spec.get("records") or [])
            except (ValueError, TypeError, IndexError, AttributeError):
                continue
    return out


def compare_tables(db: sqlite3.Connection, expected: dict[str, Counter], problems: list[str]) -> None:
    """Each logged table holds exactly the rows the log wrote into it."""
    tables = logged_tables(db)
    for table in tables:
        want = {k: n for k, n in expected.get(table, Counter()).items() if n}
        have = Counter(_row_key(compared_row(table, row)) for row in db.execute(f"SELECT * FROM {_quoted(table)}"))
        if have == want:
            continue
        extra = sorted(shown_row(k) for k in have if have[k] > want.get(k, 0))
        lost = sorted(shown_row(k) for k in want if want[k] > have.get(k, 0))
        if extra:
            problems.append(f"the ledger's {table} table holds a row its log never wrote: {extra[0]}")
        if lost:
            problems.append(f"the ledger's {table} table lost a row its log wrote: {lost[0]}")
    for table in sorted(set(expected) - set(tables)):
        if any(expected[table].values()):
            problems.append(f"the ledger lost its {table} table, which its log wrote rows into")


def check_heads(db: sqlite3.Connection, log: Replay, problems: list[str],
                trusted: Callable[[bytes], bool] | None) -> dict[str, Any] | None:
    """Every head's root is the log's and each names the one before, the newest head's signature holds, its
    entries are signed.
    ``trusted(public_key)`` says whether a key is the coordinator's (None: this machine does not know it).
    Returns the newest head."""
    rows = [(int(size), str(text)) for size, text in db.execute("SELECT size, head FROM log_heads ORDER BY size")]
    newest = check_head_run(rows, None, log, trusted, problems)
    sizes = {size for size, _ in rows}
    missing = sorted(log.signed_sizes - sizes)
    if missing:
        problems.append(f"the ledger lost the log head the coordinator signed at {missing[0]} entries")
    stray = sorted(sizes - log.signed_sizes)
    if stray:
        problems.append(f"the ledger holds a log head at {stray[0]} entries that no coordinator write signed")
    covered = int(newest["size"]) if newest is not None and isinstance(newest.get("size"), int) else 0
    late = [seq for seq, kind in log.kinds.items() if kind in COORDINATOR_KINDS and seq >= covered]
    if late:
        problems.append(f"the ledger's log entry {late[0]} ({log.kinds[late[0]]}) is under no signed head: the "
                        "coordinator signs its own entries when it writes them")
    return newest


def check_head_run(heads: list[tuple[int, str]], before: str | None, log: Replay,
                   trusted: Callable[[bytes], bool] | None, problems: list[str]) -> dict[str, Any] | None:
    """Heads ``(size, stored text)`` in size order, the first naming the head whose digest is ``before``: each
    head's root is the log's and each names the one before, and the newest one's signature holds (which binds
    every earlier head in place). Returns the newest head."""
    newest = None
    for size, text in heads:
        named, before = before, head_digest(text)
        try:
            head = json.loads(text)
            root = head["root"]
        except (ValueError, TypeError, KeyError):
            problems.append(f"the ledger's log head at {size} entries is not a head")
            continue
        if head.get("size") != size or head.get("log") != log.log_id or head.get("format") != HEAD_FORMAT:
            problems.append(f"the ledger's log head at {size} entries names another log or size")
        elif size > log.size:
            problems.append(f"the ledger's log was cut back: a signed head covers {size} entries, the log holds "
                            f"{log.size}")
        elif log.roots.get(size) != root:
            problems.append(f"the ledger's log under the head at {size} entries is not the log that was signed")
        elif head.get("prev") != named:
            problems.append(f"the ledger's log head at {size} entries does not follow the head before it (a head "
                            "was edited, removed or added)")
        newest = head
    if newest is not None and not _signed(newest, trusted):
        problems.append(f"the ledger's log head at {newest.get('size')} entries is not signed by the coordinator's "
                        "key")
    return newest


def _signed(head: dict[str, Any], trusted: Callable[[bytes], bool] | None,
            verdicts: dict[bytes, bool] | None = None) -> bool:
    """Whether ``head``'s signature holds under a key ``trusted`` accepts (``verdicts`` caches its answers:
    every head is checked, most under the same key)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        sig = head["signature"]
        public = base64.b64decode(str(sig["public_key"]), validate=True)
        value = base64.b64decode(str(sig["value"]), validate=True)
        body = {k: v for k, v in head.items() if k != "signature"}
        Ed25519PublicKey.from_public_bytes(public).verify(value, canonical(body))
    except (InvalidSignature, ValueError, TypeError, KeyError):
        return False
    if trusted is None:
        return True
    if verdicts is None:
        return trusted(public)
    if public not in verdicts:
        verdicts[public] = trusted(public)
    return verdicts[public]


def check_frontier(db: sqlite3.Connection, log: Replay, problems: list[str]) -> None:
    """The stored frontier is the one the log's leaves give, byte for byte."""
    row = db.execute("SELECT value FROM log_state WHERE key='frontier'").fetchone()
    if row is None or row[0] != frontier_text(log.frontier):
        problems.append("the ledger's log frontier is not the log's")


def check_state(db: sqlite3.Connection, log: Replay, problems: list[str]) -> None:
    """``log_state`` holds exactly what the log derives: its frontier, and the adoption marker of an adopted log."""
    want = {"frontier": frontier_text(log.frontier)}
    if log.adopted:
        want["adopted"] = adopted_marker(log.started)
    have = dict(db.execute("SELECT key, value FROM log_state"))
    if have.get("frontier") != want["frontier"]:
        problems.append("the ledger's log frontier is not the log's")
    elif have != want:
        key = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))[0]
        problems.append(f"the ledger's log state {str(key)[:40]!r} is not the one its log gives")


def check_sequences(db: sqlite3.Connection, log: Replay, problems: list[str]) -> None:
    """``sqlite_sequence`` names, for each AUTOINCREMENT table the log inserted into, the highest id it inserted
    (SQLite takes the next id from it: a raised or lowered one would give a request an id out of order)."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name='sqlite_sequence'").fetchone() is None:
        return
    want: list[tuple[str, int]] = []
    for table, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type='table' ORDER BY name"):
        if "AUTOINCREMENT" not in str(sql).upper():
            continue
        key = [r[0] for r in db.execute(f"PRAGMA table_info({_quoted(table)})") if r[5] == 1]
        highest = log.highest.get(table, {}).get(key[0]) if key else None
        if highest is not None:
            want.append((table, highest))
    have = sorted((str(n), s) for n, s in db.execute("SELECT name, seq FROM sqlite_sequence"))
    if have != sorted(want):
        problems.append("the ledger's sqlite_sequence is not the one its log gives (the next request id would "
                        "not follow the logged ones)")


def check_record_names(db: sqlite3.Connection, log: Replay, problems: list[str]) -> None:
    """Each kept raw record name opens to a commitment its request's logged spec holds."""
    from fedforget.store.record_commitments import commitment

    if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='record_names'").fetchone() is None:
        return
    opened: dict[int, set[str]] = {}
    for request, name, key in db.execute("SELECT request, record, key FROM record_names"):
        made = commitment(str(key), str(name))
        if made not in log.commitments.get(int(request), set()) or int(request) in log.scrubbed:
            problems.append(f"the ledger keeps a record name for request {request} that its log does not commit to")
            return
        opened.setdefault(int(request), set()).add(made)
    for request, made in sorted(log.commitments.items()):
        if made and request not in log.scrubbed and opened.get(request, set()) != made:
            problems.append(f"the ledger lost record names of request {request} that no logged scrub deleted")
            return


def log_problems(db: sqlite3.Connection, trusted: Callable[[bytes], bool] | None = None,
                 extra_sizes: set[int] = frozenset()) -> tuple[list[str], Replay]:
    """Every problem of the ledger's log and of the tables it covers (inside the caller's read transaction);
    the replay also holds the root at every head's size and at ``extra_sizes``."""
    problems: list[str] = []
    heads = {int(r[0]) for r in db.execute("SELECT size FROM log_heads")} | set(extra_sizes)
    log = replay(db.execute("SELECT seq, entry, leaf FROM log ORDER BY seq"), heads, problems)
    if problems:
        return problems, log
    check_state(db, log, problems)
    check_heads(db, log, problems, trusted)
    compare_tables(db, log.tables, problems)
    check_sequences(db, log, problems)
    check_record_names(db, log, problems)
    return problems, log
