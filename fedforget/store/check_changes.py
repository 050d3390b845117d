"""The forget service's store check: the whole check once, then before each request only what changed.

:func:`~fedforget.store.check.check_store` reads every table, so its cost grows with the requests and
samples a store holds; a service answering hundreds of requests a second cannot run it before each one.
:class:`StoreWatch` runs it when the service starts, and again whenever the manifest or the ledger file is
replaced, and otherwise asks cheap questions first:

- nothing committed to the ledger since the last check (SQLite's ``PRAGMA data_version`` on a connection
  the watch keeps) and no file it covers changed (their ``stat``): only the served files are looked at
  (hashed again only when their ``stat`` changed);
- else, what changed is checked: the requests recorded since (each whole, each forgotten row in the unit the
  manifest puts its sample in), the row counts of the tables that only grow (a row deleted or added behind
  the ledger's back changes them), and every artifact-level invariant (the artifacts, lineage and serving
  tables are small): no valid artifact saw forgotten data, what is served is valid and intact.

What this does not re-read per request is what no forget or retrain writes: SQLite's page check and the
sample index. An edit in place of such a row between two requests is found by the next full check (every
CLI command, and the service's next start).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedforget.store.check import (
    StoreCheck,
    check_artifact_rows,
    check_requests,
    check_serving,
    check_store,
)
from fedforget.store.forget_plan import PlanError, SamplePlan, sample_plan
from fedforget.store.ledger import LEDGER
from fedforget.store.store import MANIFEST, METRICS, Store, StoreError

#: tables whose rows a store only ever adds (or, for ``samples`` and ``units``, writes once at training)
COUNTED = ("requests", "forgotten", "samples", "units", "history", "retrains")


def _stat_key(path: os.PathLike[str] | str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class Seen:
    """What the last check found sound."""

    manifest: tuple[int, int, int, int] | None
    ledger_inode: int | None
    data_version: int
    metrics: tuple[int, int, int, int] | None
    last_request: int
    counts: dict[str, int]
    #: served artifact → its sha256
    served: dict[str, str] = field(default_factory=dict)
    #: the ledger's record of the manifest it was trained with (no forget or retrain writes it)
    identity: str | None = None


class StoreWatch:
    """One store, checked whole at first and then by what changed; thread-safe, one check at a time."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._seen: Seen | None = None
        self._plan: SamplePlan | None = None
        self._db: sqlite3.Connection | None = None
        #: how many checks of each kind ran (the benchmark reports them)
        self.runs = {"full": 0, "changes": 0, "files": 0}

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- the check ---------------------------------------------------------------------------
    def check(self) -> StoreCheck:
        """The store's check result now: whole when the watch is new or a file was replaced, else the changes."""
        with self._lock:
            seen = self._seen
            if seen is None or _stat_key(self.store.root / MANIFEST) != seen.manifest or \
                    self._ledger_inode() != seen.ledger_inode:
                return self._full()
            version = self._data_version()
            if version is None:
                return self._full()
            if version == seen.data_version:
                return self._files(seen)
            return self._changes(seen, version)

    def _full(self) -> StoreCheck:
        self.runs["full"] += 1
        self._reconnect()
        self._seen = None
        # the mark is taken before the check reads the store: a request committed in between is after the
        # mark, so the next check by changes reads it (taken after, it would be marked seen, never checked)
        version = self._data_version()
        manifest_key = _stat_key(self.store.root / MANIFEST)
        mark = None
        if version is not None:
            try:
                ledger = self.store.ledger()
            except StoreError:
                ledger = None  # the whole check below says why
            if ledger is not None:
                try:
                    with ledger.snapshot():
                        mark = self._mark(ledger.db, manifest_key, version, ledger.serving())
                except (sqlite3.DatabaseError, ValueError, TypeError):
                    mark = None  # a damaged ledger: the whole check below says what
                finally:
                    ledger.close()
        out = check_store(self.store)
        if out.ok and mark is not None:
            try:
                self._plan = sample_plan(self.store.manifest())
            except PlanError:
                self._plan = None  # the whole check said the plan is sound; a None plan checks no units
            self._seen = mark
        return out

    def _files(self, seen: Seen) -> StoreCheck:
        """Nothing was committed: only the files the check covers may have changed under it."""
        self.runs["files"] += 1
        out = StoreCheck()
        if _stat_key(self.store.root / METRICS) != seen.metrics:
            return self._full()
        for artifact, sha in seen.served.items():
            if not self.store.verify_artifact(sha):
                problem = f"served artifact {artifact} is corrupt or missing"
                out.problems.append(problem)
                out.repairable.append(problem)
        return out

    def _changes(self, seen: Seen, version: int) -> StoreCheck:
        self.runs["changes"] += 1
        out = StoreCheck()
        ledger = self.store.ledger()
        try:
            with ledger.snapshot():
                db = ledger.db
                self._check_counts(db, seen, out)
                if _meta(db, "manifest-identity") != seen.identity:
                    out.problems.append(f"{LEDGER}'s record of the manifest changed after training")
                new = dict(db.execute("SELECT id, samples FROM requests WHERE id > ?", (seen.last_request,)))
                rows = {rid: self._rows_of(db, rid, out) for rid in sorted(new)}
                check_requests(db, out, rows, after=seen.last_request)
                check_artifact_rows(self.store, ledger, out)
                check_serving(self.store, ledger, out)
                if out.ok:
                    self._seen = self._mark(db, seen.manifest, version, ledger.serving())
        except sqlite3.DatabaseError as exc:
            out.problems.append(f"{LEDGER} is corrupt ({exc})")
        finally:
            ledger.close()
        if not out.ok:
            self._seen = None  # a refusal is re-checked whole next time
        return out

    def _check_counts(self, db: sqlite3.Connection, seen: Seen, out: StoreCheck) -> None:
        """Rows the last check saw are all still there: old requests unchanged in number, the one-time tables
        unchanged, the growing ones grown by exactly what the new requests recorded."""
        old = db.execute("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM requests WHERE id <= ?",
                         (seen.last_request,)).fetchone()
        if (int(old[0]), int(old[1])) != (seen.counts["requests"], seen.last_request):
            out.problems.append(f"{LEDGER} lost or renumbered forget requests since the last check")
        for table in ("samples", "units"):
            if _count(db, table) != seen.counts[table]:
                out.problems.append(f"{LEDGER}'s {table} table changed after training")
        added = int(db.execute("SELECT COALESCE(SUM(samples), 0) FROM requests WHERE id > ?",
                               (seen.last_request,)).fetchone()[0])
        if _count(db, "forgotten") != seen.counts["forgotten"] + added:
            out.problems.append(f"{LEDGER}'s forgotten rows do not add up to its requests since the last check")
        for table in ("history", "retrains"):
            if _count(db, table) < seen.counts[table]:
                out.problems.append(f"{LEDGER} lost rows of its {table} table since the last check")

    def _rows_of(self, db: sqlite3.Connection, rid: int, out: StoreCheck) -> int:
        """A new request's forgotten rows (through the units it recorded), each in its manifest unit."""
        units_json = db.execute("SELECT units FROM requests WHERE id=?", (rid,)).fetchone()[0]
        total = 0
        for unit in json.loads(units_json):
            samples = [int(r[0]) for r in db.execute("SELECT sample FROM forgotten WHERE unit=? AND request=?",
                                                     (str(unit), rid))]
            total += len(samples)
            wrong = self._misplaced(samples, str(unit))
            if wrong is not None:
                out.problems.append(f"request {rid} forgot sample {wrong} under unit {unit}, which the manifest "
                                    "does not put it in")
        return total

    def _misplaced(self, samples: list[int], unit: str) -> int | None:
        """The first of ``samples`` the manifest does not put in ``unit`` (None when all are there)."""
        plan = self._plan
        if plan is None or not samples:
            return None
        arr = np.asarray(samples, dtype=np.int64)
        pos = plan.locate(arr)
        code = plan.index.get(unit, -1)
        bad = (pos < 0) | (plan.unit_codes[np.maximum(pos, 0)] != code)
        return int(arr[np.argmax(bad)]) if bool(bad.any()) else None

    # -- bookkeeping ---------------------------------------------------------------------------
    def _mark(self, db: sqlite3.Connection, manifest: tuple[int, int, int, int] | None, version: int,
              serving: dict[str, Any]) -> Seen:
        shas = dict(db.execute("SELECT artifact, sha256 FROM artifacts").fetchall())
        return Seen(manifest=manifest, ledger_inode=self._ledger_inode(), data_version=version,
                    metrics=_stat_key(self.store.root / METRICS),
                    last_request=int(db.execute("SELECT COALESCE(MAX(id), 0) FROM requests").fetchone()[0]),
                    counts={t: _count(db, t) for t in COUNTED},
                    served={a: str(shas.get(a, "")) for a in serving.get("artifacts", [])},
                    identity=_meta(db, "manifest-identity"))

    def _ledger_inode(self) -> int | None:
        key = _stat_key(self.store.root / LEDGER)
        return None if key is None else key[0]

    def _reconnect(self) -> None:
        if self._db is not None:
            self._db.close()
        path = (self.store.root / LEDGER).absolute()
        try:
            self._db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False,
                                       isolation_level=None)
        except sqlite3.Error:
            self._db = None

    def _data_version(self) -> int | None:
        """SQLite's count of commits by other connections, on the watch's own idle connection."""
        if self._db is None:
            return None
        try:
            return int(self._db.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            return None


def _meta(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _count(db: sqlite3.Connection, table: str) -> int:
    return int(db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0])
