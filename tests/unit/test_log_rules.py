"""What a writer without the coordinator's key may append to the ledger's log: each entry judged by the rows it
inserts and deletes, never by the kind or writer it declares (``fedforget.store.log_rules``)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

import fedforget
from fedforget.store.log import UNLOGGED, canonical
from fedforget.store.log_check import Replay, replay
from fedforget.store.log_rules import RUN_META, RUN_WRITES, run_entry_problem
from fedforget.store.merkle import leaf_hash

REQUEST = [1, 1.0, "sample", '{"samples": [3]}', 1, '["0:0"]', "[]", 0.5]
PURGE = ["a0", "f" * 64, 1, 2.0, 0]
ARTIFACT = ["a1", "e" * 64, "lora", 1, 1, "{}"]
INVALID = [*ARTIFACT[:4], 0, "{}"]


def acks(**marks: int) -> str:
    return json.dumps({p[1:]: {"up_to_request": n, "at": 1.0, "deleted": 1} for p, n in marks.items()})


@pytest.mark.parametrize(("rows", "problem"), [
    ([["artifacts", "+", ["a1", "e" * 64, "lora", 1, 1, "{}"]], ["lineage", "+", ["0:0", "a1"]]], None),
    ([["purged", "+", PURGE]], None),
    ([["purged", "-", PURGE], ["purged", "+", [*PURGE[:4], 1]]], None),
    ([["meta", "-", ["acks", acks(p1=1)]], ["meta", "+", ["acks", acks(p1=2, p2=1)]]], None),
    ([["meta", "-", ["acks", "sha256:" + "0" * 64]], ["meta", "+", ["acks", acks(p1=1)]]], None),
    ([["requests", "+", [5, *REQUEST[1:]]]], "inserts forget request #5"),
    ([["requests", "-", REQUEST]], "removes forget request #1"),
    ([["requests", "-", REQUEST], ["requests", "+", [*REQUEST[:4], 0, *REQUEST[5:]]]],
     "changes the samples of forget request #1 in the requests table"),
    ([["purged", "-", PURGE]], "removes the purge of artifact a0 from the purged table"),
    ([["purged", "-", PURGE], ["purged", "+", [PURGE[0], "d" * 64, *PURGE[2:]]]], "removes the purge"),
    ([["meta", "-", ["acks", acks(p1=2)]], ["meta", "+", ["acks", acks(p1=1)]]], "lowers partition 1's"),
    ([["meta", "-", ["acks", acks(p1=2)]], ["meta", "+", ["acks", acks(p2=3)]]], "lowers partition 1's"),
    ([["meta", "-", ["acks", acks(p1=2)]]], "drops the clients' acknowledgements"),
    ([["meta", "+", ["acks", "sha256:" + "0" * 64]]], "acknowledgements the log cannot show"),
    ([["artifacts", "-", INVALID], ["artifacts", "+", ["a1", "d" * 64, "lora", 2, 1, "{}"]]], None),
    ([["artifacts", "-", ARTIFACT], ["artifacts", "+", INVALID]], None),
    ([["lineage", "-", ["0:0", "a1"]], ["artifacts", "-", ARTIFACT], ["artifacts", "+", ARTIFACT]], None),
    ([["dp_exposure", "-", ["0:0", "a1"]], ["dp_budget", "-", ["a1", 1, 2]], ["dp_budget", "+", ["a1", 0, 2]]],
     None),
    ([["meta", "-", ["serving", "sha256:" + "0" * 64]], ["meta", "+", ["serving", "sha256:" + "1" * 64]]], None),
    ([["artifacts", "-", INVALID], ["artifacts", "+", ARTIFACT]], "makes artifact a1 valid again"),
    ([["artifacts", "-", INVALID], ["artifacts", "+", ["a1", "d" * 64, "lora", 1, 1, "{}"]]], "valid again"),
    ([["artifacts", "-", ARTIFACT], ["artifacts", "+", [*ARTIFACT[:2], "full", *ARTIFACT[3:]]]],
     "changes the kind of artifact a1 in the artifacts table"),
    ([["artifacts", "-", ARTIFACT]], "removes artifact a1 from the artifacts table"),
    ([["lineage", "-", ["0:0", "a1"]]], "removes the lineage of artifact a1 (unit 0:0) from the lineage table"),
    ([["lineage", "-", ["0:0", "a1"]], ["artifacts", "+", ["a2", *ARTIFACT[1:]]]], "from the lineage table"),
    ([["dp_exposure", "-", ["0:0", "a1"]]], "from the dp_exposure table"),
    ([["history", "-", ["a1", "e" * 64, 1, 1.0]]], "from the history table"),
    ([["retrains", "-", [1, 1.0, 1, "[]"]], ["retrains", "+", [1, 1.0, 0, "[]"]]],
     "changes the watermark of retrain #1 in the retrains table"),
    ([["meta", "-", ["serving", "sha256:" + "0" * 64]]], "removes the 'serving' value from the meta table"),
    ([["meta", "+", ["leaver-min-distances", "sha256:" + "0" * 64]]], "into the meta table, a key no run writes"),
    ([["units", "+", ["9:0", 9, 1]]], "writes the units table, which a run never writes"),
    ([["artifacts", "+", ARTIFACT[:5]]], "writes a row of 5 values into the artifacts table"),
], ids=["artifact", "purge-added", "purge-done", "acks-raised", "acks-after-a-digest", "request-invented",
        "request-removed", "request-altered", "purge-removed", "purge-renamed", "acks-lowered",
        "acks-partition-dropped", "acks-dropped", "acks-hidden", "artifact-rebuilt", "artifact-invalidated",
        "lineage-renewed", "dp-exposure-renewed", "serving-replaced", "artifact-revalidated",
        "artifact-revalidated-at-its-watermark", "artifact-kind-changed", "artifact-deleted", "lineage-removed",
        "lineage-removed-recording-another", "dp-exposure-removed", "history-removed", "retrain-lowered",
        "meta-deleted",
        "meta-key-no-run-writes", "table-no-run-writes", "row-of-another-shape"])
def test_an_entry_without_the_key_may_only_add(rows, problem):
    got = run_entry_problem(7, {"kind": "artifact", "writer": "run"}, rows)
    if problem is None:
        assert got is None, got
    else:
        assert got is not None and problem in got and "entry 7 (artifact)" in got, got


def chain(*entries: dict) -> list[tuple[int, str, str]]:
    """Entries as a log holds them: positions, ``prev`` and leaf hashes computed as any writer computes them."""
    out, prev = [], None
    for seq, fields in enumerate(entries):
        text = canonical({"v": 1, "seq": seq, "prev": prev, "at": 1.0, "rows": [], **fields}).decode()
        prev = leaf_hash(text.encode()).hex()
        out.append((seq, text, prev))
    return out


@pytest.mark.parametrize("writer", ["run", "anything", None])
def test_a_request_removed_by_an_entry_not_the_coordinators_is_refused_whatever_it_declares(writer):
    problems: list[str] = []
    replay(chain({"kind": "genesis", "adopted": False, "writer": "run"},
                 {"kind": "forget", "writer": "coordinator", "rows": [["requests", "+", REQUEST]]},
                 {"kind": "artifact", "writer": writer, "rows": [["requests", "-", REQUEST]]}), set(), problems)
    assert len(problems) == 1 and "entry 2 (artifact), written without the coordinator's key, removes forget " \
        "request #1" in problems[0], problems


def test_the_coordinators_entry_may_change_a_request_and_the_replay_knows_which_entry_inserted_it():
    problems: list[str] = []
    done = replay(chain({"kind": "genesis", "adopted": True, "writer": "run", "rows": [["requests", "+", REQUEST]]},
                        {"kind": "forget", "writer": "coordinator",
                         "rows": [["requests", "+", [2, *REQUEST[1:]]], ["requests", "-", REQUEST]]}),
                  set(), problems, Replay())
    assert problems == [] and done.requested == {1: 0, 2: 1}


def test_a_genesis_that_did_not_adopt_may_hold_no_rows():
    problems: list[str] = []
    replay(chain({"kind": "genesis", "adopted": False, "writer": "run", "rows": [["requests", "+", REQUEST]]}),
           set(), problems)
    assert problems and "did not adopt" in problems[0], problems


#: the modules that create the forget service's own databases' tables (not the ledger's)
SERVICE_DATABASES = frozenset({"service/requests_db.py", "unlearning/deadline_settings.py", "service/opendsr_book.py"})


def ledger_schema_tables() -> dict[str, list[str]]:
    """Every table a ledger can hold → its columns: each ``CREATE TABLE`` of the package but the forget
    service's own databases (``service.db``, its deadline settings, ``opendsr.db``), so a table added to the ledger,
    a method's included, is found."""
    root = Path(fedforget.__file__).parent
    db = sqlite3.connect(":memory:")
    try:
        for path in sorted(root.rglob("*.py")):
            if path.relative_to(root).as_posix() in SERVICE_DATABASES:  # the service's own files, not the ledger
                continue
            for statement in re.findall(r"CREATE TABLE IF NOT EXISTS [^;]*;", path.read_text(encoding="utf-8")):
                db.execute(statement)
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {n: [r[1] for r in db.execute(f'PRAGMA table_info("{n}")')] for n in names
                if not n.startswith("sqlite_")}
    finally:
        db.close()


