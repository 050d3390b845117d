"""The chains' and FedShard's continued module, assembled on the user's own model (``Task(train='all')``): the
model takes the stored state whole as its trained parameters, even those the user named ``head.*`` (which a
LoRA + head state would split off as fedforget's head), and trains them all; FedShard averages such shards
tensor by tensor, never re-factorising what only looks like a LoRA factor."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from fedforget.core.config import RunConfig
from fedforget.federation.module_stack import Module, assemble, split_state

USER_APP = """
import torch
from torch import nn
from fedforget.client import Task


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 5)
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def make():
    torch.manual_seed(0)
    return Net()


TASK = Task(name="own-head", backbone=make, feature_dim=2, lora_targets=[], num_classes=2, train="all")
"""


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunConfig:
    name = f"ownhead_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_APP))
    monkeypatch.syspath_prepend(str(tmp_path))
    return RunConfig(method="fedshard", task=f"{name}:TASK")


def test_a_continued_module_of_the_users_model_is_its_whole_state_head_named_parameters_included(cfg):
    from fedforget.federation.run_setup import DEFAULT_ADAPTER, build_model

    state = {k: v + 1 for k, v in build_model(cfg, 2).initial_state.items()}
    assert sorted(state) == ["body.bias", "body.weight", "head.bias", "head.weight"]
    lora, head = split_state(state)  # what the nodes and serving split by name: head.* lands apart
    assert sorted(head) == ["head.bias", "head.weight"]
    trained = assemble(cfg, 2, "continue", [Module("default", None, lora)], head, train_last=True)
    assert all(torch.equal(trained.trainable_state(DEFAULT_ADAPTER)[k], state[k]) for k in state)
    assert all(p.requires_grad for p in trained.module.parameters())
    served = assemble(cfg, 2, "continue", [Module("default", None, lora)], head)
    assert not any(p.requires_grad for p in served.module.parameters())


def test_fedshard_averages_a_whole_models_shards_tensor_by_tensor(cfg):
    from fedforget.methods.fedshard.server import merge_rule

    assert merge_rule(cfg) == "factors"
    assert merge_rule(RunConfig(method="fedshard", task="digits-mlp")) == "product"
