"""The app's own model: a small MLP over a vector of 16 tabular features, 4 classes.

Its backbone is the frozen feature extractor fedforget adapts with LoRA (on ``fc1`` and ``fc2``) and tops
with a linear head. A retrain and ``fedforget verify`` rebuild it, so it must come out the same every time:
here a seeded init (a real app would load its pretrained weights from a file).
"""

import torch
from torch import nn

from fedforget.client import Task

FEATURES, CLASSES, FEATURE_DIM = 16, 4, 32


class TabularMLP(nn.Module):
    """16 features -> 32 features."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, 64)
        self.fc2 = nn.Linear(64, FEATURE_DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc2(torch.relu(self.fc1(x))))


def make_backbone() -> nn.Module:
    """The same weights on every call and every machine (a seeded init)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(20240601)
        return TabularMLP()


TASK = Task(
    name="tabular-mlp",
    backbone=make_backbone,
    feature_dim=FEATURE_DIM,
    lora_targets=["fc1", "fc2"],
    num_classes=CLASSES,
    input_column="features",  # each record: record_id, label, features (a list of 16 numbers)
    simulation_data="data/node-{partition}",  # a simulated node's records (a SuperNode names its data-dir)
)
