"""A sequence task (a small character-level language model of the user's: ``Task(targets=..., head=False)``, texts
without labels) trains in process under every method whose training takes a task's loss, each reporting the task's
perplexity beside token accuracy and loss on the server's texts, and serving LoRA modules only (the forget
service's ``predict``, which answers a class per record, refuses it in one line); under the methods whose training
does not take one it is refused in one line before any store exists. Run on the committed texts of
examples/tiny-lm with its own ServerApp."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fedforget.core.config import ConfigError
from fedforget.federation.record_key import hand_over
from fedforget.store import Store

from .helpers import example_home, served_tensors
from .test_example_tiny_lm_app import EXAMPLE, NODES

#: what a method needs on the example's 3 nodes (2 slices each)
METHOD_KEYS: dict[str, dict[str, object]] = {
    "fedavg": {"num-rounds": 2}, "replay": {"num-rounds": 2}, "fedshard": {"num-rounds": 2},
    "sisa": {"chains.groups": 3}, "fedcio": {"chains.clusters": 2},
    "s3t": {"chains.groups": 3, "chains.budget": 2, "chains.placement": "additive"},
}
TASKS = '''
import numpy as np
import torch
from torch import nn

from fedforget.client import Task

CHARS, WIDTH, IGNORE = 64, 24, -100


class CharLM(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            self.embed = nn.Embedding(CHARS, 16)
            self.mix = nn.Linear(16, 16)
            self.out = nn.Linear(16, CHARS)

    def forward(self, ids, mask):
        return self.out(torch.tanh(self.mix(self.embed(ids))))


def encode(texts):
    ids = torch.zeros(len(texts), WIDTH, dtype=torch.int64)
    for row, text in enumerate(texts):
        codes = [1 + ord(c) % (CHARS - 1) for c in text[:WIDTH]]
        ids[row, : len(codes)] = torch.tensor(codes)
    return ids, (ids != 0).to(torch.int64)


def next_chars(ids, mask):
    targets = torch.full_like(ids, IGNORE)
    targets[:, :-1] = ids[:, 1:].masked_fill(mask[:, 1:] == 0, IGNORE)
    return targets


def perplexity(probabilities, targets):
    kept = targets != IGNORE
    picked = probabilities[kept][np.arange(int(kept.sum())), targets[kept]]
    return {"perplexity": float(np.exp(-np.log(picked).mean()))}


CHAR_LM = Task(name="char-lm", backbone=CharLM, feature_dim=CHARS, num_classes=CHARS, lora_targets=["mix", "out"],
               head=False, input_column="text", encode=encode, targets=next_chars, metric=perplexity,
               simulation_data="data/node-{partition}")
'''


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    example_home(EXAMPLE, tmp_path, monkeypatch)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "seq_tasks.py").write_text(TASKS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    return tmp_path


def run_app(store: Path, method: str, **keys: object) -> Store:
    from tiny_lm.client_app import app as client_app
    from tiny_lm.server_app import app as server_app

    from fedforget.inprocess import run_in_process
    from fedforget.unlearning.user_app import declared_config

    declared = {k: v for k, v in declared_config(EXAMPLE).items() if not k.startswith("chains.")}
    config = {**declared, "task": "seq_tasks:CHAR_LM", "method": method, "store": str(store), "lr": 0.05, **keys}
    hand_over(store, "7c" * 32)
    run_in_process(config, NODES, server_app=server_app, client_app=client_app)
    return Store.open(store)


@pytest.mark.parametrize("method", sorted(METHOD_KEYS))
def test_every_method_that_takes_a_loss_trains_a_sequence_task_and_reports_its_metric(home, method):
    store = run_app(home / "runs" / method, method, **METHOD_KEYS[method])
    final = next(row for row in reversed(store.metrics()) if row.get("final"))
    assert 0.0 < final["accuracy"] < 1.0
    assert final["perplexity"] == pytest.approx(math.exp(final["loss"]), rel=1e-9)
    assert final["perplexity"] < 64  # below a uniform guess over the 64 characters
    keys = {key.split(":", 1)[1] for key in served_tensors(store)}
    assert keys and all("lora_" in k for k in keys)  # no fedforget head: the model's own output layer is the output


@pytest.mark.parametrize("method", ["safe", "protosisa", "hosfl"])
def test_a_method_whose_training_takes_no_loss_refuses_a_sequence_task_before_any_store(home, method):
    with pytest.raises(ConfigError, match="sequence task|needs a split model") as info:
        run_app(home / "runs" / method, method)
    assert "\n" not in str(info.value)
    assert not (home / "runs" / method / "manifest.json").exists()


def test_the_forget_services_predict_refuses_a_sequence_task_in_one_line(home):
    from fastapi.testclient import TestClient

    from fedforget.service.app import create_app
    from fedforget.service.tokens import create_token

    store = run_app(home / "runs" / "predict", "fedavg", **{"num-rounds": 1})
    token = create_token(store.root, "predict", ["predict"])[0]
    with TestClient(create_app(store.root)) as client:
        reply = client.post("/v1/predict", json={"inputs": ["a fine film"]},
                            headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 422, reply.text
    detail = reply.json()["detail"]
    assert "sequence task" in detail and "\n" not in detail
