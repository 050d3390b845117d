"""The forget service's store check: the whole check once, then before each request only what was appended.

:func:`~fedforget.store.check.check_store` reads every table and replays the ledger's whole log, so its cost
grows with the requests and samples a store holds; a service answering hundreds of requests a second cannot run
it before each one. :class:`StoreWatch` runs it when the service starts, and again whenever the manifest or the
ledger file is replaced, and keeps the log's replay; then it asks cheap questions first:

- nothing committed to the ledger since the last check (SQLite's ``PRAGMA data_version`` on a connection
  the watch keeps) and no file it covers changed (their ``stat``): only the served files are looked at
  (hashed again only when their ``stat`` changed);
- something committed but the log gained no entry: every honest write appends one in its own transaction, so
  the commit was made behind the ledger's back, and the whole check runs (and names the edit);
- entries of another writer than the coordinator (a ServerApp run, or anyone else without the key) appended: the
  whole check runs, once for all the entries one check finds (a training run's many, or one forged entry beside a
  hand edit in place of an old row, which the entries themselves would not show); the checks after it read only
  what is appended later;
- else the new entries are checked (``fedforget.store.log_follow``: they continue the chain, their heads are
  signed, each row they wrote is in its table, each logged table holds as many rows as the log left in it),
  and what the log does not cover: the new requests' forgotten rows (each in the unit the manifest puts its
  sample in, as many as each request recorded), the units table's size, and, for the artifacts the new
  entries touched or whose data was just forgotten, that no valid one saw forgotten data, that their sha256
  and watermark are the ones training wrote, that what is served is valid, intact and the serving plan's.
  A retrain's entries (new artifacts, lineage or history rows) get the artifact checks over every artifact;
- ``service.db`` changed (its ``stat``): it is held to the ``via`` fields of the log
  (``fedforget.store.service_evidence``), linear in its rows, once per change.

What this does not re-read per request is what no new entry wrote: a hand edit in place of an old row made in
the same moment as an honest commit of the coordinator is found by the next full check (every CLI command, and
the service's next start); SQLite's page check and the sample index likewise.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections import ChainMap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedforget.store.check import (
    StoreCheck,
    check_artifact_rows,
    check_requests,
    check_serving,
    check_store,
    service_problems,
    trusted_key,
)
from fedforget.store.forget_plan import PlanError, SamplePlan, sample_plan
from fedforget.store.ledger import LEDGER, Ledger
from fedforget.store.log_check import Replay
from fedforget.store.log_record import record_path
from fedforget.store.service_evidence import SERVICE_DB
from fedforget.store.store import MANIFEST, METRICS, Store, StoreError

#: meta keys the serving plan follows from
SERVING_META = frozenset({"serving", "plan"})
#: tables a retrain or a training run writes: entries touching them get the artifact checks over every artifact
TRAINING_TABLES = ("lineage", "history", "retrains")


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
    #: rows of the tables the log does not cover that a forget only adds to (``forgotten``) or none writes
    forgotten: int
    units: int
    log_size: int
    #: served artifact → its sha256
    served: dict[str, str] = field(default_factory=dict)
    artifacts: frozenset[str] = frozenset()
    #: ``service.db``'s stat when it last matched the log
    service: tuple[int, int, int, int] | None = None
    #: the ledger's record of the manifest it was trained with (no forget or retrain writes it)
    identity: str | None = None


class StoreWatch:
    """One store, checked whole at first and then by what was appended; thread-safe, one check at a time."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: the files whose ``stat`` each check compares, as strings (a check runs before every request)
        self._files_at = {name: str(store.root / name) for name in (MANIFEST, METRICS, SERVICE_DB, LEDGER)}
        self._lock = threading.Lock()
        self._seen: Seen | None = None
        self._log: Replay | None = None
        self._plan: SamplePlan | None = None
        self._db: sqlite3.Connection | None = None
        self._reader: Ledger | None = None
        self._paths: dict[str, str] = {}
        #: served sha256 → the stat of its file when it was last hashed intact
        self._intact: dict[str, tuple[int, int, int, int] | None] = {}
        self._trust: dict[bytes, bool] = {}
        #: where the coordinator's record of this store's log lies (its path resolved at each whole check)
        self._record_at: Path | None = None
        #: how many checks of each kind ran (the benchmark reports them)
        self.runs = {"full": 0, "changes": 0, "files": 0}

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    # -- the check ---------------------------------------------------------------------------
    def check(self) -> StoreCheck:
        """The store's check result now: whole when the watch is new or a file was replaced, else the changes."""
        with self._lock:
            seen = self._seen
            if seen is None or _stat_key(self._files_at[MANIFEST]) != seen.manifest or \
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
        self._record_at = record_path(self.store.root)
        self._seen, self._log = None, None
        # the mark is taken before the check reads the store: a request committed in between is after the
        # mark, so the next check by changes reads it (taken after, it would be marked seen, never checked)
        version = self._data_version()
        manifest_key = _stat_key(self._files_at[MANIFEST])
        mark = None
        if version is not None:
            try:
                ledger = self.store.ledger()
            except StoreError:
                ledger = None  # the whole check below says why
            if ledger is not None:
                try:
                    with ledger.snapshot():
                        mark = self._mark(ledger, manifest_key, version)
                except (sqlite3.DatabaseError, ValueError, TypeError):
                    mark = None  # a damaged ledger: the whole check below says what
                finally:
                    ledger.close()
        out = check_store(self.store)
        # a commit between the mark and the check's read: the replay is ahead of the mark, start again next time
        if out.ok and mark is not None and (out.log is None or out.log.size == mark.log_size):
            try:
                self._plan = sample_plan(self.store.manifest())
                if self._plan is not None:
                    self._plan.sorted_ids  # noqa: B018 - its look-up index now, not in the first request's check
            except PlanError:
                self._plan = None  # the whole check said the plan is sound; a None plan checks no units
            self._seen, self._log = mark, out.log
        return out

    def _files(self, seen: Seen) -> StoreCheck:
        """Nothing was committed: only the files the check covers may have changed under it.

        Unless a commit landed after the count was read: a forget's purge then deletes files it stopped serving,
        and the service links the row of a forget whose entry the log replayed so far does not hold. What looks
        wrong is then checked again by the changes, against the log that holds the commit."""
        self.runs["files"] += 1
        out = StoreCheck()
        if _stat_key(self._files_at[METRICS]) != seen.metrics:
            return self._full()
        self._check_served_files(seen, out)
        service = _stat_key(self._files_at[SERVICE_DB])
        committed = not out.ok and self._data_version() != seen.data_version
        if out.ok and service != seen.service and self._log is not None:
            try:
                with self._reading().snapshot():  # no commit lands while it is read
                    committed = self._data_version() != seen.data_version
                    if not committed:
                        out.problems += service_problems(self.store, self._log)
            except sqlite3.DatabaseError as exc:
                out.problems.append(f"{LEDGER} is corrupt ({exc})")
        if committed:
            version = self._data_version()
            return self._full() if version is None else self._changes(seen, version)
        if service != seen.service and self._log is not None:
            if out.ok:
                seen.service = service
            else:
                self._seen, self._log = None, None
        return out

    def _check_served_files(self, seen: Seen, out: StoreCheck) -> None:
        """Each served file is intact: hashed again only when its ``stat`` changed since it was last found so."""
        paths, intact, stat = self._paths, self._intact, os.stat
        for artifact, sha in seen.served.items():
            path = paths.get(sha)
            if path is None:
                path = paths[sha] = str(self.store.artifact_path(sha))
            try:
                st = stat(path)
                key: tuple[int, int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            except OSError:
                key = None
            if key is not None and intact.get(sha) == key:
                continue
            if self.store.verify_artifact(sha):
                intact[sha] = key
                continue
            problem = f"served artifact {artifact} is corrupt or missing"
            out.problems.append(problem)
            out.repairable.append(problem)

    def _trusted(self) -> Callable[[bytes], bool] | None:
        """Whether a head's key is the coordinator's, each key asked once per watch."""
        ask = trusted_key()
        if ask is None:
            return None
        known = self._trust

        def trusted(public: bytes) -> bool:
            if public not in known:
                known[public] = ask(public)
            return known[public]
        return trusted

    def _changes(self, seen: Seen, version: int) -> StoreCheck:
        if self._log is None:
            return self._full()  # a store without a log: every commit is checked whole
        out = StoreCheck()
        unlogged = False
        try:
            ledger = self._reading()
            with ledger.snapshot():
                unlogged = not self._check_appended(ledger, seen, version, out)
        except sqlite3.DatabaseError as exc:
            out.problems.append(f"{LEDGER} is corrupt ({exc})")
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:  # a cell edited by hand
            out.problems.append(f"{LEDGER} holds a malformed record ({type(exc).__name__}: {str(exc)[:200]})")
        if unlogged:
            return self._full()  # committed without a log entry, or by another writer: the whole check
        if not out.ok:
            self._seen, self._log = None, None  # a refusal is re-checked whole next time
        return out

    def _check_appended(self, ledger: Ledger, seen: Seen, version: int, out: StoreCheck) -> bool:
        """Check what the log gained since ``seen``. False: the whole check must run instead (the log gained
        nothing though the file changed, or an entry of another writer than the coordinator)."""
        from fedforget.store.log_follow import follow
        from fedforget.store.log_record import record_problems

        db, log = ledger.db, self._log
        assert log is not None
        rows = db.execute("SELECT seq, entry, leaf FROM log WHERE seq >= ? ORDER BY seq", (log.size,)).fetchall()
        if not rows or not all(_by_coordinator(entry) for _seq, entry, _leaf in rows):
            return False
        self.runs["changes"] += 1
        touched = follow(db, log, rows, self._trusted(), out.problems)
        if out.problems:
            return True
        roots = ChainMap({log.size: log.frontier.root().hex()}, log.roots)  # not a copy: one root per head
        out.problems += record_problems(self.store.root, log.log_id, log.size, roots, has_log=True,
                                        path=self._record_at)
        if _meta(db, "manifest-identity") != seen.identity:
            out.problems.append(f"{LEDGER}'s record of the manifest changed after training")
        new = dict(db.execute("SELECT id, samples FROM requests WHERE id > ?", (seen.last_request,)))
        counted = {rid: self._rows_of(db, rid, out) for rid in sorted(new)}
        check_requests(db, out, counted, after=seen.last_request)
        forgotten = _count(db, "forgotten")
        if forgotten != seen.forgotten + sum(new.values()):
            out.problems.append(f"{LEDGER}'s forgotten rows do not add up to its requests since the last check")
        if _count(db, "units") != seen.units:
            out.problems.append(f"{LEDGER}'s units table changed after training")
        artifacts = {str(k[0]) for k in touched.get("artifacts", ())}
        meta = {str(k[0]) for k in touched.get("meta", ())}
        if artifacts - seen.artifacts or any(t in touched for t in TRAINING_TABLES):
            check_artifact_rows(self.store, ledger, out)
            check_serving(self.store, ledger, out)
        else:
            self._check_artifacts(ledger, artifacts, sorted(new), out)
            if artifacts or meta & SERVING_META:
                _check_serving_plan(ledger, out)
        service = _stat_key(self._files_at[SERVICE_DB])
        if out.ok and service != seen.service:  # the service reserves a row before its entry: both changed
            out.problems += service_problems(self.store, log)
        if out.ok:
            served = _served(ledger) if artifacts or meta & SERVING_META else seen.served
            self._seen = Seen(manifest=seen.manifest, ledger_inode=seen.ledger_inode, data_version=version,
                              metrics=_stat_key(self._files_at[METRICS]),
                              last_request=max([seen.last_request, *new]), forgotten=forgotten, units=seen.units,
                              log_size=log.size, served=served, artifacts=seen.artifacts | artifacts,
                              identity=seen.identity, service=service)
            self._check_served_files(self._seen, out)
        return True

    def _check_artifacts(self, ledger: Ledger, artifacts: set[str], requests: list[int], out: StoreCheck) -> None:
        """The artifacts the new entries touched keep the sha256 and watermark their training wrote last and saw
        no forgotten data if valid; no valid artifact saw the units the new requests forgot from."""
        db = ledger.db
        last = "(SELECT h.{0} FROM history h WHERE h.artifact = a.artifact ORDER BY h.rowid DESC LIMIT 1)"
        for artifact in sorted(artifacts):
            row = db.execute(f"SELECT a.sha256 != {last.format('sha256')}, a.watermark != "
                             f"{last.format('watermark')}, a.valid, a.watermark FROM artifacts a WHERE a.artifact=?",
                             (artifact,)).fetchone()
            if row is None:
                continue  # deleted by an entry the log holds: nothing of it is served (checked below)
            if row[0]:
                out.problems.append(f"artifact {artifact} records a sha256 its training never wrote (its history "
                                    "says otherwise)")
            elif row[1]:
                out.problems.append(f"artifact {artifact} records a watermark its training never wrote (its history "
                                    "says otherwise)")
            if row[2] == 1 and db.execute("SELECT 1 FROM lineage l JOIN forgotten f ON f.unit = l.unit WHERE "
                                          "l.artifact = ? AND f.request > ? LIMIT 1", (artifact, row[3])).fetchone():
                out.problems.append(f"artifact {artifact} is valid but saw forgotten data")
        for rid in requests:
            units = json.loads(db.execute("SELECT units FROM requests WHERE id=?", (rid,)).fetchone()[0])
            for unit in units:
                for (artifact,) in db.execute("SELECT a.artifact FROM lineage l JOIN artifacts a ON a.artifact = "
                                              "l.artifact WHERE l.unit = ? AND a.valid = 1 AND a.watermark < ?",
                                              (str(unit), rid)):
                    out.problems.append(f"artifact {artifact} is valid but saw forgotten data")

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
    def _mark(self, ledger: Ledger, manifest: tuple[int, int, int, int] | None, version: int) -> Seen:
        from fedforget.store.log import has_log, log_size

        db = ledger.db
        return Seen(manifest=manifest, ledger_inode=self._ledger_inode(), data_version=version,
                    metrics=_stat_key(self._files_at[METRICS]),
                    last_request=int(db.execute("SELECT COALESCE(MAX(id), 0) FROM requests").fetchone()[0]),
                    forgotten=_count(db, "forgotten"), units=_count(db, "units"),
                    log_size=log_size(db) if has_log(db) else 0, served=_served(ledger),
                    artifacts=frozenset(str(r[0]) for r in db.execute("SELECT artifact FROM artifacts")),
                    identity=_meta(db, "manifest-identity"), service=_stat_key(self._files_at[SERVICE_DB]))

    def _ledger_inode(self) -> int | None:
        key = _stat_key(self._files_at[LEDGER])
        return None if key is None else key[0]

    def _reading(self) -> Ledger:
        """The watch's own read-only ledger handle, kept open between checks (opened again by a whole check)."""
        if self._reader is None:
            self._reader = Ledger.reader(self.store.root / LEDGER)
        return self._reader

    def _reconnect(self) -> None:
        if self._db is not None:
            self._db.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
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


def _by_coordinator(entry: str) -> bool:
    """Whether a log entry says the coordinator wrote it (the heads it must be under are checked by
    ``log_follow``: an entry claiming the coordinator without its signed head is refused there)."""
    try:
        parsed = json.loads(entry)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("writer") == "coordinator"


def _served(ledger: Ledger) -> dict[str, str]:
    """Served artifact → its recorded sha256."""
    shas = dict(ledger.db.execute("SELECT artifact, sha256 FROM artifacts").fetchall())
    return {str(a): str(shas.get(a, "")) for a in ledger.serving().get("artifacts", [])}


def _check_serving_plan(ledger: Ledger, out: StoreCheck) -> None:
    """What is served is valid and is what the plan and the valid artifacts give."""
    valid = ledger.valid_artifacts()
    serving = ledger.serving()
    out.problems += [f"served artifact {a} is not valid" for a in sorted(set(serving.get("artifacts", [])) - valid)]
    plan = ledger.plan()
    if plan is not None and _meta(ledger.db, "serving") is not None:
        from fedforget.core.serving_plans import compute_serving

        if compute_serving(plan, valid) != serving:
            out.problems.append("the serving plan is not the one the plan and the valid artifacts give")


def _meta(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _count(db: sqlite3.Connection, table: str) -> int:
    return int(db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0])
