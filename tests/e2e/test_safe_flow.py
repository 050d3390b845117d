"""SAFE through a real Flower runtime (the Ray simulation engine): train with `flwr run`, forget one sample with
the CLI (its clique leaves the ensemble), `fedforget retrain` retrains only that clique through Flower, verify is
exact. SAFE's server code is the same on every runtime; the loopback deployment's path is the FedSGT flow's."""

from __future__ import annotations

import json

import pytest

from fedforget.launch import simulation_federation
from fedforget.store import Store
from fedforget.store.tombstones import load_tombstones

from ..integration.helpers import artifact_shas, fedforget_cli, flwr_run_config, train_in_process

pytestmark = pytest.mark.e2e

NODES = 3
CONFIG = {"method": "safe", "task": "digits-mlp", "safe.coarse": 2, "safe.fine": 2, "num-rounds": 1,
          "safe.adapter-steps": 4, "lr": 0.02, "seed": 5}


def _flow(fed, store_path, state_dir_of) -> None:  # noqa: ANN001
    proc = fed.flwr_run(flwr_run_config(CONFIG, store_path), timeout=900)
    assert proc.returncode == 0 and "store written to" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    store = Store.open(store_path)
    trained = artifact_shas(store)
    assert trained == artifact_shas(train_in_process(store_path.parent / "inproc", NODES, **CONFIG))
    sample = store.manifest()["partitions"]["1"][0][0]
    forgot = json.loads(fedforget_cli(fed.env, "forget", "--store", str(store_path), "--sample", str(sample),
                                      "--json").stdout)
    assert len(forgot["safe"]["cliques"]) == 1 and forgot["serving"]["available"]
    fedforget_cli(fed.env, "retrain", "--store", str(store_path), "--federation", fed.connection)
    assert sample in load_tombstones(state_dir_of(1), "digits-mlp")
    retrained = artifact_shas(store)
    assert {a for a in trained if trained[a] != retrained[a]} == set(forgot["invalidated"])
    verdict = json.loads(fedforget_cli(fed.env, "verify", "--store", str(store_path), "--json").stdout)
    assert verdict["exact"] and verdict["served"] == len(trained)


def test_safe_forget_retrain_verify_on_the_simulation_engine(tmp_path):
    store = tmp_path / "s"
    with simulation_federation(tmp_path / "flwr-home", NODES) as fed:
        _flow(fed, store, lambda p: store / "clients" / str(p))