def test_the_allow_list_decides_for_every_logged_table_of_the_ledger_with_its_columns():
    tables = {n: cols for n, cols in ledger_schema_tables().items() if n not in UNLOGGED}
    assert {"artifacts", "requests", "dp_budget"} <= set(tables)
    assert set(RUN_WRITES) == set(tables), set(RUN_WRITES) ^ set(tables)
    for name, rule in RUN_WRITES.items():
        assert list(rule.columns) == tables[name], name
        assert set(rule.key) | rule.change <= set(rule.columns), name


def test_the_meta_keys_a_run_may_write_are_the_ones_its_code_writes():
    from fedforget.store.purge import AUDIT_KEY, METRICS_MARK
    from fedforget.store.store import MANIFEST_DIGEST

    assert {AUDIT_KEY, METRICS_MARK, MANIFEST_DIGEST} <= RUN_META


def test_a_runs_real_writes_pass_and_an_invalidated_artifact_made_valid_without_a_rebuild_does_not(tmp_path):
    """The ledger's own write paths, run without the key (training, a SAFE-DP counter, an artifact invalidated,
    then rebuilt from less data with its counter recorded anew), append entries the rules grant."""
    from fedforget.methods.safe.budget_store import set_dp_exposure
    from fedforget.store.ledger import Ledger
    from fedforget.store.log import without_head_signer
    from fedforget.store.log_check import log_problems

    with without_head_signer():
        ledger = Ledger(tmp_path / "ledger.sqlite")
        try:
            ledger.record_artifact("a1", "e" * 64, "lora", ["0:0", "0:1"], 0)
            set_dp_exposure(ledger, "a1", ["1:0", "1:1"], 2)
            with ledger.transaction("artifact") as db:
                db.execute("UPDATE artifacts SET valid=0 WHERE artifact='a1'")
            ledger.record_artifact("a1", "d" * 64, "lora", ["0:1"], 1)
            set_dp_exposure(ledger, "a1", ["1:1"], 2)
            assert log_problems(ledger.db)[0] == []
            with ledger.transaction("artifact") as db:
                db.execute("UPDATE artifacts SET valid=0 WHERE artifact='a1'")
            with ledger.transaction("artifact") as db:
                db.execute("UPDATE artifacts SET valid=1, watermark=5 WHERE artifact='a1'")
            problems = log_problems(ledger.db)[0]
        finally:
            ledger.close()
    assert len(problems) == 1 and "makes artifact a1 valid again without rebuilding it" in problems[0], problems
