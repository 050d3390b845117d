"""The same config and seed give a bit-identical artifact in process, on Ray and on a real deployment."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fedforget.launch import loopback_deployment, simulation_federation
from fedforget.store import Store

from ..integration.helpers import finished_store, flwr_run_config, served_sha, train_in_process

pytestmark = pytest.mark.e2e

NODES = 3
#: The file scikit-learn ships the digits in: both splits' rows, which only nodes may open.
DIGITS_FILE = "digits.csv.gz"
AUDIT = Path(__file__).with_name("open_audit")
CONFIG = {"task": "digits-mlp", "num-rounds": 2, "lr": 0.02, "local-epochs": 2, "seed": 11}


@pytest.fixture(scope="module")
def in_process_sha(tmp_path_factory) -> str:
    return served_sha(train_in_process(tmp_path_factory.mktemp("inproc") / "s", num_nodes=NODES, **CONFIG))


@pytest.fixture(scope="module")
def simulation(tmp_path_factory):
    with simulation_federation(tmp_path_factory.mktemp("flwr-home"), NODES) as fed:
        yield fed


def test_flwr_run_with_a_bad_value_names_the_key_and_writes_no_store(tmp_path, simulation):
    store = tmp_path / "s"
    proc = simulation.flwr_run(f"method='nope' store=\"{store}\"", timeout=300)
    assert "fedforget: bad run config: run-config 'method'='nope' is not one of" in proc.stdout + proc.stderr
    assert not store.exists()


def test_loopback_deployment_matches_the_in_process_run_and_its_server_opens_no_training_file(
        tmp_path, in_process_sha, monkeypatch):
    store, opened = tmp_path / "s", tmp_path / "opened.jsonl"
    monkeypatch.setenv("FEDFORGET_OPEN_AUDIT", str(opened))  # every process of the deployment logs its opens
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(AUDIT), os.environ.get("PYTHONPATH", "")]))
    with loopback_deployment(tmp_path / "deploy", NODES) as fed:
        proc = fed.flwr_run(flwr_run_config(CONFIG, store), timeout=900)
    result = finished_store(proc, store)
    assert served_sha(result) == in_process_sha
    assert result.manifest()["num-partitions"] == NODES

    rows = [json.loads(line) for line in opened.read_text().splitlines()]
    training = [(argv, path) for _, argv, path in rows if Path(path).name == DIGITS_FILE]
    assert any("flwr-clientapp" in argv for argv, _ in training), "the nodes' reads were not seen: the audit is blind"
    server = [path for _, argv, path in rows if "flwr-serverapp" in argv]
    assert server, "no ServerApp process was seen"
    assert not [p for p in server if Path(p).name == DIGITS_FILE]


def test_a_different_seed_does_not_match(tmp_path, in_process_sha):
    """Negative control: the comparison above can fail."""
    other = train_in_process(tmp_path / "s", num_nodes=NODES, **{**CONFIG, "seed": 12})
    assert served_sha(other) != in_process_sha


def test_fedforget_run_on_ray_shows_each_round_and_matches_the_in_process_run(tmp_path, in_process_sha, simulation):
    """The demo's path: `fedforget run` submits `flwr run` to the Ray simulation engine, follows the rounds, names
    the store; what the store serves is bit-identical to the in-process run of the same config and seed."""
    store = tmp_path / "s"
    run_config = " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in CONFIG.items())
    proc = subprocess.run(
        ["fedforget", "run", "--federation", simulation.connection, "--store", str(store), "--run-config", run_config],
        env={**simulation.env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "round 1/2: test accuracy" in proc.stdout and "round 2/2: test accuracy" in proc.stdout
    assert f"store written to {store}" in proc.stdout
    assert (store / "flwr-run.log").is_file()
    assert served_sha(Store.open(store)) == in_process_sha
