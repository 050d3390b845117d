"""FedShard as a Flower strategy: each shard sizes its own rounds (``rounds_min``/``rounds_max``)."""

from __future__ import annotations

from fedforget.federation.method_strategy import MethodStrategy
from fedforget.methods.fedshard import METHOD


class FedShard(MethodStrategy):
    """FedShard: clients sharded by a fairness-aware plan; a forget retrains only its shard."""

    method = METHOD

    variant = "fedshard"
    rounds_key = None
