"""``Ledger.forget_group`` leaves the ledger the requests one by one would have left (row for row, but for the
times), refuses a bad request alone, and rolls back as one when the group's transaction dies before its
commit."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fedforget.store.crash import CRASH_EXIT
from fedforget.store.ledger import CRASH_ENV, GroupItem, Ledger, LedgerUsageError

from .test_ledger import build, sid

TIMES = {"requests": (1, 7), "history": (3,), "purged": (3,)}  # columns that hold clock readings (at, latency)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("group-template") / "ledger.sqlite"
    build(path).close()
    return path


def copy(template: Path, where: Path) -> Path:
    where.mkdir()
    shutil.copyfile(template, where / "ledger.sqlite")
    return where / "ledger.sqlite"


def rows(path: Path) -> dict[str, list[tuple]]:
    """Every table but the log's, without clock readings."""
    db = sqlite3.connect(path)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
                  if not r[0].startswith(("log", "sqlite_"))]
        out = {}
        for table in tables:
            times = TIMES.get(table, ())
            out[table] = sorted(tuple(v for i, v in enumerate(row) if i not in times)
                                for row in db.execute(f"SELECT * FROM {table}"))
        return out
    finally:
        db.close()


def log_entries(path: Path) -> list[dict]:
    db = sqlite3.connect(path)
    try:
        return [json.loads(r[0]) for r in db.execute("SELECT entry FROM log ORDER BY seq")]
    finally:
        db.close()


ITEMS = [GroupItem(samples=[sid(0, 0, 1)], log_fields={"via": {"n": 1}}),
         GroupItem(slices=["1:2"], log_fields={"via": {"n": 2}}),
         GroupItem(samples=[sid(0, 0, 1)], log_fields={"via": {"n": 3}}),  # forgotten by the first: a no-op
         GroupItem(clients=[3], log_fields={"via": {"n": 4}})]


def test_a_group_leaves_what_its_requests_one_by_one_leave(template, tmp_path):
    alone, grouped = copy(template, tmp_path / "alone"), copy(template, tmp_path / "grouped")
    ledger = Ledger(alone)
    try:
        singles = [ledger.forget(item.samples, item.slices, item.clients, log_fields=item.log_fields)
                   for item in ITEMS]
    finally:
        ledger.close()
    ledger = Ledger(grouped)
    try:
        results = ledger.forget_group(ITEMS)
    finally:
        ledger.close()
    assert [r.request for r in results] == [s.request for s in singles] == [1, 2, None, 3]
    assert [r.invalidated for r in results] == [s.invalidated for s in singles]
    assert results[2].forgetting == 1
    assert rows(grouped) == rows(alone)
    assert [shape(e) for e in log_entries(grouped)[1:]] == [shape(e) for e in log_entries(alone)[1:]]


def shape(entry: dict) -> tuple:
    """An entry without its clock readings and hash links: what it says happened, and the rows it names."""
    return (entry["seq"], entry["kind"], entry.get("request"), entry.get("via"), entry["writer"],
            [(table, op, len(values)) for table, op, values in entry["rows"]])


def test_a_bad_request_in_a_group_is_refused_alone(template, tmp_path):
    path = copy(template, tmp_path / "g")
    ledger = Ledger(path)
    try:
        results = ledger.forget_group([GroupItem(samples=[sid(0, 0, 1)]), GroupItem(samples=[7]),
                                       GroupItem(samples=[]), GroupItem(slices=["9:9"]),
                                       GroupItem(samples=[sid(1, 1, 1)])])
        assert [type(r).__name__ for r in results] == ["ForgetResult", "LedgerUsageError", "LedgerUsageError",
                                                       "LedgerUsageError", "ForgetResult"]
        assert "unknown sample id(s) 7" in str(results[1]) and isinstance(results[3], LedgerUsageError)
        assert [r.request for r in (results[0], results[4])] == [1, 2]
        assert [r["request"] for r in ledger.requests()] == [1, 2]
    finally:
        ledger.close()


def test_a_group_killed_before_its_commit_leaves_nothing(template, tmp_path):
    path = copy(template, tmp_path / "g")
    before = rows(path)
    items = f"[GroupItem(samples=[{sid(0, 0, 1)}]), GroupItem(samples=[{sid(1, 1, 1)}])]"
    code = ("import sys; import fedforget.methods.registry; from fedforget.store.ledger import GroupItem, Ledger; "
            f"Ledger(sys.argv[1]).forget_group({items})")
    done = subprocess.run([sys.executable, "-c", code, str(path)], env={**os.environ,
                          CRASH_ENV: "forget-group:before-commit"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == CRASH_EXIT, done.stderr
    assert rows(path) == before
