"""HO-SFL with its opt-in variance reduction (``hosfl.zo-params``, ``hosfl.client-momentum``) through the
real ServerApp and ClientApp: uploads stay P scalars, every client's persisted (θ_c, m) replays to the
served θ_c bit for bit, and nothing outside the subspace moves."""

from __future__ import annotations

import torch

from fedforget.core.config import parse_run_config
from fedforget.methods.hosfl import client as hosfl_client
from fedforget.methods.hosfl import zo
from fedforget.methods.hosfl.server import client_theta_from_artifact
from fedforget.methods.hosfl.split_model import build_split_model
from tests.integration.helpers import served_sha, train_in_process

OPT_IN = {"task": "digits-mlp", "partitioner": "iid", "lr": 0.02, "hosfl.client-lr": 0.01, "method": "hosfl",
          "hosfl.zo-params": "lora_B", "hosfl.client-momentum": 0.9, "hosfl.perturbations": 3,
          "num-rounds": 6, "hosfl.clients-per-round": 2, "hosfl.eval-every": 6}


def test_subspace_momentum_replays_bit_for_bit_with_p_scalar_uploads(tmp_path):
    store = train_in_process(tmp_path / "s", num_nodes=4, **OPT_IN)
    manifest = store.manifest()
    cfg = parse_run_config(manifest["config"])
    info = manifest["split"]
    split = build_split_model(cfg, 10)
    index = zo.subspace_index(split.client_names, [p.numel() for _, p in split.client_params], "lora_B")
    assert info["zo-dim"] == index.numel() < info["d_c"] and info["client-momentum"] == 0.9
    for row in store.metrics()[1:]:
        assert row["bytes"]["up"]["aggregation"] == 2 * 3 * 4  # P float32 scalars per client, nothing else
    served = client_theta_from_artifact(store.get_arrays(served_sha(store)), split.client_names)
    outside = torch.ones(split.d_c, dtype=torch.bool)
    outside[index] = False
    assert torch.equal(served[outside], split.initial_client[outside])  # the LoRA A factors never moved
    assert not torch.equal(served[index], split.initial_client[index])
    hist = store.get_arrays(info["history"])
    entries = [(hist["seeds"][i].tolist(), hist["vbar"][i].tolist()) for i in range(len(hist["seeds"]))]
    versions = []
    for part in range(manifest["num-partitions"]):
        path = store.root / "clients" / str(part) / f"split-{info['run-tag']}.safetensors"
        theta, version = hosfl_client.load_state(path, split.initial_client)
        buf = hosfl_client.load_momentum(path, index.numel())
        hosfl = cfg.hosfl
        replayed = zo.replay(theta, entries[version:], hosfl.mu, hosfl.client_lr, index, hosfl.client_momentum, buf)
        assert torch.equal(replayed, served), part
        versions.append(version)
    assert len(set(versions)) > 1  # clients were at different versions and caught up by replay


def test_defaults_record_nothing_new_in_the_manifest(tmp_path):
    store = train_in_process(tmp_path / "s", num_nodes=3, **{**OPT_IN, "hosfl.zo-params": "",
                                                               "hosfl.client-momentum": 0.0, "num-rounds": 2,
                                                               "hosfl.eval-every": 2})
    assert "zo-dim" not in store.manifest()["split"]
