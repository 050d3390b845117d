"""`fedforget verify` is quiet by default: the verdict and (on a terminal) a one-line progress, not Flower's
strategy log of the from-scratch reference run; `-v` shows that log."""

from __future__ import annotations

import os
import subprocess

import pytest

from .helpers import train_in_process


@pytest.fixture(scope="module")
def fedavg_store(tmp_path_factory):
    return train_in_process(tmp_path_factory.mktemp("quiet") / "store", 3, **{"num-rounds": 2, "train-size": 300})


def verify(store, *extra: str) -> subprocess.CompletedProcess:  # noqa: ANN001
    proc = subprocess.run(["fedforget", "verify", "--store", str(store.root), *extra],
                          env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_verify_prints_a_few_lines_with_the_verdict_and_no_run_log(fedavg_store):
    proc = verify(fedavg_store)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) <= 4, lines
    assert any(line.startswith("exact: 1/1 served artifacts bit-identical") for line in lines), lines
    assert "INFO" not in proc.stdout + proc.stderr and "Starting" not in proc.stdout + proc.stderr


def test_verify_verbose_shows_the_reference_runs_log(fedavg_store):
    proc = verify(fedavg_store, "-v")
    out = proc.stdout + proc.stderr
    assert "Starting FedAvgLoRA strategy" in out and "round 2/2: test accuracy" in out
    assert "exact: 1/1 served artifacts bit-identical" in out


def test_progress_lines_are_read_from_the_servers_round_and_position_lines():
    from fedforget.unlearning.quiet import progress_of

    assert progress_of("round 3/5: test accuracy 0.8000, loss 0.5") == (3, 5, "rounds")
    assert progress_of("fedforget: 12/40 chain positions trained") == (12, 40, "chain positions")
    assert progress_of("Strategy execution finished") is None
