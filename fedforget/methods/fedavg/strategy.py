"""FedAvg over LoRA + head as a Flower strategy: the reference every method is measured against, and the
retrain-from-scratch baseline of forgetting (``start(grid=grid, action="retrain")``)."""

from __future__ import annotations

from fedforget.federation.method_strategy import MethodStrategy
from fedforget.methods.fedavg import METHOD


class FedAvgLoRA(MethodStrategy):
    """Flower's FedAvg over one LoRA adapter + head, seeded by partition and averaged in partition order."""

    method = METHOD

    variant = "fedavg"
