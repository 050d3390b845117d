import torch

from fedforget.core.config import RunConfig
from fedforget.tasks.peft_modules import build_task_model
from fedforget.tasks.registry import get_task


def _model():
    cfg = RunConfig(task="digits-mlp")
    return build_task_model(get_task("digits-mlp").load_backbone(cfg, 1), 10, 4, 8, seed=1)


def test_backbone_is_frozen_and_only_lora_and_head_train():
    model = _model()
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or n.startswith("head.") for n in trainable)
    model.train()
    assert not model.body.training and model.head.training


def test_stacked_adapters_switch_on_and_off_independently():
    model = _model()
    x = torch.rand(8, 64)
    bare = model(x)  # LoRA B starts at zero: the adapter changes nothing yet
    model.add_adapter("phase2", seed=1)
    model.load_adapter_state("phase2", {k: torch.randn_like(v) for k, v in model.adapter_state("phase2").items()})
    model.activate(["default", "phase2"], trainable=["phase2"])
    stacked = model(x)
    assert not torch.equal(bare, stacked)
    names = [n for n, p in model.named_parameters() if p.requires_grad and "lora_" in n]
    assert names and all(".phase2." in n for n in names)
    model.activate(["default"])
    assert torch.equal(model(x), bare)
    model.activate([])
    assert torch.equal(model(x), bare)
    model.activate(["default", "phase2"])
    assert torch.equal(model(x), stacked)


def test_adapter_init_is_seeded():
    a, b = _model(), _model()
    a.add_adapter("m", seed=3)
    b.add_adapter("m", seed=3)
    assert all(torch.equal(a.adapter_state("m")[k], b.adapter_state("m")[k]) for k in a.adapter_state("m"))
    b.add_adapter("n", seed=4)
    assert any(not torch.equal(a.adapter_state("m")[k], b.adapter_state("n")[k]) for k in a.adapter_state("m"))


def test_trainable_state_round_trips():
    model = _model()
    state = {k: torch.randn_like(v) for k, v in model.trainable_state("default").items()}
    model.load_trainable_state("default", state)
    assert all(torch.equal(model.trainable_state("default")[k], v) for k, v in state.items())
