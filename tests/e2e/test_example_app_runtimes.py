"""The example Flower app (examples/tabular-mlp) run as a Flower user runs it from a copy outside the checkout:
`fedforget run` in its directory on the simulation engine, `flwr run` on a loopback deployment; then the
coordinator's commands on its store submit that same app: forget a record and retrain (both runtimes), and on
the simulation engine a receipt that verifies through the nodes (exact)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fedforget.launch import FlowerHome, loopback_deployment, simulation_federation

from ..integration.helpers import fedforget_cli, finished_store

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tabular-mlp"
NODES = 3
RECORD = "node-1:patient-1-007"
#: One round keeps CI short (each of a deployment's messages starts a ClientApp process); the app's config holds
#: the rest, and the coordinator's runs take the stored value.
SHORT = "num-rounds=1"


def copy_app(folder: Path, example: Path = EXAMPLE) -> Path:
    """A copy of the example, as a user's checkout of it."""
    shutil.copytree(example, folder, ignore=shutil.ignore_patterns("runs", ".flwr", "__pycache__"))
    return folder


def user_flwr_run(fed: FlowerHome, app: Path, run_config: str = "") -> object:
    """``flwr run . <connection> --stream`` from the app's directory, relative paths taken from it."""
    cmd = ["flwr", "run", ".", fed.connection, "--stream", "--run-config", f"{SHORT} {run_config}".strip()]
    return subprocess.run(cmd, env={**fed.env, "FEDFORGET_HOME": str(app)}, cwd=app, capture_output=True,
                          text=True, timeout=600, check=False)


def user_fedforget_run(fed: FlowerHome, app: Path, run_config: str = SHORT,
                       store: str | None = None) -> subprocess.CompletedProcess:
    """``fedforget run`` from the app's directory, in a user's shell: nothing of the checkout's environment;
    ``store``: the store a user names with ``--store`` instead of the app's declared one."""
    chosen = ["--store", store] if store else []
    return subprocess.run(["fedforget", "run", "--federation", fed.connection, *chosen, "--run-config", run_config],
                          env={**user_shell(fed), "COLUMNS": "300"}, cwd=app, capture_output=True, text=True,
                          timeout=900, check=False)


def user_shell(fed: FlowerHome) -> dict[str, str]:
    return {k: v for k, v in fed.env.items() if k not in ("FEDFORGET_HOME", "PYTHONPATH")}


def forget_and_retrain(fed: FlowerHome, app: Path, store: Path, env: dict[str, str] | None = None,
                       record: str = RECORD) -> dict[str, str]:
    """Forget ``record`` and retrain through the app that trained the store; the coordinator's environment."""
    env = env or {**fed.env, "FEDFORGET_HOME": str(app)}
    fedforget_cli(env, "forget", "--store", str(store), "--record", record)
    retrained = json.loads(fedforget_cli(env, "retrain", "--store", str(store), "--federation", fed.connection,
                                         "--json").stdout)
    assert retrained["retrained_up_to_request"] == 1
    return env


def test_the_example_on_the_simulation_engine_then_forget_retrain_verify_receipt(tmp_path):
    """`fedforget run` in the app's directory runs that app (not fedforget's own) into its declared store, in a
    shell without the checkout's FEDFORGET_HOME; the coordinator's commands then work on it from that shell."""
    app = copy_app(tmp_path / "tabular-mlp")
    with simulation_federation(tmp_path / "flwr-home", NODES) as fed:
        store = app / "runs" / "tabular-mlp"
        run = user_fedforget_run(fed, app)
        assert f"running the Flower app example/tabular-mlp 1.0.0 in {app}" in run.stdout, run.stdout[-3000:]
        manifest = finished_store(run, store).manifest()
        assert manifest["task"] == "tabular_mlp.task:TASK" and manifest["app"]["name"] == "example/tabular-mlp"
        assert not (app / "runs" / "latest").exists()
        env = forget_and_retrain(fed, app, store, env=user_shell(fed))
        # the receipt runs verify through the nodes into the certificate: a reference trained by the app
        receipt = fedforget_cli(env, "receipt", "--store", str(store), "1", "--federation", fed.connection, "--json")
        verdict = json.loads(receipt.stdout)["verify"]
        assert verdict["exact"] and verdict["forgotten_samples"] == 1, verdict["reason"]


def test_the_example_on_a_loopback_deployment_then_forget_and_retrain(tmp_path):
    app = copy_app(tmp_path / "tabular-mlp")
    store = tmp_path / "store"
    with loopback_deployment(tmp_path / "deploy", NODES, data_dir=app / "data") as fed:
        proc = user_flwr_run(fed, app, f'store="{store}" test-data="{app / "data" / "server"}"')
        assert finished_store(proc, store).manifest()["nodes"]["1"] == {"name": "node-1", "records": "local"}
        forget_and_retrain(fed, app, store)  # verify through a deployment: tests/e2e/test_verify_through_federation.py
        assert "fedavg trained fedavg/global" in (store / "flwr-run.log").read_text()  # the retrain's own log
