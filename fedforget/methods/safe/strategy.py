"""SAFE and ProtoSISA as Flower strategies: ``num_rounds`` is each adapter's FedAvg rounds."""

from __future__ import annotations

from typing import ClassVar

from fedforget.federation.method_strategy import MethodStrategy
from fedforget.methods.safe.config import PROTOSISA_LAYOUT, SAFE_LAYOUT, SafeLayout


class SAFE(MethodStrategy):
    """SAFE: adapters over a graph of coarse and fine shards of the clients' features.

    ``start`` trains every adapter on the round engine (:class:`~fedforget.methods.safe.server.SafeRound`):
    each round, one message per node carries the blocks of all its cliques, each adapter is averaged in float64
    over its clique's replies in partition order, the server's safe shard last. ``configure_train``/
    ``aggregate_train`` see the adapters as ``<adapter>:<tensor>``."""


    variant = "safe"
    #: how the variant shards the clients' data
    layout: ClassVar[SafeLayout] = SAFE_LAYOUT


class ProtoSISA(MethodStrategy):
    """ProtoSISA: SAFE's shards with class prototypes in place of trained adapters.

    ``start`` draws uniform random shards and trains their adapters with SAFE's rounds on the round engine
    (:class:`~fedforget.methods.safe.server.SafeRound`)."""


    variant = "protosisa"
    layout: ClassVar[SafeLayout] = PROTOSISA_LAYOUT
