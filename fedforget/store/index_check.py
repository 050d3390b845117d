"""Does the ledger's sample index say what the manifest and the forget requests say?

``forget`` looks ids up in the derived index (``units``, ``samples``, ``forgotten``); a row moved there
would make a request invalidate the wrong artifacts while every other invariant still holds. So the index
is compared, table by table, with the fingerprinted manifest's plan and with what each request's spec
resolves to (:mod:`fedforget.store.forget_plan`):

- ``units``: each unit of the plan with its partition and size (an extra unit only as an empty slice or
  cell ``P:S`` of a plan partition);
- ``samples``: each unit's sample ids, exactly (one ordered index scan per unit against the manifest's ids:
  about 0.3 s at 10⁶ samples);
- ``forgotten``: exactly the samples the requests name or hold in a slice or client they name, each under
  the first request that names it and in the unit the manifest puts it in.

A store whose training never got as far as indexing (no plan, no unit, no request) has nothing to compare.
"""

from __future__ import annotations

import json
import sqlite3
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedforget.store.forget_plan import PlanError, SamplePlan, resolve_requests, sample_plan

#: How every problem line starts: the one refusal the operator sees names the table and the sample.
PREFIX = "the ledger's sample index disagrees with the manifest: "


def index_problems(db: sqlite3.Connection, manifest: Mapping[str, Any]) -> list[str]:
    """At most one problem line (empty when the index agrees); never raises on a malformed record.

    Call it inside one read transaction (``Ledger.snapshot``) so a concurrent ``forget`` is seen whole."""
    try:
        plan = sample_plan(manifest)
    except PlanError as exc:
        return [f"manifest.json's partition plan is malformed: {exc}"]
    try:
        if plan is None or not _indexed(db):
            return []
        return _units(db, plan) or _samples(db, plan) or _forgotten(db, plan)
    except PlanError as exc:
        return [PREFIX + str(exc)]
    except (ValueError, TypeError, OverflowError) as exc:  # a cell edited by hand
        return [f"the ledger's sample index holds a malformed record ({type(exc).__name__}: {str(exc)[:200]})"]


def check_index(store: Any) -> list[str]:  # noqa: ANN401 - a Store (no import cycle with store.check)
    """:func:`index_problems` of a store, in its own read transaction (for callers outside ``check_store``)."""
    manifest = store.manifest()
    ledger = store.ledger()
    try:
        with ledger.snapshot():
            return index_problems(ledger.db, manifest)
    finally:
        ledger.close()


def _indexed(db: sqlite3.Connection) -> bool:
    return any(db.execute(q).fetchone() is not None for q in (
        "SELECT 1 FROM meta WHERE key='plan'", "SELECT 1 FROM units LIMIT 1", "SELECT 1 FROM samples LIMIT 1",
        "SELECT 1 FROM requests LIMIT 1"))


def _empty_unit(name: str, plan: SamplePlan) -> int | None:
    """The partition of an empty slice or cell ``P:S`` of a plan partition (which the manifest may omit)."""
    head, _, tail = name.partition(":")
    if head.isdecimal() and tail.isdecimal() and str(int(head)) == head and int(head) in plan.partitions:
        return int(head)
    return None


def _units(db: sqlite3.Connection, plan: SamplePlan) -> list[str]:
    seen: set[str] = set()
    for unit, partition, size in db.execute("SELECT unit, partition, size FROM units ORDER BY unit"):
        name = str(unit)
        seen.add(name)
        i = plan.index.get(name)
        if i is not None:
            want = (plan.partition_of[i], len(plan.ids[i]))
        else:
            p = _empty_unit(name, plan)
            if p is None:
                return [PREFIX + f"unit {name[:40]!r} is not in the manifest's plan"]
            want = (p, 0)
        if (partition, size) != want:
            return [PREFIX + f"unit {name} is recorded in partition {str(partition)[:20]} with {str(size)[:20]} "
                    f"samples; the manifest has it in partition {want[0]} with {want[1]}"]
    missing = [n for n in plan.names if n not in seen]
    return [PREFIX + f"unit {missing[0]} of the manifest's plan is missing from the units table"] if missing else []


def _parsed(text: str | None, count: int, what: str) -> np.ndarray:
    """A ``group_concat`` of integers as an array; a value that is not an integer is a malformed record."""
    with warnings.catch_warnings():  # a non-integer stops the parse early (with a warning): the length tells
        warnings.simplefilter("ignore")
        arr = np.fromstring(text, dtype=np.int64, sep=",") if text else np.zeros(0, np.int64)
    if len(arr) != count or (count and str(text).count(",") != count - 1):
        raise ValueError(f"{what} holds a value that is not an integer")
    return arr


