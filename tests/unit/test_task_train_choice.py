"""``Task(train=...)``: "lora" by default (the spec trains LoRA + fedforget's head, as before); "all" or a list
of parameter-name prefixes makes the user's module the whole model, whose trainable state is exactly the named
parameters; anything else, or a whole-model task that still asks for LoRA or a head width, is one ValueError line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedforget.client import Task
from fedforget.core.config import ConfigError
from fedforget.tasks.whole_model import SLOT, build_whole_model


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2), nn.Dropout(0.5))


def task(**keys: object) -> Task:
    return Task(**{"name": "t", "backbone": mlp, "feature_dim": 2, "lora_targets": [], "num_classes": 2, **keys})


def test_a_task_trains_lora_by_default_and_its_spec_says_so():
    lora = Task(name="t", backbone=mlp, feature_dim=5, lora_targets=["0"], num_classes=2)
    assert lora.train == "lora" and lora.spec.trains == "lora"
    assert task(train="all").spec.trains == "all"
    assert task(train=["2"]).spec.trains == ("2",)


@pytest.mark.parametrize(("keys", "message"), [
    ({"train": "everything"}, "takes 'lora', 'all' or a list"),
    ({"train": []}, "takes 'lora', 'all' or a list"),
    ({"train": "all", "lora_targets": ["0"]}, "gets no LoRA"),
    ({"train": "all", "feature_dim": 5}, "feature_dim=num_classes"),
    ({"train": "lora"}, "lora_targets"),
])
def test_a_train_choice_the_task_cannot_take_is_one_line(keys, message):
    with pytest.raises(ValueError, match=message) as refused:
        task(**keys)
    assert "\n" not in str(refused.value)


def test_the_whole_models_trainable_state_is_exactly_the_named_parameters():
    model = build_whole_model(mlp(), ("2",), "t")
    assert sorted(model.trainable_state(SLOT)) == ["2.bias", "2.weight"]
    assert [n for n, p in model.module.named_parameters() if p.requires_grad] == ["2.weight", "2.bias"]
    model.activate([SLOT], trainable=[])
    assert not any(p.requires_grad for p in model.parameters())
    whole = build_whole_model(mlp(), "all", "t")
    assert sorted(whole.trainable_state(SLOT)) == sorted(n for n, _ in mlp().named_parameters())
    state = {k: v + 1 for k, v in whole.trainable_state(SLOT).items()}
    whole.load_trainable_state(SLOT, state)
    assert all(torch.equal(whole.trainable_state(SLOT)[k], state[k]) for k in state)
    with pytest.raises(ValueError, match="do not match"):
        whole.load_trainable_state(SLOT, {"2.bias": state["2.bias"]})


def test_the_users_module_stays_in_eval_mode_so_training_draws_no_unseeded_dropout():
    model = build_whole_model(mlp(), "all", "t")
    model.train()
    assert model.training and not any(m.training for m in model.module.modules())
    x = torch.ones(4, 3)
    assert torch.equal(model(x), model(x))  # no dropout draw


def test_a_model_with_running_statistics_or_a_prefix_naming_nothing_is_refused():
    with pytest.raises(ConfigError, match="keeps running statistics"):
        build_whole_model(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)), "all", "t")
    build_whole_model(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2, track_running_stats=False)), "all", "t")
    with pytest.raises(ConfigError, match="'9' names no parameter"):
        build_whole_model(mlp(), ("2", "9"), "t")


def test_each_variant_of_a_family_declares_for_itself_whether_it_trains_the_users_whole_model():
    """The chains continue one model along a chain (SISA, FedCIO: they train it) or stack modules that forgetting
    switches off (FedSGT, S3T: they refuse, naming who can)."""
    from fedforget.core.config import RunConfig
    from fedforget.methods.registry import FAMILIES
    from fedforget.tasks.trained_parameters import check_method_trains

    chains = next(m for m in FAMILIES if "sisa" in m.variants)
    for variant in ("sisa", "fedcio"):
        assert chains.whole_model_refusal(variant) is None
        check_method_trains(chains, RunConfig(method=variant, task="digits-mlp"), "all")
    for variant in ("fedsgt", "s3t"):
        with pytest.raises(ConfigError, match="switching modules off") as refused:
            check_method_trains(chains, RunConfig(method=variant, task="digits-mlp"), "all")
        assert "\n" not in str(refused.value)
        assert all(v in str(refused.value) for v in ("fedavg", "replay", "fedshard", "sisa", "fedcio"))
