"""``ledger.sqlite`` without torch: a synthetic partition plan and a FedSGT ChainPlan with fake sha256s."""

import hashlib
import multiprocessing
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fedforget.core.serving_plans import compute_serving
from fedforget.methods.chains.grouping import group_units
from fedforget.methods.chains.plan import ChainPlan
from fedforget.methods.chains.sequences import cyclic_sequences
from fedforget.store.ledger import CRASH_ENV, Ledger, LedgerUsageError

PARTITIONS, SLICES, PER_SLICE = 4, 3, 5
CRASH_POINTS = ("forget:request-row", "forget:forgotten-rows", "forget:invalidated", "forget:before-commit")


def sid(partition: int, slice_: int, j: int) -> int:
    """Sample ids with holes (j < 5), so 7, 17, ... are unknown."""
    return partition * 100 + slice_ * 10 + j


SLICE_IDS = {p: [[sid(p, s, j) for j in range(PER_SLICE)] for s in range(SLICES)] for p in range(PARTITIONS)}
UNITS = [f"{p}:{s}" for p in range(PARTITIONS) for s in range(SLICES)]
PLAN = ChainPlan("fedsgt", [group_units(UNITS, 3, seed=1)], [cyclic_sequences(3, 3)], "new", "additive", 1, "allseq")


def sha(artifact: str, version: int = 0) -> str:
    return hashlib.sha256(f"{artifact}@{version}".encode()).hexdigest()


def touched(units: set[str]) -> set[str]:
    """The artifacts a request touching ``units`` must invalidate: lineage holds one of them."""
    return {a for a, c, p in PLAN.artifacts() if units & set(PLAN.lineage(c, p))}


def build(path: Path) -> Ledger:
    ledger = Ledger(path)
    ledger.load_samples(SLICE_IDS)
    ledger.set_plan(PLAN.serving_json())  # what training stores: the plan without unit lists
    for artifact, chain, position in PLAN.artifacts():
        assert ledger.record_artifact(artifact, sha(artifact), "lora+head", PLAN.lineage(chain, position), 0,
                                      {"position": position})
    ledger.refresh_serving()
    return ledger


