"""Crash safety of the coordinator: kill -9 at injected points and at random times inside ``forget``
and ``retrain`` (real processes: forked coordinators, retrain runs of the real ServerApp/ClientApp).
Afterwards every request is applied or pending, never half; the ledger, plan and artifacts agree;
and a restarted retrain serves the same bytes as an uninterrupted one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from fedforget.faults.campaign import CampaignResult, retrain_campaign, run_retrain, served_state
from fedforget.store import Store
from fedforget.store.check import check_store
from fedforget.store.crash import CRASH_ENV
from fedforget.unlearning.forget import forget_request

from .helpers import train_in_process

CONFIG = {"method": "fedsgt", "chains.groups": 3, "chains.budget": 3, "slices-per-client": 1, "local-epochs": 1,
          "seed": 3}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash") / "trained"
    train_in_process(root, 3, **CONFIG)
    return root


@pytest.fixture(scope="module")
def pending(trained, tmp_path_factory):
    """The trained store with two forget requests waiting for a retrain."""
    root = tmp_path_factory.mktemp("crash") / "pending"
    shutil.copytree(trained, root)
    store = Store.open(root)
    parts = store.manifest()["partitions"]
    forget_request(store, samples=[parts["1"][0][0]])
    forget_request(store, samples=[parts["2"][0][3], parts["0"][0][5]])
    return root


def test_two_hundred_coordinator_crashes_in_forget_lose_nothing_and_half_apply_nothing(trained, tmp_path):
    root = tmp_path / "s"
    shutil.copytree(trained, root)
    # in a process without torch, where forking a coordinator costs milliseconds
    proc = subprocess.run([sys.executable, "-m", "fedforget.faults", "forget", str(root), "--crashes", "200",
                           "--seed", "7"], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = CampaignResult(**json.loads(proc.stdout))
    assert result.crashes >= 200 and result.injected > 0 and result.killed > 0
    assert result.pending_after_crash > 0
    assert (result.half_applied_found, result.lost_found, result.inconsistent_found) == (0, 0, 0), result.problems
    assert check_store(Store.open(root)).ok


def test_a_retrain_killed_at_any_point_finishes_with_the_same_served_bytes_when_restarted(pending, tmp_path):
    result = retrain_campaign(pending, tmp_path, crashes=4, max_crashes_per_job=2, seed=11)
    assert result.crashes >= 4 and result.jobs >= 2
    assert result.unfinished_after_restart == 0 and result.inconsistent_found == 0, result.problems
    assert result.mismatched_after_restart == 0, result.problems


def test_the_check_finds_a_half_applied_request_and_a_stale_valid_artifact(pending, tmp_path):
    """Negative control: the invariants the campaigns rely on do fire on a broken store."""
    root = tmp_path / "broken"
    shutil.copytree(pending, root)
    assert check_store(Store.open(root)).ok
    ledger = Store.open(root).ledger()
    try:
        ledger.db.execute("DELETE FROM forgotten WHERE request = 2")
        ledger.db.execute("UPDATE artifacts SET valid = 1")
    finally:
        ledger.close()
    problems = check_store(Store.open(root)).problems
    assert any("half applied" in p for p in problems)
    assert any("saw forgotten data" in p for p in problems)


def test_a_crash_point_in_retrain_really_stops_it_before_the_job_is_done(pending, tmp_path, monkeypatch):
    """Negative control: an injected crash leaves the retrain unfinished (the watermark is not reached)."""
    root = tmp_path / "s"
    shutil.copytree(pending, root)
    monkeypatch.delenv(CRASH_ENV, raising=False)
    finished, _ = run_retrain(root, "chains:position-recorded@2")
    assert not finished
    assert served_state(root)["watermark"] == 0
