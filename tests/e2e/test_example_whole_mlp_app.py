"""The example app examples/whole-mlp (its own MLP trained whole with its own loss and metric, CSV records, method
``replay``) run as a Flower user runs it from a copy outside the checkout: ``fedforget run`` in its directory on
the simulation engine, then the coordinator's forget and retrain submit that same app, and ``verify
--federation`` finds the retrained model bit for bit a from-scratch run through the nodes without the record.
The same with SISA, by the command its README shows: the forget retrains the record's shard only, and both
shards' served MLPs verify."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fedforget.launch import simulation_federation

from ..integration.helpers import fedforget_cli, finished_store
from .test_example_app_runtimes import NODES, copy_app, forget_and_retrain, user_fedforget_run, user_shell

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "whole-mlp"
RECORD = "node-2:member-2-010"


def test_the_whole_mlp_example_on_the_simulation_engine_then_forget_retrain_verify(tmp_path):
    app = copy_app(tmp_path / "whole-mlp", EXAMPLE)
    with simulation_federation(tmp_path / "flwr-home", NODES) as fed:
        store = app / "runs" / "whole-mlp"
        run = user_fedforget_run(fed, app)
        assert f"running the Flower app example/whole-mlp 1.0.0 in {app}" in run.stdout, run.stdout[-3000:]
        manifest = finished_store(run, store).manifest()
        assert manifest["task"] == "whole_mlp.task:TASK" and manifest["config"]["method"] == "replay"
        assert manifest["task-functions"]["metric-names"] == ["macro-f1"]
        env = forget_and_retrain(fed, app, store, env=user_shell(fed), record=RECORD)
        verified = fedforget_cli(env, "verify", "--store", str(store), "--federation", fed.connection, "--json")
        report = json.loads(verified.stdout)
        assert report["exact"] and report["forgotten_samples"] == 1, report["reason"]


def readme_sisa_command() -> tuple[str, str]:
    """The store and the run config of the README's SISA ``fedforget run``: CI runs what a user copies."""
    text = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    found = re.search(r"fedforget run --store (\S+) \\\n\s*--run-config \"(method='sisa'[^\"]*)\"", text)
    assert found, "examples/whole-mlp/README.md shows no `fedforget run --store ... --run-config \"method='sisa' ...\"`"
    return found.group(1), found.group(2)


def test_the_whole_mlp_example_with_sisa_by_its_readme_then_forget_retrain_verify(tmp_path):
    app = copy_app(tmp_path / "whole-mlp", EXAMPLE)
    store_name, run_config = readme_sisa_command()
    with simulation_federation(tmp_path / "flwr-home", NODES) as fed:
        store = app / store_name
        run = user_fedforget_run(fed, app, run_config=run_config, store=store_name)
        manifest = finished_store(run, store).manifest()
        assert manifest["config"]["method"] == "sisa" and manifest["config"]["chains.shards"] == 2
        env = forget_and_retrain(fed, app, store, env=user_shell(fed), record=RECORD)
        retrain = [r for r in finished_store(run, store).metrics() if r.get("action") == "retrain"]
        rebuilt = next(r for r in retrain if r.get("final"))["rebuilt"]
        assert len({artifact.split("/")[1] for artifact in rebuilt}) == 1  # the record's shard only
        verified = fedforget_cli(env, "verify", "--store", str(store), "--federation", fed.connection, "--json")
        report = json.loads(verified.stdout)
        assert report["exact"] and report["forgotten_samples"] == 1, report["reason"]
        assert report["served"] == report["served_equal"] == 2  # both shards' MLPs, bit for bit