def dump(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return list(db.iterdump())
    finally:
        db.close()


ALL = {a for a, _, _ in PLAN.artifacts()}


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("template") / "ledger.sqlite"
    build(path).close()
    return path


@pytest.fixture
def path(template, tmp_path) -> Path:
    target = tmp_path / "ledger.sqlite"
    shutil.copyfile(template, target)
    return target


@pytest.fixture
def ledger(path):
    handle = Ledger(path)
    yield handle
    handle.close()


def assert_consistent(ledger: Ledger, forgotten_units: set[str]) -> None:
    """Validity follows lineage, and the serving plan (from the compact plan) is the full plan's."""
    valid = ALL - touched(forgotten_units)
    assert ledger.valid_artifacts() == valid
    assert ledger.serving() == compute_serving(PLAN.to_json(), valid)


# -- set-up ----------------------------------------------------------------------------------------------


def test_a_built_ledger_holds_the_plan_samples_lineage_and_a_full_serving_plan(tmp_path):
    ledger = build(tmp_path / "ledger.sqlite")
    assert os.stat(ledger.path).st_mode & 0o777 == 0o600
    assert ledger.num_samples() == PARTITIONS * SLICES * PER_SLICE
    assert ledger.plan() == PLAN.serving_json()
    assert ledger.units_of_partition(2) == ["2:0", "2:1", "2:2"]
    for artifact, chain, position in PLAN.artifacts():
        assert ledger.lineage(artifact) == PLAN.lineage(chain, position)
    assert ledger.valid_artifacts() == ALL
    assert ledger.serving() == compute_serving(PLAN.to_json(), ALL)
    assert not ledger.has_requests() and ledger.requests() == [] and ledger.forgotten_count() == 0
    ledger.close()


# -- forget by sample, slice, client -----------------------------------------------------------------------


def test_forget_a_sample_invalidates_exactly_the_artifacts_whose_lineage_holds_its_unit(ledger):
    result = ledger.forget(samples=[sid(1, 2, 3)])
    assert result.request == 1 and result.new_samples == 1 and result.already == 0
    assert result.units == ["1:2"]
    assert set(result.invalidated) == touched({"1:2"}) and result.invalidated == sorted(result.invalidated)
    assert 0 < len(result.invalidated) < len(ALL)
    assert_consistent(ledger, {"1:2"})
    assert result.serving == ledger.serving()
    (row,) = ledger.requests()
    assert (row["kind"], row["spec"], row["samples"], row["units"], row["state"]) == (
        "sample", {"samples": [sid(1, 2, 3)], "slices": [], "clients": []}, 1, ["1:2"], "pending")
    assert row["invalidated"] == result.invalidated
    assert ledger.forgotten_by_partition() == {1: [sid(1, 2, 3)]}


def test_forget_a_slice_forgets_all_its_samples(ledger):
    result = ledger.forget(slices=["2:0"])
    assert (result.new_samples, result.units) == (PER_SLICE, ["2:0"])
    assert set(result.invalidated) == touched({"2:0"})
    assert_consistent(ledger, {"2:0"})
    assert ledger.requests()[0]["kind"] == "slice"
    assert ledger.forgotten_by_partition() == {2: SLICE_IDS[2][0]}


def test_forget_a_client_forgets_every_slice_of_it(ledger):
    result = ledger.forget(clients=[3])
    units = {"3:0", "3:1", "3:2"}
    assert result.new_samples == SLICES * PER_SLICE and set(result.units) == units
    assert set(result.invalidated) == touched(units)
    assert_consistent(ledger, units)
    assert ledger.requests()[0]["kind"] == "client"
    assert ledger.forgotten_by_partition() == {3: sorted(i for s in SLICE_IDS[3] for i in s)}


def test_a_later_request_reports_only_what_it_newly_invalidated(ledger):
    first = ledger.forget(samples=[sid(0, 0, 0)])
    second = ledger.forget(samples=[sid(2, 1, 4), sid(0, 0, 1)])
    assert second.request == 2 and second.new_samples == 2
    assert second.units == sorted({"0:0", "2:1"})
    assert set(second.invalidated) == touched({"2:1"}) - touched({"0:0"})
    assert not set(first.invalidated) & set(second.invalidated)
    assert_consistent(ledger, {"0:0", "2:1"})
    # A slice whose sample went earlier still forgets the rest of it, and invalidates nothing new.
    third = ledger.forget(slices=["0:0"])
    assert (third.request, third.new_samples, third.invalidated, third.units) == (3, PER_SLICE - 2, [], ["0:0"])
    assert ledger.forgotten_count() == PER_SLICE + 1
    assert ledger.forgotten_by_partition(up_to=1) == {0: [sid(0, 0, 0)]}


def test_samples_and_slices_in_one_request_count_each_sample_once(ledger):
    result = ledger.forget(samples=[sid(1, 0, 0), sid(3, 2, 1)], slices=["1:0"])
    assert result.new_samples == PER_SLICE + 1
    assert result.units == ["1:0", "3:2"]
    assert ledger.requests()[0]["kind"] == "slice"
    assert_consistent(ledger, {"1:0", "3:2"})


# -- idempotence and refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize("request_", [
    {"samples": [sid(1, 1, 1)]},
    {"slices": ["1:1"]},
    {"clients": [1]},
    {"samples": [sid(1, 1, 1), sid(1, 1, 1)], "slices": ["1:1", "1:1"]},
])
def test_repeating_a_request_is_a_no_op(path, ledger, request_):
    first = ledger.forget(**request_)
    assert first.request == 1
    before = dump(path)
    again = ledger.forget(**request_)
    assert again.request is None and again.new_samples == 0 and again.invalidated == [] and again.units == []
    assert again.to_json()["no-op"] is True
    assert again.serving == first.serving
    assert ledger.last_request() == 1 and len(ledger.requests()) == 1
    assert dump(path) == before


def test_forgetting_a_client_whose_slices_are_already_gone_is_a_no_op(path, ledger):
    ledger.forget(slices=["2:0", "2:1"])
    ledger.forget(samples=[sid(2, 2, j) for j in range(PER_SLICE)])
    before = dump(path)
    assert ledger.forget(clients=[2]).request is None
    assert dump(path) == before


