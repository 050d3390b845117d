"""``ledger.sqlite``: forget requests, the sample index, lineage, validity and the serving plan.

Everything a forget request reads or changes lives in one SQLite database so that a request is one
transaction: either every artifact it touches is invalid and the new serving plan is written, or
nothing happened ("applied or pending, never half"). Look-ups go through indexes
(sample → unit → artifacts), so a request costs the same whether the store covers 10³ or 10⁷
samples. ``BEGIN IMMEDIATE`` serialises concurrent coordinators.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedforget.core.serving_plans import compute_serving
from fedforget.store.crash import CRASH_ENV as CRASH_ENV  # re-exported for tests
from fedforget.store.crash import crash_point
from fedforget.store.log import LOG_SCHEMA, LogWriter
from fedforget.store.purge import PURGE_SCHEMA, record_purges
from fedforget.store.record_commitments import (
    RECORD_NAMES_SCHEMA,
    commitment,
    commitments_of,
    draw_openings,
    keep_openings,
    migrate_raw_names,
)

LEDGER = "ledger.sqlite"
#: ``rule(db, request) -> invalidated artifacts``, run inside a forget request's transaction.
InvalidationRule = Callable[[sqlite3.Connection, int], Iterable[str]]
CHUNK = 500  # SQLite host parameters per statement stay well under its limit

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS units(unit TEXT PRIMARY KEY, partition INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS units_by_partition ON units(partition);
CREATE TABLE IF NOT EXISTS samples(sample INTEGER PRIMARY KEY, unit TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS samples_by_unit ON samples(unit);
CREATE TABLE IF NOT EXISTS artifacts(artifact TEXT PRIMARY KEY, sha256 TEXT NOT NULL, kind TEXT NOT NULL,
    watermark INTEGER NOT NULL, valid INTEGER NOT NULL, meta TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lineage(unit TEXT NOT NULL, artifact TEXT NOT NULL, PRIMARY KEY(unit, artifact))
    WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lineage_by_artifact ON lineage(artifact);
CREATE TABLE IF NOT EXISTS history(artifact TEXT NOT NULL, sha256 TEXT NOT NULL, watermark INTEGER NOT NULL,
    at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS requests(id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, kind TEXT NOT NULL,
    spec TEXT NOT NULL, samples INTEGER NOT NULL, units TEXT NOT NULL, invalidated TEXT NOT NULL,
    latency_ms REAL NOT NULL);
CREATE TABLE IF NOT EXISTS forgotten(sample INTEGER PRIMARY KEY, unit TEXT NOT NULL, request INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS forgotten_by_unit ON forgotten(unit, request);
CREATE TABLE IF NOT EXISTS retrains(id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,
    watermark INTEGER NOT NULL, rebuilt TEXT NOT NULL);
""" + PURGE_SCHEMA + LOG_SCHEMA + RECORD_NAMES_SCHEMA


#: Where a usage error points to find what to forget (the CLI commands that read the sample index).
FIND_COMMANDS = ("`fedforget samples --store DIR --client N` lists a client's samples and slices, "
                 "`fedforget locate --store DIR --sample ID` finds a sample's client and slice")


class LedgerUsageError(ValueError):
    """A request names something the store does not know; nothing was written."""


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), CHUNK):
        yield items[i : i + CHUNK]


def _marks(n: int) -> str:
    return ",".join("?" * n)


