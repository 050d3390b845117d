"""The coordinator CLI on a FedSGT store: JSON contracts, idempotency, bad input, a crash mid-forget."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fedforget.store import Store
from fedforget.store.ledger import CRASH_ENV
from fedforget.unlearning.cli import app

from .helpers import train_in_process

runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "store"
    train_in_process(path, 3, method="fedsgt", **{"chains.groups": 3, "chains.budget": 3, "slices-per-client": 2})
    return path


@pytest.fixture
def store(trained, tmp_path):
    dst = tmp_path / "store"
    shutil.copytree(trained, dst)
    return dst


def cli(*args: str):  # noqa: ANN201
    return runner.invoke(app, list(args))


def one_line_error(result) -> str:  # noqa: ANN001
    lines = (result.stderr or result.output).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def sample_of(store, partition: int) -> int:  # noqa: ANN001
    return Store.open(store).manifest()["partitions"][str(partition)][0][0]


def test_forget_json_reports_units_invalidated_serving_and_latency_and_repeats_are_no_ops(store):
    sid = str(sample_of(store, 1))
    first = cli("forget", "--store", str(store), "--sample", sid, "--json")
    assert first.exit_code == 0, first.output
    data = json.loads(first.output)
    assert data["request"] == 1 and data["units"] == ["1:0"] and data["invalidated"]
    assert data["serving"]["available"] and data["latency-ms"] >= 0
    assert len(data["affected-groups"]) == 1 and data["affected-sequences"]
    again = json.loads(cli("forget", "--store", str(store), "--sample", sid, "--json").output)
    assert again["no-op"] and again["request"] is None
    status = json.loads(cli("status", "--store", str(store), "--json").output)
    assert status["requests"]["total"] == 1 and 0.0 < status["accuracy"] <= 1.0
    assert [s["active_prefix"] for s in status["sequences"]] and status["deletions_left"] > 0


@pytest.mark.parametrize("args", [
    ["--sample", "999999"], ["--slice", "7:0"], ["--slice", "banana"], ["--client", "42"], [],
], ids=["unknown-sample", "unknown-slice", "malformed-slice", "unknown-client", "nothing"])
def test_bad_ids_exit_2_with_one_line_and_write_nothing(store, args):
    ledger = store / "ledger.sqlite"
    before = ledger.read_bytes()
    result = cli("forget", "--store", str(store), *args)
    assert result.exit_code == 2
    assert one_line_error(result).startswith("fedforget: error: ")
    assert ledger.read_bytes() == before


def test_status_evaluate_and_verify_json(store):
    status = json.loads(cli("status", "--store", str(store), "--json").output)
    assert status["available"] and not status["retrain_required"] and len(status["sequences"]) == 3
    evaluated = json.loads(cli("evaluate", "--store", str(store), "--json").output)
    assert evaluated["accuracy"] == pytest.approx(status["accuracy"])
    cli("forget", "--store", str(store), "--client", "2")
    result = cli("verify", "--store", str(store), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["exact"] is True


def test_audit_reports_the_memorised_decision_before_and_auc_after(store):
    assert cli("audit", "--store", str(store)).exit_code == 2  # nothing forgotten yet
    cli("forget", "--store", str(store), "--slice", "0:0", "--audit-before")  # "before" exists only until the purge
    data = json.loads(cli("audit", "--store", str(store), "--json").output)
    after = data["after"]
    assert 0.0 <= after["loss_threshold_auc"] <= 1.0 and 0.0 <= after["shadow_auc"] <= 1.0
    low, high = after["loss_threshold_ci95"]
    assert low <= after["loss_threshold_auc"] <= high
    assert data["before"]["memorised"] in (True, False) and "loss_threshold_auc" not in data["before"]  # purged
    assert data["before_request"] == 1 and data["held_out"] >= 100 and data["verdict"] is None


def test_theory_json_has_closed_form_monte_carlo_and_sequences():
    rate = json.loads(cli("theory", "deletion-rate", "--method", "fedsgt", "--groups", "10", "--budget", "10",
                          "--trials", "4000", "--json").output)
    assert rate["closed_form"] == pytest.approx(29.2897, abs=1e-3)
    assert abs(rate["monte_carlo"] - rate["closed_form"]) / rate["closed_form"] < 0.03
    seqs = json.loads(cli("theory", "sequences", "--groups", "4", "--budget", "4", "--json").output)["sequences"]
    assert seqs == [[0, 1, 2, 3], [3, 0, 1, 2], [2, 3, 0, 1], [1, 2, 3, 0]]
    bms = json.loads(cli("theory", "sequences", "--groups", "4", "--budget", "4", "--prior", "0.4,0.3,0.2,0.1",
                         "--json").output)["sequences"]
    assert sorted(map(tuple, bms)) == [(0, 1, 2, 3), (1, 0, 3, 2), (2, 3, 0, 1), (3, 2, 1, 0)]
    bad = cli("theory", "sequences", "--groups", "4", "--prior", "0.5,0.5")
    assert bad.exit_code == 2 and "--prior" in one_line_error(bad)


@pytest.mark.parametrize("point", ["forget:request-row", "forget:invalidated", "forget:before-commit"])
def test_a_crash_mid_forget_leaves_the_request_absent_and_a_rerun_applies_it(store, point):
    sid = str(sample_of(store, 0))
    before = (store / "ledger.sqlite").read_bytes()
    env = {**os.environ, CRASH_ENV: point}
    crashed = subprocess.run([sys.executable, "-m", "fedforget.unlearning.cli", "forget", "--store", str(store),
                              "--sample", sid], env=env, capture_output=True, text=True)
    assert crashed.returncode == 137
    status = json.loads(cli("status", "--store", str(store), "--json").output)
    assert status["requests"]["total"] == 0 and all(a["valid"] for a in status["artifacts"])
    assert (store / "ledger.sqlite").read_bytes() == before
    again = json.loads(cli("forget", "--store", str(store), "--sample", sid, "--json").output)
    assert again["request"] == 1 and again["invalidated"]


def test_run_refuses_a_store_that_holds_forget_requests(store):
    cli("forget", "--store", str(store), "--client", "0")
    result = cli("run", "--store", str(store), "--run-config", "task='digits-mlp'")
    assert result.exit_code == 2 and "holds forget requests" in one_line_error(result)


def test_fairness_on_a_store_not_trained_with_fedshard_exits_2_with_one_line(store):
    ledger = store / "ledger.sqlite"
    before = ledger.read_bytes()
    result = cli("fairness", "--store", str(store))
    assert result.exit_code == 2
    assert "method='fedshard'" in one_line_error(result)
    assert ledger.read_bytes() == before
