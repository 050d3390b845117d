"""Group commit: the forget requests that arrive while one commit runs are committed together by the next.

A caller hands its submissions (one, or a batch's many) to :meth:`GroupCommitter.submit` and blocks until
they are answered. Two threads of the committer do the writing, each one group at a time:

- the **ledger stage** takes every submission queued so far (whole callers, up to :data:`MAX_GROUP` unless a
  single batch is larger): that is a group, closed the moment it is taken (no timer, so a caller alone is
  committed at once, and whoever arrives meanwhile joins the next group). It runs the store check once,
  reserves every new idempotency key in ``service.db`` (one commit; a key used before answers its request,
  a key used with another body its conflict, alone), then applies the new reservations in the ledger with
  :meth:`fedforget.store.ledger.Ledger.forget_group`: one transaction, each request with its own request
  row, log entry (its ``via``) and signed head, each in its own savepoint, so one the ledger refuses is
  rolled back alone (one commit, one fsync);
- the **link stage** then purges what the group invalidated (once), links every applied reservation to its
  ledger request and drops every refused one (one ``service.db`` commit), and only then answers the group's
  callers. While it runs, the ledger stage already commits the next group.

So a 201 says the request is durable in the ledger and linked in ``service.db``. A crash before the ledger's
commit leaves reservations ``accepted`` (the next start applies them); after it, reservations the ledger
applied but ``service.db`` never linked, which the next start links (forgetting what is forgotten is a
no-op: never applied twice).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedforget.service.requests_db import IdempotencyConflict, RequestsDB, ServiceRequest
from fedforget.store.ledger import GroupItem, LedgerUsageError
from fedforget.store.service_evidence import body_digest, evidence_of, store_body_key
from fedforget.unlearning.request_states import ledger_states_of

#: submissions one group takes from the queue (a batch larger than this is still one group)
MAX_GROUP = 1000


@dataclass
class Submission:
    """One forget request as a caller hands it over; ``outcome`` is set by the commit that holds it."""

    spec: dict[str, list[Any]]
    key: str
    asked_by: str
    outcome: tuple[ServiceRequest, bool] | BaseException | None = None
    #: the ledger states of the group's requests, read once after its link (``states.ledger_states_of``)
    states: dict[int, dict[str, Any]] | None = None


@dataclass
class _Reserved:
    """A submission's place in its group: its ``service.db`` row and whether this group created it."""

    submission: Submission
    rid: int
    created: bool
    accepted_at: float = 0.0
    digest: str = ""
    error: BaseException | None = None
    #: the submission that reserved this key, in this group or one still being linked
    leader: _Reserved | None = field(default=None, repr=False)


@dataclass
class _Group:
    submissions: list[Submission]
    done: list[threading.Event]
    reserved: list[_Reserved] = field(default_factory=list)
    applied: list[tuple[_Reserved, Any]] = field(default_factory=list)
    refused: list[_Reserved] = field(default_factory=list)
    error: BaseException | None = None


class GroupCommitter:
    """Commits queued submissions in groups (``check`` is the store check, run once per group;
    ``forget_check`` the store method's own refusal of ids, run per submission)."""

    def __init__(self, db: RequestsDB, check: Callable[[], None],
                 forget_check: Callable[[Sequence[int]], None] | None = None) -> None:
        self.db = db
        self.check = check
        self.forget_check = forget_check
        self._queue: list[tuple[list[Submission], threading.Event]] = []
        self._arrived = threading.Condition()
        self._linking: queue.Queue[_Group] = queue.Queue(maxsize=1)
        #: rid → its reservation, while the group that reserved it is not linked yet
        self._inflight: dict[int, _Reserved] = {}
        self._inflight_lock = threading.Lock()
        #: groups committed and the submissions they held (for the benchmark)
        self.groups = 0
        self.committed = 0
        for target, name in ((self._ledger_stage, "forget-ledger"), (self._link_stage, "forget-link")):
            threading.Thread(target=target, name=name, daemon=True).start()

    def submit(self, submissions: list[Submission]) -> list[Submission]:
        """Queue ``submissions`` and return once the commit holding them is durable (each has its outcome)."""
        done = threading.Event()
        with self._arrived:
            self._queue.append((submissions, done))
            self._arrived.notify()
        done.wait()
        return submissions

    def _take(self) -> _Group:
        with self._arrived:
            while not self._queue:
                self._arrived.wait()
            group = _Group([], [])
            while self._queue and (not group.submissions or
                                   len(group.submissions) + len(self._queue[0][0]) <= MAX_GROUP):
                subs, done = self._queue.pop(0)
                group.submissions.extend(subs)
                group.done.append(done)
            return group

    def _ledger_stage(self) -> None:
        while True:
            group = self._take()
            try:
                self.check()
                with self._inflight_lock:
                    group.reserved = _reserve(self.db, group.submissions, self._inflight)
                    self._inflight.update({r.rid: r for r in group.reserved if r.created})
                group.applied, group.refused = _apply(self.db, group.reserved, self.forget_check)
            except BaseException as exc:  # the store refused, or a write failed: every caller of the group hears it
                group.error = exc
                for r in group.reserved:  # as a lone request's: its reservation goes, unless its forget is logged
                    if r.created:
                        try:
                            self.db._drop(r.rid)
                        except Exception:  # noqa: BLE001 (left accepted: the next start applies it)
                            pass
            self._linking.put(group)

    def _link_stage(self) -> None:
        while True:
            group = self._linking.get()
            try:
                if group.error is None:
                    _finish(self.db, group)
                    self.groups += 1
                    self.committed += len(group.submissions)
            except BaseException as exc:
                group.error = exc
            finally:
                with self._inflight_lock:
                    for r in group.reserved:
                        self._inflight.pop(r.rid, None)
                for s in group.submissions:
                    if group.error is not None and not isinstance(s.outcome, tuple):
                        s.outcome = group.error
                for done in group.done:
                    done.set()


