"""The whole forget flow through real Flower runtimes: train with `flwr run`, forget with the CLI,
`fedforget retrain` through Flower (clients delete the data in their own state dirs), verify exact. The same
FedSGT flow on a loopback deployment is tests/e2e/test_verify_through_federation.py's (its nodes hold their own
records, and its reference trains through them too)."""

from __future__ import annotations

import json

import pytest

from fedforget.launch import simulation_federation
from fedforget.store import Store
from fedforget.store.tombstones import load_tombstones

from ..integration.helpers import artifact_shas, fedforget_cli, flwr_run_config, train_in_process

pytestmark = pytest.mark.e2e

NODES = 3
CONFIG = {"method": "fedsgt", "task": "digits-mlp", "chains.groups": 2, "chains.budget": 2, "slices-per-client": 1,
          "chains.rounds-per-phase": 1,  # one round per chain position: a message per node, not three
          "lr": 0.02, "local-epochs": 2, "seed": 5}


FEDSHARD = {"method": "fedshard", "task": "digits-mlp", "fedshard.fanout": 2, "fedshard.rounds-min": 1,
            "fedshard.rounds-max": 2, "lr": 0.02, "local-epochs": 2, "seed": 5}


def _flow(fed, store_path, state_dir_of, config: dict = CONFIG) -> None:  # noqa: ANN001
    """Train, forget (one sample; a whole client for FedShard), retrain through Flower, verify."""
    proc = fed.flwr_run(flwr_run_config(config, store_path), timeout=900)
    assert proc.returncode == 0 and "store written to" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    store = Store.open(store_path)
    trained = artifact_shas(store)
    reference = artifact_shas(train_in_process(store_path.parent / "inproc", NODES, **config))
    assert trained == reference  # same artifacts as the in-process run, bit for bit
    sample = store.manifest()["partitions"]["1"][0][0]
    what = ["--client", "1"] if config["method"] == "fedshard" else ["--sample", str(sample)]
    forgot = json.loads(fedforget_cli(fed.env, "forget", "--store", str(store_path), *what, "--json").stdout)
    assert forgot["invalidated"] and forgot["serving"]["available"]
    summary = json.loads(fedforget_cli(fed.env, "retrain", "--store", str(store_path), "--federation", fed.connection,
                                       "--json").stdout)  # JSON alone: flwr's progress goes to stderr
    assert summary["retrained_up_to_request"] == 1 and summary["available"]
    assert sample in load_tombstones(state_dir_of(1), "digits-mlp")
    retrained = artifact_shas(store)
    assert {a for a in trained if trained[a] != retrained[a]} == set(forgot["invalidated"])
    verdict = json.loads(fedforget_cli(fed.env, "verify", "--store", str(store_path), "--json").stdout)
    assert verdict["exact"] and verdict["served"] == (1 if config["method"] == "fedshard" else len(trained))


def test_forget_retrain_verify_on_the_simulation_engine(tmp_path):
    store = tmp_path / "s"
    with simulation_federation(tmp_path / "flwr-home", NODES) as fed:
        _flow(fed, store, lambda p: store / "clients" / str(p))


def test_fedshard_leaver_retrains_its_path_exactly_on_the_simulation_engine(tmp_path):
    store = tmp_path / "s"
    with simulation_federation(tmp_path / "flwr-home", NODES) as fed:
        _flow(fed, store, lambda p: store / "clients" / str(p), FEDSHARD)
