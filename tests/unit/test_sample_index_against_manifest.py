"""The sample index is checked against the manifest, and what is forgotten is resolved from the manifest and
the requests' specs alone (no torch): every way of editing ``units``, ``samples`` or ``forgotten`` by hand
is named in one line, an honest index (before and after forgets of samples, slices and clients) passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedforget.store.forget_plan import PlanError, resolve_requests, sample_plan
from fedforget.store.index_check import PREFIX, index_problems
from fedforget.store.ledger import Ledger

SLICES = {0: [[1, 4, 9], [2, 3]], 1: [[5, 6], [7, 8, 10]], 2: [[0, 11], []]}
MANIFEST = {"partitions": {str(p): s for p, s in SLICES.items()}}


def ledger_with_forgets(path: Path) -> Ledger:
    ledger = Ledger(path)
    ledger.load_samples(SLICES)
    ledger.set_plan({"kind": "single", "artifact": "global"})
    ledger.forget(samples=[4])
    ledger.forget(slices=["1:1"], samples=[6])
    ledger.forget(clients=[0])  # 4 is already forgotten by request 1: it stays request 1's
    return ledger


def problems(ledger: Ledger, manifest: dict = MANIFEST) -> list[str]:
    with ledger.snapshot():
        return index_problems(ledger.db, manifest)


@pytest.fixture
def ledger(tmp_path):
    handle = ledger_with_forgets(tmp_path / "ledger.sqlite")
    yield handle
    handle.close()


def test_requests_resolve_against_the_manifest_each_sample_under_the_first_request_naming_it():
    plan = sample_plan(MANIFEST)
    got = resolve_requests(plan, [(1, {"samples": [4]}), (2, {"samples": [6], "slices": ["1:1"], "clients": []}),
                                  (3, {"clients": [0]})])
    assert got.samples.tolist() == [1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert got.requests.tolist() == [3, 3, 3, 1, 2, 2, 2, 3, 2]
    assert got.by_partition(plan) == {0: [1, 2, 3, 4, 9], 1: [6, 7, 8, 10]}
    assert resolve_requests(plan, []).by_partition(plan) == {}


def test_a_spec_from_before_slices_and_clients_were_recorded_still_resolves():
    plan = sample_plan(MANIFEST)
    assert resolve_requests(plan, [(1, {"samples": [0]})]).by_partition(plan) == {2: [0]}


@pytest.mark.parametrize(("spec", "needle"), [({"samples": [12]}, "sample 12"), ({"samples": [99]}, "safe shard"),
                                              ({"slices": ["5:0"]}, "slice '5:0'"), ({"clients": [3]}, "client 3"),
                                              ({"samples": [-1]}, "non-negative"), ({"samples": "4"}, "not a list")])
def test_a_spec_naming_what_the_manifest_does_not_hold_is_refused(spec, needle):
    plan = sample_plan({**MANIFEST, "safe-shard-ids": [99]})
    with pytest.raises(PlanError, match=needle):
        resolve_requests(plan, [(1, spec)])


def test_safe_cells_are_the_units_and_must_split_each_pinned_partition_exactly():
    cells = {"0": {"0": [1, 9], "3": [2, 3, 4]}, "1": {"1": [5, 6, 7, 8, 10]}, "2": {"2": [0, 11]}}
    plan = sample_plan({**MANIFEST, "cells": cells})
    assert plan.names == ("0:0", "0:3", "1:1", "2:2")
    assert resolve_requests(plan, [(1, {"slices": ["0:3", "0:1"]})]).samples.tolist() == [2, 3, 4]  # 0:1 is empty
    moved = {**cells, "0": {"0": [1, 9, 5], "3": [2, 3, 4]}}
    with pytest.raises(PlanError, match="cells of partition 0"):
        sample_plan({**MANIFEST, "cells": moved})


def test_an_honest_index_agrees_with_the_manifest_before_and_after_forgets(tmp_path):
    fresh = Ledger(tmp_path / "fresh.sqlite")
    try:
        assert problems(fresh) == []  # nothing indexed yet: a run that never got that far
        fresh.load_samples(SLICES)
        assert problems(fresh) == []
    finally:
        fresh.close()
    forgot = ledger_with_forgets(tmp_path / "forgot.sqlite")
    try:
        assert problems(forgot) == []
        assert forgot.forgotten_by_partition() == resolve_requests(
            sample_plan(MANIFEST), forgot.request_specs()).by_partition(sample_plan(MANIFEST))
    finally:
        forgot.close()


EDITS = {
    "a sample moved to another unit": ("UPDATE samples SET unit='2:0' WHERE sample=5",
                                       "sample 5 is indexed in unit 2:0; the manifest puts it in 1:0"),
    "a samples row deleted": ("DELETE FROM samples WHERE sample=11",
                              "sample 11 of unit 2:0 is missing from the samples table"),
    "a samples row added": ("INSERT INTO samples VALUES(12, '1:0')",
                            "sample 12 is indexed in unit 1:0 but lies in no unit of the manifest's plan"),
    "a samples row added under a new unit": ("INSERT INTO samples VALUES(12, '9:9')",
                                             "the samples table holds 13 samples"),
    "a unit's partition changed": ("UPDATE units SET partition=2 WHERE unit='1:0'",
                                   "unit 1:0 is recorded in partition 2 with 2 samples"),
    "a unit's size changed": ("UPDATE units SET size=3 WHERE unit='2:0'", "unit 2:0 is recorded in partition 2 "
                              "with 3 samples; the manifest has it in partition 2 with 2"),
    "a unit deleted": ("DELETE FROM units WHERE unit='2:1'", "unit 2:1 of the manifest's plan is missing"),
    "a unit added": ("INSERT INTO units VALUES('x', 0, 0)", "unit 'x' is not in the manifest's plan"),
    "a forgotten row moved to another unit": ("UPDATE forgotten SET unit='2:0' WHERE sample=6",
                                              "forgotten sample 6 is recorded in unit 2:0; the manifest puts it in"),
    "a forgotten row added": ("INSERT INTO forgotten VALUES(0, '2:0', 2)",
                              "sample 0 is recorded forgotten by request 2, which names neither it"),
    "a forgotten row deleted": ("DELETE FROM forgotten WHERE sample=7", "request 2 forgets sample 7, which is not"),
    "a forgotten row under another request": ("UPDATE forgotten SET request=3 WHERE sample=4",
                                              "sample 4 is recorded forgotten by request 3, but request 1 named it"),
    "a request's spec rewritten": ("UPDATE requests SET spec='{\"samples\": [12]}' WHERE id=1",
                                   "request 1 names sample 12, which lies in no partition"),
    "a request column edited to text": ("UPDATE forgotten SET request='x' WHERE sample=4", "malformed record"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_each_edit_of_the_index_is_named_in_one_line(ledger, edit):
    statement, needle = EDITS[edit]
    ledger.db.execute(statement)
    found = problems(ledger)
    assert len(found) == 1 and needle in found[0], found


def test_a_moved_forgotten_row_names_the_unit_the_manifest_puts_the_sample_in(ledger):
    ledger.db.execute("UPDATE forgotten SET unit='1:0' WHERE sample=7")
    assert problems(ledger) == [PREFIX + "forgotten sample 7 is recorded in unit 1:0; the manifest puts it in 1:1"]


def test_the_forget_after_a_moved_sample_resolves_to_its_manifest_partition(ledger):
    """The adversary's case: forget trusts the edited index, the manifest-side reference does not."""
    ledger.db.execute("UPDATE samples SET unit='1:0' WHERE sample=0")  # 0 lies in 2:0 in the manifest
    ledger.forget(samples=[0])
    assert ledger.forgotten_by_partition()[1] == [0, 6, 7, 8, 10]  # what the edited index says
    plan = sample_plan(MANIFEST)
    assert resolve_requests(plan, ledger.request_specs()).by_partition(plan)[2] == [0]
    assert "sample 0 is indexed in unit 1:0; the manifest puts it in 2:0" in problems(ledger)[0]


def test_the_check_of_a_large_index_takes_a_fraction_of_a_second(tmp_path):
    """One ordered scan per unit against the manifest's ids: linear, about 0.3 s per 10⁶ samples
    (``benchmarks/index_check_scale.py``); 2·10⁵ here keeps the test quick."""
    import time

    ids = list(range(200_000))
    slices = {p: [ids[p * 20_000 + s * 5000:p * 20_000 + (s + 1) * 5000] for s in range(4)] for p in range(10)}
    big = Ledger(tmp_path / "big.sqlite")
    try:
        big.load_samples(slices)
        big.set_plan({"kind": "single", "artifact": "global"})
        big.forget(samples=ids[::2000])
        big.forget(slices=["3:1"])
        start = time.perf_counter()
        assert problems(big, {"partitions": {str(p): s for p, s in slices.items()}}) == []
        assert time.perf_counter() - start < 1.0
    finally:
        big.close()
