"""`fedforget verify --federation` on a loopback deployment whose SuperNodes hold their own records: in-process
verify refuses (the coordinator cannot read them), verify refuses while a request has not reached its nodes,
and is exact after a retrain delivered it. Its negative control (a node deleted a record the store never forgot,
so the reference its nodes train differs) runs with the nodes played in process:
tests/integration/test_verify_nodes_own_records.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fedforget.federation.node_data import REGISTERED
from fedforget.launch import loopback_deployment
from fedforget.unlearning.verify_federation import SCRATCH

from ..integration.helpers import fedforget_cli, finished_store, flwr_run_config

pytestmark = pytest.mark.e2e

NODES = 2
CONFIG = {"method": "fedsgt", "task": "digits-mlp", "chains.groups": 2, "chains.budget": 2, "slices-per-client": 1,
          "chains.rounds-per-phase": 1, "lr": 0.02, "local-epochs": 1, "seed": 5}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["fedforget", *args], env={**env, "COLUMNS": "200"}, capture_output=True, text=True,
                          timeout=900, check=False)


def record_ids(data: Path, p: int) -> list[str]:
    return [str(r) for r in pq.read_table(data / f"node-{p}" / "train.parquet").column("record_id").to_pylist()]


def test_verify_through_the_nodes_that_hold_their_own_records(tmp_path):
    data = tmp_path / "data"
    split = subprocess.run(["bash", "deploy/data.sh", str(data), str(NODES)], capture_output=True, text=True,
                           check=False, timeout=300, env={**os.environ, "FEDFORGET_DATA_ARGS": "--train-size 200"})
    assert split.returncode == 0, split.stderr
    store = tmp_path / "s"
    with loopback_deployment(tmp_path / "deploy", NODES, data_dir=data) as fed:
        states = tmp_path / "deploy" / "deploy"
        proc = fed.flwr_run(flwr_run_config({**CONFIG, "test-data": str(data / "server")}, store), timeout=900)
        manifest = finished_store(proc, store).manifest()
        assert manifest["nodes"]["1"] == {"name": "node-1", "records": "local"}

        refused = cli(fed.env, "verify", "--store", str(store))  # in process: the coordinator holds no rows
        assert refused.returncode == 2 and "--federation" in refused.stderr and len(refused.stderr.splitlines()) == 1

        record = record_ids(data, 1)[4]
        fedforget_cli(fed.env, "forget", "--store", str(store), "--record", f"node-1:{record}")
        pending = cli(fed.env, "verify", "--store", str(store), "--federation", fed.connection)
        assert pending.returncode == 2 and "have not reached the nodes" in pending.stderr, pending.stderr

        fedforget_cli(fed.env, "retrain", "--store", str(store), "--federation", fed.connection, "--json")
        registered = {p: (states / f"node{p}" / REGISTERED).stat().st_ino for p in range(NODES)}
        verdict = json.loads(fedforget_cli(fed.env, "verify", "--store", str(store), "--federation", fed.connection,
                                           "--json").stdout)
        assert verdict["exact"] and verdict["held"]["equal"] and verdict["forgotten_samples"] == 1, verdict["reason"]
        assert verdict["served"] > 0 and verdict["outputs"]["equal"]
        assert not (store / SCRATCH).exists()
        # the reference kept what the nodes registered for the store (its next retrain checks against it)
        assert {p: (states / f"node{p}" / REGISTERED).stat().st_ino for p in range(NODES)} == registered

