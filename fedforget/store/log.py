"""The ledger's log: an append-only record of everything written to the ledger, each entry committing to the
one before, under heads the coordinator signs.

Every write transaction on ``ledger.sqlite`` appends one entry, in the same transaction, naming what happened
(``kind``: ``genesis``, ``artifact``, ``forget``, ``retrain``, ``acks``, ``purge``, ``receipt``, ...) and every
row it inserted into or deleted from the ledger's tables (an update is both). The rows are caught by
temporary triggers on the writer's own connection (``TEMP`` triggers exist on that connection only, so a hand
edit through any other connection is never logged), for every table but the ones in :data:`UNLOGGED`: the
sample index, which the fingerprinted manifest and the logged requests determine, the log itself, and the
raw record names that forgetting scrubs. Replaying the entries therefore rebuilds every logged table, row for
row (``fedforget.store.log_check``).

An entry's ``writer`` is ``coordinator`` when this process holds the key (and signs a head right after it),
else ``run``; what a ``run`` entry may change is held by ``fedforget.store.log_rules``, judged by its rows.

An entry is canonical JSON (sorted keys, no spaces) holding ``prev``, the leaf hash of the entry before it
(a hash chain), and the log's heads are RFC 9162 Merkle roots (``fedforget.store.merkle``): a head signed
with the coordinator's receipt key commits to every entry under it, and an inclusion proof shows one entry
under it with ``log2(size)`` hashes. Entries carry ``v`` (their format) so later fields need no migration.

A log's first entry (``genesis``) holds a random nonce; its leaf hash is the log's id. A store written
before the log existed adopts one on its first write: the genesis entry then holds every row of its logged
tables as they are (``adopted``), and edits made before adoption cannot be detected.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from fedforget.store.merkle import Frontier, leaf_hash

FORMAT = 1
HEAD_FORMAT = "fedforget-log-head/1"
LOG_SCHEMA = """
CREATE TABLE IF NOT EXISTS log(seq INTEGER PRIMARY KEY, entry TEXT NOT NULL, leaf TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log_heads(size INTEGER PRIMARY KEY, head TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log_state(key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
#: Tables whose rows are not copied into the log: the sample index (written once by training, checked against
#: the fingerprinted manifest and the logged requests' specs), the log's own tables, and raw record names
#: (kept only until forgetting scrubs them; the log holds their keyed commitments).
UNLOGGED = frozenset({"samples", "units", "forgotten", "log", "log_heads", "log_state", "record_names"})
#: Entries only the coordinator writes: each must be under a head signed by the coordinator's key, which it
#: signs in the same transaction. Everything else (a training run's artifacts) may wait for the next head.
COORDINATOR_KINDS = frozenset({"forget", "receipt", "scrub", "sign", "service-no-op"})
#: Entries appended even when their transaction wrote no logged row: what happened is the entry itself.
EVENT_KINDS = frozenset({"receipt", "sign", "scrub", "samples", "service-no-op"})
FUNCTION = "fedforget_logged"
DIGEST_PREFIX = "sha256:"


def canonical(value: Any) -> bytes:
    """The one byte string an entry or a head is hashed and signed as."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class HeadSigner(Protocol):
    """The coordinator's side of signing: its key signs heads, and each head is recorded outside the store."""

    def sign(self, data: bytes) -> tuple[bytes, bytes]:
        """``(raw public key, signature)`` of ``data``."""

    def after_commit(self, root: Any, head: dict[str, Any], requests: bool = False) -> None:
        """A signed head was committed for the store at ``root`` (``requests``: a forget request is under it):
        record it where the store cannot reach."""

    def trusts(self, public: bytes) -> bool | None:
        """Whether ``public`` is the coordinator's key (None: this machine cannot tell)."""


_signer: HeadSigner | None = None


def set_head_signer(signer: HeadSigner | None) -> None:
    """Make this process a coordinator (its ledger writes are signed at once), or not (``None``)."""
    global _signer
    _signer = signer


def head_signer() -> HeadSigner | None:
    return _signer


@contextmanager
def without_head_signer() -> Iterator[None]:
    """A ServerApp run inside a coordinator's process (in-process training, ``verify``'s reference) signs
    nothing, as in its own process: the key stays the coordinator's, used by the coordinator's own writes."""
    global _signer
    held, _signer = _signer, None
    try:
        yield
    finally:
        _signer = held


#: meta keys the log keeps in clear: the clients' acknowledgements (partitions and request numbers, nothing
#: computed on data), so that the check can tell an entry that lowers or drops one from one that adds to them.
CLEAR_META = frozenset({"acks"})


def logged_row(table: str, values: Sequence[Any]) -> list[Any]:
    """A row as the log keeps it. A meta value is kept as its sha256 (but those of :data:`CLEAR_META`): some
    are values forgetting must erase (an audit's measurements on forgotten samples, a leaving client's update
    angle), which an append-only log must never hold; the digest still pins the value the table holds."""
    if table == "meta" and len(values) == 2 and isinstance(values[1], str) and values[0] not in CLEAR_META:
        return [values[0], DIGEST_PREFIX + hashlib.sha256(values[1].encode("utf-8")).hexdigest()]
    return list(values)


def compared_row(table: str, values: Sequence[Any], logged: bool = False) -> list[Any]:
    """A row as the check compares the log with the tables: every meta value as its sha256. A ``logged`` row
    (as an entry holds it) already holds the digest, but for the values the log keeps in clear
    (:data:`CLEAR_META`; a log written before it kept any in clear holds their digest too)."""
    if table == "meta" and len(values) == 2 and isinstance(values[1], str) and \
            not (logged and values[1].startswith(DIGEST_PREFIX)):
        return [values[0], DIGEST_PREFIX + hashlib.sha256(values[1].encode("utf-8")).hexdigest()]
    return list(values)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def logged_tables(db: sqlite3.Connection) -> list[str]:
    """Every table of the ledger whose rows the log copies."""
    return [r[0] for r in db.execute("SELECT name FROM main.sqlite_master WHERE type='table' ORDER BY name")
            if r[0] not in UNLOGGED and not str(r[0]).startswith("sqlite_")]


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA main.table_info({_quoted(table)})")]


class LogWriter:
    """One ledger connection's log: catches the rows each transaction writes and appends its entry."""

    def __init__(self, db: sqlite3.Connection,
                 before_adoption: Callable[[sqlite3.Connection], object] | None = None) -> None:
        """``before_adoption`` runs before a store written without a log snapshots its tables into the genesis
        entry (what must not enter the log, such as raw record names, moves out first)."""
        self.db = db
        self.before_adoption = before_adoption
        self.rows: list[list[Any]] = []
        self.catching = True
        self._schema: int | None = None
        self._pending_head: dict[str, Any] | None = None
        self.kind, self.fields = "update", {}
        self._requests = False
        db.create_function(FUNCTION, -1, self._note)
        # a row an INSERT OR REPLACE displaces fires the delete trigger only with recursive triggers on
        db.execute("PRAGMA recursive_triggers=ON")

    def _note(self, table: str, op: str, *values: Any) -> None:
        if self.catching:
            self.rows.append([table, op, logged_row(table, values)])

    def _install(self) -> None:
        """Temporary triggers on every logged table (again whenever the schema changed: a method's table)."""
        version = int(self.db.execute("PRAGMA main.schema_version").fetchone()[0])
        if version == self._schema:
            return
        for table in logged_tables(self.db):
            cols = columns(self.db, table)
            q = _quoted(table)
            lit = "'" + table.replace("'", "''") + "'"
            new = ", ".join(f"NEW.{_quoted(c)}" for c in cols)
            old = ", ".join(f"OLD.{_quoted(c)}" for c in cols)
            name = f"fedforget_log_{table.encode().hex()}"
            self.db.execute(f"DROP TRIGGER IF EXISTS temp.{name}_i")
            self.db.execute(f"DROP TRIGGER IF EXISTS temp.{name}_d")
            self.db.execute(f"DROP TRIGGER IF EXISTS temp.{name}_u")
            self.db.execute(f"CREATE TEMP TRIGGER {name}_i AFTER INSERT ON main.{q} BEGIN "
                            f"SELECT {FUNCTION}({lit}, '+', {new}); END")
            self.db.execute(f"CREATE TEMP TRIGGER {name}_d AFTER DELETE ON main.{q} BEGIN "
                            f"SELECT {FUNCTION}({lit}, '-', {old}); END")
            self.db.execute(f"CREATE TEMP TRIGGER {name}_u AFTER UPDATE ON main.{q} BEGIN "
                            f"SELECT {FUNCTION}({lit}, '-', {old}); SELECT {FUNCTION}({lit}, '+', {new}); END")
        self._schema = int(self.db.execute("PRAGMA main.schema_version").fetchone()[0])

    # -- a transaction ------------------------------------------------------------------------
    def begin(self, kind: str = "update", fields: dict[str, Any] | None = None) -> None:
        """Inside a fresh write transaction: a store without a log adopts one first, then rows are caught."""
        self.rows = []
        self._pending_head = None
        self.name(kind, **(fields or {}))
        if self.db.execute("SELECT 1 FROM log LIMIT 1").fetchone() is None:
            self.genesis()
        self._install()
        self.catching = True

    def name(self, kind: str, **fields: Any) -> None:
        """Say what the running transaction does (its entry's ``kind`` and fields)."""
        self.kind, self.fields = kind, fields

    def finish(self) -> int | None:
        """Before the commit: append the transaction's entry (none when it wrote nothing and named no kind),
        and sign a head when this process is the coordinator. Returns the entry's position."""
        rows, self.rows = self.rows, []
        if not rows and self.kind not in EVENT_KINDS:
            return None
        seq = self.append(self.kind, self.fields, rows)
        if _signer is not None:
            self._pending_head = self.sign()
        return seq

    def abandon(self) -> None:
        self.rows = []
        self._pending_head = None

    def committed(self, root: Any) -> None:
        """After the commit: hand the signed head to the signer to record outside the store."""
        head, self._pending_head = self._pending_head, None
        if head is not None and _signer is not None:
            _signer.after_commit(root, head, self._requests)

    # -- entries ------------------------------------------------------------------------------
    def frontier(self) -> Frontier:
        row = self.db.execute("SELECT value FROM log_state WHERE key='frontier'").fetchone()
        frontier = Frontier.from_json(json.loads(row[0])) if row else Frontier()
        top = self.db.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM log").fetchone()[0]
        if frontier.size != int(top):
            raise sqlite3.DatabaseError(f"the log's frontier covers {frontier.size} entries of {top}")
        return frontier

    def append(self, kind: str, fields: dict[str, Any], rows: list[list[Any]], at: float | None = None) -> int:
        frontier = self.frontier()
        seq = frontier.size
        prev = self.db.execute("SELECT leaf FROM log WHERE seq=?", (seq - 1,)).fetchone() if seq else None
        entry = {**fields, "v": FORMAT, "seq": seq, "prev": prev[0] if prev else None, "kind": kind,
                 "at": time.time() if at is None else at, "writer": "coordinator" if _signer is not None else "run",
                 "rows": rows}
        data = canonical(entry)
        leaf = leaf_hash(data)
        self.db.execute("INSERT INTO log(seq, entry, leaf) VALUES(?, ?, ?)", (seq, data.decode("utf-8"), leaf.hex()))
        frontier.append(leaf)
        self.db.execute("INSERT OR REPLACE INTO log_state(key, value) VALUES('frontier', ?)",
                        (frontier_text(frontier),))
        return seq

    def genesis(self, restart: bool = False) -> None:
        """The log's first entry: over the logged tables' rows as they are (an adopted store) or over nothing."""
        self.catching = False
        if not restart and self.before_adoption is not None:
            self.before_adoption(self.db)
        rows = [] if restart else [[table, "+", logged_row(table, row)] for table in logged_tables(self.db)
                                   for row in self.db.execute(f"SELECT * FROM {_quoted(table)}")]
        adopted = bool(rows) or self.db.execute("SELECT 1 FROM samples LIMIT 1").fetchone() is not None
        self.db.execute("DELETE FROM log_state WHERE key='frontier'")
        at = time.time()
        self.append("genesis", {"nonce": secrets.token_hex(16), "adopted": adopted}, rows, at=at)
        if adopted:  # derived from the genesis entry, as the frontier is from the leaves: the check compares both
            self.db.execute("INSERT OR REPLACE INTO log_state(key, value) VALUES('adopted', ?)", (adopted_marker(at),))

    def sign(self) -> dict[str, Any]:
        """Sign the head over every entry so far (inside the transaction that appended the last one)."""
        assert _signer is not None
        frontier = self.frontier()
        before = self.db.execute("SELECT head FROM log_heads ORDER BY size DESC LIMIT 1").fetchone()
        head = {"format": HEAD_FORMAT, "log": log_id(self.db), "size": frontier.size,
                "root": frontier.root().hex(), "at": time.time(), "prev": head_digest(before[0]) if before else None}
        public, signature = _signer.sign(canonical(head))
        signed = {**head, "signature": {"algorithm": "ed25519", "public_key": base64.b64encode(public).decode(),
                                        "value": base64.b64encode(signature).decode()}}
        self.db.execute("INSERT OR REPLACE INTO log_heads(size, head) VALUES(?, ?)",
                        (frontier.size, json.dumps(signed, sort_keys=True)))
        self._requests = self.db.execute("SELECT 1 FROM requests LIMIT 1").fetchone() is not None
        return signed

    def restart(self) -> None:
        """Every table was just emptied for a new run at the same path: a new log begins."""
        self.catching = False
        self.rows = []
        self.genesis(restart=True)


def adopted_marker(at: float) -> str:
    """``log_state``'s ``adopted`` value of a log whose genesis entry, written at ``at``, adopted a store."""
    return json.dumps({"at": at})


def frontier_text(frontier: Frontier) -> str:
    """``log_state``'s ``frontier`` value, as the writer stores it and the check expects it byte for byte."""
    return json.dumps(frontier.to_json())


def head_digest(text: str) -> str:
    """What the next head names its predecessor by: the sha256 of the stored head (its signature included), so
    the newest head's signature covers every head before it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def log_id(db: sqlite3.Connection) -> str | None:
    """The log's id: the leaf hash of its genesis entry (None: no log yet)."""
    row = db.execute("SELECT leaf FROM log WHERE seq=0").fetchone()
    return None if row is None else str(row[0])


def has_log(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='log'").fetchone() is not None and \
        db.execute("SELECT 1 FROM log LIMIT 1").fetchone() is not None


def latest_head(db: sqlite3.Connection) -> dict[str, Any] | None:
    row = db.execute("SELECT head FROM log_heads ORDER BY size DESC LIMIT 1").fetchone()
    return None if row is None else json.loads(row[0])


def log_size(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM log").fetchone()[0])


def unsigned_entries(db: sqlite3.Connection) -> int:
    """How many entries no signed head covers yet (a training run's, until the coordinator's next write)."""
    head = latest_head(db)
    return log_size(db) - (int(head["size"]) if head else 0)

