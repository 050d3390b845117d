"""The app's own model, trained whole: a 16 -> 32 -> 4 MLP whose output is the logits, with its own loss
(label-smoothed cross-entropy) and its own metric (macro-F1).

``train="all"``: fedforget adds no LoRA and no head, and every parameter (``fc1.*``, ``fc2.*``) is trained,
exchanged and served under its own name. A retrain and ``fedforget verify`` build the model again, so the init
is seeded; the loss is a pure function of its arguments, so a retrain computes the same bits.
"""

import numpy as np
import torch
from torch import nn

from fedforget.client import Task

FEATURES, HIDDEN, CLASSES = 16, 32, 4
COLUMNS = [f"f{i}" for i in range(FEATURES)]  # a record: record_id, label, f0 … f15


class WholeMLP(nn.Module):
    """16 features -> 4 class logits."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def make_model() -> nn.Module:
    """The same start on every call and every machine."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        return WholeMLP()


def smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits, labels, label_smoothing=0.1)


def macro_f1(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The mean over classes of 2·TP / (2·TP + FP + FN)."""
    predicted = probabilities.argmax(1)
    per_class = []
    for k in range(probabilities.shape[1]):
        hits = np.sum((predicted == k) & (labels == k))
        misses = np.sum((predicted == k) != (labels == k))
        per_class.append(2 * hits / max(2 * hits + misses, 1))
    return {"macro-f1": float(np.mean(per_class))}


TASK = Task(
    name="whole-mlp",
    backbone=make_model,
    feature_dim=CLASSES,  # the model's output is the logits
    lora_targets=[],
    num_classes=CLASSES,
    input_columns=COLUMNS,
    simulation_data="data/node-{partition}",  # a simulated node's train.csv and test.csv
    train="all",
    loss=smoothed_cross_entropy,
    metric=macro_f1,
)