@dataclass
class ForgetResult:
    """What one ``forget`` did; ``request`` is None when everything named was already forgotten."""

    request: int | None
    new_samples: int
    units: list[str]
    invalidated: list[str]
    serving: dict[str, Any]
    latency_ms: float
    already: int = 0
    #: what the request hit, as the plan's method reports it (chains: groups and cut sequences), filled in
    #: by the coordinator
    affected: dict[str, Any] = field(default_factory=dict)
    #: what the purge after the commit deleted (files relative to the store), filled in by the coordinator
    purged: dict[str, Any] = field(default_factory=dict)
    #: the records the request named (``NODE:RECORD_ID`` → sample id), filled in by the coordinator
    records: dict[str, int] = field(default_factory=dict)
    #: each named record's opening (name, key, commitment): handed to the requester, scrubbed from the store
    #: once the request is complete
    openings: list[dict[str, str]] = field(default_factory=list)
    #: for a no-op in a group (:meth:`Ledger.forget_group`): the newest request that forgot what it names
    forgetting: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request, "new-samples": self.new_samples, "already-forgotten": self.already,
                "units": self.units, "invalidated": self.invalidated, "serving": self.serving,
                "affected-groups": self.affected.get("groups", []),
                "affected-sequences": self.affected.get("sequences", []),
                "latency-ms": self.latency_ms, "no-op": self.request is None, "purged": self.purged,
                "records": dict(self.records), "record-openings": list(self.openings),
                **{k: v for k, v in self.affected.items() if k not in ("groups", "sequences")}}  # a method's own detail


def _named(samples: Sequence[int], slices: Sequence[str],
           clients: Sequence[int]) -> tuple[list[int], list[str], list[int]]:
    """A request's ids sorted and deduplicated; raises :class:`LedgerUsageError` (nothing written) when it names
    nothing or a negative id."""
    samples = sorted({int(s) for s in samples})
    slices = sorted(set(slices))
    clients = sorted({int(c) for c in clients})
    if not (samples or slices or clients):
        raise LedgerUsageError("name something to forget: --sample ID, --record NODE:RECORD_ID, --slice P:S or "
                               "--client P")
    negative = [i for i in (*samples, *clients) if not 0 <= i < 2**63]  # ids are SQLite int64, never < 0
    if negative:
        raise LedgerUsageError(f"unknown id(s) {', '.join(map(str, negative[:5]))}: sample and client ids "
                               f"are non-negative integers; {FIND_COMMANDS}")
    return samples, slices, clients


@dataclass(frozen=True)
class GroupItem:
    """One request of :meth:`Ledger.forget_group`: what :meth:`Ledger.forget` takes, and the fields of the
    ``service-no-op`` entry it gets when it forgets nothing new (None: no entry)."""

    samples: Sequence[int] = ()
    slices: Sequence[str] = ()
    clients: Sequence[int] = ()
    records: Sequence[str] = ()
    log_fields: Mapping[str, Any] | None = None
    no_op_fields: Mapping[str, Any] | None = None


