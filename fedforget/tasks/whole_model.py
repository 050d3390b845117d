"""The user's own model trained as the whole model (``Task(train='all')`` or a list of parameter-name prefixes).

:class:`WholeModel` has the interface the one-model methods use on :class:`~fedforget.tasks.peft_modules.TaskModel`
(one adapter slot named ``default``, :meth:`activate`, :meth:`trainable_state`, :meth:`load_trainable_state`), so
fedavg and replay exchange, average, checkpoint and serve it unchanged, and SISA, FedCIO and FedShard continue it
as their one module (``module_stack.assemble``): its trainable state is the trained
parameters under the user's own names, and its output is the user's module's output (the logits).

The module stays in eval mode (no dropout: its draws would come from an unseeded stream). BatchNorm running
statistics would then stay at their init, normalising nothing, and in train mode they would change outside the
exchanged state: a model keeping them is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

from fedforget.core.config import ConfigError
from fedforget.tasks.trained_parameters import Trains, describe, is_trained

#: its one adapter slot: the name the one-model methods exchange the trainable state under
SLOT = "default"


class WholeModel(nn.Module):
    """The user's module, its ``trained`` parameters trainable and the rest frozen."""

    def __init__(self, module: nn.Module, trained: Sequence[str]) -> None:
        super().__init__()
        self.module = module
        self.trained = list(trained)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.module(*inputs)

    def train(self, mode: bool = True) -> WholeModel:
        """The user's module stays in eval mode whatever ``mode`` is, as ``TaskModel``'s backbone does: dropout
        would draw from torch's global random stream, which no seed of the run fixes, so a retrain would not
        replay it."""
        super().train(mode)
        self.module.eval()
        return self

    @property
    def adapter_names(self) -> list[str]:
        return [SLOT]

    def add_adapter(self, name: str, seed: int, target_modules: Sequence[str] | None = None) -> None:
        raise ConfigError("the user's own model (Task(train='all' or a list)) has no LoRA modules to add")

    def activate(self, names: Sequence[str], trainable: Iterable[str] = ()) -> None:
        """``names`` is the one slot; with ``trainable`` naming it the trained parameters get gradients."""
        if list(names) != [SLOT]:
            raise KeyError(f"the user's own model has one slot {SLOT!r}, not {list(names)}")
        grad = SLOT in trainable
        for name, param in self.module.named_parameters():
            param.requires_grad = grad and name in self.trained

    def trainable_state(self, name: str = SLOT) -> dict[str, torch.Tensor]:
        """The trained parameters, under the user's own names (what fedavg and replay exchange and store)."""
        params = dict(self.module.named_parameters())
        return {k: params[k].detach().clone() for k in sorted(self.trained)}

    def load_trainable_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        if set(state) != set(self.trained):
            odd = sorted(set(state) ^ set(self.trained))[:4]
            raise ValueError(f"the model's trained parameters {odd} do not match the state's")
        params = dict(self.module.named_parameters())
        with torch.no_grad():
            for key, value in state.items():
                params[key].copy_(value)


def build_whole_model(module: nn.Module, trains: Trains, task: str) -> WholeModel:
    """The user's module with the parameters ``trains`` names trainable; one ConfigError line for a model with
    train-mode buffers or a prefix that names no parameter."""
    tracking = [n for n, m in module.named_modules() if getattr(m, "track_running_stats", False)]
    if tracking:
        raise ConfigError(f"task {task!r} with {describe(trains)}: module {tracking[0]!r} keeps running statistics "
                          "(BatchNorm), which the trained state does not carry; use track_running_stats=False "
                          "or Task(train='lora')")
    names = [n for n, _ in module.named_parameters()]
    trained = [n for n in names if is_trained(n, trains)]
    unmatched = [p for p in (() if isinstance(trains, str) else trains) if not any(is_trained(n, (p,)) for n in names)]
    if unmatched or not trained:
        raise ConfigError(f"task {task!r} with {describe(trains)}: {unmatched[0] if unmatched else 'it'!r} names no "
                          f"parameter of the model (its parameters: {', '.join(names[:6])})")
    model = WholeModel(module, trained)
    model.activate([SLOT], trainable=[SLOT])
    return model
