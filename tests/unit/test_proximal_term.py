"""FedProx's proximal term in local training: with ``proximal_mu`` the trained weights stay closer to the ones
received; with 0 training is exactly what it was without the term."""

from __future__ import annotations

import torch
from torch import nn

from fedforget.training.supervised import TrainSettings, train_supervised


def _trained(mu: float) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    start = model.weight.detach().clone()
    inputs = (torch.randn(64, 4, generator=torch.Generator().manual_seed(1)),)
    labels = torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(2))
    settings = TrainSettings(epochs=3, batch_size=16, lr=0.1, optimizer="sgd", seed=7, proximal_mu=mu)
    train_supervised(model, inputs, labels, settings)
    return start, model.weight.detach()


def test_the_proximal_term_keeps_the_weights_near_the_received_ones():
    start, plain = _trained(0.0)
    _, pulled = _trained(5.0)
    assert torch.linalg.norm(pulled - start) < torch.linalg.norm(plain - start)


def test_without_the_term_training_is_bit_identical_to_the_default_settings():
    _, zero = _trained(0.0)
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    inputs = (torch.randn(64, 4, generator=torch.Generator().manual_seed(1)),)
    labels = torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(2))
    train_supervised(model, inputs, labels, TrainSettings(epochs=3, batch_size=16, lr=0.1, optimizer="sgd", seed=7))
    assert torch.equal(model.weight.detach(), zero)