def _samples(db: sqlite3.Connection, plan: SamplePlan) -> list[str]:
    for name, want in zip(plan.names, plan.ids, strict=True):
        count, text = db.execute("SELECT COUNT(*), group_concat(sample) FROM (SELECT sample FROM samples "
                                 "WHERE unit=? ORDER BY sample)", (name,)).fetchone()
        got = _parsed(text, int(count), "samples")
        if not np.array_equal(got, want):
            return [_moved(db, plan, name, got, want)]
    total = int(db.execute("SELECT COUNT(*) FROM samples").fetchone()[0])
    if total != plan.size():
        row = db.execute(f"SELECT sample, unit FROM samples WHERE unit NOT IN ({','.join('?' * len(plan.names))}) "
                         "ORDER BY sample LIMIT 1", plan.names).fetchone() if len(plan.names) < 30000 else None
        where = f": sample {row[0]} is indexed in unit {str(row[1])[:40]!r}" if row else ""
        return [PREFIX + f"the samples table holds {total} samples, the manifest's plan {plan.size()}{where}"]
    return []


def _moved(db: sqlite3.Connection, plan: SamplePlan, name: str, got: np.ndarray, want: np.ndarray) -> str:
    """The first sample of unit ``name`` the table and the manifest disagree on, in words."""
    extra, missing = np.setdiff1d(got, want), np.setdiff1d(want, got)
    if len(missing) and (not len(extra) or missing[0] < extra[0]):
        sample = int(missing[0])
        row = db.execute("SELECT unit FROM samples WHERE sample=?", (sample,)).fetchone()
        if row is None:
            return PREFIX + f"sample {sample} of unit {name} is missing from the samples table"
        return PREFIX + f"sample {sample} is indexed in unit {str(row[0])[:40]}; the manifest puts it in {name}"
    sample = int(extra[0])
    home = plan.unit_of(sample)
    if home is None:
        return PREFIX + f"sample {sample} is indexed in unit {name} but lies in no unit of the manifest's plan"
    return PREFIX + f"sample {sample} is indexed in unit {name}; the manifest puts it in {home}"


def _forgotten(db: sqlite3.Connection, plan: SamplePlan) -> list[str]:
    specs = [(int(i), json.loads(spec)) for i, spec in db.execute("SELECT id, spec FROM requests ORDER BY id")]
    expected = resolve_requests(plan, specs)
    count, samples, requests = db.execute(
        "SELECT COUNT(*), group_concat(sample), group_concat(request) FROM "
        "(SELECT sample, request FROM forgotten ORDER BY sample)").fetchone()
    got, by = _parsed(samples, int(count), "forgotten"), _parsed(requests, int(count), "forgotten")
    if not (np.array_equal(got, expected.samples) and np.array_equal(by, expected.requests)):
        return [PREFIX + _first_difference(got, by, expected.samples, expected.requests)]
    row = db.execute("SELECT f.sample, f.unit FROM forgotten f LEFT JOIN samples s ON s.sample = f.sample "
                     "WHERE s.unit IS NOT f.unit ORDER BY f.sample LIMIT 1").fetchone()
    if row is not None:  # the samples table already agrees with the manifest: it is the manifest's unit
        return [PREFIX + f"forgotten sample {row[0]} is recorded in unit {str(row[1])[:40]}; the manifest puts "
                f"it in {plan.unit_of(int(row[0]))}"]
    return []


def _first_difference(got: np.ndarray, by: np.ndarray, want: np.ndarray, first: np.ndarray) -> str:
    """The first forgotten sample the table and the requests' specs disagree on, in words."""
    extra, missing = np.setdiff1d(got, want), np.setdiff1d(want, got)
    if len(extra) and (not len(missing) or extra[0] < missing[0]):
        sample = int(extra[0])
        request = int(by[np.searchsorted(got, sample)])
        return (f"sample {sample} is recorded forgotten by request {request}, which names neither it nor a slice "
                "or client holding it")
    if len(missing):
        sample = int(missing[0])
        request = int(first[np.searchsorted(want, sample)])
        return f"request {request} forgets sample {sample}, which is not recorded forgotten"
    i = int(np.flatnonzero(by != first)[0])
    return (f"sample {int(got[i])} is recorded forgotten by request {int(by[i])}, but request {int(first[i])} "
            "named it first")