class Ledger:
    """A handle on ``ledger.sqlite``; every public method is one transaction."""

    def __init__(self, path: Path, create: bool = True, rules: Sequence[InvalidationRule] = ()) -> None:
        """``create=False``: the ledger of a finished store, which must already hold the tables.

        ``rules`` run inside every forget transaction, after the lineage invalidation: each returns the
        artifacts it invalidated itself (a method's own bookkeeping, composed in by :class:`Store`).
        """
        self.path = Path(path)
        self.rules = tuple(rules)
        fresh = not self.path.exists()
        # a finished store's ledger is never created by opening it: a missing file is an error, not a new ledger
        target = self.path if create else f"{self.path.absolute().as_uri()}?mode=rw"
        self.db = sqlite3.connect(target, timeout=60.0, isolation_level=None, uri=not create)
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA secure_delete=ON")  # a deleted row's bytes are zeroed, not left in free pages
        self.db.execute("PRAGMA foreign_keys=ON")
        if fresh:
            os.chmod(self.path, 0o600)
        if not create and self.db.execute("SELECT 1 FROM sqlite_master WHERE name='requests'").fetchone() is None:
            self.db.close()
            raise sqlite3.DatabaseError("it holds no fedforget tables")
        try:
            self.db.executescript(SCHEMA)
        except sqlite3.OperationalError as exc:  # a store written before a table existed, on a read-only mount
            from fedforget.store.refused_writes import is_read_only_error

            if create or not is_read_only_error(exc):
                raise
        self.log = LogWriter(self.db, before_adoption=migrate_raw_names)

    @classmethod
    def reader(cls, path: Path) -> Ledger:
        """A read-only handle on a finished store's ledger, usable from any thread (one at a time): no schema
        script, no log writer. Kept open, its schema and pages stay parsed between reads."""
        self = cls.__new__(cls)
        self.path = Path(path)
        self.rules = ()
        self.db = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True, timeout=60.0,
                                  isolation_level=None, check_same_thread=False)
        return self

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self, kind: str = "update", **fields: Any) -> Iterator[sqlite3.Connection]:
        """One write transaction, and its log entry (``kind`` and ``fields`` say what happened; the rows it
        wrote are caught by the log): both commit, or neither."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.log.begin(kind, fields)
            yield self.db
            self.log.finish()
        except BaseException:
            self.log.abandon()
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        self.log.committed(self.path.parent)

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One consistent read of the ledger: a writer's commit waits until it ends (rollback journal)."""
        self.db.execute("BEGIN DEFERRED")
        try:
            self.db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # takes the shared lock now
            yield self.db
        finally:
            if self.db.in_transaction:  # SQLite may already have rolled back after an I/O or corruption error
                self.db.execute("COMMIT")

    # -- meta ---------------------------------------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def _set_meta(self, db: sqlite3.Connection, key: str, value: Any) -> None:
        text = json.dumps(value, sort_keys=True)
        row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None or row[0] != text:  # an unchanged value writes nothing (and logs nothing)
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, text))

    def set_meta_in(self, key: str, value: Any) -> None:
        """Set a meta value inside the caller's running :meth:`transaction`."""
        if not self.db.in_transaction:
            raise RuntimeError("set_meta_in runs inside a transaction")
        self._set_meta(self.db, key, value)

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction("meta", key=key) as db:
            self._set_meta(db, key, value)

    # -- set-up by a training run -------------------------------------------------------------
    def clear_unless_requested(self) -> bool:
        """Empty every table for a new run at the same path, in one write transaction, unless a forget
        request is recorded (then nothing changes and this returns False).

        The file is emptied, never unlinked: a coordinator waiting on its lock then finds no plan and is
        refused, where an unlinked file would take its commit and lose it.
        """
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM requests LIMIT 1").fetchone() is not None:
                return False
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            self.log.catching = False
            for table in tables:
                db.execute(f'DELETE FROM "{table.replace(chr(34), chr(34) * 2)}"')
            self.log.restart()
        return True

    def load_samples(self, slices: dict[int, list[list[int]]]) -> None:
        """The sample → unit index of a partition plan (``slices[partition][slice] -> ids``)."""
        with self.transaction("samples", partitions=len(slices)) as db:
            for partition, parts in sorted(slices.items()):
                for s, ids in enumerate(parts):
                    unit = f"{partition}:{s}"
                    db.execute("INSERT OR REPLACE INTO units VALUES(?, ?, ?)", (unit, int(partition), len(ids)))
                    db.executemany("INSERT OR REPLACE INTO samples VALUES(?, ?)", ((int(i), unit) for i in ids))

    def set_plan(self, plan: dict[str, Any]) -> None:
        with self.transaction("plan") as db:
            self._set_meta(db, "plan", plan)

    def plan(self) -> dict[str, Any] | None:
        return self.get_meta("plan")

    def record_artifact(self, artifact: str, sha256: str, kind: str, lineage: Iterable[str], watermark: int,
                        meta: dict[str, Any] | None = None) -> bool:
        """Store a (re)trained artifact; it is valid unless a request newer than ``watermark`` touched it.

        A stale one (built from data a request forgot while it was being built) is recorded as purged by
        that request in the same transaction, like what a forget invalidates: the run that built it
        deletes its bytes when it finishes (:func:`~fedforget.store.purge.finish_pending_purges`).
        """
        units = sorted(set(lineage))
        with self.transaction("artifact", artifact=artifact) as db:
            db.execute("DELETE FROM lineage WHERE artifact=?", (artifact,))
            db.executemany("INSERT INTO lineage VALUES(?, ?)", ((u, artifact) for u in units))
            stale = db.execute(
                "SELECT MAX(f.request) FROM lineage l JOIN forgotten f ON f.unit = l.unit "
                "WHERE l.artifact=? AND f.request > ?", (artifact, watermark)).fetchone()[0]
            db.execute("INSERT OR REPLACE INTO artifacts VALUES(?, ?, ?, ?, ?, ?)",
                       (artifact, sha256, kind, watermark, 0 if stale else 1, json.dumps(meta or {}, sort_keys=True)))
            db.execute("INSERT INTO history VALUES(?, ?, ?, ?)", (artifact, sha256, watermark, time.time()))
            if stale is not None:  # the same bytes may have been purged already (a rebuild from the same data)
                record_purges(db, int(stale), [artifact])
                db.execute("UPDATE purged SET done=0 WHERE artifact=? AND sha256=?", (artifact, sha256))
            crash_point("ledger:record-artifact")
            return stale is None

    def refresh_serving(self) -> dict[str, Any]:
        """Recompute the serving plan from the valid artifacts (after training or retraining)."""
        with self.transaction("serving") as db:
            return self._refresh_serving(db)

    def _refresh_serving(self, db: sqlite3.Connection) -> dict[str, Any]:
        plan = self._plan(db)
        valid = {r[0] for r in db.execute("SELECT artifact FROM artifacts WHERE valid=1")}
        serving = compute_serving(plan, valid)
        self._set_meta(db, "serving", serving)
        return serving

    def _plan(self, db: sqlite3.Connection) -> dict[str, Any]:
        row = db.execute("SELECT value FROM meta WHERE key='plan'").fetchone()
        if row is None:
            raise LedgerUsageError("this store has no trained plan yet; run training first")
        return json.loads(row[0])

    # -- reads --------------------------------------------------------------------------------
    def serving(self) -> dict[str, Any]:
        return self.get_meta("serving", {"available": False, "artifacts": []})

    def artifacts(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT artifact, sha256, kind, watermark, valid, meta FROM artifacts ORDER BY artifact")
        return [{"artifact": a, "sha256": s, "kind": k, "watermark": w, "valid": bool(v), "meta": json.loads(m)}
                for a, s, k, w, v, m in rows]

    def valid_artifacts(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT artifact FROM artifacts WHERE valid=1")}

    def lineage(self, artifact: str) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT unit FROM lineage WHERE artifact=? ORDER BY unit", (artifact,))]

    def first_sha(self, artifact: str) -> str | None:
        """The sha256 of the artifact as first trained (before any forget), for before/after audits."""
        row = self.db.execute("SELECT sha256 FROM history WHERE artifact=? ORDER BY rowid LIMIT 1",
                              (artifact,)).fetchone()
        return row[0] if row else None

    def requests(self, only: int | None = None) -> list[dict[str, Any]]:
        """Every request in id order, or the one with id ``only`` (a list of at most one)."""
        done = self.retrained_watermark()
        where, args = ("WHERE id=? ", (only,)) if only is not None else ("", ())
        rows = self.db.execute("SELECT id, at, kind, spec, samples, units, invalidated, latency_ms FROM requests "
                               f"{where}ORDER BY id", args)
        return [{"request": i, "at": at, "kind": k, "spec": json.loads(sp), "samples": n, "units": json.loads(u),
                 "invalidated": json.loads(inv), "latency-ms": lat, "state": "retrained" if i <= done else "pending"}
                for i, at, k, sp, n, u, inv, lat in rows]

    def request_specs(self) -> list[tuple[int, Any]]:
        """Every request's id and what it named (``spec``: samples, slices, clients; ``records`` as commitments, already
        resolved into its samples), in id order: what a check of the sample index, or a reference that must not
        trust it, resolves against the manifest."""
        return [(int(i), json.loads(spec)) for i, spec in self.db.execute("SELECT id, spec FROM requests ORDER BY id")]

    def last_request(self) -> int:
        row = self.db.execute("SELECT MAX(id) FROM requests").fetchone()
        return int(row[0] or 0)

    def retrained_watermark(self) -> int:
        row = self.db.execute("SELECT MAX(watermark) FROM retrains").fetchone()
        return int(row[0] or 0)

    def forgotten_by_partition(self, up_to: int | None = None) -> dict[int, list[int]]:
        """Every forgotten sample id (of requests ``<= up_to``), grouped by the partition holding it."""
        limit = self.last_request() if up_to is None else up_to
        out: dict[int, list[int]] = {}
        rows = self.db.execute(
            "SELECT f.sample, u.partition FROM forgotten f JOIN units u ON u.unit = f.unit WHERE f.request <= ? "
            "ORDER BY f.sample", (limit,))
        for sample, partition in rows:
            out.setdefault(int(partition), []).append(int(sample))
        return out

    def forgotten_count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM forgotten").fetchone()[0])

    def has_requests(self) -> bool:
        return self.last_request() > 0

    def units_of_partition(self, partition: int) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT unit FROM units WHERE partition=? ORDER BY unit", (partition,))]

    def exhausted_partitions(self) -> list[int]:
        """Partitions all of whose samples are forgotten (a leaving client): retraining skips them."""
        held = dict(self.db.execute("SELECT u.partition, COUNT(*) FROM samples s JOIN units u ON u.unit = s.unit "
                                    "GROUP BY u.partition"))
        gone = dict(self.db.execute("SELECT u.partition, COUNT(*) FROM forgotten f JOIN units u ON u.unit = f.unit "
                                    "GROUP BY u.partition"))
        return sorted(int(p) for p, n in held.items() if gone.get(p, 0) >= n)

    def num_samples(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0])

    # -- the forget path ----------------------------------------------------------------------
    def forget(self, samples: Sequence[int] = (), slices: Sequence[str] = (), clients: Sequence[int] = (),
               clock: Callable[[], float] = time.perf_counter, records: Sequence[str] = (),
               log_fields: Mapping[str, Any] | None = None) -> ForgetResult:
        """Apply one request: forget samples, whole slices or whole clients, in one transaction.

        Unknown ids raise :class:`LedgerUsageError` before anything is written; a request naming only
        what is already forgotten is a no-op (no request row, nothing invalidated). ``records`` are the
        ``NODE:RECORD_ID`` names the caller resolved into ``samples``: the spec keeps their keyed commitments
        (the names stay in ``record_names`` until the request is complete); the key only when some were named.
        ``log_fields`` are added to the request's log entry (the forget service's record of who asked).
        """
        start = clock()
        samples, slices, clients = _named(samples, slices, clients)
        with self.transaction() as db:
            return self._forget_in(db, self._plan(db), samples, slices, clients, records, log_fields, clock, start)

    def forget_group(self, items: Sequence[GroupItem],
                     clock: Callable[[], float] = time.perf_counter) -> list[ForgetResult | LedgerUsageError]:
        """Apply several requests in one transaction (one lock, one commit, one fsync): each as :meth:`forget`
        applies it alone, in the order given, with its own request row, log entry and signed head, so the
        ledger holds what the requests one by one would have left. A request the ledger refuses fails alone
        (its savepoint is rolled back, its :class:`LedgerUsageError` is its result); the others commit.

        A request that forgets nothing new gets a ``service-no-op`` entry naming the request that forgot what
        it names, when ``no_op_fields`` asks for one (the forget service's record that it was asked)."""
        out: list[ForgetResult | LedgerUsageError] = []
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.log.begin("update", {})
            plan = self._plan(self.db)
            for item in items:
                start = clock()
                self.db.execute("SAVEPOINT forget_item")
                try:
                    samples, slices, clients = _named(item.samples, item.slices, item.clients)
                    self.log.name("update")
                    result = self._forget_in(self.db, plan, samples, slices, clients, item.records,
                                             item.log_fields, clock, start)
                    self.log.finish()
                    if result.request is None:
                        result.forgetting = self._forgetting_request(samples, slices, clients)
                        if item.no_op_fields is not None:
                            self.log.name("service-no-op", request=result.forgetting, **item.no_op_fields)
                            self.log.finish()
                except LedgerUsageError as exc:
                    self.db.execute("ROLLBACK TO forget_item")
                    self.log.rows = []
                    result = exc
                self.db.execute("RELEASE forget_item")
                out.append(result)
            crash_point("forget-group:before-commit")
        except BaseException:
            self.log.abandon()
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        self.log.committed(self.path.parent)
        return out

    def _forgetting_request(self, samples: Sequence[int], slices: Sequence[str], clients: Sequence[int]) -> int | None:
        """The newest request that forgot what a no-op request names (read inside the caller's transaction)."""
        units = list(slices)
        for client in clients:
            units += self.units_of_partition(int(client))
        newest = 0
        for column, values in (("sample", list(samples)), ("unit", units)):
            for chunk in _chunks(values):
                row = self.db.execute(f"SELECT MAX(request) FROM forgotten WHERE {column} IN ({_marks(len(chunk))})",
                                      chunk).fetchone()
                newest = max(newest, int(row[0] or 0))
        return newest or None

    def _forget_in(self, db: sqlite3.Connection, plan: dict[str, Any], samples: list[int], slices: list[str],
                   clients: list[int], records: Sequence[str], log_fields: Mapping[str, Any] | None,
                   clock: Callable[[], float], start: float) -> ForgetResult:
        """One request inside the caller's write transaction (its log entry named, not yet appended)."""
        units_named = self._resolve_units(db, slices, clients)
        found = self._resolve_samples(db, samples)
        already = self._already(db, samples)
        new_samples = [s for s in samples if s not in already]
        unit_new = self._count_unforgotten(db, units_named)
        if not new_samples and unit_new == 0:
            row = db.execute("SELECT value FROM meta WHERE key='serving'").fetchone()
            serving = json.loads(row[0]) if row else {"available": False, "artifacts": []}  # as serving()
            return ForgetResult(None, 0, [], [], serving, (clock() - start) * 1000.0, already=len(samples))
        spec: dict[str, list[Any]] = {"samples": samples, "slices": slices, "clients": clients}
        opened = draw_openings(records)
        if records:  # keyed commitments: the raw names stay in record_names until the request is complete
            spec["records"] = commitments_of(opened)
        kind = "client" if clients else "slice" if slices else "sample"
        cur = db.execute("INSERT INTO requests(at, kind, spec, samples, units, invalidated, latency_ms) "
                         "VALUES(?, ?, ?, 0, '[]', '[]', 0)", (time.time(), kind, json.dumps(spec)))
        request = int(cur.lastrowid)
        self.log.name("forget", **{**(log_fields or {}), "request": request})
        keep_openings(db, request, opened)
        crash_point("forget:request-row")
        db.executemany("INSERT INTO forgotten VALUES(?, ?, ?)", ((s, found[s], request) for s in new_samples))
        before = db.total_changes
        for chunk in _chunks(units_named):
            db.execute(f"INSERT OR IGNORE INTO forgotten SELECT sample, unit, ? FROM samples "
                       f"WHERE unit IN ({_marks(len(chunk))})", (request, *chunk))
        count = len(new_samples) + db.total_changes - before
        touched = sorted({found[s] for s in new_samples} | {
            u for u in units_named if self._touched_by(db, u, request)})
        crash_point("forget:forgotten-rows")
        invalidated = self._invalidate(db, touched)
        invalidated = sorted(set(invalidated).union(*(rule(db, request) for rule in self.rules)))
        crash_point("forget:invalidated")
        record_purges(db, request, invalidated)  # the bytes go right after the commit (store.purge)
        valid = {r[0] for r in db.execute("SELECT artifact FROM artifacts WHERE valid=1")}
        serving = compute_serving(plan, valid)
        self._set_meta(db, "serving", serving)
        latency = (clock() - start) * 1000.0
        db.execute("UPDATE requests SET samples=?, units=?, invalidated=?, latency_ms=? WHERE id=?",
                   (count, json.dumps(touched), json.dumps(invalidated), latency, request))
        crash_point("forget:before-commit")
        return ForgetResult(request, count, touched, invalidated, serving, latency,
                            already=len(samples) - len(new_samples),
                            openings=[{"record": n, "key": k, "commitment": commitment(k, n)}
                                      for n, k in sorted(opened.items())])

    def _resolve_samples(self, db: sqlite3.Connection, samples: list[int]) -> dict[int, str]:
        found: dict[int, str] = {}
        for chunk in _chunks(samples):
            found.update(db.execute(f"SELECT sample, unit FROM samples WHERE sample IN ({_marks(len(chunk))})",
                                    chunk).fetchall())
        missing = [s for s in samples if s not in found]
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (" …" if len(missing) > 5 else "")
            raise LedgerUsageError(f"unknown sample id(s) {shown}: not in this store's training data "
                                   f"(sample ids are indices into the task's train split); {FIND_COMMANDS}")
        return found

    def _resolve_units(self, db: sqlite3.Connection, slices: list[str], clients: list[int]) -> list[str]:
        units: set[str] = set()
        for chunk in _chunks(slices):
            units.update(r[0] for r in db.execute(f"SELECT unit FROM units WHERE unit IN ({_marks(len(chunk))})",
                                                  chunk))
        missing = [s for s in slices if s not in units]
        if missing:
            raise LedgerUsageError(f"unknown slice(s) {', '.join(missing[:5])} (PARTITION:SLICE); {FIND_COMMANDS}")
        for c in clients:
            rows = [r[0] for r in db.execute("SELECT unit FROM units WHERE partition=?", (c,))]
            if not rows:
                raise LedgerUsageError(f"unknown client {c}: this store has partitions "
                                       f"0..{self._max_partition(db)}; {FIND_COMMANDS}")
            units.update(rows)
        return sorted(units)

    @staticmethod
    def _max_partition(db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT MAX(partition) FROM units").fetchone()[0] or 0)

    @staticmethod
    def _already(db: sqlite3.Connection, samples: list[int]) -> set[int]:
        out: set[int] = set()
        for chunk in _chunks(samples):
            out.update(r[0] for r in db.execute(f"SELECT sample FROM forgotten WHERE sample IN ({_marks(len(chunk))})",
                                                chunk))
        return out

    @staticmethod
    def _count_unforgotten(db: sqlite3.Connection, units: list[str]) -> int:
        total = 0
        for u in units:
            total += db.execute("SELECT COUNT(*) FROM samples s WHERE s.unit=? AND NOT EXISTS "
                                "(SELECT 1 FROM forgotten f WHERE f.sample = s.sample)", (u,)).fetchone()[0]
        return int(total)

    @staticmethod
    def _touched_by(db: sqlite3.Connection, unit: str, request: int) -> bool:
        return db.execute("SELECT 1 FROM forgotten WHERE unit=? AND request=? LIMIT 1",
                          (unit, request)).fetchone() is not None

    @staticmethod
    def _invalidate(db: sqlite3.Connection, units: list[str]) -> list[str]:
        hit: set[str] = set()
        for chunk in _chunks(units):
            hit.update(r[0] for r in db.execute(
                f"SELECT DISTINCT l.artifact FROM lineage l JOIN artifacts a ON a.artifact = l.artifact "
                f"WHERE a.valid=1 AND l.unit IN ({_marks(len(chunk))})", chunk))
        ids = sorted(hit)
        for chunk in _chunks(ids):
            db.execute(f"UPDATE artifacts SET valid=0 WHERE artifact IN ({_marks(len(chunk))})", chunk)
        return ids

    # -- retraining ---------------------------------------------------------------------------
    def finish_retrain(self, watermark: int, rebuilt: list[str]) -> dict[str, Any]:
        """Record that clients dropped every request up to ``watermark`` and invalid artifacts were rebuilt."""
        with self.transaction("retrain", watermark=int(watermark)) as db:
            db.execute("INSERT INTO retrains(at, watermark, rebuilt) VALUES(?, ?, ?)",
                       (time.time(), watermark, json.dumps(rebuilt)))
            serving = self._refresh_serving(db)
            crash_point("ledger:finish-retrain")
            return serving
