"""Assemble the model of a chain prefix: stacked LoRA modules (or one continued adapter) + a head.

Shared by the clients (to train position ``i`` on top of frozen ``1..i-1``) and by the server and
the coordinator (to serve or verify a prefix), so both build the very same network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from fedforget.core.config import RunConfig
from fedforget.federation.run_setup import DEFAULT_ADAPTER, build_model
from fedforget.tasks.peft_modules import HEAD_PREFIX, TaskModel
from fedforget.tasks.whole_model import WholeModel

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Module:
    """One position of a chain: its adapter slot name, the layers it sits on, its LoRA weights (a continued
    module of the user's own model: its trained parameters)."""

    slot: str
    targets: list[str] | None
    lora: Mapping[str, torch.Tensor]


def split_state(state: Mapping[str, torch.Tensor]) -> tuple[Tensors, Tensors]:
    """An artifact (LoRA + ``head.*``) as (LoRA weights, head weights)."""
    lora = {k: v for k, v in state.items() if not k.startswith(HEAD_PREFIX)}
    head = {k: v for k, v in state.items() if k.startswith(HEAD_PREFIX)}
    return lora, head


def slot_name(position: int) -> str:
    return f"m{position}"


def assemble(cfg: RunConfig, num_classes: int, stacking: str, modules: Sequence[Module],
             head: Mapping[str, torch.Tensor], train_last: bool = False) -> TaskModel | WholeModel:
    """The (cached, reset) task model with exactly ``modules`` active in order and ``head`` loaded.

    ``stacking='continue'`` loads the single module and ``head`` as the model's trainable state of the default
    slot (SISA, FedCIO, FedShard): the model says what that is, LoRA + ``head.*`` for fedforget's task model, the
    trained parameters for the user's own model (``Task(train='all')``), which has no LoRA/head split; splitting
    a state by name and loading both parts back is the state itself. ``'new'`` adds one adapter per module
    (FedSGT, S3T). With ``train_last`` only the last module and the head get gradients.
    """
    model = build_model(cfg, num_classes).model
    if stacking == "continue":
        if len(modules) != 1:
            raise ValueError(f"a continued adapter is one module, got {len(modules)}")
        model.load_trainable_state(DEFAULT_ADAPTER, {**modules[0].lora, **head})
        model.activate([DEFAULT_ADAPTER], trainable=[DEFAULT_ADAPTER] if train_last else [])
        return model
    names = []
    for module in modules:
        model.add_adapter(module.slot, seed=0, target_modules=module.targets)
        model.load_adapter_state(module.slot, dict(module.lora))
        names.append(module.slot)
    model.activate(names, trainable=names[-1:] if train_last else [])
    model.load_head_state(dict(head))
    return model


def fresh_module(cfg: RunConfig, num_classes: int, slot: str, targets: list[str] | None, seed: int) -> Tensors:
    """The seeded initial LoRA weights of a new module (B = 0, so it starts as a no-op)."""
    model = build_model(cfg, num_classes).model
    model.add_adapter(slot, seed=seed, target_modules=targets)
    return model.adapter_state(slot)


def initial_head(cfg: RunConfig, num_classes: int) -> Tensors:
    """The seeded head every chain starts from (data-independent, so shared by all chains)."""
    return build_model(cfg, num_classes).model.head_state()


def default_module_init(cfg: RunConfig, num_classes: int) -> Tensors:
    """The seeded initial LoRA weights of the default adapter (what a continued chain starts from)."""
    bundle = build_model(cfg, num_classes)
    lora, _ = split_state(bundle.initial_state)
    return lora
