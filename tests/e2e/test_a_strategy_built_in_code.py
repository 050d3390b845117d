"""A Flower app whose ServerApp builds its forgettable strategy in code (tests/fixtures/in-code-app: a subclass
of Flower's FedProx made forgettable, its rounds, training values and federated evaluation said in code; its
``pyproject.toml`` declares only the run's own keys) trains, forgets and retrains on the simulation engine and on
a loopback deployment, and verifies exact through the nodes: the nodes train by the values each message carries,
the store records them, and the coordinator's runs submit the same app, which builds the same strategy. The
server holds no test set: the nodes evaluate what is served on their own test records."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fedforget.launch import FlowerHome, loopback_deployment, simulation_federation

from ..integration.helpers import fedforget_cli, finished_store

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "in-code-app"
NODES = 3
RECORD = "node-1:patient-1-007"
#: what ``server_app.py`` builds, as the store records it
BUILT = {"method": "replay", "num-rounds": 2, "local-epochs": 2, "lr": 0.05, "seed": 3, "replay.strategy": "fedprox",
         "replay.proximal-mu": 0.01, "evaluate-on-nodes": True, "task": "in_code_app.task:TASK"}


def copy_app(folder: Path) -> Path:
    """The app with its nodes' records: the tabular example's, each node also holding a third of its test rows
    as its own test split (the server keeps none)."""
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    shutil.copytree(REPO / "examples" / "tabular-mlp" / "data", folder / "data")
    test = pq.read_table(folder / "data" / "server" / "test.parquet")
    for node in range(NODES):
        share = test.take(list(range(node, test.num_rows, NODES)))
        pq.write_table(share, folder / "data" / f"node-{node}" / "test.parquet")
    shutil.rmtree(folder / "data" / "server")
    return folder


def user_shell(fed: FlowerHome) -> dict[str, str]:
    return {k: v for k, v in fed.env.items() if k not in ("FEDFORGET_HOME", "PYTHONPATH")}


def check_built_in_code(store: Path) -> None:
    """The store records what the code built, not the app's run config (which holds only the run's own keys)."""
    declared = tomllib.loads((FIXTURE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert set(declared) == {"action", "store", "reference"}
    manifest = json.loads((store / "manifest.json").read_text())
    assert {k: manifest["config"][k] for k in BUILT} == BUILT
    assert manifest["replay-strategy"]["class"].endswith("ClippedFedProx")
    assert manifest["replay-strategy"]["attributes"]["clip"] == 1.0
    assert manifest["app"]["name"] == "example/in-code-app"


def forget_and_retrain(env: dict[str, str], store: Path, connection: str) -> dict:
    fedforget_cli(env, "forget", "--store", str(store), "--record", RECORD)
    retrained = json.loads(fedforget_cli(env, "retrain", "--store", str(store), "--federation", connection,
                                         "--json").stdout)
    assert retrained["retrained_up_to_request"] == 1
    status = json.loads(fedforget_cli(env, "status", "--store", str(store), "--json").stdout)
    assert status["accuracy"] is None  # no server test set ...
    nodes = status["federated_accuracy"]  # ... the nodes' evaluation of what the retrain serves
    assert nodes["nodes"] == NODES and nodes["examples"] == 80 and 0.0 < nodes["accuracy"] <= 1.0
    return status


def test_a_strategy_built_in_code_on_the_simulation_engine_forgets_and_verifies_exact(tmp_path):
    app = copy_app(tmp_path / "in-code-app")
    with simulation_federation(tmp_path / "flwr-home", NODES) as fed:
        env = user_shell(fed)
        run = subprocess.run(["fedforget", "run", "--federation", fed.connection], env={**env, "COLUMNS": "300"},
                             cwd=app, capture_output=True, text=True, timeout=900, check=False)
        store = app / "runs" / "in-code"
        finished_store(run, store)
        assert "on the nodes' test records (80 records, 3 nodes)" in run.stdout, run.stdout[-3000:]
        check_built_in_code(store)
        forget_and_retrain(env, store, fed.connection)
        verified = json.loads(fedforget_cli(env, "verify", "--store", str(store), "--federation", fed.connection,
                                            "--json").stdout)
        assert verified["exact"] and verified["served"] == 1 and verified["forgotten_samples"] == 1, verified


def test_a_strategy_built_in_code_on_a_loopback_deployment_forgets_and_retrains(tmp_path):
    app = copy_app(tmp_path / "in-code-app")
    store = tmp_path / "store"
    with loopback_deployment(tmp_path / "deploy", NODES, data_dir=app / "data") as fed:
        run = subprocess.run(["flwr", "run", ".", fed.connection, "--stream", "--run-config", f'store="{store}"'],
                             env={**fed.env, "FEDFORGET_HOME": str(app)}, cwd=app, capture_output=True, text=True,
                             timeout=600, check=False)
        finished_store(run, store)
        assert "in-code-app: the nodes' accuracy" in run.stdout  # the app's own line, from Flower's Result
        check_built_in_code(store)
        served = forget_and_retrain({**fed.env, "FEDFORGET_HOME": str(app)}, store, fed.connection)["serving"]
        assert served == ["replay/round-2"]
