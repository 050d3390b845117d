"""FedAvg over LoRA + head as a Flower strategy: the reference every method is measured against, and the
retrain-from-scratch baseline of forgetting (``start(grid=grid, action="retrain")``)."""

from __future__ import annotations

from fedforget.federation.method_strategy import MethodStrategy


class FedAvgLoRA(MethodStrategy):
    """Flower's FedAvg over one LoRA adapter + head, seeded by partition and averaged in partition order.

    ``start`` runs ``num_rounds`` rounds on the round engine (:class:`~fedforget.methods.fedavg.server.FedAvgRound`):
    each round samples partitions with a seed, sends them the global model, averages every reply in partition
    order (Flower's float32 arithmetic) and evaluates the result on the server's test set.
    ``configure_train``/``aggregate_train`` see the model under its tensor names."""


    variant = "fedavg"
