"""Group commit: the forget requests that arrive while one commit runs are committed together by the next.

A caller hands its submissions (one, or a batch's many) to :meth:`GroupCommitter.submit` and blocks. The
first caller to take the commit lock becomes the group's leader: it takes every submission queued so far
(whole callers, up to :data:`MAX_GROUP` submissions unless a single batch is larger) and commits them as one
group; callers that queued meanwhile wait for the lock and find their submissions done, or lead the next group.
A group closes when its leader takes the queue: no timer, so a caller alone is committed at once.

One group is, in order (each step one transaction, as a single request's steps were):

1. the store check, once (what changed since the last one);
2. ``service.db``: every idempotency key looked up and every new one reserved and sealed (one commit): a
   key used before answers its request, a key used with another body its conflict, alone;
3. the ledger: :meth:`fedforget.store.ledger.Ledger.forget_group` applies the new reservations in id order,
   each with its own request row, log entry (its ``via``) and signed head, each in its own savepoint: one the
   ledger refuses is rolled back alone (one commit, one fsync);
4. the purge of what the group invalidated (once);
5. ``service.db``: every applied reservation linked to its ledger request, every refused one dropped (one
   commit).

Each caller returns only after step 5: its 201 says its request is durable in the ledger and linked. A crash
before step 3's commit leaves reservations ``accepted`` (the next start applies them); after it, reservations
the ledger applied but ``service.db`` never linked, which the next start links (forgetting what is forgotten
is a no-op: never applied twice).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedforget.service.requests_db import IdempotencyConflict, RequestsDB, ServiceRequest
from fedforget.store.ledger import GroupItem, LedgerUsageError
from fedforget.store.service_evidence import body_digest, evidence_of, store_body_key

#: submissions one group takes from the queue (a batch larger than this is still one group)
MAX_GROUP = 1000


@dataclass
class Submission:
    """One forget request as a caller hands it over; ``outcome`` is set by the commit that holds it."""

    spec: dict[str, list[Any]]
    key: str
    asked_by: str
    outcome: tuple[ServiceRequest, bool] | BaseException | None = None
    done: bool = False


@dataclass
class _Reserved:
    """A submission's place in its group: its ``service.db`` row and whether this group created it."""

    submission: Submission
    rid: int
    created: bool
    accepted_at: float = 0.0
    digest: str = ""
    error: BaseException | None = None
    leader: _Reserved | None = field(default=None, repr=False)  # another submission of this group, same key


class GroupCommitter:
    """Commits queued submissions in groups, one group at a time (``check`` is the store check, run once
    per group; ``forget_check`` the store method's own refusal of ids, run per submission)."""

    def __init__(self, db: RequestsDB, check: Callable[[], None],
                 forget_check: Callable[[Sequence[int]], None] | None = None) -> None:
        self.db = db
        self.check = check
        self.forget_check = forget_check
        self._queue: list[list[Submission]] = []
        self._queue_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        #: groups committed and their sizes (for the metrics and the benchmark)
        self.groups = 0
        self.committed = 0

    def submit(self, submissions: list[Submission]) -> list[Submission]:
        """Queue ``submissions`` and return once the commit holding them is durable (each has its outcome)."""
        with self._queue_lock:
            self._queue.append(submissions)
        while not all(s.done for s in submissions):
            with self._commit_lock:
                if all(s.done for s in submissions):
                    break
                with self._queue_lock:
                    group, taken = [], 0
                    while self._queue and (not group or taken + len(self._queue[0]) <= MAX_GROUP):
                        taken += len(self._queue[0])
                        group.extend(self._queue.pop(0))
                self._commit(group)
        return submissions

    def _commit(self, group: list[Submission]) -> None:
        try:
            self.check()
            apply_group(self.db, group, self.forget_check)
        except BaseException as exc:  # the store refused, or a write failed: every caller of the group hears it
            for s in group:
                if not s.done:
                    s.outcome, s.done = exc, True
            if not isinstance(exc, Exception):
                raise
        else:
            self.groups += 1
            self.committed += len(group)


def apply_group(db: RequestsDB, group: list[Submission],
                forget_check: Callable[[Sequence[int]], None] | None = None) -> None:
    """Steps 2–5 of the module's group for ``group``; sets each submission's outcome."""
    reserved = _reserve(db, group)
    new = [r for r in reserved if r.created and r.error is None]
    if forget_check is not None:
        for r in new:
            try:
                forget_check(r.submission.spec["samples"])
            except LedgerUsageError as exc:
                r.error = exc
    todo = [r for r in new if r.error is None]
    results = _forget(db, todo) if todo else []
    for r, result in zip(todo, results, strict=True):
        if isinstance(result, LedgerUsageError):
            r.error = result
    if todo:
        from fedforget.methods.registry import store_method
        from fedforget.store.purge import complete_purges

        complete_purges(db.store, store_method(db.store.manifest()))
    _link(db, [(r, res) for r, res in zip(todo, results, strict=True) if not isinstance(res, LedgerUsageError)],
          [r for r in new if r.error is not None])
    rows = _rows(db, {r.rid for r in reserved if r.rid})
    for r in reserved:
        s = r.submission
        source = r.leader or r
        if r.error is not None:
            s.outcome = r.error
        elif source.error is not None:  # the same key earlier in this group, refused: so is this one
            s.outcome = source.error
        else:
            s.outcome = (rows[r.rid], r.created)
        s.done = True


def _reserve(db: RequestsDB, group: list[Submission]) -> list[_Reserved]:
    """Look up every key and reserve the new ones (one ``service.db`` commit)."""
    out: list[_Reserved] = []
    mine: dict[int, _Reserved] = {}
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
