"""The model every method trains: a frozen backbone wrapped by ``peft`` LoRA, plus a task head.

Several named LoRA adapters can sit on one backbone; any subset can be active at once (later
methods stack "module i of sequence ρ"), and only the ones named trainable get gradients. The head
lives outside peft, so a method can keep one head per adapter and swap it in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from torch import nn

from fedforget.core.seeds import derive_seed
from fedforget.tasks.base import Backbone

HEAD_PREFIX = "head."


class TaskModel(nn.Module):
    """``head(body(*inputs))`` with ``body`` a PeftModel over a frozen backbone kept in eval mode."""

    def __init__(self, body: PeftModel, head: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.head = head

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(*inputs))

    def train(self, mode: bool = True) -> TaskModel:
        """Only the head follows ``mode``; the backbone stays in eval mode (no BN updates, no dropout)."""
        super().train(mode)
        self.body.eval()
        return self

    # -- adapters -----------------------------------------------------------------------------
    @property
    def adapter_names(self) -> list[str]:
        return sorted(self.body.peft_config)

    def add_adapter(self, name: str, seed: int, target_modules: Sequence[str] | None = None) -> None:
        """Add a new LoRA adapter with a seeded init (same seed → same bits), on every LoRA target or
        only on ``target_modules`` (S3T places each phase's module on its own block of layers)."""
        config = self.body.peft_config[self.adapter_names[0]]
        if target_modules is not None:
            config = replace(config, target_modules=list(target_modules))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "lora-init", name))
            self.body.add_adapter(name, config)

    def activate(self, names: Sequence[str], trainable: Iterable[str] = ()) -> None:
        """Make exactly ``names`` active (stacked); only ``trainable`` ones (and the head) get gradients.

        An empty ``names`` serves the bare backbone plus head.
        """
        unknown = [n for n in names if n not in self.body.peft_config]
        if unknown:
            raise KeyError(f"unknown adapter(s): {unknown}")
        if names:
            self.body.base_model.set_adapter(list(names))
            self.body.base_model.enable_adapter_layers()
        else:
            self.body.base_model.disable_adapter_layers()
        markers = [f"lora_{ab}.{n}." for n in trainable for ab in ("A", "B")]
        for pname, param in self.body.named_parameters():
            param.requires_grad = any(m in pname for m in markers)
        for param in self.head.parameters():
            param.requires_grad = True

    # -- state exchanged with clients and stored as artifacts -------------------------------------
    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        """One adapter's LoRA weights, with peft's adapter-independent key names."""
        state = get_peft_model_state_dict(self.body, adapter_name=name)
        return {k: v.detach().clone() for k, v in sorted(state.items())}

    def load_adapter_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        expected = set(get_peft_model_state_dict(self.body, adapter_name=name))
        if set(state) != expected:
            raise ValueError(f"adapter {name!r} state has keys {sorted(set(state) ^ expected)[:4]} that do not match")
        set_peft_model_state_dict(self.body, state, adapter_name=name)

    def head_state(self) -> dict[str, torch.Tensor]:
        return {HEAD_PREFIX + k: v.detach().clone() for k, v in self.head.state_dict().items()}

    def load_head_state(self, state: dict[str, torch.Tensor]) -> None:
        self.head.load_state_dict({k[len(HEAD_PREFIX) :]: v for k, v in state.items()})

    def trainable_state(self, name: str) -> dict[str, torch.Tensor]:
        """What FedAvg exchanges for adapter ``name``: its LoRA weights plus the head."""
        return {**self.adapter_state(name), **self.head_state()}

    def load_trainable_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        self.load_head_state({k: v for k, v in state.items() if k.startswith(HEAD_PREFIX)})
        self.load_adapter_state(name, {k: v for k, v in state.items() if not k.startswith(HEAD_PREFIX)})


def build_task_model(backbone: Backbone, num_classes: int, lora_r: int, lora_alpha: int, seed: int,
                     adapter: str = "default", head: bool = True) -> TaskModel:
    """Freeze the backbone, wrap it with one LoRA adapter and add a head, all from seeded inits; ``head=False``:
    the backbone's output is the task's output (a language model's logits), the head an identity with no
    weights, and LoRA alone trains."""
    module = backbone.module
    module.eval()
    for p in module.parameters():
        p.requires_grad = False
    config = LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0, target_modules=backbone.lora_targets)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "lora-init", adapter))
        body = get_peft_model(module, config, adapter_name=adapter)
        torch.manual_seed(derive_seed(seed, "head-init"))
        top: nn.Module = nn.Linear(backbone.feature_dim, num_classes) if head else nn.Identity()
    model = TaskModel(body, top)
    model.activate([adapter], trainable=[adapter])
    return model
