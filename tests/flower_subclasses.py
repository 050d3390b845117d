"""Users' subclasses of Flower's FedAvg that the replay tests build: one whose hooks replay exactly, one whose hook
draws unseeded random numbers (which ``Forgettable`` refuses)."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import FedAvg


class ClippedFedAvg(FedAvg):
    """FedAvg whose global model is clipped coordinate-wise: a deterministic function of the replies."""

    def __init__(self, clip: float = 0.05, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.clip = clip

    def aggregate_train(self, server_round, replies):  # noqa: ANN001, ANN201
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is not None:
            arrays = ArrayRecord({k: Array(np.clip(v.numpy(), -self.clip, self.clip)) for k, v in arrays.items()})
        return arrays, metrics


class NoisyFedAvg(FedAvg):
    def aggregate_train(self, server_round, replies):  # noqa: ANN001, ANN201
        arrays, metrics = super().aggregate_train(server_round, replies)
        return ArrayRecord({k: Array(v.numpy() + np.random.normal(0, 0.01)) for k, v in arrays.items()}), metrics