def _apply(db: RequestsDB, reserved: list[_Reserved], forget_check: Callable[[Sequence[int]], None] | None
           ) -> tuple[list[tuple[_Reserved, Any]], list[_Reserved]]:
    """The ledger's side of a group: (applied reservations with their results, refused reservations)."""
    new = [r for r in reserved if r.created and r.error is None]
    if forget_check is not None:
        for r in new:
            try:
                forget_check(r.submission.spec["samples"])
            except LedgerUsageError as exc:
                r.error = exc
    todo = [r for r in new if r.error is None]
    results = _forget(db, todo) if todo else []
    applied = []
    for r, result in zip(todo, results, strict=True):
        if isinstance(result, LedgerUsageError):
            r.error = result
        else:
            applied.append((r, result))
    return applied, [r for r in new if r.error is not None]


def _finish(db: RequestsDB, group: _Group) -> None:
    """Purge, link, and set each submission's outcome."""
    if group.applied:
        from fedforget.methods.registry import store_method
        from fedforget.store.purge import complete_purges

        complete_purges(db.store, store_method(db.store.manifest()))
    _link(db, group.applied, group.refused)
    rows = _rows(db, {r.rid for r in group.reserved})
    linked = {row.ledger_request for row in rows.values() if row.ledger_request is not None}
    states = ledger_states_of(db.store, linked) if linked else {}
    for r in group.reserved:
        source = r.leader or r
        error = r.error or source.error
        row = rows.get(r.rid)
        if error is None and row is None:  # its key's first request, in a group that failed, was dropped
            error = RuntimeError(f"the request under idempotency_key {r.submission.key!r} failed before it was "
                                 "applied; send it again")
        r.submission.outcome = error if error is not None else (row, r.created)
        r.submission.states = states


def _reserve(db: RequestsDB, group: list[Submission], inflight: dict[int, _Reserved]) -> list[_Reserved]:
    """Look up every key and reserve the new ones (one ``service.db`` commit). A key reserved by this group or
    one not linked yet follows that reservation: it is answered once that one is linked (or refused)."""
    out: list[_Reserved] = []
    mine = dict(inflight)
    conn = db._connect()
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for s in group:
                digest = body_digest(s.spec)
                row = conn.execute("SELECT id, body_sha256 FROM requests WHERE idempotency_key=?",
                                   (s.key,)).fetchone()
                if row is not None:
                    r = _Reserved(s, int(row[0]), False, digest=digest, leader=mine.get(int(row[0])))
                    if row[1] != digest:
                        r.error = IdempotencyConflict(f"idempotency_key {s.key!r} was used for another body "
                                                      f"(request {row[0]}); use a new key for a new request")
                    out.append(r)
                    continue
                at = time.time()
                cur = conn.execute("INSERT INTO requests(idempotency_key, body_sha256, spec, asked_by, accepted_at) "
                                   "VALUES(?, ?, ?, ?, ?)", (s.key, digest, json.dumps(s.spec), s.asked_by, at))
                rid = int(cur.lastrowid)
                db._seal(conn, rid)
                mine[rid] = _Reserved(s, rid, True, at, digest)
                out.append(mine[rid])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    return out


def _forget(db: RequestsDB, todo: list[_Reserved]) -> list[Any]:
    """The ledger's side: every reservation of the group in one transaction, each as it would be alone."""
    from fedforget.unlearning.forget import parse_slices

    body_key = store_body_key(db.store.root)
    items = []
    for r in todo:
        s = r.submission
        via = evidence_of(r.rid, s.key, r.digest, s.asked_by, r.accepted_at, body_key)
        items.append(GroupItem(s.spec["samples"], parse_slices(s.spec["slices"]), s.spec["clients"],
                               s.spec.get("records") or [], {"via": via}, {"via": via}))
    ledger = db.store.ledger()
    try:
        return ledger.forget_group(items)
    finally:
        ledger.close()


def _link(db: RequestsDB, applied: list[tuple[_Reserved, Any]], refused: list[_Reserved]) -> None:
    """Link each applied reservation to its ledger request and drop each refused one (one commit)."""
    if not applied and not refused:
        return
    conn = db._connect()
    try:
        conn.execute("BEGIN IMMEDIATE")
        now = time.time()
        for r, result in applied:
            kept = {k: v for k, v in r.submission.spec.items() if k != "records"}
            ledger_request = result.request if result.request is not None else result.forgetting
            conn.execute("UPDATE requests SET ledger_request=?, no_op=?, applied_at=?, spec=? WHERE id=?",
                         (ledger_request, int(result.request is None), now, json.dumps(kept), r.rid))
            db._seal(conn, r.rid)
        for r in refused:
            conn.execute("DELETE FROM requests WHERE id=? AND ledger_request IS NULL", (r.rid,))
        conn.execute("COMMIT")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


def _rows(db: RequestsDB, rids: set[int]) -> dict[int, ServiceRequest]:
    if not rids:
        return {}
    found: dict[int, ServiceRequest] = {}
    ordered = sorted(rids)
    for i in range(0, len(ordered), 500):
        chunk = ordered[i : i + 500]
        for row in db._rows(f"WHERE id IN ({','.join('?' * len(chunk))})", tuple(chunk)):
            found[row.id] = row
    return found
