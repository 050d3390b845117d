"""What a writer without the coordinator's key may append to the ledger's log: each entry judged by the rows it
inserts and deletes, never by the kind or writer it declares (``fedforget.store.log_rules``)."""

from __future__ import annotations

import json

import pytest

from fedforget.store.log import canonical
from fedforget.store.log_check import Replay, replay
from fedforget.store.log_rules import run_entry_problem
from fedforget.store.merkle import leaf_hash

REQUEST = [1, 1.0, "sample", '{"samples": [3]}', 1, '["0:0"]', "[]", 0.5]
PURGE = ["a0", "f" * 64, 1, 2.0, 0]


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
    ([["requests", "-", REQUEST], ["requests", "+", [*REQUEST[:4], 0, *REQUEST[5:]]]], "changes forget request #1"),
    ([["purged", "-", PURGE]], "removes the purge of artifact a0"),
    ([["purged", "-", PURGE], ["purged", "+", [PURGE[0], "d" * 64, *PURGE[2:]]]], "removes the purge"),
    ([["meta", "-", ["acks", acks(p1=2)]], ["meta", "+", ["acks", acks(p1=1)]]], "lowers partition 1's"),
    ([["meta", "-", ["acks", acks(p1=2)]], ["meta", "+", ["acks", acks(p2=3)]]], "lowers partition 1's"),
    ([["meta", "-", ["acks", acks(p1=2)]]], "drops the clients' acknowledgements"),
    ([["meta", "+", ["acks", "sha256:" + "0" * 64]]], "acknowledgements the log cannot show"),
], ids=["artifact", "purge-added", "purge-done", "acks-raised", "acks-after-a-digest", "request-invented",
        "request-removed", "request-altered", "purge-removed", "purge-renamed", "acks-lowered",
        "acks-partition-dropped", "acks-dropped", "acks-hidden"])
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