@pytest.mark.parametrize("trained", [True, False])
def test_forgetting_an_empty_slice_is_a_no_op_even_before_a_serving_plan_exists(tmp_path, trained):
    # A partition smaller than slices-per-client leaves empty slices; training may not have finished yet.
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.load_samples({0: [[1, 2], []], 1: [[3], [4]]})
    plan = ChainPlan("fedsgt", [[["0:0", "0:1"], ["1:0", "1:1"]]], [[(0, 1), (1, 0)]], "new", "additive", 1,
                     "allseq")
    ledger.set_plan(plan.serving_json())
    if trained:
        for artifact, chain, position in plan.artifacts():
            ledger.record_artifact(artifact, sha(artifact), "lora+head", plan.lineage(chain, position), 0)
        ledger.refresh_serving()
    before = dump(ledger.path)
    result = ledger.forget(slices=["0:1"])
    assert result.request is None and result.units == [] and result.invalidated == []
    assert result.serving == ledger.serving()
    assert dump(ledger.path) == before
    ledger.close()


@pytest.mark.parametrize(("request_", "message"), [
    ({"samples": [7]}, r"unknown sample id\(s\) 7: not in this store"),
    ({"samples": [sid(0, 0, 0), 7, 17, 27, 37, 47, 57]}, r"unknown sample id\(s\) 7, 17, 27, 37, 47 …"),
    ({"slices": ["9:0"]}, r"unknown slice\(s\) 9:0"),
    ({"slices": ["0:3"]}, r"unknown slice\(s\) 0:3"),
    ({"slices": ["zero"]}, r"unknown slice\(s\) zero"),
    ({"clients": [9]}, r"unknown client 9: this store has partitions 0\.\.3"),
    ({"samples": [sid(0, 0, 0)], "clients": [4]}, "unknown client 4"),
    ({"samples": [sid(0, 0, 0)], "slices": ["0:0", "4:0"]}, "unknown slice"),
    ({}, "name something to forget"),
])
def test_unknown_ids_are_refused_and_nothing_is_written(path, ledger, request_, message):
    ledger.forget(samples=[sid(3, 0, 0)])  # a store with history, not only a fresh one
    before, raw = dump(path), path.read_bytes()
    with pytest.raises(LedgerUsageError, match=message):
        ledger.forget(**request_)
    assert path.read_bytes() == raw
    assert dump(path) == before
    assert ledger.last_request() == 1
    ledger.forget(samples=[sid(3, 0, 1)])  # the connection is usable afterwards (no open transaction)
    assert ledger.last_request() == 2


