"""The example app examples/tiny-lm (a pretrained language model's first layers and LM head, LoRA, the
language-model loss, perplexity, texts without labels, the chain method FedSGT) run as a Flower user runs it from a
copy outside the checkout: ``fedforget run`` in its directory on the simulation engine, then the coordinator's
forget and retrain submit that same app, and ``verify --federation`` finds the retrained model bit for bit a
from-scratch run through the nodes without the text."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fedforget.launch import simulation_federation

from ..integration.helpers import fedforget_cli, finished_store
from .test_example_app_runtimes import NODES, copy_app, forget_and_retrain, user_shell

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-lm"


def test_the_tiny_lm_example_on_the_simulation_engine_then_forget_retrain_verify(tmp_path):
    app = copy_app(tmp_path / "tiny-lm", EXAMPLE)
    with simulation_federation(tmp_path / "flwr-home", NODES) as fed:
        store = app / "runs" / "tiny-lm"
        run = subprocess.run(["fedforget", "run", "--federation", fed.connection], cwd=app,
                             env={**user_shell(fed), "COLUMNS": "300"}, capture_output=True, text=True, timeout=900,
                             check=False)
        assert f"running the Flower app example/tiny-lm 1.0.0 in {app}" in run.stdout, run.stdout[-3000:]
        manifest = finished_store(run, store).manifest()
        assert manifest["task"] == "tiny_lm.task:TASK" and manifest["config"]["method"] == "fedsgt"
        assert manifest["task-functions"]["metric-names"] == ["perplexity"]
        env = forget_and_retrain(fed, app, store, env=user_shell(fed), record="node-1:member-1-007")
        verified = fedforget_cli(env, "verify", "--store", str(store), "--federation", fed.connection, "--json")
        report = json.loads(verified.stdout)
        assert report["exact"] and report["forgotten_samples"] == 1, report["reason"]
        assert report["outputs"]["compared"], report["outputs"]
