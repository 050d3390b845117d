"""FedShard as a Flower strategy: each shard sizes its own rounds (``rounds_min``/``rounds_max``)."""

from __future__ import annotations

from fedforget.federation.method_strategy import MethodStrategy


class FedShard(MethodStrategy):
    """FedShard: clients sharded by a fairness-aware plan; a forget retrains only its shard.

    ``start`` runs each stage's shards on the round engine (:class:`~fedforget.methods.fedshard.server.ShardRound`):
    each round, every member of a shard with rounds left trains the shard's model on all its slices and the
    shard averages its members' replies in partition order; the stage's shards are then merged into the next.
    ``configure_train``/``aggregate_train`` see the shards' models as ``<artifact>:<tensor>``."""


    variant = "fedshard"
    rounds_key = None
