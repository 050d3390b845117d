"""HO-SFL over real Flower runtimes: `flwr run` on the Ray simulation engine and on a loopback deployment
(a new ClientApp process per message, client state in each SuperNode's state dir).

Both must give the bit-identical artifact of the in-process run, and in the deployment every node's
persisted θ_c must replay to the server's θ_c.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from fedforget.core.config import parse_run_config
from fedforget.launch import loopback_deployment, simulation_federation
from fedforget.methods.hosfl import client as hosfl_client
from fedforget.methods.hosfl import zo
from fedforget.methods.hosfl.server import client_theta_from_artifact
from fedforget.methods.hosfl.split_model import build_split_model

from ..integration.helpers import finished_store, flwr_run_config, served_sha, train_in_process

pytestmark = pytest.mark.e2e

NODES = 3
# few messages: 1 discovery query + 2 rounds x 2 exchanges x 2 clients
CONFIG = {"method": "hosfl", "task": "digits-mlp", "partitioner": "iid", "num-rounds": 2, "hosfl.clients-per-round": 2,
          "hosfl.perturbations": 3, "lr": 0.02, "hosfl.client-lr": 0.01, "seed": 21, "round-timeout": 300.0}


@pytest.fixture(scope="module")
def in_process_sha(tmp_path_factory) -> str:
    return served_sha(train_in_process(tmp_path_factory.mktemp("inproc") / "s", num_nodes=NODES, **CONFIG))


def test_hosfl_on_the_ray_simulation_engine_matches_in_process(tmp_path, in_process_sha):
    store = tmp_path / "s"
    with simulation_federation(tmp_path / "flwr-home", NODES) as sim:
        proc = sim.flwr_run(flwr_run_config(CONFIG, store), timeout=600)
        result = finished_store(proc, store)
        status = subprocess.run(["fedforget", "status", "--store", str(store), "--json"], env=sim.env,
                                capture_output=True, text=True, timeout=120, check=False)
    assert served_sha(result) == in_process_sha
    info = json.loads(status.stdout)["split"]
    assert info["client_rounds"] == 4 and info["bytes_total"]["up"]["aggregation"] == 4 * 3 * 4


def test_hosfl_on_a_loopback_deployment_matches_in_process_and_nodes_replay_bit_exactly(tmp_path, in_process_sha):
    store = tmp_path / "s"
    with loopback_deployment(tmp_path / "deploy", NODES) as fed:
        proc = fed.flwr_run(flwr_run_config(CONFIG, store), timeout=900)
    result = finished_store(proc, store)
    assert served_sha(result) == in_process_sha
    manifest = result.manifest()
    info = manifest["split"]
    cfg = parse_run_config(manifest["config"])
    split = build_split_model(cfg, 10)
    served_sha256 = served_sha(result)
    theta_server = client_theta_from_artifact(result.get_arrays(served_sha256), split.client_names)
    hist = result.get_arrays(info["history"])
    entries = [(hist["seeds"][i].tolist(), hist["vbar"][i].tolist()) for i in range(len(hist["seeds"]))]
    found = 0
    for part in range(NODES):  # the node's --node-config state-dir, not the store
        path = tmp_path / "deploy" / "deploy" / f"node{part}" / f"split-{info['run-tag']}.safetensors"
        if not path.exists():
            continue  # never sampled
        found += 1
        theta, version = hosfl_client.load_state(path, split.initial_client)
        assert torch.equal(zo.replay(theta, entries[version:], cfg.hosfl.mu, cfg.hosfl.client_lr), theta_server)
    assert found >= 2
    assert not any((result.root / "clients").iterdir())  # deployment state stays on the nodes