def test_forget_before_training_is_refused(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.load_samples(SLICE_IDS)
    before = dump(ledger.path)
    with pytest.raises(LedgerUsageError, match="no trained plan yet"):
        ledger.forget(samples=[sid(0, 0, 0)])
    assert dump(ledger.path) == before
    ledger.close()


# -- retraining --------------------------------------------------------------------------------------------


def test_an_artifact_recorded_below_a_request_that_touched_it_is_invalid(ledger):
    result = ledger.forget(samples=[sid(2, 2, 0)])
    hit = sorted(touched({"2:2"}))[0]
    spared = sorted(ALL - touched({"2:2"}))[0]
    chain_of = {a: (c, p) for a, c, p in PLAN.artifacts()}
    # Retrained from data taken before request 1 (watermark 0): still holds 2:2's sample.
    assert ledger.record_artifact(hit, sha(hit, 1), "lora+head", PLAN.lineage(*chain_of[hit]), 0) is False
    assert hit not in ledger.valid_artifacts()
    # Retrained after the clients dropped request 1 (watermark 1): valid again.
    assert ledger.record_artifact(hit, sha(hit, 2), "lora+head", PLAN.lineage(*chain_of[hit]), 1) is True
    assert hit in ledger.valid_artifacts()
    # An artifact the request never touched is valid at any watermark.
    assert ledger.record_artifact(spared, sha(spared, 1), "lora+head", PLAN.lineage(*chain_of[spared]), 0) is True
    row = next(a for a in ledger.artifacts() if a["artifact"] == hit)
    assert (row["sha256"], row["watermark"], row["valid"]) == (sha(hit, 2), 1, True)
    assert ledger.first_sha(hit) == sha(hit)
    assert ledger.lineage(hit) == PLAN.lineage(*chain_of[hit])
    assert result.request == 1


def test_finish_retrain_marks_requests_up_to_its_watermark_retrained(ledger):
    first = ledger.forget(samples=[sid(0, 1, 0)])
    ledger.forget(clients=[3])
    assert [r["state"] for r in ledger.requests()] == ["pending", "pending"]
    chain_of = {a: (c, p) for a, c, p in PLAN.artifacts()}
    for artifact in first.invalidated:  # rebuilt from data without request 1's sample
        ledger.record_artifact(artifact, sha(artifact, 1), "lora+head", PLAN.lineage(*chain_of[artifact]), 1)
    serving = ledger.finish_retrain(1, first.invalidated)
    assert [r["state"] for r in ledger.requests()] == ["retrained", "pending"]
    assert ledger.retrained_watermark() == 1
    valid = ALL - touched({"3:0", "3:1", "3:2"})
    assert ledger.valid_artifacts() == valid
    assert serving == ledger.serving() == compute_serving(PLAN.to_json(), valid)
    ledger.finish_retrain(2, [])
    assert [r["state"] for r in ledger.requests()] == ["retrained", "retrained"]


# -- concurrency -------------------------------------------------------------------------------------------


def _forget_each(path: str, samples: list[int], barrier) -> None:
    ledger = Ledger(Path(path))
    barrier.wait()
    for s in samples:
        ledger.forget(samples=[s])
    ledger.close()


def test_two_processes_forgetting_at_once_both_land(path):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    mine = [sid(0, s, j) for s in range(SLICES) for j in range(3)]
    theirs = [sid(2, s, j) for s in range(SLICES) for j in range(3)]
    procs = [ctx.Process(target=_forget_each, args=(str(path), ids, barrier)) for ids in (mine, theirs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    ledger = Ledger(path)
    rows = ledger.requests()
    assert [r["request"] for r in rows] == list(range(1, len(mine) + len(theirs) + 1))
    assert sorted(s for r in rows for s in r["spec"]["samples"]) == sorted(mine + theirs)
    assert ledger.forgotten_by_partition() == {0: sorted(mine), 2: sorted(theirs)}
    # Serialised: each request's invalidations are disjoint and together cover what the union touches.
    invalidated = [a for r in rows for a in r["invalidated"]]
    assert len(invalidated) == len(set(invalidated))
    units = {f"{p}:{s}" for p in (0, 2) for s in range(SLICES)}
    assert set(invalidated) == touched(units)
    assert_consistent(ledger, units)
    ledger.close()


# -- crash safety ------------------------------------------------------------------------------------------

CRASHING_FORGET = ("import sys; import fedforget.methods.registry; from fedforget.store.ledger import Ledger; "
                   "Ledger(sys.argv[1]).forget(samples=[int(sys.argv[2])])")
CRASH_TARGET = sid(2, 0, 3)


@pytest.fixture(scope="module")
def crashed(template, tmp_path_factory) -> dict[str, tuple[Path, dict, subprocess.Popen]]:
    """One ledger per crash point, each with a committed request, and a forget killed at that point.

    The four killed processes run side by side (each spends most of its life importing).
    """
    runs = {}
    for point in CRASH_POINTS:
        path = tmp_path_factory.mktemp("crash") / "ledger.sqlite"
        shutil.copyfile(template, path)
        ledger = Ledger(path)
        ledger.forget(slices=["1:1"])  # committed history the crash must not disturb
        before = {"artifacts": ledger.artifacts(), "serving": ledger.serving(), "dump": dump(path)}
        ledger.close()
        proc = subprocess.Popen([sys.executable, "-c", CRASHING_FORGET, str(path), str(CRASH_TARGET)],
                                env={**os.environ, CRASH_ENV: point}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        runs[point] = (path, before, proc)
    yield runs
    for _, _, proc in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_inside_forget_leaves_the_request_absent_and_a_rerun_applies_it(crashed, point):
    path, before, proc = crashed[point]
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 137, stderr
    ledger = Ledger(path)
    assert ledger.last_request() == 1
    assert ledger.forgotten_by_partition() == {1: SLICE_IDS[1][1]}
    assert ledger.artifacts() == before["artifacts"]
    assert ledger.serving() == before["serving"]
    assert dump(path) == before["dump"]
    result = ledger.forget(samples=[CRASH_TARGET])
    assert result.request == 2 and result.new_samples == 1
    assert set(result.invalidated) == touched({"2:0"}) - touched({"1:1"})
    assert_consistent(ledger, {"1:1", "2:0"})
    ledger.close()
